#!/usr/bin/env bash
# tests/test_hardening_cli.sh: no crash, hang, false verdict or memory that
# follows declared sizes on the user-data paths (issue 30, items 1, 2, 4-8).
# usage: test_hardening_cli.sh MIXPREC_BINARY SOURCE_DIR
#  1  eval --data with a y narrower or wider than the model's output: exit 2
#     naming both widths (was SIGSEGV, and exit 0 on misaligned targets);
#  2  a FIFO, or a link to one, as data.path, eval --data, predict --input,
#     the checkpoint's stored data.path and --resume RUN data.path=FIFO:
#     exit 2 at once (was a hang);
#  4  ckpt verify accepts a world model trained on user data;
#  5  edited statistics/widths with valid checksums (std 0 or negative, a
#     mean of 1e38, workload_meta missing or not JSON, out_dim) are refused
#     by eval, predict, export and verify; an edited out_dim by --resume;
#     a y_std of 1e38 by eval on the run's own split;
#  6  predict --output / export -o naming a device (via a link) or a FIFO:
#     exit 2, the node untouched;
#  7  memory follows the file: a 5 KB .npz declaring 1 GiB, a zip bomb with
#     the wrong rank, a 1 GiB sparse safetensors file (bad header, or a
#     small valid one), a label of 2^20 in a 500-byte file, a checkpoint
#     claiming in_dim = 10^7: each ends (30 s timeout) under 150 MB peak RSS
#     (before: 1-3.6 GB, or a timeout);
#  8  exit codes and messages: a batch size change on resume mid-call is
#     exit 2 with metrics.db / events.jsonl unchanged; bad shapes in
#     predict/eval exit 2 like NaN input; a broken deflate stream is not
#     "(No error)"; an empty .npz says it holds no array; an .npy descr
#     '<f4\0' is refused; a two-rank run resumes in one process mid-call
#     without training.batch_size (needs mpirun and an MPI build).
# Every command runs under a timeout (exit 124 = hang) and its peak RSS is
# measured (resource.getrusage of the child). Files from
# tests/hardening_cases.py (/usr/bin/python3 with NumPy); exit 77 without.
set -u
src=$(realpath "$2")
. "$(dirname "$0")/cli_lib.sh" "$1"
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3"; exit 77; }
/usr/bin/python3 "$src/tests/hardening_cases.py" data . ||
  { echo "SKIP: numpy could not write the data"; exit 77; }
export MIXPREC_NUM_THREADS=1
cases() { /usr/bin/python3 "$src/tests/hardening_cases.py" "$@"; }

# run_m SECONDS CMD...: run CMD with stdout/stderr in m.out/m.err under a
# timeout; sets rc (124: timed out) and rss (the child's peak RSS in MB)
run_m() {
  local r
  r=$(/usr/bin/python3 - "$@" <<'EOF'
import resource, subprocess, sys
try:
    rc = subprocess.run(sys.argv[2:], timeout=float(sys.argv[1]), stdout=open("m.out", "wb"),
                        stderr=open("m.err", "wb")).returncode
except subprocess.TimeoutExpired:
    rc = 124
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
EOF
  )
  rc=${r% *}
  rss=${r#* }
}
# expect CODE WHAT PATTERN: the last run_m exited CODE and its output
# (stderr, or stdout: verify reports there) matches PATTERN
expect() {
  [ "$rc" = "$1" ] || { fail "$2: exit $rc, expected $1: $(tail -2 m.err)"; return; }
  cat m.err m.out | grep -Eq "$3" || fail "$2: output lacks /$3/: $(tail -2 m.err)"
}
# small MB WHAT: the last run_m peaked under MB
small() {
  echo "$2: peak RSS $rss MB"
  [ "$rss" -lt "$1" ] || fail "$2: peak RSS $rss MB (limit $1 MB)"
}

run_m 120 "$bin" train data.path=reg.npz model.workload=regressor training.epochs=2 output.dir=run
[ "$rc" = 0 ] || { fail "train on reg.npz: $(tail -3 m.err)"; exit 1; }
run_m 120 "$bin" train data.path=wm.npz training.epochs=1 checkpoint.every_steps=5 output.dir=wmrun
[ "$rc" = 0 ] || { fail "train on wm.npz: $(tail -3 m.err)"; exit 1; }
wck=$(ls wmrun/checkpoints/*.safetensors | tail -1)
rck=$(ls run/checkpoints/*.safetensors | tail -1)

# ---- 1: the data's widths against the model's -------------------------------
run_m 60 "$bin" eval run --data narrow.npz
expect 2 "1: eval --data with y [N, 1] for a 2-output model" \
  "1 targets; the model takes 5 and gives 2"
run_m 60 "$bin" eval run --data wide.npz
expect 2 "1: eval --data with y [N, 3] for a 2-output model" \
  "3 targets; the model takes 5 and gives 2"

# ---- 2: FIFOs are refused, not waited on --------------------------------------
mkfifo fifo
ln -s fifo fifolink
for a in "train data.path=fifo model.workload=regressor output.dir=f1" \
         "train data.path=fifolink model.workload=regressor output.dir=f2" \
         "eval run --data fifo" "predict run --input fifolink --output f.st" \
         "train --resume run data.path=fifo"; do
  run_m 20 "$bin" $a
  expect 2 "2: $a" "is a FIFO"
done
# the data.path stored in the checkpoint becomes a FIFO
cp reg.npz reg2.npz
run_m 120 "$bin" train data.path=reg2.npz model.workload=regressor training.epochs=1 output.dir=run2
rm reg2.npz && mkfifo reg2.npz
run_m 20 "$bin" eval run2
expect 2 "2: eval of a run whose data.path is now a FIFO" "is a FIFO"
run_m 20 "$bin" train --resume run2 training.epochs=2
expect 2 "2: --resume of a run whose data.path is now a FIFO" "is a FIFO"

# ---- 4: verify accepts a world model on user data -----------------------------
run_m 60 "$bin" ckpt verify wmrun
[ "$rc" = 0 ] || fail "4: ckpt verify of a user-data world model: exit $rc: $(cat m.out)"
grep -q "shapes match the config" m.out || fail "4: verify did not check shapes: $(cat m.out)"

# ---- 5: edited metadata (checksums recomputed) --------------------------------
for what in x_std_zero x_std_negative x_mean_1e38 missing garbage out_dim; do
  cases tamper "$wck" t_$what.safetensors $what || { fail "5: cannot write $what"; continue; }
  run_m 60 "$bin" ckpt verify t_$what.safetensors
  expect 1 "5: verify $what" "workload_meta"
  run_m 60 "$bin" eval t_$what.safetensors --data wm.npz
  expect 1 "5: eval $what" "workload_meta"
  run_m 60 "$bin" predict t_$what.safetensors --input inwm.npz --output p_$what.st
  expect 1 "5: predict $what" "workload_meta"
  [ -e p_$what.st ] && fail "5: predict $what wrote its output"
  run_m 60 "$bin" ckpt export t_$what.safetensors --torch -o e_$what.st
  expect 1 "5: export $what" "workload_meta"
done
cases tamper "$wck" t_y_std_1e38.safetensors y_std_1e38
cp t_y_std_1e38.safetensors wmrun/checkpoints/ckpt-000000009999.safetensors
run_m 60 "$bin" eval wmrun
expect 2 "5: eval of the own split with y_std edited to 1e38" "statistics differ"
rm wmrun/checkpoints/ckpt-000000009999.safetensors
n0=$(ls wmrun/checkpoints | wc -l)
run_m 60 "$bin" train --resume t_out_dim.safetensors data.path=wm.npz output.dir=wmrun \
  training.epochs=3
expect 2 "5: resume with an edited out_dim" "out_dim"
[ "$(ls wmrun/checkpoints | wc -l)" = "$n0" ] || fail "5: the refused resume wrote a checkpoint"

# ---- 6: outputs must be regular files or new ----------------------------------
ln -s /dev/null nul.st
run_m 60 "$bin" predict run --input in.npz --output nul.st
expect 2 "6: predict --output a link to /dev/null" "not a regular file"
[ -L nul.st ] && [ -c /dev/null ] || fail "6: the link or /dev/null was replaced"
run_m 20 "$bin" predict run --input in.npz --output fifo
expect 2 "6: predict --output FIFO" "not a regular file"
run_m 20 "$bin" ckpt export run --torch -o fifo
expect 2 "6: export --torch -o FIFO" "not a regular file"
run_m 20 "$bin" ckpt export "$rck" --dtype bf16 -o nul.st
expect 2 "6: ckpt export -o a link to /dev/null" "not a regular file"
[ -p fifo ] || fail "6: the FIFO was replaced"

# ---- 7: memory follows the file, not what it declares -------------------------
run_m 30 "$bin" eval run --data declared.npz
expect 2 "7: a 5 KB .npz declaring 1 GiB" "declares .* bytes from"
small 150 "7: declared 1 GiB"
run_m 30 "$bin" train data.path=bomb.npz output.dir=bomb
expect 2 "7: a zip bomb (256 MiB from 256 KB)" "at most 100:1"
small 150 "7: zip bomb"
[ -e bomb ] && fail "7: the refused bomb left output.dir"
head -c 8 /dev/urandom >sparse_bad.safetensors && truncate -s 1G sparse_bad.safetensors
run_m 30 "$bin" eval run --data sparse_bad.safetensors
expect 2 "7: 1 GiB sparse file with a bad header" "header length"
small 150 "7: sparse, bad header"
/usr/bin/python3 - <<'EOF'
import json, struct, numpy as np
x = np.ones((4, 5), "f4"); y = np.zeros((4, 2), "f4")
h = json.dumps({"x": {"dtype": "F32", "shape": [4, 5], "data_offsets": [0, 80]},
                "y": {"dtype": "F32", "shape": [4, 2], "data_offsets": [80, 112]}}).encode()
open("sparse_ok.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + x.tobytes() + y.tobytes())
EOF
truncate -s 1G sparse_ok.safetensors
run_m 30 "$bin" eval run --data sparse_ok.safetensors
expect 0 "7: 1 GiB sparse file with a small valid header" "."
small 150 "7: sparse, valid header"
run_m 30 "$bin" train data.path=label.npz model.workload=classifier output.dir=label
expect 2 "7: a label of 2^20 in a 500-byte file" "1048577 classes"
small 150 "7: label 2^20"
cases tamper "$rck" t_in_dim.safetensors in_dim_1e7
for a in "eval t_in_dim.safetensors --data reg.npz" \
         "predict t_in_dim.safetensors --input in.npz --output q.st" \
         "ckpt export t_in_dim.safetensors --torch -o q.st"; do
  run_m 30 "$bin" $a
  expect 1 "7: $a (in_dim 10^7)" "parameters"
  small 150 "7: $a"
done

# ---- 8: exit codes and messages ------------------------------------------------
run_m 120 "$bin" train data.path=reg.npz model.workload=regressor training.epochs=2 \
  checkpoint.every_steps=3 checkpoint.keep_last=20 output.dir=mid
ls mid/checkpoints | tail -n +3 | while read -r f; do rm "mid/checkpoints/$f"; done
sum0=$(md5sum mid/metrics.db mid/events.jsonl)
run_m 60 "$bin" train --resume mid training.batch_size=16
expect 2 "8: a batch size change on resume mid-call" "training.batch_size=32"
[ "$(md5sum mid/metrics.db mid/events.jsonl)" = "$sum0" ] ||
  fail "8: the refused resume wrote to metrics.db or events.jsonl"
run_m 60 "$bin" predict run --input in_bad.npz --output b.st
expect 2 "8: predict on x of the wrong width" "must be float \[N, 5\]"
run_m 60 "$bin" predict run --input in_nan.npz --output b.st
expect 2 "8: predict on NaN input" "NaN"
run_m 60 "$bin" eval run --data wm.npz
expect 2 "8: eval on data of another workload" "unexpected array 'actions'"
run_m 60 "$bin" eval run --data deflate.npz
expect 2 "8: a deflate stream shorter than declared" "stream ends before the data does"
grep -q "No error" m.err && fail "8: deflate error reads 'No error': $(cat m.err)"
run_m 60 "$bin" eval run --data empty.npz
expect 2 "8: an empty .npz" "holds no array"
grep -q safetensors m.err && fail "8: an empty .npz is described as safetensors: $(cat m.err)"
run_m 60 "$bin" train data.path=descr_nul.npz model.workload=regressor output.dir=nul
expect 2 "8: descr '<f4\\0'" "descr"

if command -v mpirun >/dev/null 2>&1; then
  MPI=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0"
       mpirun --oversubscribe --allow-run-as-root -np 2)
  "${MPI[@]}" "$bin" train data.path=reg.npz model.workload=regressor training.epochs=2 \
    training.batch_size=16 checkpoint.every_steps=3 checkpoint.keep_last=20 output.dir=two \
    >two.out 2>two.err
  mrc=$?
  if grep -q "built without MPI" two.err; then
    echo "8: two-rank resume skipped: no MPI in $bin"
  elif [ $mrc -ne 0 ]; then
    fail "8: two-rank run exited $mrc: $(tail -3 two.err)"
  else
    ls two/checkpoints | tail -n +3 | while read -r f; do rm "two/checkpoints/$f"; done
    run_m 120 "$bin" train --resume two
    [ "$rc" = 0 ] ||
      fail "8: one-process resume of a two-rank run mid-call: exit $rc: $(tail -2 m.err)"
  fi
else
  echo "8: two-rank resume skipped: no mpirun"
fi

echo "test_hardening_cli: $fails failure(s)"
exit $((fails > 0))
