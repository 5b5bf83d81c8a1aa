#!/bin/bash
# usage: ab.sh PAIRS args... ; alternates base and new bench_train_step, 1 thread
P=$1; shift
for i in $(seq 1 $P); do
  for v in base new; do
    if [ $v = base ]; then B=/work/wt/stepprof-base/build/bench_train_step; else B=/work/wt/stepprof/build/bench_train_step; fi
    r=$(MIXPREC_NUM_THREADS=1 nice -n 19 $B "$@" 2>&1)
    echo "$v $(echo "$r" | grep -o 'process [0-9.]*' | cut -d' ' -f2) $(echo "$r" | grep 'fastest' | tr -s ' ')"
  done
done
