# Per-leg timeline of shoal-bench-iceoryx pingpong (shoal-direct) from the TSC
# stamps that trace.patch adds (SHOAL_TRACE=DIR: each process writes DIR/trace.PID
# once it has 200000 events). Usage: python3 trace-rt.py DIR/trace.A DIR/trace.B
# (the two sides of one shoal-direct sample: the files whose event 1 counts
# match). Prints the median gap between consecutive events of a round trip.
import struct,collections,statistics,sys,glob
def load(f):
    d=open(f,'rb').read(); n=len(d)//8
    return [(e>>8,e&255) for e in struct.unpack('<%dQ'%n,d)]
fs=sys.argv[1:]
S=[load(f) for f in fs]
# A: side where an event 1 follows 14 directly most of the time
def isA(ev):
    c=sum(1 for i in range(len(ev)-1) if ev[i][1]==14 and ev[i+1][1]==1)
    return c>len(ev)//20
a,b=(S[0],S[1]) if isA(S[0]) else (S[1],S[0])
ev=sorted([(t,'A',e) for t,e in a]+[(t,'B',e) for t,e in b])
rts=[]; cur=None
for t,s,e in ev:
    if s=='A' and e==1:
        if cur: rts.append(cur)
        cur={'start':t}; continue
    if cur is None: continue
    k=s+str(e)
    if e==10:
        if (s+'11') not in cur: cur[k]=t
        continue
    if k not in cur: cur[k]=t
keys=collections.Counter(k for r in rts for k in r)
full=[k for k,c in keys.items() if c>0.9*len(rts)]
rts=[r for r in rts if all(k in r for k in full)]
tot=[]
# RT length: next start - start
starts=[r['start'] for r in rts]
for i in range(len(rts)-1): rts[i]['end']=rts[i+1]['start']
rts=rts[:-1]
full.append('end')
med={k:statistics.median(r[k]-r['start'] for r in rts) for k in full}
order=sorted(full,key=lambda k:med[k])
ns=1/2.096015
print('round trips',len(rts),'RT p50 %.0f ns'%(med['end']*ns))
for i in range(len(order)-1):
    d=sorted(r[order[i+1]]-r[order[i]] for r in rts)
    print('%5s -> %5s p50 %6.1f ns  p10 %6.1f  p90 %6.1f'%(order[i],order[i+1],d[len(d)//2]*ns,d[len(d)//10]*ns,d[9*len(d)//10]*ns))
