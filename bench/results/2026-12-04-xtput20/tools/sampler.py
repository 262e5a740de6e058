#!/usr/bin/env python3
# Poll /proc every 10 ms: per task of the bench's processes, schedstat run ns.
# Output lines: t pid tid role comm run_ns
import os, sys, time
root = int(sys.argv[1]); out = open(sys.argv[2], 'w')
roles = {}
def role(pid):
    if pid in roles: return roles[pid]
    try:
        cmd = open(f'/proc/{pid}/cmdline','rb').read().split(b'\0')
        env = open(f'/proc/{pid}/environ','rb').read().split(b'\0')
    except OSError: return None
    cmd = [c.decode(errors='replace') for c in cmd]
    r = None
    if len(cmd) > 1 and cmd[1] == 'run' and '--host' in cmd: r = 'router-' + cmd[cmd.index('--host')+1]
    elif len(cmd) > 1 and cmd[1] == 'bridge' and '--host' in cmd: r = 'bridge-' + cmd[cmd.index('--host')+1]
    else:
        g = [e for e in env if e.startswith(b'SHOAL_GROUP=')]
        if g: r = 'group-' + g[0][12:].decode()
        elif len(cmd) > 1 and cmd[1] in ('run', 'bridge'): r = None
        elif 'shoal-bench-net' in cmd[0]: r = 'side'
    if r: roles[pid] = r
    return r
ppid = {}
def mine(p):
    seen = 0
    while p > 1 and seen < 20:
        if p == root: return True
        if p not in ppid: return False
        p = ppid[p]; seen += 1
    return False
def kids():
    res = []
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            st = open(f'/proc/{p}/stat').read()
        except OSError: continue
        ppid[int(p)] = int(st[st.rindex(')') + 2:].split()[1])
        if 'shoal' in st[:60]: res.append(int(p))
    return [p for p in res if mine(p)]
while os.path.exists(f'/proc/{root}'):
    t = time.monotonic()
    cpu = open('/proc/stat').readline().split()
    out.write(f'{t:.4f} 0 0 machine idle {int(cpu[4])*10000000}\n')
    out.write(f'{t:.4f} 0 1 machine busy {(sum(map(int,cpu[1:8]))-int(cpu[4]))*10000000}\n')
    for pid in kids():
        r = role(pid)
        if r is None: continue
        try:
            for i, tid in enumerate(sorted(os.listdir(f'/proc/{pid}/task'), key=int)):
                ns = open(f'/proc/{pid}/task/{tid}/schedstat').read().split()[0]
                comm = open(f'/proc/{pid}/task/{tid}/comm').read().strip() + f'#{i}'
                out.write(f'{t:.4f} {pid} {tid} {r} {comm} {ns}\n')
        except OSError: pass
    time.sleep(0.01)
