import csv,statistics as st,sys,os
# pairring.py DIR: per alternation, medians of each build's samples; head/base and ÷ plain / ÷ rte_ring
def rows(f):
    return list(csv.DictReader(open(f)))
def med(rs,c,p,b):
    v=[float(r['mmsgs_per_s']) for r in rs if r['kind']=='throughput' and r['contender']==c and r['payload']==p and r['batch']==b]
    return st.median(v) if v else None
d=sys.argv[1]
n=max(int(f[5:-4]) for f in os.listdir(d) if f.startswith('head-') and f.endswith('.csv'))
for p in ('16','64','256','1024'):
  for b in ('1','32'):
    hb=[];bb=[];hp=[];bp=[];hr=[];br=[];hv=[];bv=[]
    for i in range(1,n+1):
        if not os.path.exists(f'{d}/base-{i}.csv') or not os.path.exists(f'{d}/head-{i}.csv'): continue
        H=rows(f'{d}/head-{i}.csv'); B=rows(f'{d}/base-{i}.csv')
        h=med(H,'shoal',p,b); bs=med(B,'shoal',p,b)
        if h is None or bs is None: continue
        hv.append(h); bv.append(bs); hb.append(h/bs)
        hp.append(h/med(H,'plain',p,b)); bp.append(bs/med(B,'plain',p,b))
        if med(H,'rte_ring',p,b): hr.append(h/med(H,'rte_ring',p,b)); br.append(bs/med(B,'rte_ring',p,b))
    if not hb: continue
    f=lambda x: f'{min(x):.2f}-{max(x):.2f} (med {st.median(x):.2f})' if x else '-'
    print(f'{p:>5} B x{b:<2} shoal base {f(bv)} head {f(hv)} M/s | head/base median {st.median(hb):.3f}, lower in {sum(r<1 for r in hb)} of {len(hb)} | ÷plain base {f(bp)} head {f(hp)} | ÷rte base {f(br)} head {f(hr)}')
# ping-pong p50: Shoal ÷ plain per alternation, each build
def pmed(rs,c):
    v=[float(r['p50_ns']) for r in rs if r['kind']=='ping-pong' and r['contender']==c]
    return st.median(v) if v else None
hp=[];bp=[];hb=[]
for i in range(1,n+1):
    if not os.path.exists(f'{d}/base-{i}.csv') or not os.path.exists(f'{d}/head-{i}.csv'): continue
    H=rows(f'{d}/head-{i}.csv'); B=rows(f'{d}/base-{i}.csv')
    if pmed(H,'shoal') is None or pmed(B,'shoal') is None: continue
    hp.append(pmed(H,'shoal')/pmed(H,'plain')); bp.append(pmed(B,'shoal')/pmed(B,'plain')); hb.append(pmed(H,'shoal')/pmed(B,'shoal'))
if hp:
    f=lambda x: f'{min(x):.2f}-{max(x):.2f} (med {st.median(x):.2f})'
    print(f'ping-pong 64 B p50 ÷ plain: base {f(bp)} head {f(hp)} | head/base median {st.median(hb):.3f}, lower in {sum(r<1 for r in hb)} of {len(hb)}')
