import sys, glob, os, re, collections, statistics as st
d = sys.argv[1]
res = collections.defaultdict(list)
for f in sorted(glob.glob(d + '/*.an')):
    w, i = os.path.basename(f)[:-3].split('-')
    tot = 0; sec = None; roles = collections.Counter(); rates = []
    for line in open(f):
        if line.startswith('== '):
            if sec == '64': break
            sec = line.split()[1]; continue
        if sec != '64': continue
        m = re.match(r'run \d: steady \d+ ms, (\d+) msg/s', line)
        if m: rates.append(int(m.group(1)))
        m = re.match(r'\s+(\S+)\s+(\S+)\s+([\d.]+) ns/msg', line)
        if m: roles[m.group(1)] += float(m.group(3))
        m = re.match(r'\s+ours total ([\d.]+)', line)
        if m: tot = float(m.group(1))
    if rates: res[w].append((int(i), tot, roles, st.median(rates)))
keys = ['group-bench-a', 'router-a', 'bridge-a', 'bridge-b', 'router-b', 'group-bench-b']
print('side pair  total  ' + ' '.join(f'{k[:10]:>10s}' for k in keys) + '   rate64')
for w in sorted(res):
    for i, tot, roles, rate in sorted(res[w]):
        print(f'{w:4s} {i:4d} {tot:6.0f}  ' + ' '.join(f'{roles[k]:10.0f}' for k in keys) + f' {rate:9.0f}')
    l = res[w]
    print(f'{w:4s} med  {st.median(x[1] for x in l):6.0f}  ' + ' '.join(f'{st.median(x[2][k] for x in l):10.0f}' for k in keys) + f' {st.median(x[3] for x in l):9.0f}')
