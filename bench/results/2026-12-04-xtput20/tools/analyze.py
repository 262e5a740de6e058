#!/usr/bin/env python3
# Per 64 B / 1 KiB sample: the steady window (bench-b's group busy, bench-a's
# not in its start-up), each thread's CPU share over it, / the sample's rate.
import sys, csv, collections
samp, csvf = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(csvf)))
data = collections.defaultdict(list); info = {}
for line in open(samp):
    t, pid, tid, role, comm, ns = line.split()
    k = (int(pid), int(tid)); data[k].append((float(t), int(ns))); info[k] = (role, comm)
def at(s, t):
    if t <= s[0][0]: return s[0][1]
    for (t0, n0), (t1, n1) in zip(s, s[1:]):
        if t0 <= t <= t1: return n0 + (n1 - n0) * (t - t0) / (t1 - t0) if t1 > t0 else n1
    return s[-1][1]
def slopes(s): return [(t0, t1, (n1 - n0) / ((t1 - t0) * 1e9)) for (t0, n0), (t1, n1) in zip(s, s[1:]) if t1 > t0]
ga = sorted([k for k in data if info[k][0] == 'group-bench-a'], key=lambda k: data[k][0][0])
gb = sorted([k for k in data if info[k][0] == 'group-bench-b'], key=lambda k: data[k][0][0])
contenders = sorted(set(r['contender'] for r in rows))
order = []  # instances in run order: for r: for payload: for contender (rotated)
pay = collections.defaultdict(list)
for i, (ka, kb) in enumerate(zip(ga, gb)):
    payload = 64 if i % 2 == 0 else 1024
    run = i // 2 + 1
    sb = slopes(data[kb])
    # router A's dispatcher busy too: messages flowing (not the start-up)
    ra = [k for k in data if info[k][0] == 'router-a' and 'disp' in info[k][1]
          and data[ka][0][0] - 0.3 < data[k][0][0] < data[ka][0][0] + 0.2]
    def busy_ra(t):
        return any(a <= t <= b and v > 0.08 for k in ra for a, b, v in slopes(data[k]))
    on = [(t0, t1) for t0, t1, v in sb if v > 0.08 and busy_ra((t0 + t1) / 2)]
    if len(on) < 4: continue
    w0, w1 = on[1][0], on[-2][1]
    rate = [float(r['msgs_per_s']) for r in rows if int(r['payload']) == payload and int(r['run']) == run][0]
    acc = collections.Counter()
    for key, s2 in data.items():
        role, comm = info[key]
        if role == 'side' or s2[0][0] > w1 or s2[-1][0] < w0: continue
        acc[(role, comm)] += at(s2, w1) - at(s2, w0)
    pay[payload].append((run, w1 - w0, rate, acc))
    open(samp + '.win', 'a').write(f'{payload} {run} {w0} {w1} {rate}\n')
for payload, lst in sorted(pay.items()):
    print(f'== {payload} B')
    tot = collections.Counter(); totw = 0; totm = 0
    for run, w, rate, acc in lst:
        m = acc[('machine', 'busy')]; idle = acc[('machine', 'idle')]
        ours = sum(v for k, v in acc.items() if k[0] != 'machine')
        print(f'run {run}: steady {w*1e3:.0f} ms, {rate:.0f} msg/s; ours {ours/1e9/w:.2f} CPUs, machine busy {m/1e9/w:.2f}, idle {idle/1e9/w:.2f}')
        tot.update(acc); totm += rate * w
    allns = 0
    for k in sorted(tot):
        v = tot[k] / totm
        if k[0] == 'machine' or v < 0.5: continue
        print(f'  {k[0]:16s} {k[1]:18s} {v:8.1f} ns/msg'); allns += v
    print(f'  ours total {allns:.1f} ns/msg; machine busy {tot[("machine","busy")]/totm:.1f}, idle {tot[("machine","idle")]/totm:.1f} ns/msg')
