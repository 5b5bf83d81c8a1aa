import sys,statistics as st,re
for f in sys.argv[1:]:
    d={'base':[],'new':[]}; ph={'base':[],'new':[]}
    for l in open(f):
        w=l.split(); d[w[0]].append(float(w[1]))
        m=re.findall(r'([a-z]+) ([0-9.]+) ms',l); ph[w[0]].append([float(x[1]) for x in m])
    out=[]
    for k in ('base','new'):
        p=[st.median(c) for c in zip(*ph[k])]
        out.append("%s %.3f ms/step (fastest fwd/bwd/safety/opt %s)"%(k,st.median(d[k])," / ".join("%.3f"%x for x in p)))
    diffs=[n-b for b,n in zip(d['base'],d['new'])]
    print(f, "|", " | ".join(out), "| paired diff median %.3f"%st.median(diffs))
