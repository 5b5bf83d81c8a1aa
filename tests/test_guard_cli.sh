#!/usr/bin/env bash
# tests/test_guard_cli.sh: the guard as a `mixprec` user meets it.
# usage: test_guard_cli.sh MIXPREC_BINARY SOURCE_DIR
#  - `doctor` lists every precision with its support level and fallback;
#  - `doctor --preflight` refuses FP16 for a model whose activations exceed
#    65504 (layer 0 weights x 1e5) and accepts it for the default model;
#  - a `stop` rule ends `train` with exit code 4, outputs written, and the
#    summary names the rule; --json carries the guard object;
#  - `kill -USR1` switches a running job to fp32 at a step boundary, with no
#    lost or repeated step;
#  - bad guard/fault keys are config errors (exit 2) naming the key;
#  - issue 15, item 1: weights scaled to Inf before the first step (pure
#    fp16): the starting state is never a rollback point (no "rolled back"),
#    the run exits 1 naming the non-finite tensor, records the run failed,
#    and every checkpoint it wrote is marked unhealthy.
. "$(dirname "$0")/cli_lib.sh" "$1"
small="data.trajectories=16 data.episode_length=50 model.hidden=32 model.depth=2 training.batch_size=16 checkpoint.enabled=false obs.store.enabled=false"

"$bin" doctor > doctor.txt 2>&1 || fail "doctor exit $?"
for p in fp32 mixed_bf16 mixed_fp16 bf16 fp16 fp8; do
  grep -qE "^$p +(native|convert|emulated) " doctor.txt || fail "doctor lacks a row for $p"
done
grep -qE "^fp8 +emulated" doctor.txt || fail "doctor: fp8 must say emulated"

"$bin" doctor --preflight > pre.txt 2>&1 || fail "doctor --preflight exit $?"
grep -qE "^mixed_fp16 +safe" pre.txt || fail "default world model: fp16 not accepted: $(cat pre.txt)"
"$bin" doctor --preflight fault.kind=scale_weights fault.step=0 fault.value=1e5 > pre2.txt 2>&1 ||
  fail "doctor --preflight (scaled) exit $?"
grep -qE "^mixed_fp16 +UNSAFE .*beyond f16 max 65504" pre2.txt || fail "scaled model: fp16 not refused: $(cat pre2.txt)"
grep -q "^recommended: mixed_fp16" pre2.txt && fail "scaled model: fp16 recommended"

"$bin" train --quiet $small training.epochs=1 training.precision=mixed_fp16 fault.kind=nan \
  fault.step=3 fault.count=0 guard.nonfinite_loss.action=stop output.dir=out > stop.txt 2> stop.err
rc=$?
[ $rc -eq 4 ] || fail "stop rule: exit $rc, expected 4"
grep -q "STOPPED by a guard rule" stop.txt || fail "summary lacks the stop: $(cat stop.txt)"
grep -q "nonfinite_loss" stop.txt || fail "summary lacks the rule"
[ -f out/summary.json ] || fail "stop rule: no summary.json"

"$bin" train --quiet --json $small training.epochs=1 training.precision=mixed_fp16 fault.kind=nan \
  fault.layer=2 fault.step=5 fault.count=10 output.dir=out2 > run.json 2>/dev/null || fail "recovery run exit $?"
python3 - run.json <<'PY' || fail "recovery JSON: $(cat run.json)"
import json, sys
d = json.load(open(sys.argv[1]))
g = d["guard"]
assert d["precision"] == "mixed_bf16", d["precision"]
assert g["fallbacks"] == 1 and g["rollbacks"] == 1, g
assert g["rules"]["nonfinite_loss"]["fired"] == 1, g
assert g["first_nonfinite"]["layer"] == 2 and g["first_nonfinite"]["pass"] == "forward", g
PY

# size the run to last a few seconds on this machine (and build)
t0=$(date +%s.%N)
"$bin" train --quiet $small training.epochs=2 output.dir=cal > /dev/null 2>&1 || fail "calibration run"
t1=$(date +%s.%N)
"$bin" train --quiet $small training.epochs=12 output.dir=cal > /dev/null 2>&1 || fail "calibration run"
t2=$(date +%s.%N)
epochs=$(python3 -c "import math; e = max(($t2 - $t1) - ($t1 - $t0), 1e-3) / 10; print(min(20000, max(12, math.ceil(4.0 / e))))")
"$bin" train --quiet $small training.epochs=$epochs training.precision=mixed_bf16 output.dir=sig > sig.txt 2> sig.err &
pid=$!
for _ in $(seq 50); do
  grep -q "fp16_enabled" sig.err 2>/dev/null && break
  sleep 0.1
done
sleep 0.2
kill -USR1 $pid
wait $pid || fail "SIGUSR1 run exit $?"
grep -q "operator request" sig.err || fail "no operator event: $(tail -3 sig.err)"
python3 - sig/history.csv <<'PY' || fail "SIGUSR1 history"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
steps = [int(r["step"]) for r in rows]
assert steps == list(range(1, len(rows) + 1)), "steps lost or repeated"
modes = [r["precision"] for r in rows]
k = modes.index("fp32")
assert k > 0 and set(modes[:k]) == {"mixed_bf16"} and set(modes[k:]) == {"fp32"}, modes
PY

"$bin" train $small guard.zero_grad.action=explode output.dir=bad > /dev/null 2> bad.err
[ $? -eq 2 ] || fail "bad action: expected exit 2"
grep -q "guard.zero_grad.action" bad.err || fail "bad action: key not named: $(cat bad.err)"
"$bin" train $small fault.kind=nan fault.layer=40 output.dir=bad2 > /dev/null 2> bad2.err
[ $? -eq 2 ] || fail "fault.layer beyond the model: expected exit 2"
grep -q "fault.layer" bad2.err || fail "fault.layer not named: $(cat bad2.err)"

# a run that ends with non-finite weights is a failure, never exit 0
"$bin" train output.dir=inf training.epochs=1 data.trajectories=32 model.hidden=16 model.depth=2 \
  checkpoint.every_steps=50 training.precision=fp16 fault.kind=scale_weights fault.value=1e30 \
  fault.step=0 > inf.out 2> inf.err
rc=$?
[ $rc -eq 1 ] || fail "non-finite weights at the end: exit $rc, expected 1"
grep -q "training failed: .*non-finite.*layers.0.weight" inf.err ||
  fail "the failure does not name the non-finite tensor: $(tail -3 inf.err)"
grep -q "is not a rollback point" inf.err || fail "no word that the start state was refused"
! grep -q "rolled back to" inf.err || fail "rolled back to a non-finite state: $(grep 'rolled back' inf.err | head -2)"
[ "$(sqlite3 inf/metrics.db 'SELECT state FROM runs' 2>/dev/null)" = failed ] ||
  fail "run state in the store: $(sqlite3 inf/metrics.db 'SELECT state FROM runs' 2>&1)"
nck=0
for f in inf/checkpoints/ckpt-*.safetensors; do
  [ -e "$f" ] || continue
  nck=$((nck + 1))
  "$bin" ckpt verify "$f" 2>&1 | grep -q "UNHEALTHY\|FAIL" || fail "$f is not marked unhealthy"
done
[ $nck -ge 1 ] || fail "no checkpoint written by the non-finite run"

if [ $fails -ne 0 ]; then
  echo "test_guard_cli: $fails failures"
  exit 1
fi
echo "test_guard_cli: ok"
