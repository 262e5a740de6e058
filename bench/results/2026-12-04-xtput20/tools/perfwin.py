#!/usr/bin/env python3
# perf script (-F pid,tid,time,ip,sym,dso with callchains) -> per role: self
# samples by symbol, and for kernel samples the syscall / entry they came from,
# inside the 64 B steady windows only.
import sys, collections
samp, script = sys.argv[1], sys.argv[2]
top = int(sys.argv[3]) if len(sys.argv) > 3 else 15
wins = [tuple(map(float, l.split()[2:4])) for l in open(samp + '.win') if l.split()[0] == '64']
role = {}
for line in open(samp):
    t, pid, tid, r, comm, ns = line.split()
    if r not in ('machine', 'side'): role[int(pid)] = r
selfc = collections.defaultdict(collections.Counter)
entry = collections.defaultdict(collections.Counter)
caller = collections.defaultdict(collections.Counter)
tot = collections.Counter()
def flush(head, frames):
    if head is None: return
    pid, t = head
    if pid not in role or not any(a <= t <= b for a, b in wins): return
    r = role[pid]; tot[r] += 1
    if not frames: return
    sym0, dso0 = frames[0]
    selfc[r][(dso0, sym0)] += 1
    if dso0 == '[kernel.kallsyms]':
        # the outermost kernel frame under a syscall entry, and the first user frame
        k = [s for s, d in frames if d == '[kernel.kallsyms]']
        u = [s for s, d in frames if d != '[kernel.kallsyms]']
        sysc = next((s for s in reversed(k) if s.startswith(('__x64_sys', '__do_sys', 'do_syscall', 'asm_'))), k[-1])
        ks = [s for s in k if s.startswith('__x64_sys_')]
        entry[r][(ks[0] if ks else k[-1]) + ' <- ' + (u[0] if u else '?')] += 1
    else:
        u = [s for s, d in frames[1:3]]
        caller[r][sym0 + ' <- ' + ' <- '.join(u)] += 1
head = None; frames = []
for line in open(script):
    if not line.strip():
        flush(head, frames); head = None; frames = []; continue
    if not line.startswith(('\t', ' ' * 8)) and head is None:
        f = line.split()
        pid = int(f[0].split('/')[0]); t = float(f[1].rstrip(':'))
        head = (pid, t); frames = []
        continue
    f = line.strip().split(None, 1)
    if len(f) < 2: continue
    sym, _, dso = f[1].rpartition(' (')
    sym = sym.split('+0x')[0]
    frames.append((sym, dso.rstrip(')').split('/')[-1]))
flush(head, frames)
allt = sum(tot.values())
for r in sorted(tot):
    print(f'== {r}: {tot[r]} samples ({100*tot[r]/allt:.1f} % of ours)')
    k = collections.Counter()
    for (dso, sym), n in selfc[r].items(): k[dso] += n
    print('   by dso: ' + ', '.join(f'{d} {100*n/tot[r]:.0f}%' for d, n in k.most_common(6)))
    for (dso, sym), n in selfc[r].most_common(top):
        print(f'   {100*n/tot[r]:5.1f}%  {dso:22s} {sym}')
    print('   kernel by syscall <- user caller:')
    for e, n in entry[r].most_common(8):
        print(f'   {100*n/tot[r]:5.1f}%  {e}')
