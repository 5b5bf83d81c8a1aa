#!/usr/bin/env bash
# tests/test_data_cli.sh: bring your own data and model, through the CLI.
# usage: test_data_cli.sh MIXPREC_BINARY SOURCE_DIR
#  - the README's three commands (train on an .npz, eval, predict) work, with
#    model.layers given as a YAML sequence; eval --json reports the run's
#    validation loss; predict output matches PyTorch on `ckpt export --torch`
#    (tests/torch_check.py, skipped without torch);
#  - every malformed data file, a bad model.layers and a bad
#    model.init_from exit 2, name the problem, and write nothing;
#  - model.init_from accepts an export of the same shape;
#  - a GPT checkpoint samples after its training text is gone.
# Data written by /usr/bin/python3 numpy (tests/data_cases.py,
# tests/user_run_cases.py); exit 77 without it.
set -u
src=$(realpath "$2")
. "$(dirname "$0")/cli_lib.sh" "$1"
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3"; exit 77; }
mkdir cases runs
/usr/bin/python3 "$src/tests/data_cases.py" cases && /usr/bin/python3 "$src/tests/user_run_cases.py" . ||
  { echo "SKIP: numpy could not write the data"; exit 77; }

# ---- the three commands -----------------------------------------------------
cat > wm.yaml <<'EOF'
model:
  layers: [linear:64, gelu, linear:64, gelu, linear]
training:
  epochs: 8
  lr: 3e-3
EOF
"$bin" train --config wm.yaml data.path=spring.npz output.dir=runs/wm --json --quiet \
  >train.json 2>train.err || fail "train on spring.npz: $(cat train.err)"
"$bin" eval runs/wm --json >eval.json 2>eval.err || fail "eval: $(cat eval.err)"
"$bin" predict runs/wm --input pred_wm.npz --output pred.safetensors 2>pred.err ||
  fail "predict: $(cat pred.err)"
/usr/bin/python3 - train.json eval.json <<'EOF' || fail "eval loss differs from the run's validation loss"
import json, sys
t = json.load(open(sys.argv[1]))
e = json.load(open(sys.argv[2]))
val = t.get("val_loss", t.get("validation_loss"))
assert e["workload"] == "world_model" and e["precision"] == "fp32", e
assert val is not None and abs(e["loss"] - val) <= 1e-6 * abs(val), (e["loss"], val)
assert e["loss"] == e["fp32_loss"], e
assert e["loss"] < 0.05, e
EOF
"$bin" ckpt export runs/wm --torch -o export.safetensors 2>exp.err || fail "export: $(cat exp.err)"
/usr/bin/python3 "$src/tests/torch_check.py" export.safetensors pred_wm.npz pred.safetensors spring.npz
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] || fail "predict differs from PyTorch on the export"
"$bin" eval runs/wm --data spring.npz >eval.txt 2>&1 || fail "eval --data: $(cat eval.txt)"
grep -q "fp32" eval.txt || fail "eval text lacks the fp32 row: $(cat eval.txt)"

# ---- resume: the newest checkpoint still carries the statistics ---------------
"$bin" train --resume runs/wm data.path=spring.npz training.epochs=9 --quiet >/dev/null 2>res.err ||
  fail "resume with one more epoch: $(cat res.err)"
"$bin" eval runs/wm --json >eval2.json 2>eval2.err || fail "eval after resume: $(cat eval2.err)"
/usr/bin/python3 -c "
import json, sys
a, b = json.load(open('eval.json')), json.load(open('eval2.json'))
sys.exit(0 if b['checkpoint'] > a['checkpoint'] else 1)" ||
  fail "eval after resume did not use a newer checkpoint: $(cat eval.json eval2.json)"

# ---- init_from: an export of the same shape starts a new run ------------------
"$bin" train --config wm.yaml data.path=spring.npz model.init_from=export.safetensors \
  training.epochs=1 output.dir=runs/init --quiet >/dev/null 2>init.err ||
  fail "init_from an export: $(cat init.err)"

# ---- bad input: exit 2, named, nothing written -------------------------------
expect_bad() { # DESCRIPTION NEEDLE ARGS...
  local desc=$1 needle=$2; shift 2
  rm -rf out
  "$bin" train output.dir=out "$@" >stdout.txt 2>stderr.txt
  local rc=$?
  [ $rc -eq 2 ] || fail "$desc: exit $rc, expected 2 ($(cat stderr.txt))"
  grep -qF -- "$needle" stderr.txt || fail "$desc: stderr lacks '$needle': $(cat stderr.txt)"
  [ ! -e out ] || fail "$desc: output files were written"
}
expect_bad "wrong rank" "array 'obs' has rank 2" data.path=cases/wm_rank.npz
expect_bad "shape mismatch" "shape mismatch: array 'actions'" data.path=cases/wm_shape.npz
expect_bad "missing array" "missing array 'rewards'" data.path=cases/wm_missing.npz
expect_bad "NaN" "holds NaN or Inf" data.path=cases/wm_nan.npz
expect_bad "empty" "is empty" data.path=cases/empty.npz
expect_bad "truncated npz" "truncated" data.path=cases/trunc.npz
expect_bad "truncated safetensors" "truncated" model.workload=classifier data.path=cases/st_trunc.safetensors
expect_bad "dtype" "has dtype float32" model.workload=classifier data.path=cases/cls_float_y.npz
expect_bad "big-endian" "big-endian" model.workload=classifier data.path=cases/bigendian.npz
expect_bad "fortran" "Fortran order" model.workload=classifier data.path=cases/fortran.npz
expect_bad "no such file" "cannot open" data.path=cases/nope.npz
expect_bad "regressor without data" "needs data.path" model.workload=regressor
expect_bad "gpt with data.path" "model.workload=gpt reads data.text_file" model.workload=gpt \
  data.path=spring.npz
expect_bad "gpt with model.layers" "not used by model.workload=gpt" model.workload=gpt \
  "model.layers=[linear:8, linear]"
expect_bad "bad layer list" "item 1 'swish' is unknown" "model.layers=[linear:8, swish, linear]"
expect_bad "layer list end" "must end with 'linear'" "model.layers=[linear:8, gelu]"
expect_bad "init_from shape" "has shape [64, 3]; the model needs [8, 3]" data.path=spring.npz \
  "model.layers=[linear:8, gelu, linear]" model.init_from=export.safetensors
expect_bad "init_from missing tensor" "missing tensor 'layers.6.weight'" data.path=spring.npz \
  "model.layers=[linear:64, gelu, linear:64, relu, tanh, gelu, linear]" \
  model.init_from=export.safetensors

# ---- eval / predict on a checkpoint without user data, bad inputs -----------
"$bin" predict runs/wm --input cls3.safetensors --output p2.safetensors 2>p2.err
[ $? -ne 0 ] || fail "predict with classifier inputs on a world model succeeded"
grep -q "missing array 'obs'" p2.err || fail "predict bad input: $(cat p2.err)"
[ ! -e p2.safetensors ] || fail "predict wrote output on error"

# ---- GPT: sample without the training text ----------------------------------
/usr/bin/python3 -c "
import random; random.seed(1)
w = ['alpha', 'beta', 'gamma', 'hack', 'byte']
open('t.txt', 'w').write(' '.join(random.choice(w) for _ in range(4000)))"
"$bin" train model.workload=gpt data.text_file=t.txt gpt.layers=1 gpt.embd=16 gpt.heads=2 \
  gpt.context=16 training.epochs=1 output.dir=runs/gpt --quiet >/dev/null 2>gpt.err ||
  fail "gpt train: $(cat gpt.err)"
rm -f t.txt
"$bin" sample --checkpoint runs/gpt/model.safetensors --prompt "hack " --length 40 \
  >sample.txt 2>sample.err || fail "sample without the text: $(cat sample.err)"
[ "$(wc -c <sample.txt)" -ge 40 ] || fail "sample printed too little: $(cat sample.txt)"

[ $fails -eq 0 ] && echo "test_data_cli: ok" || echo "test_data_cli: $fails failure(s)"
[ $fails -eq 0 ]
