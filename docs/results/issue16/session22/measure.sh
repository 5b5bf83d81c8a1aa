#!/bin/bash
# session 22 final measurements, idle machine, one after the other
cd /work/main
S=/work/s22
build/mixprec bench kernels --no-generic --shapes training --reps 11 > $S/bk-final-run1.txt 2>&1
build/mixprec bench kernels --no-generic --shapes training --reps 11 > $S/bk-final-run2.txt 2>&1
build/bench_gemm_cpu --threads 2 --reps 11 --shapes training --base /tmp/base22.so --ours /tmp/final22.so > $S/bgc-2t-final.txt 2>&1
build/bench_gemm_cpu --threads 1 --reps 11 --shapes training --base /tmp/base22.so --ours /tmp/final22.so > $S/bgc-1t-final.txt 2>&1
bash docs/results/issue16/steps.sh before22 > $S/steps-final.txt 2>&1
echo done > $S/measure.done
