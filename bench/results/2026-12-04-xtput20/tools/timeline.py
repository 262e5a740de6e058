import sys, collections
samp = sys.argv[1]; inst = int(sys.argv[2])
data = collections.defaultdict(list); info = {}
for line in open(samp):
    t, pid, tid, role, comm, ns = line.split()
    k = (int(pid), int(tid)); data[k].append((float(t), int(ns))); info[k] = role
first = {}
for k, s in data.items(): first.setdefault(k[0], s[0][0])
ra = sorted(set(first[k[0]] for k in data if info[k] == 'group-bench-a'))
t0 = ra[inst] - 0.1; t1 = ra[inst + 1] - 0.1 if inst + 1 < len(ra) else 1e18
roles = ['group-bench-a', 'router-a', 'bridge-a', 'bridge-b', 'router-b', 'group-bench-b', 'machine']
bins = collections.defaultdict(lambda: collections.Counter())
for k, s in data.items():
    r = info[k]
    if r not in roles or (r != 'machine' and not (t0 <= first[k[0]] < t1)): continue
    if r == 'machine' and k[1] != 1: continue
    for (a, n0), (b, n1) in zip(s, s[1:]):
        if a < t0 or a > t1: continue
        bins[int((a - t0) / 0.02)][r] += (n1 - n0) / ((b - a) * 1e9) * (b - a)
print('t(ms)  ' + ' '.join(f'{r[:9]:>9s}' for r in roles))
for b in sorted(bins):
    print(f'{b*20:5d}  ' + ' '.join(f'{bins[b][r]/0.02:9.2f}' for r in roles))
