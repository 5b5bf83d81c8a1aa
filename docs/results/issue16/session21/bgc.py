import re,math,sys
runs=[]
for f in sys.argv[1:]:
    d={}
    for l in open(f):
        if not re.search(r'\s(same|DIFF|differ)\s*$',l): continue
        p=l.split(); i=[k for k,t in enumerate(p) if t in('f32','bf16','f16')][0]
        key=(' '.join(p[:i-3]),p[i-3]+' '+p[i-2],p[i]) if False else (' '.join(p[:i-2]), p[i-2]+' '+p[i-1], p[i])
        ours,base,dn,od,bd=map(float,p[i+1:i+6]); d[key]=(od,bd)
    runs.append(d)
keys=list(runs[0])
gm=lambda xs: math.exp(sum(map(math.log,xs))/len(xs))
for dt in ('f32','bf16','f16'):
    ks=[k for k in keys if k[2]==dt]
    both=[k for k in ks if all(r[k][0]>=1.0 for r in runs)]
    bb=[k for k in ks if all(r[k][1]>=1.0 for r in runs)]
    print(f"{dt}: ours/oneDNN geomean "+", ".join("%.3f"%gm([r[k][0] for k in ks]) for r in runs)+f"; >=1.0 in every run {len(both)}/{len(ks)} (start of session {len(bb)}/{len(ks)}, geomean "+", ".join("%.3f"%gm([r[k][1] for k in ks]) for r in runs)+")")
    low=[k for k in ks if not all(r[k][0]>=1.0 for r in runs)]
    print("   below 1.0 in some run: "+"; ".join(f"{k[0]} {k[1]} "+"/".join("%.2f"%r[k][0] for r in runs) for k in low))
