#!/bin/bash
# scripts/gpu-check.sh: the GPU check of the CUDA backend, for a machine
# with an NVIDIA GPU (written for one H100; docs/gpu.md). Well under 10
# minutes: one CUDA build of the library and the gpu-labelled tests only,
# `ctest -L gpu` (on a GPU machine a skip counts as a failure), then
# compute-sanitizer memcheck over every gpu test. Raw outputs go to
# $RESULTS (default docs/results/gpu-<date>/) so they can be committed.
#
# usage: scripts/gpu-check.sh            (from the repository root)
#   BUILD=dir      build directory (default build-gpu)
#   RESULTS=dir    where the logs go
#   ALLOW_SKIP=1   no GPU here: report the skips and exit 77 instead of 1
#                  (lets a CPU-only machine check that the script itself works)
# Exit: 0 all gpu tests passed and memcheck is clean; 1 a failure; 77 no GPU
# and ALLOW_SKIP=1.
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
RESULTS=${RESULTS:-docs/results/gpu-$(date -u +%Y%m%d-%H%M%S)}
JOBS=$(nproc 2>/dev/null || echo 2)
mkdir -p "$RESULTS"
log() { echo "gpu-check: $*" | tee -a "$RESULTS/summary.txt"; }
step() { # name, command...: run with a 4-minute cap, keep the output
    local name=$1; shift
    timeout 240 "$@" >"$RESULTS/$name.log" 2>&1
    local rc=$?
    log "$name: exit $rc"
    return $rc
}

missing=""
for pc in yaml-0.1 jansson sqlite3 libmicrohttpd zlib; do
    pkg-config --exists "$pc" 2>/dev/null || missing="$missing $pc"
done
[ -z "$missing" ] || { log "missing build dependencies (pkg-config):$missing; see scripts/install-deps.sh"; exit 1; }

{ nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv 2>&1 || true; } >"$RESULTS/nvidia-smi.txt"
log "host $(hostname), $(nproc) cores; nvcc: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1)"

step configure cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMIXPREC_WERROR=ON -DMIXPREC_CUDA=ON || exit 1
GPU_TESTS=$(cd tests && ls test_cuda_*.c 2>/dev/null | sed 's/\.c$//' | tr '\n' ' ')
# shellcheck disable=SC2086
step build cmake --build "$BUILD" -j"$JOBS" --target mixprec_cli $GPU_TESTS || exit 1
"$BUILD/mixprec" doctor >"$RESULTS/doctor.txt" 2>&1
grep -E '^(cuda|gpu)' "$RESULTS/doctor.txt" | tee -a "$RESULTS/summary.txt"

step ctest-gpu ctest --test-dir "$BUILD" -L gpu --output-on-failure
rc=$?
skipped=$(grep -c '(Skipped)\|Not Run' "$RESULTS/ctest-gpu.log" || true)
if [ $rc -ne 0 ]; then
    log "FAIL: ctest -L gpu exit $rc"
    exit 1
fi
if [ "$skipped" -gt 0 ]; then
    if [ "${ALLOW_SKIP:-0}" = 1 ]; then
        log "no GPU: $skipped gpu test(s) skipped (ALLOW_SKIP=1); memcheck not run"
        exit 77
    fi
    log "FAIL: $skipped gpu test(s) skipped on a machine that should have a GPU"
    exit 1
fi

SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$SAN" ] || { log "FAIL: compute-sanitizer not found"; exit 1; }
fail=0
for t in $GPU_TESTS; do
    step "memcheck-$t" "$SAN" --tool memcheck --error-exitcode 9 --leak-check full "$BUILD/$t" || fail=1
done
[ $fail -eq 0 ] && log "OK: gpu tests passed, memcheck clean" || log "FAIL: memcheck"
exit $fail
