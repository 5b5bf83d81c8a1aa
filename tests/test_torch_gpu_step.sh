#!/usr/bin/env bash
# tests/test_torch_gpu_step.sh: bench/torch_gpu_step.py (the PyTorch side of
# the GPU benchmark, issue 28 part 5) in its CPU dry run, under Debian's
# /usr/bin/python3 (torch 1.13, no CUDA).
# usage: bash test_torch_gpu_step.sh <mixprec binary (unused)> <source dir>
#
#  1. --device cpu --dry-run on the world model (initial weights and batch
#     read from a safetensors file this test writes) and mlp512 (seeded,
#     written with --save-init): tests/torch_gpu_step_check.py checks the
#     records (one per model x variant x precision, what a CPU cannot run
#     named) and the loss after N steps against a float64 NumPy oracle of
#     the MLP, MSE and AdamW; compile runs through the child process with a
#     stand-in for torch.compile (MXP_TORCH_FAKE_COMPILE=1) where torch
#     lacks it;
#  2. a compile child that hangs is killed at --compile-cap-s and its cases
#     are recorded as unavailable naming the cap;
#  3. --table re-renders the run; bad options exit 2 naming the option.
# Exit 77 (skipped) when /usr/bin/python3 has no torch or NumPy.
set -u
SRC=$2
PY=/usr/bin/python3
BENCH=$SRC/bench/torch_gpu_step.py
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
    echo "SKIP: $PY cannot import torch and numpy"
    exit 77
fi

# ---- 2. a compile that hangs is capped, recorded, not fatal (in the
# background while 1 runs: it mostly waits for its cap)
MXP_TORCH_FAKE_COMPILE=hang "$PY" "$BENCH" --device cpu --dry-run --models wm --variants eager,compile \
    --precisions fp32 --compile-cap-s 5 --out-dir "$TMP/hang" >"$TMP/hang.out" 2>&1 &
hang_pid=$!

# ---- 1. the dry run against the oracle
"$PY" "$SRC/tests/torch_gpu_step_check.py" init "$TMP/init" || fail "writing the init file"
fake=1
"$PY" -c 'import torch, sys; sys.exit(hasattr(torch, "compile"))' || fake=
MXP_TORCH_FAKE_COMPILE=$fake "$PY" "$BENCH" --device cpu --dry-run --models wm,mlp512 --warmup 10 --steps 10 \
    --init-dir "$TMP/init" --save-init --out-dir "$TMP/out" >"$TMP/run.out" 2>&1 ||
    { cat "$TMP/run.out"; fail "the dry run exited $?"; }
"$PY" "$SRC/tests/torch_gpu_step_check.py" check "$TMP/init" "$TMP/out" ||
    { cat "$TMP/run.out"; fail "the dry run's records"; }
[ "$(grep -c '^wm ' "$TMP/out/torch_gpu_step.txt")" = 12 ] || fail "the table has not 12 wm rows"
grep -q 'DRY RUN' "$TMP/out/torch_gpu_step.txt" || fail "the table does not say it is a dry run"

wait $hang_pid || { cat "$TMP/hang.out"; fail "the capped run exited $?"; }
grep -q '"reason": "compile cap of 5 s reached.*"variant": "compile"' "$TMP/hang/torch_gpu_step.jsonl" ||
    { cat "$TMP/hang/torch_gpu_step.jsonl"; fail "the hung compile is not recorded as capped"; }
grep -q '"status": "dry".*"variant": "eager"' "$TMP/hang/torch_gpu_step.jsonl" ||
    fail "the eager case before the hung compile lost its record"

# ---- 3. --table, bad options
"$PY" "$BENCH" --table "$TMP/out/torch_gpu_step.jsonl" >"$TMP/table.txt" || fail "--table"
cmp -s "$TMP/table.txt" "$TMP/out/torch_gpu_step.txt" || fail "--table does not re-render the run's table"
for args in "--models nope" "--variants eager,x" "--precisions fp64" "--warmup 2" "--save-init"; do
    # shellcheck disable=SC2086
    "$PY" "$BENCH" --device cpu --dry-run --out-dir "$TMP/bad" $args >/dev/null 2>"$TMP/bad.err"
    rc=$?
    [ $rc = 2 ] || fail "$args: exit $rc, expected 2"
    grep -q -- "${args%% *}" "$TMP/bad.err" || fail "$args: the message does not name the option: $(cat "$TMP/bad.err")"
done
echo "PASS: test_torch_gpu_step"
