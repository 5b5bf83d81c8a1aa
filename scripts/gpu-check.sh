#!/bin/bash
# scripts/gpu-check.sh: the GPU verification of the CUDA backend, run from
# the device kit (scripts/gpu-kit.sh) on the lent GPU machine (one H100, no
# network, no build packages; docs/gpu.md says how to call it).
#
# usage: scripts/gpu-check.sh OUTDIR             on the GPU machine
#        scripts/gpu-check.sh --dry-run [OUTDIR] here: check the kit only
#   KIT=dir       the kit (default gpu-kit/ in the repository root)
#   BUDGET_S=n    seconds for all steps together (default 420: the whole
#                 run, packing included, stays under 8 minutes)
#
# Steps, each capped with `timeout` (its cap, or what is left of the budget):
#   probe-*      nvidia-smi, toolchain (nvcc, compute-sanitizer, glibc),
#                python3/torch (information only), where cuBLASLt is, the
#                kit's `mixprec version` and `doctor`;
#   test-*       each GPU test of the kit's manifest (a skip is a failure
#                on a GPU machine);
#   bench-*      each GPU benchmark of the manifest;
#   train-*      the training runs (TRAIN_RUNS below): the default world
#                model on `training.device=cuda` for a few hundred steps
#                (TRAIN_SHORT) in fp32, mixed_bf16, mixed_fp16, then the same
#                config on the CPU; the verdict carries the validation loss
#                of both, their relative difference, the steps and the
#                device's steps/s (from each run's summary.json); FAIL when
#                the device run's summary does not show one device-to-host
#                copy per step (device_step.d2h_per_step_max);
#   memcheck-*   compute-sanitizer --tool memcheck on each GPU test;
#   racecheck-*  compute-sanitizer --tool racecheck on the tests with block
#                reductions (RACECHECK_TESTS);
#   bench-init   bench_cuda_dstep --write-init: the benchmark's initial
#                weights and ring of 8 batches per model, read by both sides;
#   dstep-bench  mixprec's device step timed on them, eager and graphed,
#                batch uploaded in each step (bench_cuda_dstep, DSTEP_S,
#                default 60; device only);
#   torch-gpu-step  the PyTorch baseline (bench/torch_gpu_step.py) on the
#                same init files, batch h2d (copied from pinned host memory
#                in each step: mixprec's terms) first, then resident, with
#                what is left of the budget (TORCH_S, default 200);
#   bench-table  the two side by side (bench/gpu_bench_table.py), also
#                printed before the summary (device only).
# Libraries: every kit program runs with LD_LIBRARY_PATH set for that
# command only: the kit's lib/ then the folder where cuBLASLt was found
# (ldconfig, /usr/local/cuda*, PyTorch's site-packages/nvidia/*/lib), so the
# kit's libraries never reach python3/torch.
# Output: OUTDIR/gpu-check.log (every step's command, exit, time and output,
# long outputs cut to their head and tail) and OUTDIR/gpu-check-raw.tar.gz
# (full outputs); the summary table (step, exit, seconds, verdict) is
# printed last and ends the log.
# Exit: 0 every step passed (INFO counts as passed); 1 a
# failure; 2 bad usage. --dry-run (a machine without a GPU): 77 when the
# kit is sound (every library of every program resolves inside the kit or
# to the device's system libraries under LD_LIBRARY_PATH=kit/lib only, no
# program links cuBLASLt, libmixprec takes libcudart through its RUNPATH,
# every program starts: the CLI answers, GPU tests and benches exit 77),
# 1 on a kit defect. (The old ALLOW_SKIP=1 mode is gone: the dry run
# replaces it.)
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
if [ "${1:-}" = --dry-run ]; then DRY=1; shift; fi
OUTDIR=${1:-}
if [ $# -gt 1 ] || { [ $DRY = 0 ] && [ -z "$OUTDIR" ]; } || [[ "$OUTDIR" == -* ]]; then
    echo "usage: scripts/gpu-check.sh OUTDIR | scripts/gpu-check.sh --dry-run [OUTDIR]" >&2
    exit 2
fi
if [ -n "$OUTDIR" ]; then
    mkdir -p "$OUTDIR" && [ -w "$OUTDIR" ] || { echo "gpu-check: cannot write to $OUTDIR" >&2; exit 2; }
    OUTDIR=$(cd "$OUTDIR" && pwd)
fi
KIT=${KIT:-$ROOT/gpu-kit}
KIT=$(cd "$KIT" 2>/dev/null && pwd || echo "$KIT")
BUDGET_S=${BUDGET_S:-420}
[[ "$BUDGET_S" =~ ^[0-9]+$ ]] || { echo "gpu-check: BUDGET_S='$BUDGET_S' is not a number of seconds" >&2; exit 2; }

# Training runs: "name|extra config overrides" (the CLI's default model,
# the world model). Later sessions add lines here; each gets `train
# --quiet training.device=cuda $TRAIN_SHORT output.dir=... checkpoint.dir=...`
# and the same on the CPU (cpu-<name>).
TRAIN_SHORT=${TRAIN_SHORT:-"training.epochs=1 data.trajectories=64"} # about 360 steps
TRAIN_RUNS=(
    "train-fp32|training.precision=fp32"
    "train-mixed_bf16|training.precision=mixed_bf16"
    "train-mixed_fp16|training.precision=mixed_fp16"
)
# block reductions: k_grad_pass (test_cuda_backend); layernorm, MSE, softmax
# cross-entropy and the store+scan trees (test_cuda_mlp)
RACECHECK_TESTS=${RACECHECK_TESTS:-test_cuda_backend test_cuda_mlp}
# Libraries the device brings: glibc's own, libstdc++, libgcc_s, libcuda
# (the same list as scripts/gpu-kit.sh).
SYSTEM_LIBS='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so)'

START=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
RAW=$WORK/raw
mkdir -p "$RAW"
LOG=$WORK/gpu-check.log
S_NAME=() S_RC=() S_SEC=() S_VERDICT=()
FAILS=0
LT_DIR=""
NOTRUN=""

say() { echo "gpu-check: $*" | tee -a "$LOG"; }
# A kit too broken to check: the log so far still goes to OUTDIR.
abort() {
    say "FAIL: $*"
    [ -z "$OUTDIR" ] || cp "$LOG" "$OUTDIR/gpu-check.log"
    exit 1
}
# record NAME RC SECONDS VERDICT (PASS..., FAIL..., INFO...)
record() {
    local v=$4
    [ "$NOTRUN" = "$1" ] && v="FAIL (not run: time budget spent)"
    S_NAME+=("$1") S_RC+=("$2") S_SEC+=("$3") S_VERDICT+=("$v")
    [[ "$v" == FAIL* ]] && FAILS=$((FAILS + 1))
    say "$1: exit $2, $3 s: $v"
}
# The prefix of every kit program: LD_LIBRARY_PATH = the kit (+ cuBLASLt's
# folder once found), nothing preloaded.
set_kenv() { KENV=(env -u LD_PRELOAD "LD_LIBRARY_PATH=$KIT/lib${LT_DIR:+:$LT_DIR}"); }
set_kenv
# step NAME CAP CMD...: run CMD under timeout (CAP or the budget left),
# output to $RAW/NAME.txt, headed and cut into the log; sets RC and SEC.
step() {
    local name=$1 cap=$2
    shift 2
    local left=$((START + BUDGET_S - $(date +%s)))
    [ "$cap" -lt "$left" ] || cap=$left
    if [ "$cap" -lt 5 ]; then
        RC=124 SEC=0 NOTRUN=$name
        echo "not run: the time budget (BUDGET_S=$BUDGET_S) is spent" >"$RAW/$name.txt"
        echo "=== $name: not run (budget spent)" >>"$LOG"
        return
    fi
    local t0 t1
    t0=$(date +%s.%N)
    timeout -k 10 "$cap" "$@" >"$RAW/$name.txt" 2>&1 </dev/null
    RC=$?
    t1=$(date +%s.%N)
    SEC=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    local lines
    lines=$(wc -l <"$RAW/$name.txt")
    {
        echo "=== $name (exit $RC, $SEC s, cap $cap s): $*"
        if [ "$lines" -le 250 ]; then
            cat "$RAW/$name.txt"
        else
            head -n 150 "$RAW/$name.txt"
            echo "[... $((lines - 250)) lines cut; full output in gpu-check-raw.tar.gz: $name.txt ...]"
            tail -n 100 "$RAW/$name.txt"
        fi
    } >>"$LOG"
}
# verdict of a program that must pass (0); 77 is a skip, which on a GPU
# machine means the device was not usable.
must_pass() {
    case $RC in
    0) echo PASS ;;
    77) echo "FAIL (skipped: no usable device)" ;;
    124 | 137) echo "FAIL (time cap)" ;;
    *) echo "FAIL" ;;
    esac
}

# The folder holding $1 (cuBLASLt's soname) on this machine: ldconfig, the
# CUDA toolkits, PyTorch's wheels (site-packages/nvidia/*/lib). All
# candidates are listed; the first wins.
find_cublaslt() {
    local so=$1 sp
    {
        ldconfig -p 2>/dev/null | awk -v s="$so" '$1 == s {print $NF}'
        ls -d /usr/local/cuda*/lib64/"$so" /usr/local/cuda*/lib/"$so" \
            /usr/local/cuda*/targets/x86_64-linux/lib/"$so" 2>/dev/null
        for sp in $(timeout 60 python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
            [ -d "$sp/nvidia" ] && find "$sp/nvidia" -maxdepth 3 -name "$so" 2>/dev/null
        done
    } | awk '!seen[$0]++'
}

say "$(date -u +%Y-%m-%dT%H:%M:%SZ) $([ $DRY = 1 ] && echo 'dry run' || echo 'device run') on $(hostname); kit $KIT; budget $BUDGET_S s"
if [ ! -f "$KIT/manifest.tsv" ] || [ ! -f "$KIT/kit-info.txt" ]; then
    abort "no kit at $KIT (manifest.tsv, kit-info.txt): build it with scripts/gpu-kit.sh and carry it (docs/gpu.md)"
fi
cp "$KIT/kit-info.txt" "$KIT/manifest.tsv" "$RAW/"
LT_SONAME=$(awk '$1 == "cublaslt_soname" {print $2}' "$KIT/kit-info.txt")
TESTS=$(awk -F'\t' '$1 == "test" {print $2}' "$KIT/manifest.tsv")
BENCHES=$(awk -F'\t' '$1 == "bench" {print $2}' "$KIT/manifest.tsv")
entry() { awk -F'\t' -v n="$1" -v k="$KIT" '$2 == n {a = $4; gsub("@KIT@", k, a); print $3 "\t" a}' "$KIT/manifest.tsv"; }
path_of() { entry "$1" | cut -f1; }
args_of() { entry "$1" | cut -f2; }
CLI=$KIT/$(path_of mixprec)
chmod +x "$KIT"/bin/* 2>/dev/null # in case the copy to the device lost the modes
for f in "$CLI" $(for t in $TESTS $BENCHES; do echo "$KIT/$(path_of "$t")"; done); do
    [ -x "$f" ] || abort "the manifest names $f, which is missing or not executable: rebuild the kit"
done

# ---- the kit's libraries (both modes; the dry run's main check)
check_libs() {
    local f bad=0 out
    for f in "$KIT"/bin/* "$KIT"/lib/*; do
        out=$(env -u LD_PRELOAD LD_LIBRARY_PATH="$KIT/lib" ldd "$f" 2>&1) || { echo "$f: ldd failed: $out"; bad=1; continue; }
        echo "== $f"
        echo "$out"
        while read -r name arrow path _; do
            [ "$arrow" = "=>" ] || continue
            if [ "$path" = "not" ]; then
                echo "DEFECT: $f needs $name, not found in the kit"; bad=1
            elif [[ "$path" != "$KIT/lib/"* ]] && ! grep -Eq "$SYSTEM_LIBS" <<<"$name"; then
                echo "DEFECT: $f takes $name from $path, outside the kit (the device will not have it)"; bad=1
            fi
        done <<<"$out"
        if grep -q 'NEEDED.*libcublasLt' <<<"$(readelf -d "$f" 2>/dev/null)"; then
            echo "DEFECT: $f links libcublasLt (it must be dlopen()ed)"; bad=1
        fi
    done
    local lib
    lib=$(ls "$KIT"/lib/libmixprec.so.* 2>/dev/null | head -1) # the soname carries the ABI version
    # (no `cmd | grep -q` under pipefail: grep's early exit would fail cmd)
    local dyn syms
    dyn=$(readelf -d "$lib") syms=$(nm -D "$lib")
    grep -Eq '(RUNPATH).*\$ORIGIN' <<<"$dyn" || { echo "DEFECT: $lib has no \$ORIGIN RUNPATH"; bad=1; }
    grep -Eq 'NEEDED.*libcudart\.so' <<<"$dyn" || { echo "DEFECT: $lib does not link the shared libcudart"; bad=1; }
    grep -Eq ' U cudaGetDeviceCount@' <<<"$syms" ||
        { echo "DEFECT: $lib does not import cudaGetDeviceCount from libcudart (static runtime linked in?)"; bad=1; }
    return $bad
}
t0=$(date +%s)
check_libs >"$RAW/kit-libs.txt" 2>&1
rc=$?
grep DEFECT "$RAW/kit-libs.txt" | tee -a "$LOG"
record kit-libs $rc $(($(date +%s) - t0)) "$([ $rc = 0 ] && echo PASS || echo 'FAIL (kit defect)')"

# ---- probe
step probe-gpu 30 nvidia-smi
if [ $RC = 0 ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv >>"$RAW/probe-gpu.txt" 2>&1
    record probe-gpu $RC "$SEC" PASS
elif [ $DRY = 1 ]; then
    record probe-gpu $RC "$SEC" "INFO (no GPU here)"
else
    record probe-gpu $RC "$SEC" "FAIL (nvidia-smi)"
fi
probe_tools() {
    uname -a; ldd --version | head -1; nproc; free -g | head -2
    for t in nvcc compute-sanitizer; do
        p=$(command -v $t || ls /usr/local/cuda/bin/$t 2>/dev/null | awk 'NR == 1')
        echo "$t: ${p:-not found}"; [ -n "$p" ] && "$p" --version | tail -2
    done
    echo "python3: $(command -v python3) $(python3 --version 2>&1)"
    echo "CUDA toolkits: $(ls -d /usr/local/cuda* 2>/dev/null | tr '\n' ' ')"
    ldconfig -p | grep -E 'libcuda\.so|libcublasLt' || true
}
export -f probe_tools
step probe-tools 30 bash -c probe_tools
record probe-tools $RC "$SEC" INFO
step probe-torch 90 env -u LD_LIBRARY_PATH python3 -c 'import torch; c = torch.cuda.is_available(); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", c, torch.cuda.get_device_name(0) if c else "")'
record probe-torch $RC "$SEC" "INFO$([ $RC = 0 ] || echo ' (no torch)')"
t0=$(date +%s)
find_cublaslt "$LT_SONAME" >"$RAW/probe-cublaslt.txt" 2>&1
LT_PATH=$(head -1 "$RAW/probe-cublaslt.txt")
{ echo "=== probe-cublaslt: $LT_SONAME candidates:"; cat "$RAW/probe-cublaslt.txt"; } >>"$LOG"
if [ -n "$LT_PATH" ] && [ -f "$LT_PATH" ]; then
    [ $DRY = 1 ] || LT_DIR=$(dirname "$LT_PATH") # the dry run checks the kit alone
    set_kenv
    record probe-cublaslt 0 $(($(date +%s) - t0)) "PASS ($LT_PATH)"
else
    record probe-cublaslt 1 $(($(date +%s) - t0)) \
        "$([ $DRY = 1 ] && echo INFO || echo FAIL) ($LT_SONAME not found)"
fi
step cli-version 30 "${KENV[@]}" "$CLI" --version
record cli-version $RC "$SEC" "$([ $RC = 0 ] && grep -q '^mixprec ' "$RAW/cli-version.txt" && echo PASS || echo FAIL)"
step doctor 60 "${KENV[@]}" "$CLI" doctor
if [ $RC = 0 ] && grep -Eq '^gpu +[0-9]+ ' "$RAW/doctor.txt"; then
    record doctor $RC "$SEC" PASS
elif [ $RC = 0 ] && [ $DRY = 1 ] && grep -Eq '^gpu +none: ' "$RAW/doctor.txt"; then
    record doctor $RC "$SEC" "PASS (no device here)"
else
    record doctor $RC "$SEC" "FAIL (no device line)"
fi

# ---- GPU tests and benchmarks (a dry run expects 77: no device)
run_prog() { # kind name cap
    local name=$2
    # shellcheck disable=SC2046
    step "$1-$name" "$3" "${KENV[@]}" "$KIT/$(path_of "$name")" $(args_of "$name")
    if [ $DRY = 1 ]; then
        record "$1-$name" $RC "$SEC" "$([ $RC = 77 ] || [ $RC = 0 ] && echo PASS || echo 'FAIL (does not start)')"
    else
        record "$1-$name" $RC "$SEC" "$(must_pass)"
    fi
}
for t in $TESTS; do run_prog test "$t" 120; done
# bench_cuda_dstep (the benchmark against PyTorch) runs in its own steps
# below, on the shared init files; the dry run only checks that it starts.
DSTEP=bench_cuda_dstep
for b in $BENCHES; do
    [ $DRY = 0 ] && [ "$b" = $DSTEP ] && continue
    run_prog bench "$b" 90
done

# ---- training runs on the device
# "val V (cpu C, rel R%), N steps, S steps/s" from a device and a CPU
# summary.json (S: the device run's steps over its wall time).
json_num() { sed -n "s/.*\"$2\":\([-0-9.eE+naif]*\).*/\1/p" "$1" 2>/dev/null | head -1; }
summary_pair() {
    local dv cv n w
    dv=$(json_num "$1" val_loss) cv=$(json_num "$2" val_loss)
    n=$(json_num "$1" training_steps) w=$(json_num "$1" wall_time_s)
    awk -v d="${dv:-nan}" -v c="${cv:-nan}" -v n="${n:-0}" -v w="${w:-0}" 'BEGIN {
        r = (c + 0 != 0) ? 100 * (d - c) / c : 0
        printf "val %s (cpu %s, rel %+.2f%%), %d steps, %.0f steps/s", d, c, r, n, (w > 0 ? n / w : 0) }'
}
for r in "${TRAIN_RUNS[@]}"; do
    name=${r%%|*}
    # shellcheck disable=SC2206
    over=(${r#*|})
    # shellcheck disable=SC2206
    short=($TRAIN_SHORT)
    out=$RAW/$name
    step "$name" 120 "${KENV[@]}" "$CLI" train --quiet training.device=cuda "${short[@]}" \
        "${over[@]}" "output.dir=$out" "checkpoint.dir=$WORK/ckpt-$name"
    if [ $RC = 0 ] && [ -f "$out/summary.json" ]; then
        dev_rc=$RC dev_sec=$SEC
        step "cpu-$name" 90 "${KENV[@]}" "$CLI" train --quiet training.device=cpu "${short[@]}" \
            "${over[@]}" "output.dir=$RAW/cpu-$name" "checkpoint.dir=$WORK/ckpt-cpu-$name"
        v=$(summary_pair "$out/summary.json" "$RAW/cpu-$name/summary.json")
        if grep -q '"d2h_per_step_max":1,' "$out/summary.json"; then
            record "$name" "$dev_rc" "$dev_sec" "PASS ($v)"
        else # the summary's device_step: one device-to-host copy per step
            record "$name" "$dev_rc" "$dev_sec" "FAIL (not one copy per step: $(grep -o '"device_step":{[^}]*}' "$out/summary.json"); $v)"
        fi
    elif [ $DRY = 1 ] && [ $RC = 2 ] && grep -q "training.device=cuda: .*no CUDA device" "$RAW/$name.txt"; then
        record "$name" $RC "$SEC" "PASS (refused: no device here)"
    else
        record "$name" $RC "$SEC" FAIL
    fi
done

# ---- compute-sanitizer (device only)
if [ $DRY = 0 ]; then
    SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer \
        /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | awk 'NR == 1')
    if [ -z "$SAN" ]; then
        record compute-sanitizer 1 0 "FAIL (compute-sanitizer not found)"
    else
        for t in $TESTS; do
            # shellcheck disable=SC2046
            # MIXPREC_TEST_QUICK: the GPU tests drop their largest sizes
            # under the sanitizers (test_cuda_mlp: the past-the-cap cases)
            step "memcheck-$t" 150 "${KENV[@]}" MIXPREC_TEST_QUICK=1 "$SAN" --tool memcheck --leak-check full --error-exitcode 9 \
                "$KIT/$(path_of "$t")" $(args_of "$t")
            record "memcheck-$t" $RC "$SEC" "$(must_pass)"
        done
        for t in $RACECHECK_TESTS; do
            grep -qx "$t" <<<"$TESTS" || { record "racecheck-$t" 1 0 "FAIL (not in the kit)"; continue; }
            # shellcheck disable=SC2046
            step "racecheck-$t" 150 "${KENV[@]}" MIXPREC_TEST_QUICK=1 "$SAN" --tool racecheck --error-exitcode 9 \
                "$KIT/$(path_of "$t")" $(args_of "$t")
            record "racecheck-$t" $RC "$SEC" "$(must_pass)"
        done
    fi
fi

# ---- the benchmark's inputs and mixprec's device step (issue 28 part 5,
# bench/bench_cuda_dstep, docs/gpu.md "The benchmark against PyTorch"):
# bench-init writes each model's initial FP32 weights and ring of 8 batches
# (safetensors) into $WORK/bench-init (made here, not carried: mlp2048's is
# 38 MB; the dry run writes the world model's only), which both sides read
# and cycle the same way; dstep-bench times mixprec's step on them, eager
# and graphed (DSTEP_S caps it, default 60; its own --budget-s ends it 10 s
# earlier, keeping what it measured), JSON lines into the tarball
# (raw/dstep-bench/). Then the PyTorch baseline on the same files, then
# bench-table puts the two side by side, like with like (batch h2d).
BENCH_INIT=$WORK/bench-init BENCH_INIT_OK=
DSTEP_S=${DSTEP_S:-60}
[[ "$DSTEP_S" =~ ^[0-9]+$ ]] && [ "$DSTEP_S" -ge 20 ] || DSTEP_S=60
if grep -qx "$DSTEP" <<<"$BENCHES"; then
    # shellcheck disable=SC2046
    step bench-init 60 "${KENV[@]}" "$KIT/$(path_of $DSTEP)" --write-init "$BENCH_INIT" \
        $([ $DRY = 1 ] && echo --models wm)
    record bench-init $RC "$SEC" "$([ $RC = 0 ] && echo PASS || echo FAIL)"
    [ $RC = 0 ] && BENCH_INIT_OK=1
    if [ $DRY = 0 ]; then
        step dstep-bench "$DSTEP_S" "${KENV[@]}" "$KIT/$(path_of $DSTEP)" --init-dir "$BENCH_INIT" \
            --variants eager,graph --out-dir "$RAW/dstep-bench" --budget-s $((DSTEP_S - 10))
        n=$(grep -o '"status": "[a-z-]*"' "$RAW/dstep-bench/mixprec_dstep.jsonl" 2>/dev/null | sort | uniq -c | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $3}' | tr -d '"')
        record dstep-bench $RC "$SEC" "$(must_pass)${n:+ ($n)}"
    fi
else
    record bench-init 1 0 "FAIL ($DSTEP is not in the kit: rebuild it with scripts/gpu-kit.sh)"
fi

# ---- the PyTorch baseline (issue 28 part 5, bench/torch_gpu_step.py): the
# device's python3, no kit library; its JSON lines and table go into the
# tarball (raw/torch-gpu-step/), the table into the log. TORCH_S caps it
# (its own --budget-s ends it 20 s earlier, keeping what it measured; the
# h2d cases, mixprec's terms, run first, so a short budget drops the
# resident ones). The
# dry run only checks that the script starts (--help): its CPU paths are
# tests/test_torch_gpu_step.sh's. It runs last, after the sanitizers:
# mixprec's own checks come first, the baseline gets what is left of the
# budget (not run under 40 s).
TORCH_S=${TORCH_S:-200} left=$((START + BUDGET_S - $(date +%s)))
[ "$left" -lt "$TORCH_S" ] && TORCH_S=$left
if [ $DRY = 0 ] && [ "$TORCH_S" -lt 40 ]; then
    echo "not run: $TORCH_S s of the budget left" >"$RAW/torch-gpu-step.txt"
    RC=124 SEC=0
elif [ $DRY = 1 ]; then
    step torch-gpu-step 30 python3 "$ROOT/bench/torch_gpu_step.py" --help
else
    step torch-gpu-step "$TORCH_S" env -u LD_LIBRARY_PATH python3 "$ROOT/bench/torch_gpu_step.py" \
        --out-dir "$RAW/torch-gpu-step" --budget-s $((TORCH_S > 50 ? TORCH_S - 20 : 30)) \
        --batch h2d,resident \
        ${BENCH_INIT_OK:+--init-dir "$BENCH_INIT"}
fi
n=$(grep -o '"status": "[a-z-]*"' "$RAW/torch-gpu-step/torch_gpu_step.jsonl" 2>/dev/null | sort | uniq -c | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $3}' | tr -d '"')
record torch-gpu-step $RC "$SEC" "$(must_pass)${n:+ ($n)}"
# the side-by-side table (standard library Python only): into the log, the
# tarball and the summary
if [ $DRY = 0 ]; then
    step bench-table 30 env -u LD_LIBRARY_PATH python3 "$ROOT/bench/gpu_bench_table.py" \
        "$RAW/dstep-bench/mixprec_dstep.jsonl" "$RAW/torch-gpu-step/torch_gpu_step.jsonl"
    record bench-table $RC "$SEC" "$([ $RC = 0 ] && echo INFO || echo FAIL)"
fi

# ---- summary, outputs
{
    if [ $DRY = 0 ] && [ -s "$RAW/bench-table.txt" ]; then
        echo
        echo "== the benchmark against PyTorch (raw/bench-table.txt)"
        cat "$RAW/bench-table.txt"
    fi
    echo
    printf '%-34s %5s %8s  %s\n' step exit seconds verdict
    for i in "${!S_NAME[@]}"; do
        printf '%-34s %5s %8s  %s\n' "${S_NAME[$i]}" "${S_RC[$i]}" "${S_SEC[$i]}" "${S_VERDICT[$i]}"
    done
    if [ $DRY = 1 ]; then
        [ $FAILS = 0 ] && echo "RESULT: dry run: the kit is sound ($((${#S_NAME[@]})) checks); exit 77 (no GPU run here)" ||
            echo "RESULT: dry run: $FAILS kit defect(s); exit 1"
    else
        [ $FAILS = 0 ] && echo "RESULT: all ${#S_NAME[@]} steps passed" || echo "RESULT: $FAILS of ${#S_NAME[@]} steps FAILED"
    fi
    echo "total $(($(date +%s) - START)) s"
} >"$WORK/summary.txt"
cat "$WORK/summary.txt" >>"$LOG"
if [ -n "$OUTDIR" ]; then
    # keep the tarball under the 16 MiB a returned file may have
    find "$RAW" -type f -size +4M | while read -r f; do
        { head -c 1048576 "$f"; printf '\n[... cut to 1 MiB head + 1 MiB tail by gpu-check.sh ...]\n'; tail -c 1048576 "$f"; } >"$f.cut" && mv "$f.cut" "$f"
    done
    tar -C "$WORK" -czf "$OUTDIR/gpu-check-raw.tar.gz" raw
    cp "$LOG" "$OUTDIR/gpu-check.log"
fi
cat "$WORK/summary.txt"
[ -n "$OUTDIR" ] && echo "outputs: $OUTDIR/gpu-check.log, $OUTDIR/gpu-check-raw.tar.gz"
if [ $DRY = 1 ]; then
    [ $FAILS = 0 ] && exit 77
    exit 1
fi
[ $FAILS = 0 ] && exit 0
exit 1
