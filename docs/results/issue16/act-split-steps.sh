#!/bin/bash
# interleaved: main build vs fp32act build, process CPU time per step, 1 thread
for i in 1 2 3 4 5; do
for B in /work/main/build /work/wt/fp32act/build; do
  r=$(MIXPREC_NUM_THREADS=1 $B/bench_train_step --in 72 --hidden 512 --depth 3 --out 65 --batch 256 --precision fp32 --steps 150 2>&1)
  cpu=$(echo "$r" | grep "cpu per step" | sed 's/.*process \([0-9.]*\) ms.*/\1/')
  fb=$(echo "$r" | grep "fastest step" | sed 's/.*forward \([0-9.]*\) ms, backward \([0-9.]*\) ms.*/\1 \2/')
  loss=$(echo "$r" | grep -o "final loss [0-9.e-]*")
  echo "fp32 run$i $(basename $(dirname $B)) cpu_ms_per_step $cpu fastest_fwd_bwd $fb $loss"
done; done
