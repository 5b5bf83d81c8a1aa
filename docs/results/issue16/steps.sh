#!/bin/bash
# bench_train_step, 2 threads, interleaved: before (the worktree /work/$BEFORE: before20 = 1871f5b,
# session 20's start; before21 = e64e882, session 21's start; before22 = a54317b; before23 =
# 1e1bc16, session 23's start) / after (main). Usage: steps.sh [BEFORE]
BEFORE=${1:-before20}
for cfg in "72 512 65 256 100 10" "4 512 4 256 100 10" "72 2048 65 512 12 3"; do
  set -- $cfg
  for p in fp32 mixed_bf16; do
    for i in 1 2 3 4 5; do
      for w in $BEFORE main; do
        echo "## $w in=$1 hidden=$2x3 out=$3 batch=$4 $p rep $i"
        /work/$w/build/bench_train_step --in $1 --hidden $2 --depth 3 --out $3 --batch $4 --precision $p --steps $5 --warmup $6 2>&1
      done
    done
  done
done
