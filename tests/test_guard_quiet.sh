#!/usr/bin/env bash
# tests/test_guard_quiet.sh: the guard is quiet on healthy runs and loud on
# faults (issue 15 item 7).
# usage: test_guard_quiet.sh MIXPREC_BINARY
#  - the default world model (3 epochs, seed 1234) in fp32 and mixed_bf16,
#    and seeds 2 and 5 in mixed_bf16,
#    raise no guard alert and end in the precision they started in (before
#    the fix: 9 grad_norm_growth alerts in fp32; in mixed_bf16 canary
#    alerts, two rollbacks and a fallback to fp32); MIXPREC_TEST_QUICK=1
#    (the reference-kernel and sanitizer passes of scripts/test.sh) skips
#    these two full-length runs, the release pass has them;
#  - the drills still fire: 10 NaN losses in mixed_fp16 (nonfinite_loss,
#    fallback + rollback), weights x 1e6 (overflow, fallback), a tensor
#    squeezed under FP16's smallest normal (underflow);
#  - training.precision=auto logs the precision it chose, not fp32.
. "$(dirname "$0")/cli_lib.sh" "$1"
alerts() { grep -cE "guard \[P[012]\]" "$1"; }

# mode:seed; seeds 2 and 5 in mixed_bf16 raised 8 and 7 canary alerts (seed 5
# rolled back and fell back to fp32) before the canary's loss floor
runs="fp32:1234 mixed_bf16:1234 mixed_bf16:2 mixed_bf16:5"
[ "${MIXPREC_TEST_QUICK:-0}" = 1 ] && runs=""
for r in $runs; do
  m=${r%%:*} s=${r#*:}
  "$bin" train --json checkpoint.enabled=false obs.store.enabled=false training.seed=$s \
    training.precision=$m output.dir=q_$m$s > q_$m$s.json 2> q_$m$s.err || fail "$r: exit $?"
  n=$(alerts q_$m$s.err)
  [ "$n" -eq 0 ] || fail "healthy $m seed $s run: $n alerts: $(grep -E 'guard \[P' q_$m$s.err | head -3)"
  grep -q "\"precision\":\"$m\"" q_$m$s.json || fail "healthy $m seed $s run did not end in $m"
done

small="data.trajectories=32 data.episode_length=100 model.hidden=64 model.depth=2 training.batch_size=32 checkpoint.enabled=false obs.store.enabled=false"
"$bin" train --quiet $small training.epochs=2 training.precision=mixed_fp16 fault.kind=nan \
  fault.layer=2 fault.step=31 fault.count=10 output.dir=d1 > /dev/null 2> d1.err || fail "nan drill exit $?"
grep -qE "guard \[P0\] nonfinite_loss .*fell back mixed_fp16 -> mixed_bf16" d1.err ||
  fail "nan drill did not fire: $(grep guard d1.err | head -3)"
"$bin" train --quiet $small training.epochs=1 training.precision=mixed_fp16 model.layernorm=true \
  fault.kind=scale_weights fault.step=0 fault.value=1e6 output.dir=d2 > /dev/null 2> d2.err ||
  fail "overflow drill exit $?"
grep -qE "guard \[P[01]\] (overflow_rate_high|nonfinite_loss)" d2.err ||
  fail "overflow drill did not fire: $(grep -E 'guard|fall' d2.err | head -3)"
"$bin" train --quiet $small training.epochs=1 training.precision=mixed_fp16 \
  guard.headroom.every_steps=1 fault.kind=value fault.value=1e-7 fault.elements=100000 \
  fault.count=0 output.dir=d3 > /dev/null 2> d3.err || fail "underflow drill exit $?"
grep -qE "guard \[P2\] underflow" d3.err || fail "underflow drill did not fire: $(grep guard d3.err | head -3)"

"$bin" train --quiet $small training.epochs=1 training.precision=auto output.dir=a > /dev/null 2> a.err ||
  fail "auto exit $?"
chose=$(sed -n 's/.*precision auto: chose \([a-z0-9_]*\).*/\1/p' a.err)
[ -n "$chose" ] || fail "auto: no choice logged"
grep -q "training world model: precision $chose," a.err ||
  fail "auto chose $chose but logged: $(grep 'training world model' a.err)"

if [ $fails -ne 0 ]; then
  echo "test_guard_quiet: $fails failures"
  exit 1
fi
echo "test_guard_quiet: ok"
