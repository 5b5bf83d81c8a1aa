#!/bin/bash
# standard scenario mixed_bf16 run by each build, interleaved; wall_time_s from the summary
for i in 1 2 3 4 5 6 7 8; do for w in "$@"; do
  d=/tmp/stdrun_$RANDOM; 
  /work/$w/build/mixprec train --json --quiet checkpoint.enabled=false obs.store.enabled=false training.precision=mixed_bf16 model.hidden=512 model.depth=3 training.batch_size=256 data.trajectories=256 training.epochs=3 output.dir=$d > $d.json 2>/dev/null
  echo "$w $(grep -o '"wall_time_s":[0-9.]*' $d.json)"; rm -rf $d $d.json
done; done
