#!/usr/bin/env bash
# tests/test_dist_cli.sh: `mixprec train` as 2 MPI ranks, as a user runs it.
# usage: test_dist_cli.sh MIXPREC_BINARY SOURCE_DIR
#  - mpirun -np 2 with training.batch_size=16 gives the losses of one
#    process with batch 32 (history.csv, 1e-6 relative), in fp32 and with
#    gradient accumulation;
#  - rank 0 alone prints the summary and writes the outputs; the other rank
#    logs warnings and errors only; summary.json reports world_size and the
#    all-reduce traffic, halved by dist.allreduce_dtype=bf16;
#  - --resume from a checkpoint at step 20 continues with the same losses at
#    the same world size and at another one with the same global batch
#    (2 x 16 <-> 1 x 32);
#  - a bad dist.* value exits 2 naming the key;
#  - killing one rank (SIGKILL) makes the job fail fast with a message that
#    names the rank, and every checkpoint file left on disk is complete;
#  - SIGUSR2 to mpirun, or SIGTERM to the ranks, stops the job gracefully:
#    both ranks stop at a step boundary, outputs and a verifying checkpoint
#    are written, mpirun exits 0 (issue 15, item 6).
# Exits 77 (skipped) without mpirun or with a mixprec built without MPI.
set -u
bin=$(realpath "$1")
src=$(realpath "$2")
command -v mpirun >/dev/null 2>&1 || { echo "test_dist_cli: skipped: no mpirun"; exit 77; }
work=$(mktemp -d)
mp=""
cleanup() {
  [ -n "$mp" ] && kill -9 "$mp" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
export MIXPREC_NUM_THREADS=1 # 2 ranks share 2 cores
# LeakSanitizer cannot tell Open MPI's lifetime allocations from leaks: off
# for the ranks (tests/test_dist.c counts mixprec's allocations there)
MPI=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0"
     mpirun --oversubscribe --allow-run-as-root -np 2)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

small="data.trajectories=16 data.episode_length=50 model.hidden=32 model.depth=2 training.epochs=2"

"${MPI[@]}" "$bin" train output.dir=two $small training.batch_size=16 >two.out 2>two.err
rc=$?
if grep -q "built without MPI" two.err; then
  echo "test_dist_cli: skipped: $bin has no MPI"
  exit 77
fi
[ $rc -eq 0 ] || fail "2-rank run exited $rc: $(tail -5 two.err)"
"$bin" train output.dir=one $small training.batch_size=32 >one.out 2>one.err ||
  fail "1-process run failed: $(tail -5 one.err)"

# compare_losses A.csv B.csv: same steps, losses within 1e-6 relative;
# prints the worst relative difference
compare_losses() {
  python3 - "$1" "$2" <<'EOF'
import csv, sys
a = list(csv.DictReader(open(sys.argv[1])))
b = list(csv.DictReader(open(sys.argv[2])))
if len(a) != len(b) or not a:
    sys.exit(f"{len(a)} vs {len(b)} steps")
worst = 0.0
for x, y in zip(a, b):
    if x["skipped"] != y["skipped"] or x["scale"] != y["scale"]:
        sys.exit(f"step {x['step']}: skipped/scale differ")
    rel = abs(float(x["loss"]) - float(y["loss"])) / abs(float(y["loss"]))
    worst = max(worst, rel)
print(f"{worst:.3g}")
sys.exit(0 if worst <= 1e-6 else f"worst relative loss difference {worst:.3g} > 1e-6")
EOF
}
w=$(compare_losses two/history.csv one/history.csv) || fail "2x16 vs 1x32: $w"
echo "2 ranks x 16 vs 1 x 32 (fp32): worst relative loss difference $w"

[ "$(grep -c 'final train loss' two.out)" = 1 ] || fail "summary not printed exactly once"
[ "$(grep -c 'training world model' two.err)" = 1 ] ||
  fail "info lines from more than rank 0: $(grep -c 'training world model' two.err)"
grep -q '"world_size":2' two/summary.json || fail "summary.json lacks world_size 2"
fp32_bytes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["comm_bytes_sent"])' \
  two/summary.json)
[ "${fp32_bytes:-0}" -gt 0 ] || fail "no all-reduce traffic recorded"

# gradient accumulation and the bf16 wire
"${MPI[@]}" "$bin" train output.dir=acc2 $small training.batch_size=8 \
  training.grad_accum_steps=2 >/dev/null 2>acc2.err || fail "accum run: $(tail -3 acc2.err)"
"$bin" train output.dir=acc1 $small training.batch_size=16 training.grad_accum_steps=2 \
  >/dev/null 2>&1 || fail "accum reference run failed"
w=$(compare_losses acc2/history.csv acc1/history.csv) || fail "accum 2x8x2 vs 1x16x2: $w"
echo "2 ranks x 8 x 2 micro vs 1 x 16 x 2 micro: worst relative loss difference $w"
"${MPI[@]}" "$bin" train output.dir=bf $small training.batch_size=16 \
  dist.allreduce_dtype=bf16 dist.check_every=5 >/dev/null 2>bf.err ||
  fail "bf16 all-reduce run: $(tail -3 bf.err)"
bf_bytes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["comm_bytes_sent"])' \
  bf/summary.json 2>/dev/null)
python3 -c "import sys; sys.exit(0 if 0.45 < $bf_bytes / $fp32_bytes < 0.55 else 1)" 2>/dev/null ||
  fail "bf16 wire sent $bf_bytes bytes vs fp32 $fp32_bytes (expected about half)"

# resume at another world size with the same global batch (32): the resumed
# steps match the run that wrote the checkpoint
compare_by_step() { # RESUMED.csv FULL.csv: every resumed step within 1e-6
  python3 - "$1" "$2" <<'EOF'
import csv, sys
full = {r["step"]: r for r in csv.DictReader(open(sys.argv[2]))}
rows = list(csv.DictReader(open(sys.argv[1])))
if not rows or rows[0]["step"] == "1" or any(r["step"] not in full for r in rows):
    sys.exit(f"resumed steps {[r['step'] for r in rows][:3]}... do not continue the full run")
worst = max(abs(float(r["loss"]) - float(full[r["step"]]["loss"])) / abs(float(full[r["step"]]["loss"]))
            for r in rows)
print(f"{worst:.3g} over {len(rows)} steps")
sys.exit(0 if worst <= 1e-6 else f"worst relative loss difference {worst:.3g}")
EOF
}
ck="checkpoint.every_steps=20 checkpoint.keep_last=10"
"${MPI[@]}" "$bin" train output.dir=r2 $small $ck training.batch_size=16 >/dev/null 2>r2.err ||
  fail "2-rank run with checkpoints: $(tail -3 r2.err)"
"$bin" train --resume r2/checkpoints/ckpt-000000000020.safetensors output.dir=r21 \
  training.batch_size=32 >/dev/null 2>r21.err || fail "resume 2x16 -> 1x32: $(tail -3 r21.err)"
w=$(compare_by_step r21/history.csv r2/history.csv) || fail "resume 2x16 -> 1x32: $w"
echo "resume 2x16 -> 1x32 at step 20: worst relative loss difference $w"
"$bin" train output.dir=r1 $small $ck training.batch_size=32 >/dev/null 2>r1.err ||
  fail "1-process run with checkpoints: $(tail -3 r1.err)"
"${MPI[@]}" "$bin" train --resume r1/checkpoints/ckpt-000000000020.safetensors output.dir=r12 \
  training.batch_size=16 >/dev/null 2>r12.err || fail "resume 1x32 -> 2x16: $(tail -3 r12.err)"
w=$(compare_by_step r12/history.csv r1/history.csv) || fail "resume 1x32 -> 2x16: $w"
echo "resume 1x32 -> 2x16 at step 20: worst relative loss difference $w"
"${MPI[@]}" "$bin" train --resume r2/checkpoints/ckpt-000000000020.safetensors output.dir=r22 \
  >/dev/null 2>r22.err || fail "resume 2x16 -> 2x16: $(tail -3 r22.err)"
w=$(compare_by_step r22/history.csv r2/history.csv) || fail "resume 2x16 -> 2x16: $w"
echo "resume 2x16 -> 2x16 at step 20: worst relative loss difference $w"

# a bad value is a config error on every rank, exit 2
"${MPI[@]}" "$bin" train output.dir=bad $small dist.allreduce_dtype=fp8 >/dev/null 2>bad.err
rc=$?
[ $rc -eq 2 ] || fail "bad dist.allreduce_dtype: exit $rc, expected 2"
grep -q "dist.allreduce_dtype" bad.err || fail "error does not name dist.allreduce_dtype"
[ ! -e bad ] || fail "outputs written after a config error"

# kill rank 1 mid-run: the job fails fast and names the dead rank
big="data.trajectories=64 data.episode_length=200 model.hidden=128 model.depth=2
     training.epochs=200 training.batch_size=16 checkpoint.every_steps=50"
"${MPI[@]}" "$bin" train output.dir=kill $big >kill.out 2>kill.err &
mp=$!
for _ in $(seq 1 600); do
  grep -q "training world model" kill.err 2>/dev/null && break
  sleep 0.1
done
for _ in $(seq 1 300); do # until the first checkpoint is on disk, then a bit more
  compgen -G "kill/checkpoints/ckpt-*.safetensors" >/dev/null && break
  sleep 0.1
done
sleep 0.5
victim=""
for p in $(pgrep -P "$mp"); do
  if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
    victim=$p
  fi
done
if [ -z "$victim" ]; then
  fail "could not find rank 1 (run ended early?): $(tail -3 kill.err)"
else
  t0=$(date +%s.%N)
  kill -9 "$victim"
  wait "$mp"
  rc=$?
  mp=""
  dt=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')")
  echo "rank 1 killed: mpirun exited $rc after ${dt} s"
  [ $rc -ne 0 ] || fail "job exited 0 after a rank was killed"
  python3 -c "import sys; sys.exit(0 if $dt < 30 else 1)" || fail "took ${dt} s to fail"
  msg=$(grep -iE "rank 1.*(signal 9|killed)|signal 9 \(Killed\)" kill.err | head -1)
  [ -n "$msg" ] || fail "no message naming the dead rank: $(tail -8 kill.err)"
  echo "message: $msg"
  # every checkpoint on disk is complete (safetensors: header length, JSON
  # header, data offsets covering the rest of the file exactly)
  python3 - kill <<'EOF' || fail "a checkpoint is corrupt"
import glob, json, os, struct, sys
files = sorted(glob.glob(os.path.join(sys.argv[1], "**", "*.safetensors"), recursive=True))
for f in files:
    raw = open(f, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    end = max((v["data_offsets"][1] for k, v in hdr.items() if k != "__metadata__"), default=0)
    if 8 + n + end != len(raw):
        sys.exit(f"{f}: {len(raw)} bytes, header says {8 + n + end}")
print(f"{len(files)} checkpoint(s) on disk, all complete")
EOF
fi

# graceful stop of the whole job (issue 15, item 6): SIGUSR2 to mpirun is
# forwarded to every rank, which stop at a step boundary; rank 0 writes the
# checkpoint and the outputs; every rank and mpirun exit 0. SIGTERM to the
# ranks does the same. (SIGTERM to mpirun is Open MPI's abort: exit 1.)
for how in usr2-to-mpirun term-to-ranks; do
  "${MPI[@]}" "$bin" train output.dir=g-$how $big >g.out 2>g.err &
  mp=$!
  for _ in $(seq 1 600); do
    compgen -G "g-$how/checkpoints/ckpt-*.safetensors" >/dev/null && break
    sleep 0.1
  done
  if [ $how = usr2-to-mpirun ]; then
    kill -USR2 $mp
  else
    kill -TERM $(pgrep -P $mp)
  fi
  wait $mp
  rc=$?
  mp=""
  echo "graceful stop ($how): mpirun exited $rc"
  [ $rc -eq 0 ] || fail "graceful stop ($how): mpirun exit $rc: $(tail -3 g.err)"
  [ "$(grep -c 'stopped by signal after step' g.err)" -eq 2 ] ||
    fail "graceful stop ($how): not every rank stopped at a step boundary: $(tail -4 g.err)"
  [ -f g-$how/summary.json ] || fail "graceful stop ($how): no outputs"
  "$bin" ckpt verify g-$how >/dev/null 2>&1 || fail "graceful stop ($how): a checkpoint fails verify"
done

echo "test_dist_cli: $fails failure(s)"
[ $fails -eq 0 ]
