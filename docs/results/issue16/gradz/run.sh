#!/bin/bash
# interleaved pairs: main build vs gradz build, MIXPREC_NUM_THREADS=1
out=$1; pairs=$2; shift 2
: > $out
for p in $(seq 1 $pairs); do
  for prec in fp32 mixed_bf16; do
    for who in main gradz; do
      if [ $who = main ]; then b=/work/main/build/bench_train_step; else b=/work/wt/gradz/build/bench_train_step; fi
      r=$(MIXPREC_NUM_THREADS=1 $b --in 72 --hidden 512 --depth 3 --out 65 --batch 256 --precision $prec --steps 150 --json)
      echo "$who $prec $p $r" >> $out
    done
  done
done
