import re,sys,statistics as st
cur=None; d={}
for line in open(sys.argv[1]):
    m=re.match(r"## (\S+) in=(\d+) hidden=(\S+) out=(\d+) batch=(\d+) (\S+) rep",line)
    if m: cur=(m.group(3),m.group(2),m.group(6),m.group(1)); continue
    m=re.search(r"median ([\d.]+) ms/step",line)
    if m and cur: d.setdefault(cur,[]).append(float(m.group(1)))
    m=re.search(r"mean per step: forward ([\d.]+) ms, backward ([\d.]+) ms, safety ([\d.]+) ms, optimizer ([\d.]+) ms",line)
    if m and cur: d.setdefault(cur+('ph',),[]).append([float(x) for x in m.groups()])
keys=sorted({k[:3] for k in d})
for k in keys:
    b=d.get(k+('before23',),[]); a=d.get(k+('main',),[])
    pb=d.get(k+('before23','ph'),[]); pa=d.get(k+('main','ph'),[])
    med=lambda v: st.median(v) if v else float('nan')
    phm=lambda v: "/".join("%.2f"%st.median([x[i] for x in v]) for i in range(4)) if v else "-"
    print(f"{k[1]}-{k[0]}-{'65' if k[1]=='72' else '4'} {k[2]}: before {med(b):.3f} after {med(a):.3f} ms ({med(b)/med(a):.3f}x)  runs b={['%.2f'%x for x in b]} a={['%.2f'%x for x in a]}  phases b {phm(pb)} a {phm(pa)}")
