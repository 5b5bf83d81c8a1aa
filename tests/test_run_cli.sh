#!/usr/bin/env bash
# tests/test_run_cli.sh: run directories and resume as a user meets them
# through `mixprec train` (docs/run.md).
# usage: test_run_cli.sh MIXPREC_BINARY SOURCE_DIR
#  - a second run into a used output.dir is refused (exit 2, the message
#    names --resume and output.dir) and nothing in the directory changes;
#  - --resume of a finished run exits 0, says so, and leaves every file of
#    the run directory byte-identical (summary.json, history.csv, the store);
#  - a GPT and a classifier run resumed from a mid-run checkpoint (the
#    newer ones deleted) end with the uninterrupted run's history.csv, byte
#    for byte, and the same held-out loss (the oracle: the straight run);
#  - a checkpoint of another workload is refused with exit 2;
#  - data parallel for any workload: mpirun -np 2 of the GPT at batch 4
#    gives the losses of one process at batch 8 (relative 1e-6).
. "$(dirname "$0")/cli_lib.sh" "$1"
# every file below a directory with its checksum (names, sizes, contents)
snap() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }

wm="data.trajectories=12 data.episode_length=40 model.hidden=16 model.depth=1 training.epochs=2"
"$bin" train --quiet $wm output.dir=W >/dev/null 2>W.err || fail "first run: $(tail -2 W.err)"
[ -f W/run.json ] || fail "no run.json"
before=$(snap W)

"$bin" train --quiet $wm output.dir=W >W2.out 2>W2.err
rc=$?
[ $rc -eq 2 ] || fail "second run into a used dir: exit $rc, expected 2"
grep -q -- "--resume" W2.err && grep -q "output.dir" W2.err ||
  fail "refusal message: $(cat W2.err)"
[ "$(snap W)" = "$before" ] || fail "the refused run changed the directory"

"$bin" train --quiet --resume W >R.out 2>R.err
rc=$?
[ $rc -eq 0 ] || fail "resume of a finished run: exit $rc: $(tail -2 R.err)"
grep -q "already complete" R.err || fail "resume of a finished run does not say so: $(cat R.err)"
[ "$(snap W)" = "$before" ] || fail "resume of a finished run changed the directory"

# mid-run resume: keep only the checkpoints up to the first periodic one
for w in "gpt" "classifier"; do
  if [ "$w" = gpt ]; then
    printf 'the quick brown fox jumps over the lazy dog.\n%.0s' $(seq 80) >text.txt
    args="model.workload=gpt data.text_file=$work/text.txt gpt.layers=1 gpt.embd=16 gpt.heads=2
          gpt.context=8 training.batch_size=4 data.train_subset=48 data.test_subset=8"
    key=val_loss
  else
    [ -d /usr/share/datasets/fashion-mnist ] || { echo "note: no Fashion-MNIST, classifier skipped"; continue; }
    args="model.workload=classifier data.train_subset=256 data.test_subset=64 model.hidden=16
          model.depth=1 training.batch_size=16"
    key=test_loss
  fi
  "$bin" train --quiet --json $args training.epochs=2 checkpoint.every_steps=5 \
    checkpoint.keep_last=100 output.dir=S >S.json 2>S.err || fail "$w straight: $(tail -2 S.err)"
  cp -r S P
  first=$(ls P/checkpoints | head -1)
  for f in $(ls P/checkpoints | tail -n +2); do rm -f "P/checkpoints/$f"; done
  "$bin" train --quiet --json --resume P >P.json 2>P.err || fail "$w resume: $(tail -2 P.err)"
  grep -q "resumed run" P.err || fail "$w: no resume line: $(head -3 P.err)"
  cmp -s S/history.csv P/history.csv || fail "$w: history.csv differs after resume from $first"
  /usr/bin/python3 - "$key" S.json P.json <<'EOF' || fail "$w: summaries differ"
import json, sys
k = sys.argv[1]
a, b = (json.load(open(p)) for p in sys.argv[2:4])
assert a[k] == b[k], (k, a[k], b[k])
assert a["training_steps"] == b["training_steps"]
assert a["run_id"] == b["run_id"] and b["resumed"] and not a["resumed"]
assert abs(a["final_train_loss"] - b["final_train_loss"]) <= 1e-7 * abs(a["final_train_loss"])
EOF
  [ "$w" = gpt ] && cp -r S G
  rm -rf S P
done

# a checkpoint of another workload: refused, exit 2
"$bin" train --quiet --resume "G/checkpoints/$(ls G/checkpoints | head -1)" model.workload=world_model \
  output.dir=X >X.out 2>X.err
rc=$?
[ $rc -eq 2 ] || fail "GPT checkpoint into the world model: exit $rc: $(tail -2 X.err)"

# data parallel, any workload: 2 ranks x 4 GPT windows == 1 process x 8
# (the run slices every global micro-batch by rank), up to all-reduce rounding
if command -v mpirun >/dev/null 2>&1; then
  printf 'the quick brown fox jumps over the lazy dog.\n%.0s' $(seq 200) >dp.txt
  dp="model.workload=gpt data.text_file=$work/dp.txt gpt.layers=1 gpt.embd=16 gpt.heads=2
      gpt.context=8 training.epochs=1 data.train_subset=64 data.test_subset=8"
  "$bin" train --quiet $dp training.batch_size=8 output.dir=D1 >/dev/null 2>D1.err ||
    fail "gpt 1 process: $(tail -2 D1.err)"
  env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" MIXPREC_NUM_THREADS=1 \
    mpirun --oversubscribe --allow-run-as-root -np 2 \
    "$bin" train --quiet $dp training.batch_size=4 output.dir=D2 >/dev/null 2>D2.err ||
    fail "gpt 2 ranks: $(tail -2 D2.err)"
  /usr/bin/python3 - D1/history.csv D2/history.csv <<'EOF' || fail "gpt 2 ranks x 4 != 1 x 8"
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
assert len(a) == len(b) > 0, (len(a), len(b))
worst = max(abs(float(x["loss"]) - float(y["loss"])) / abs(float(x["loss"])) for x, y in zip(a, b))
assert worst <= 1e-6, worst
print(f"gpt 2 ranks x 4 vs 1 x 8: worst relative loss difference {worst:.3g}")
EOF
else
  echo "note: no mpirun, data-parallel GPT skipped"
fi

[ $fails -eq 0 ] && echo "test_run_cli: ok"
exit $((fails > 0))
