#!/usr/bin/env python3
"""Summary of bench_gemm_cpu runs made with --base (usage: gemmsum.py RUN...):
per input dtype, rows at >= 1.0x oneDNN in every run (ours and base),
geometric means of ours / oneDNN, the rows below 1.0 in some run, and for
f16 the rows at >= 1.0x of oneDNN with the conversion timed (dn+cvt)."""
import math
import sys

runs = []
for path in sys.argv[1:]:
    rows = {}
    for line in open(path):
        f = line.split()
        if 'same' not in f and 'DIFF' not in f:
            continue
        i = next(k for k, t in enumerate(f) if t in ('f32', 'bf16', 'f16'))
        key = (' '.join(f[:i - 2]), f[i - 2] + ' ' + f[i - 1], f[i])
        od, bd = float(f[i + 4]), float(f[i + 5])
        dc = float(f[i + 8]) if len(f) > i + 8 else None
        rows[key] = (od, bd, dc)
    runs.append(rows)
keys = list(runs[0])


def gm(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


for dt in ('f32', 'bf16', 'f16'):
    ks = [k for k in keys if k[2] == dt]
    if not ks:
        continue
    ours = [k for k in ks if all(r[k][0] >= 1.0 for r in runs)]
    base = [k for k in ks if all(r[k][1] >= 1.0 for r in runs)]
    print(f"{dt}: >= 1.0x oneDNN in every run: ours {len(ours)}/{len(ks)}, base {len(base)}/{len(ks)}; "
          "geomean ours " + " / ".join("%.3f" % gm([r[k][0] for k in ks]) for r in runs) +
          ", base " + " / ".join("%.3f" % gm([r[k][1] for k in ks]) for r in runs))
    if dt == 'f16':
        dc = [k for k in ks if all(r[k][2] is not None and r[k][2] >= 1.0 for r in runs)]
        print(f"   vs oneDNN with the FP16 conversion timed (dn+cvt): >= 1.0 in every run {len(dc)}/{len(ks)}, "
              "min " + " / ".join("%.2f" % min(r[k][2] for k in ks) for r in runs))
    low = [k for k in ks if not all(r[k][0] >= 1.0 for r in runs)]
    print("   below 1.0 in some run (ours, runs; base): " + "; ".join(
        f"{k[0]} {k[1]} " + "/".join("%.2f" % r[k][0] for r in runs) + " (" +
        "/".join("%.2f" % r[k][1] for r in runs) + ")" for k in low))
