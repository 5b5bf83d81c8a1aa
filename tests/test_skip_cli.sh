#!/usr/bin/env bash
# tests/test_skip_cli.sh: residual blocks and dropout in model.layers through
# the CLI, on a flat replay buffer of a damped spring (numpy-written).
# usage: test_skip_cli.sh MIXPREC_BINARY SOURCE_DIR
#  - every precision mode (fp32, mixed_bf16, mixed_fp16, bf16, fp16, fp8)
#    trains a world model with a residual block and dropout to a finite
#    validation MSE below 0.5 (standardised targets: 1 is the mean's);
#  - training.precision_fp32_layers counts items (2,4: the block's linear
#    layers, kept FP32 in mixed_bf16); 5 (the residual) is refused, listing
#    the linear layers 0,2,4,8;
#  - resume is bit-exact with dropout on, with 2 micro-batches per step and
#    with an ensemble of 3: 1 epoch + --resume to 2 gives history.csv and
#    the final checkpoint of a 2-epoch run byte for byte (the masks are keyed
#    by step, micro-batch and member, not by a stream that a restart resets);
#  - dropout changes training (history differs from the same run at
#    dropout:0) and nothing else: eval and predict of that run do not depend
#    on P (identity outside training);
#  - ckpt export --torch writes residual:N and dropout:P into the layers
#    metadata; the Residual/Layers modules of docs/world_models.md and
#    mixprec.load_torch reproduce `mixprec predict` to 1e-6 + 1e-5 relative (skip_cases.py;
#    skipped without torch);
#  - malformed layer lists are refused by name before anything is written.
# Exit 77 without numpy.
set -u
src=$(realpath "$2")
. "$(dirname "$0")/cli_lib.sh" "$1"
spring_buffer 31 40 0.01 0 100 || { echo "SKIP: /usr/bin/python3 numpy could not write the data"; exit 77; }

layers="model.layers=[linear:32, gelu, linear:64, gelu, linear:32, residual:3, dropout:0.2, gelu, linear]"
# a constant learning rate: the CLI plans its schedule over each call's training.epochs
common=(data.path=buffer.npz "$layers" training.batch_size=64 training.lr=3e-3
        training.lr_schedule=constant)

# ---- every precision mode trains --------------------------------------------------
for p in fp32 mixed_bf16 mixed_fp16 bf16 fp16 fp8; do
  "$bin" train "${common[@]}" training.epochs=2 training.precision=$p checkpoint.enabled=false \
    --json --quiet >p_$p.json 2>p_$p.err || fail "train $p: $(cat p_$p.err)"
  /usr/bin/python3 -c "
import json, math, sys
t = json.load(open('p_$p.json'))
sys.exit(0 if math.isfinite(t['val_loss']) and 0 < t['val_loss'] < 0.5 else 1)" ||
    fail "$p: $(cat p_$p.json)"
done

# ---- precision_fp32_layers counts items: the block's linears 2 and 4 kept FP32 ----------
"$bin" train "${common[@]}" training.epochs=1 training.precision=mixed_bf16 \
  training.precision_fp32_layers=2,4 checkpoint.enabled=false --json --quiet >k.json 2>k.err ||
  fail "fp32 layers 2,4: $(cat k.err)"
/usr/bin/python3 -c "
import json, math, sys
t = json.load(open('k.json'))
sys.exit(0 if t['fp32_layers_kept'] == [2, 4] and math.isfinite(t['val_loss']) else 1)" ||
  fail "fp32 layers 2,4: $(cat k.json)"
"$bin" train "${common[@]}" training.epochs=1 training.precision=mixed_bf16 \
  training.precision_fp32_layers=5 checkpoint.enabled=false --quiet >/dev/null 2>k5.err &&
  fail "layer 5 (residual) accepted as an FP32 layer"
grep -q "linear layers (0,2,4,8)" k5.err || fail "fp32 layer 5: $(cat k5.err)"

# ---- bit-exact resume with dropout on ------------------------------------------------
resume_case() { # name, extra keys...
  local n=$1; shift
  "$bin" train "${common[@]}" "$@" training.epochs=2 output.dir=runs/${n}a --quiet >/dev/null \
    2>${n}a.err || fail "$n: 2 epochs: $(cat ${n}a.err)"
  "$bin" train "${common[@]}" "$@" training.epochs=1 output.dir=runs/${n}b --quiet >/dev/null \
    2>${n}b.err || fail "$n: 1 epoch: $(cat ${n}b.err)"
  "$bin" train --resume runs/${n}b data.path=buffer.npz training.epochs=2 --quiet >/dev/null \
    2>${n}c.err || fail "$n: resume: $(cat ${n}c.err)"
  cmp -s runs/${n}a/history.csv runs/${n}b/history.csv ||
    fail "$n: resumed history.csv differs: $(diff runs/${n}a/history.csv runs/${n}b/history.csv | head -4)"
  local ca cb
  ca=$(ls runs/${n}a/checkpoints/ckpt-*.safetensors 2>/dev/null | tail -1)
  cb=$(ls runs/${n}b/checkpoints/ckpt-*.safetensors 2>/dev/null | tail -1)
  [ -n "$ca" ] && [ -n "$cb" ] && [ "$(basename "$ca")" = "$(basename "$cb")" ] ||
    fail "$n: final checkpoints '$ca' '$cb'"
}
resume_case r
resume_case g training.grad_accum_steps=2
resume_case e model.ensemble=3
/usr/bin/python3 - runs <<'EOF' || fail "resumed checkpoints differ"
import json, struct, sys, glob, os
def tensors(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
for n in "rge":
    a = sorted(glob.glob(f"runs/{n}a/checkpoints/ckpt-*.safetensors"))[-1]
    b = sorted(glob.glob(f"runs/{n}b/checkpoints/ckpt-*.safetensors"))[-1]
    ta, tb = tensors(a), tensors(b)
    assert ta.keys() == tb.keys() and all(ta[k] == tb[k] for k in ta), (n, a, b)
EOF

# ---- dropout acts in training only ----------------------------------------------------
"$bin" train data.path=buffer.npz "${layers/dropout:0.2/dropout:0}" training.batch_size=64 \
  training.lr=3e-3 training.lr_schedule=constant training.epochs=2 output.dir=runs/p0 --quiet >/dev/null 2>p0.err ||
  fail "dropout:0: $(cat p0.err)"
cmp -s runs/ra/history.csv runs/p0/history.csv && fail "dropout:0.2 trained like dropout:0"
"$bin" predict runs/ra --input query.npz --output pred.safetensors >/dev/null 2>pred.err ||
  fail "predict: $(cat pred.err)"

# ---- export: the documented modules and mixprec.load_torch ------------------------------
"$bin" ckpt export runs/ra --torch -o export.safetensors 2>exp.err || fail "export: $(cat exp.err)"
grep -a -q 'residual:3, dropout:0.2' export.safetensors || fail "export metadata lacks the blocks"
PYTHONPATH="$src/python" MIXPREC_LIB="$(dirname "$bin")/libmixprec.so" \
  /usr/bin/python3 "$src/tests/skip_cases.py" export export.safetensors query.npz pred.safetensors
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] || fail "predict differs from the PyTorch modules on the export"

# ---- malformed lists, named -------------------------------------------------------------
bad() { # list, expected text
  "$bin" train data.path=buffer.npz "model.layers=$1" training.epochs=1 output.dir=runs/bad \
    --quiet >/dev/null 2>bad.err && fail "accepted $1"
  grep -q -- "$2" bad.err || fail "$1: error '$(cat bad.err)' lacks '$2'"
  [ ! -e runs/bad ] || fail "$1: wrote runs/bad"
}
bad "[linear:32, gelu, linear:16, residual:2, linear]" "takes 32 features and gives 16"
bad "[linear:32, residual:2, linear]" "must be an integer in 1..1"
bad "[linear:32, gelu, linear:32, residual:2, gelu, residual:3, linear]" "among them the residual item 3"
bad "[linear:32, dropout:1.0, linear]" "0 <= P < 1"
bad "[linear:32, dropout:abc, linear]" "dropout:abc"

exit $((fails > 0))
