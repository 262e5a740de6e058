import sys, glob, re, os
d = sys.argv[1]
rows = {}
for f in sorted(glob.glob(d + '/*.md')):
    w, i = os.path.basename(f)[:-3].split('-')
    for line in open(f):
        m = re.match(r'\| (shoal-bridge-direct|shoal-bridge|zeromq) \| (64|1024) B \| (\d+) \[(\d+), (\d+)\]', line)
        if m: rows[(int(i), w, m.group(1), m.group(2))] = int(m.group(3))
print('pair side   bridge64  direct64  zmq64 | b/zmq  d/zmq | bridge1k direct1k zmq1k')
agg = {}
for (i, w) in sorted(set((k[0], k[1]) for k in rows)):
    g = lambda c, p: rows.get((i, w, c, p), 0)
    b, dd, z = g('shoal-bridge', '64'), g('shoal-bridge-direct', '64'), g('zeromq', '64')
    print(f'{i:4d} {w:4s} {b:9d} {dd:9d} {z:9d} | {b/z if z else 0:.2f}  {dd/z if z else 0:.2f} | {g("shoal-bridge","1024"):8d} {g("shoal-bridge-direct","1024"):8d} {g("zeromq","1024"):8d}')
    agg.setdefault(w, []).append((b, dd, z, b / z if z else 0, dd / z if z else 0))
import statistics as st
for w, l in sorted(agg.items()):
    print(f'{w}: median bridge64 {st.median(x[0] for x in l):.0f}, direct64 {st.median(x[1] for x in l):.0f}, zmq64 {st.median(x[2] for x in l):.0f}, bridge/zmq {st.median(x[3] for x in l):.2f}, direct/zmq {st.median(x[4] for x in l):.2f}')
