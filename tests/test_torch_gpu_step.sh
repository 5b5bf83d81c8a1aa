#!/usr/bin/env bash
# tests/test_torch_gpu_step.sh: bench/torch_gpu_step.py (the PyTorch side of
# the GPU benchmark, issue 28 part 5) in its CPU dry run, under Debian's
# /usr/bin/python3 (torch 1.13, no CUDA).
# usage: bash test_torch_gpu_step.sh <mixprec binary (unused)> <source dir>
#
#  1. --device cpu --dry-run on the world model (initial weights and a ring
#     of 3 batches read from a safetensors file this test writes; 20 steps
#     wrap it) and mlp512 (seeded, ring 8, written with --save-init):
#     tests/torch_gpu_step_check.py checks the records (one per model x
#     variant x precision x batch mode h2d/resident, what a CPU cannot run
#     named) and the loss after N steps against a float64 NumPy oracle of
#     the MLP, MSE and AdamW on the ring; compile runs through the child
#     process with a stand-in for torch.compile (MXP_TORCH_FAKE_COMPILE=1)
#     where torch lacks it;
#  2. a compile child that hangs is killed at --compile-cap-s and its cases
#     are recorded as unavailable naming the cap;
#  3. --table re-renders the run; bad options exit 2 naming the option;
#  4. both sides of the GPU benchmark train the same problem: from the
#     init files of bench_cuda_dstep --write-init --ring 3 (the mixprec
#     binary's neighbour in the build tree; every build), torch's fp32
#     eager path on the CPU (--loss-trace, 8 steps: the ring wraps twice),
#     in both batch modes, reproduces mixprec's CPU trainer
#     (bench_cuda_dstep --cpu-losses, on the same ring) on wm and mlp512
#     step by step within 2e-6 relative (tests/torch_gpu_step_check.py
#     `same` says why); negative controls: the trainer from a different
#     init file (--seed 99) must fail that check at step 1, and torch from
#     the same file with ring slots 1 and 2 swapped (a wrong ring order)
#     must pass step 1 and fail step 2. bench/gpu_bench_table.py renders
#     the two like with like (batch h2d).
# Exit 77 (skipped) when /usr/bin/python3 has no torch or NumPy.
# MIXPREC_TEST_QUICK: 4 only (1-3 do not use the build).
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

# MIXPREC_TEST_QUICK (the reference-kernel, mock-device and sanitizer passes
# of scripts/test.sh): 4 only. 1-3 run bench/torch_gpu_step.py alone, which
# uses nothing of this build: the release pass has checked them.
quick=${MIXPREC_TEST_QUICK:-}
[ "$quick" = 0 ] && quick=
if [ -z "$quick" ]; then
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
[ "$(grep -c '^wm ' "$TMP/out/torch_gpu_step.txt")" = 24 ] || fail "the table has not 24 wm rows"
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
fi

# ---- 4. one problem on both sides (the mixprec CLI's build tree holds
# bench_cuda_dstep; CPU modes in every build)
DSTEP=$(dirname "$1")/bench_cuda_dstep
[ -x "$DSTEP" ] || fail "$DSTEP is missing: build the target bench_cuda_dstep"
"$DSTEP" --write-init "$TMP/binit" --models wm,mlp512 --ring 3 >/dev/null || fail "bench_cuda_dstep --write-init"
"$DSTEP" --write-init "$TMP/binit99" --models wm,mlp512 --seed 99 --ring 3 >/dev/null || fail "--write-init --seed 99"
"$DSTEP" --cpu-losses "$TMP/binit" --models wm,mlp512 --steps 8 >"$TMP/cpu.jsonl" || fail "bench_cuda_dstep --cpu-losses"
"$DSTEP" --cpu-losses "$TMP/binit99" --models wm,mlp512 --steps 8 >"$TMP/cpu99.jsonl" || fail "--cpu-losses (seed 99)"
"$PY" "$BENCH" --device cpu --models wm,mlp512 --variants eager --precisions fp32 --warmup 5 --steps 3 \
    --loss-trace --init-dir "$TMP/binit" --out-dir "$TMP/same" >"$TMP/same.out" 2>&1 ||
    { cat "$TMP/same.out"; fail "the CPU run from the init files exited $?"; }
"$PY" "$SRC/tests/torch_gpu_step_check.py" same "$TMP/cpu.jsonl" "$TMP/same" ||
    fail "torch from bench_cuda_dstep's init files does not reproduce mixprec's CPU trainer"
"$PY" "$SRC/tests/torch_gpu_step_check.py" same "$TMP/cpu99.jsonl" "$TMP/same" >"$TMP/neg.out" &&
    { cat "$TMP/neg.out"; fail "negative control: another init file passed the same-problem check"; }
grep -q 'FAIL: wm step 1' "$TMP/neg.out" || { cat "$TMP/neg.out"; fail "negative control: step 1 not caught"; }
# a wrong ring order: the same file with slots 1 and 2 swapped
for mo in wm mlp512; do
    "$PY" "$SRC/tests/torch_gpu_step_check.py" swap "$TMP/binit/$mo.safetensors" "$TMP/bswap/$mo.safetensors" 1 2 ||
        fail "swapping the ring slots of $mo"
done
"$PY" "$BENCH" --device cpu --models wm,mlp512 --variants eager --precisions fp32 --warmup 5 --steps 3 \
    --loss-trace --init-dir "$TMP/bswap" --out-dir "$TMP/swap" >"$TMP/swap.out" 2>&1 ||
    { cat "$TMP/swap.out"; fail "the CPU run from the swapped ring exited $?"; }
"$PY" "$SRC/tests/torch_gpu_step_check.py" same "$TMP/cpu.jsonl" "$TMP/swap" >"$TMP/negring.out" &&
    { cat "$TMP/negring.out"; fail "negative control: a wrong ring order passed the same-problem check"; }
if grep -q 'FAIL: wm step 1 ' "$TMP/negring.out" || ! grep -q 'FAIL: wm step 2 (h2d)' "$TMP/negring.out" ||
    ! grep -q 'FAIL: wm step 2 (resident)' "$TMP/negring.out"; then
    cat "$TMP/negring.out"
    fail "negative control: the wrong ring order is not caught at step 2 exactly (both batch modes)"
fi
# the side-by-side table renders mixprec's record format (a CUDA-less
# stand-in record for mixprec here: the device writes the real ones)
# (the stand-in's loss is torch's step-8 loss times 1.001: rel 1.0e-03)
tl=$("$PY" -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("kind") == "case" and r["model"] == "wm" and r.get("batch") == "h2d":
        print(repr(r["loss"] * 1.001))' "$TMP/same/torch_gpu_step.jsonl")
printf '%s\n' '{"kind": "env", "impl": "mixprec", "device": "stand-in", "driver": 13000}' \
    '{"kind": "case", "impl": "mixprec", "model": "wm", "variant": "eager", "batch": "h2d", "ring": 3, "precision": "fp32", "status": "ok", "us_per_step": 100.0, "samples_per_s": 320000, "loss": '"$tl"', "loss_step": 8, "peak_mem_bytes": 1048576, "syncs_per_step": 1.0, "init": {"source": "file '"$TMP/binit/wm.safetensors"'"}}' \
    '{"kind": "case", "impl": "mixprec", "model": "wm", "variant": "graph", "batch": "h2d", "ring": 3, "precision": "fp32", "status": "ok", "us_per_step": 50.0, "samples_per_s": 640000, "loss": '"$tl"', "loss_step": 8, "peak_mem_bytes": 1048576, "syncs_per_step": 1.0, "init": {"source": "file '"$TMP/binit/wm.safetensors"'"}}' \
    >"$TMP/mx.jsonl"
"$PY" "$SRC/bench/gpu_bench_table.py" "$TMP/mx.jsonl" "$TMP/same/torch_gpu_step.jsonl" >"$TMP/cmp.txt" || fail "gpu_bench_table.py"
# like with like: mixprec's h2d rows against torch's h2d eager (e/e ratio),
# torch's resident eager in its own block, the loss rel 1.0e-03
teh=$(awk '$1 == "wm" && $2 == "eager" && $3 == "fp32" && $4 == "h2d" {print $6}' "$TMP/same/torch_gpu_step.txt")
ter=$(awk '$1 == "wm" && $2 == "eager" && $3 == "fp32" && $4 == "resident" {print $6}' "$TMP/same/torch_gpu_step.txt")
ee=$(awk -v t="$teh" 'BEGIN { printf "%.2f", 100.0 / t }')
bb=$(awk -v t="$teh" 'BEGIN { printf "%.2f", 50.0 / t }') # torch's fastest h2d: its only one, eager
if ! head -1 "$TMP/cmp.txt" | grep -q '^# device .*driver .*13000' ||
    ! grep -Eq "^wm +fp32 +100\.0 +50\.0 +$teh .* $ee +- +$bb +eager " "$TMP/cmp.txt" ||
    ! grep -Eq "^wm +fp32 +$ter " "$TMP/cmp.txt" ||
    ! grep -Eq '^wm +fp32 +1\.0 +1\.0 .* 1\.0e-03$' "$TMP/cmp.txt"; then
    cat "$TMP/cmp.txt"
    fail "gpu_bench_table.py: env line, wm fp32 h2d row (torch eager $teh, e/e $ee), resident row ($ter) or loss rel"
fi
echo "PASS: test_torch_gpu_step"
