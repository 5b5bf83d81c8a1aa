# usage: gemmtable.py RUN1 [RUN2 ...] : bench kernels outputs -> markdown table of ours/oneDNN
# f16 rows are compared with oneDNN's f32 GEMM of the same shape (oneDNN has no FP16 GEMM).
import re, sys, math
runs = []
for f in sys.argv[1:]:
    d = {}; order = []
    for line in open(f):
        m = re.match(r"\s+(\S.*?\S)\s+(\d+x\d+x\d+)\s+(\w\w)\s+(\w+)x\w+\s+([\d.]+)\s+\(\s*\d+%\)\s+(\S+)", line)
        if not m: continue
        lab, shp, tr, dt, ours, dn = m.groups()
        key = (lab, shp, tr)
        if key not in order: order.append(key)
        d[(key, dt)] = (float(ours), None if dn == '-' else float(dn))
    runs.append((d, order))
order = runs[0][1]
def ratio(d, key, dt):
    o = d.get((key, dt)); f = d.get((key, 'f32'))
    if not o or not f or f[1] is None: return None
    dn = o[1] if o[1] is not None else f[1]
    return o[0] / dn
print("| shape | MxNxK op | f32 | bf16 | f16 (vs oneDNN f32) |")
print("| --- | --- | --- | --- | --- |")
geo = {}; allge1 = {}
for key in order:
    cells = []
    for dt in ('f32', 'bf16', 'f16'):
        rs = [ratio(d, key, dt) for d, _ in runs]
        rs = [r for r in rs if r is not None]
        if not rs: cells.append('-'); continue
        cells.append(", ".join("%.2f" % r for r in rs))
        for i, r in enumerate(rs): geo.setdefault((dt, i), []).append(math.log(r))
        allge1.setdefault(dt, []).append(all(r >= 1.0 for r in rs))
    print(f"| {key[0]} | {key[1]} {key[2]} | " + " | ".join(cells) + " |")
for dt in ('f32', 'bf16', 'f16'):
    g = [math.exp(sum(v) / len(v)) for (t, i), v in sorted(geo.items()) if t == dt]
    n = allge1.get(dt, [])
    print(f"\n{dt}: geomean per run " + ", ".join("%.3f" % x for x in g) + f"; rows >= 1.0 in every run: {sum(n)} of {len(n)}")
