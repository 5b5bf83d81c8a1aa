#!/usr/bin/env bash
# tests/test_cli.sh: the mixprec CLI as a user meets it.
# usage: test_cli.sh MIXPREC_BINARY SOURCE_DIR
#  - bad input (unknown key, malformed YAML, non-number, growth <= 1,
#    backoff >= 1, interval < 1, bad scales, bad env vars) exits 2, names
#    the key/variable and the value, and writes no output files;
#  - the kill switch forces fp32 and logs the documented line;
#  - train --json writes a parseable summary and history.csv;
#  - config show reports sources; --help works on every verb.
. "$(dirname "$0")/cli_lib.sh" "$1"

small="data.trajectories=8 data.episode_length=40 model.hidden=16 training.epochs=1 training.batch_size=16"

# expect_bad DESCRIPTION NEEDLE [env ...] -- ARGS...
expect_bad() {
  local desc=$1 needle=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  rm -rf out
  env "${envs[@]}" "$bin" train output.dir=out "$@" >stdout.txt 2>stderr.txt
  local rc=$?
  [ $rc -eq 2 ] || fail "$desc: exit $rc, expected 2"
  grep -qF -- "$needle" stderr.txt || fail "$desc: stderr lacks '$needle': $(cat stderr.txt)"
  [ ! -e out ] || fail "$desc: output files were written"
}

expect_bad "unknown key" "training.lrr" -- training.lrr=0.1
expect_bad "non-number" "training.lr" -- training.lr=abc
expect_bad "growth <= 1" "growth_factor" -- training.loss_scale.growth_factor=1
expect_bad "backoff >= 1" "backoff_factor" -- training.loss_scale.backoff_factor=1.5
expect_bad "interval < 1" "growth_interval" -- training.loss_scale.growth_interval=0
expect_bad "negative scale" "training.loss_scale.init" -- training.loss_scale.init=-1
expect_bad "zero scale" "training.loss_scale.init" -- training.loss_scale.init=0
expect_bad "nan scale" "training.loss_scale.init" -- training.loss_scale.init=nan
expect_bad "inf scale" "training.loss_scale.init" -- training.loss_scale.init=inf
expect_bad "bad env scale" "FP16_LOSS_SCALE" FP16_LOSS_SCALE=abc -- $small
expect_bad "bad env growth" "FP16_GROWTH_FACTOR" FP16_GROWTH_FACTOR=0.9 -- $small
expect_bad "bad env backoff" "FP16_BACKOFF_FACTOR" FP16_BACKOFF_FACTOR=1 -- $small
expect_bad "bad env interval" "FP16_GROWTH_INTERVAL" FP16_GROWTH_INTERVAL=0 -- $small
expect_bad "bad kill switch" "ENABLE_FP16_TRAINING" ENABLE_FP16_TRAINING=maybe -- $small
printf 'training:\n  lr: [1, 2\n' > broken.yaml
expect_bad "malformed yaml" "broken.yaml" -- --config broken.yaml
printf 'training:\n  mixed_precision:\n    dtype: float8\n' > badval.yaml
expect_bad "bad yaml value" "float8" -- --config badval.yaml
expect_bad "missing config file" "nope.yaml" -- --config nope.yaml

# kill switch: fp32 whatever the CLI asks for, with the documented log line
ENABLE_FP16_TRAINING=false "$bin" train --json output.dir=ks $small \
  training.mixed_precision.enabled=true training.mixed_precision.dtype=float16 \
  >ks.json 2>ks.err || fail "kill-switch run failed: $(cat ks.err)"
grep -qF "FP16 training disabled - using FP32" ks.err || fail "kill switch log line missing"
grep -qF '"precision":"fp32"' ks.json || fail "kill switch did not force fp32: $(cat ks.json)"

# a real run: JSON summary on stdout, summary.json and history.csv on disk
ENABLE_FP16_TRAINING=true "$bin" train --json output.dir=run1 $small >run1.json 2>run1.err \
  || fail "fp16 env run failed: $(cat run1.err)"
grep -qF '"precision":"mixed_fp16"' run1.json || fail "ENABLE_FP16_TRAINING=true not mixed_fp16"
grep -qF '"fp16_enabled_runtime":true' run1.json || fail "fp16_enabled_runtime not reported"
[ -s run1/summary.json ] || fail "summary.json missing"
head -1 run1/history.csv | grep -qF "step,epoch,loss,scale,grad_norm,skipped,precision" \
  || fail "history.csv header"
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["training_steps"]>0' \
    run1.json || fail "summary JSON does not parse"
fi

# human output when not --json
"$bin" train output.dir=run2 $small >human.txt 2>human.err || fail "plain run failed"
for k in "precision" "skipped" "overflow rate" "validation loss" "wall time" "samples/s"; do
  grep -qF "$k" human.txt || fail "summary lacks '$k'"
done

# config show: sources
FP16_LOSS_SCALE=1024 "$bin" config show training.lr=0.01 >show.txt 2>&1 || fail "config show"
grep -qE "training.lr: 0.01.*cli" show.txt || fail "config show lacks cli source"
grep -qE "training.loss_scale.init: 1024.*env" show.txt || fail "config show lacks env source"
grep -qE "training.epochs: 3.*default" show.txt || fail "config show lacks default source"

for verb in train "config show"; do
  $bin $verb --help >/dev/null || fail "$verb --help"
done
"$bin" --help >/dev/null || fail "--help"
"$bin" frobnicate >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown verb must exit 2"

[ $fails -eq 0 ] && echo "test_cli: all passed"
exit $((fails > 0))
