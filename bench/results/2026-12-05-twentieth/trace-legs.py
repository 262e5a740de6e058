import sys, array
N = 1 << 20; K = 20
ghz = 2.694872
def load(name, side):
    a = array.array('Q')
    with open(f'/tmp/r20/tr-{name}-{side}.bin','rb') as f:
        a.fromfile(f, K*N)
    return [a[k*N:(k+1)*N] for k in range(K)]
A = load('shoal-direct', 0); B = load('shoal-direct', 1)
def med(v):
    v.sort(); return f'{v[len(v)//2]/ghz:7.0f} (p10 {v[len(v)//10]/ghz:5.0f}, p90 {v[9*len(v)//10]/ghz:6.0f})'
rows = {}
def add(k, v): rows.setdefault(k, []).append(v)
for i in range(N):
    t0,t1,t4 = A[0][i],A[1][i],A[4][i]; t2,t3 = B[2][i],B[3][i]
    if not (t0 and t1 and t2 and t3 and t4): continue
    b = [B[k][i] for k in range(6, 13)]   # entry, take, empty, x3(peek call), peek, x1, x2
    a = [A[k][i] for k in range(13, 20)]
    if 0 in b or 0 in a: continue
    add('RT', t4 - t0)
    add('A send', t1 - t0)
    for who, (entry, take, empty, pcall, peek, x1, x2), start in (('B', b, t1), ('A', a, t3)):
        add(f'{who}: sender returns -> take', take - start)
        add(f'{who}: take -> ring check', empty - take)
        add(f'{who}: ring check -> peek call', pcall - empty)
        add(f'{who}: peek call -> peek found', peek - pcall)
        add(f'{who}: peek found -> envelope copied', x1 - peek)
        add(f'{who}: envelope -> before lat', x2 - x1)
        add(f'{who}: before lat -> handler entry', entry - x2)
    add('B send (handler entry -> send returns)', t3 - b[0])
for k, v in rows.items():
    print(f'{k:45s} {med(v)}  n={len(v)}')
