#!/bin/bash
# session 23 final measurements, idle machine, one after the other
cd /work/main
S=${OUT:-/tmp/s23}   # the outputs were renamed when copied here: bk-run* -> bench-kernels-training-run*, bgc-2t -> bench-gemm-cpu-2t, scen -> scenarios-run1
uptime > $S/conditions.txt
build/mixprec bench kernels --no-generic --shapes training --reps 11 > $S/bk-run1.txt 2>&1
build/mixprec bench kernels --no-generic --shapes training --reps 11 > $S/bk-run2.txt 2>&1
build/bench_gemm_cpu --threads 2 --reps 11 --shapes training --base /tmp/base23.so --ours /tmp/final23.so > $S/bgc-2t.txt 2>&1
bash docs/results/issue16/steps.sh before23 > $S/steps.txt 2>&1
for i in 1 2 3; do for w in before23 main; do
  echo "## $w mixed_bf16 world model 400 steps rep $i"
  /work/$w/build/bench_train_step --in 4 --hidden 512 --depth 3 --out 4 --batch 256 --precision mixed_bf16 --steps 400 --warmup 10 2>&1
done; done > $S/cliff.txt
build/mixprec bench train --workloads world_model --only scenarios --runs 3 --out $S/scen > $S/scen-stdout.txt 2>&1
uptime >> $S/conditions.txt
echo done > $S/measure.done
