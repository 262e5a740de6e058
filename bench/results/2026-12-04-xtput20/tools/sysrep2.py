#!/usr/bin/env python3
# syscalls per 1000 messages per role over the 64 B instances' whole life (msgs = rate x 0.3 s)
import sys, collections, re, csv
O = sys.argv[1]
names = {0:'read',1:'write',7:'poll',16:'ioctl',20:'writev',24:'sched_yield',44:'sendto',45:'recvfrom',46:'sendmsg',47:'recvmsg',202:'futex',232:'epoll_wait',233:'epoll_ctl',281:'epoll_pwait',324:'membarrier',35:'nanosleep',230:'clock_nanosleep',271:'ppoll',9:'mmap',11:'munmap',12:'brk',10:'mprotect',28:'madvise',98:'getrusage'}
rows = list(csv.DictReader(open(O + '.csv')))
role = {}; first = {}; tcomm = {}
for line in open(O + '.samp'):
    t, pid, tid, r, comm, ns = line.split()
    if r in ('machine', 'side'): continue
    role[int(pid)] = r; first.setdefault(int(pid), float(t)); tcomm[int(tid)] = comm.split('#')[0] + ('-main' if tid == pid else '')
ga = sorted(first[p] for p in first if role[p] == 'group-bench-a')
def inst(p):
    return min(range(len(ga)), key=lambda j: abs(ga[j] - first[p]))
msgs = sum(float(r['msgs_per_s']) * 0.3 for r in rows if r['payload'] == '64')
c = collections.defaultdict(collections.Counter)
for line in open(O + '.sys'):
    m = re.match(r'\s*(\d+)/(\d+)\s+([\d.]+): \s*(\S+): (.*)', line)
    if not m: continue
    pid = int(m.group(1))
    if pid not in role or inst(pid) % 2 != 0: continue
    if m.group(4) == 'raw_syscalls:sys_enter':
        nr = int(m.group(5).split()[1]); c[role[pid]][tcomm.get(int(m.group(2)), '?') + ':' + names.get(nr, str(nr))] += 1
    elif f'prev_pid={m.group(2)} ' in m.group(5): c[role[pid]]['[switch-out]'] += 1
print(f'{msgs:.0f} messages (64 B, rate x 0.3 s)')
for r in sorted(c):
    n = sum(v for k, v in c[r].items() if k != '[switch-out]')
    print(f'{r:15s} {1000*n/msgs:7.2f}/1000 msgs: ' + ', '.join(f'{k} {1000*v/msgs:.2f}' for k, v in c[r].most_common(12)))
