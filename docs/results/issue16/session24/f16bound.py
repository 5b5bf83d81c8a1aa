#!/usr/bin/env python3
"""The FP16 rows of a bench_gemm_cpu --threads 2 output against the bound
that widening sets.

Usage: f16bound.py BENCH_OUTPUT [PEAK_GFLOPS] [WIDEN_NS]

Our FP16 GEMM must widen every FP16 element of A and B to FP32 at least
once (this CPU has no AVX512-FP16; vdpbf16ps would round). oneDNN's
"onednn" column is dnnl_sgemm on FP32 copies made beforehand. For each f16
row this prints, with the two threads' FMA peak (default 234 GFLOP/s,
`mixprec bench kernels`) and the one-thread widening stream floor
(default 0.052 ns per element, docs/kernels.md "FP16 op(A) widened in its
own layout"):
  need  - the FMA efficiency (share of peak, widening excluded) our kernel
          would need to tie oneDNN if the widening ran at its floor, split
          evenly over the two threads and never duplicated;
  max   - the best ours/oneDNN possible even at 100% of the FMA peak.
A row with need > 1 (max < 1) cannot reach 1.0 on this CPU at all."""
import sys

path = sys.argv[1]
peak = float(sys.argv[2]) if len(sys.argv) > 2 else 234.0
widen_ns = float(sys.argv[3]) if len(sys.argv) > 3 else 0.052
print(f"peak {peak} GFLOP/s, widening {widen_ns} ns/element on one thread, split over 2")
print(f"{'shape':16s} {'MxNxK':15s} tr {'ours':>6s} {'onednn':>6s} {'ours/dn':>7s} "
      f"{'widen us':>8s} {'need':>6s} {'max':>5s}")
for line in open(path):
    f = line.split()
    if len(f) < 8 or 'f16' not in f:
        continue
    i = f.index('f16')
    label = ' '.join(f[:i - 2])
    mnk, tr = f[i - 2], f[i - 1]
    ours, dn = float(f[i + 1]), float(f[i + 3] if len(f) > i + 6 and f[i + 6] in ('same', 'DIFF') else f[i + 2])
    M, N, K = (int(x) for x in mnk.split('x'))
    flops = 2.0 * M * N * K
    t_dn = flops / (dn * 1e9)
    t_widen = (M * K + K * N) * widen_ns * 1e-9 / 2
    need = flops / ((t_dn - t_widen) * peak * 1e9)
    best = t_dn / (flops / (peak * 1e9) + t_widen)
    print(f"{label:16s} {mnk:15s} {tr} {ours:6.1f} {dn:6.1f} {ours / dn:7.2f} "
          f"{t_widen * 1e6:8.2f} {need:6.1%} {best:5.2f}")
