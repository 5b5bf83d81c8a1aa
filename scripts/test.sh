#!/usr/bin/env bash
# The whole mixprec test suite, from a fresh Debian 12 machine:
#  1. install build dependencies (apt, only what is missing);
#  2. warnings-as-errors Release build + every CTest program;
#  2b. bounded libFuzzer runs: the checkpoint loader (60 s), the user-data
#      readers, providers and workload_meta (20 s);
#  2c. a MIXPREC_CUDA=OFF build (library, CLI, CUDA tests): no CUDA symbol,
#      `ctest -L gpu` skips (docs/gpu.md; step 2 is the AUTO build);
#  2d. when nvcc exists: the device kit (scripts/gpu-kit.sh) and its dry
#      run (scripts/gpu-check.sh --dry-run must exit 77: the kit is sound);
#  3. the same suite under MIXPREC_FORCE_ISA=generic (reference kernels),
#     less the tests that never reach the CPU kernels or whose checks do not
#     depend on them (labels cuda, cmake, emu_only, kernel_agnostic:
#     CMakeLists.txt says which and why);
#  3b. the suite on the mock device (MIXPREC_MOCK_DEVICE=1, docs/design.md
#      "The mock device"), less the tests labelled cpu_view, cuda, cmake and
#      emu_only;
#  4. an ASan + UBSan build and its suite, less labels cuda and cmake (no C
#     code of ours runs in them: PTX and CMake checks);
#  5. `cmake --install` into a staging prefix and build examples/ against it
#     through pkg-config.
# 3, 3b and 4 re-run what step 2 ran in full, with MIXPREC_TEST_QUICK=1:
# the heavy tests then check each distinct path once (each precision mode,
# shape, optimizer), not every combination (docs/design.md "Tests").
# CTest starts the longest tests first (COST in CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
scripts/install-deps.sh

echo "== release build (-Werror) and tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMIXPREC_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== fuzz the checkpoint loader and the predictor's reading of it (libFuzzer + ASan/UBSan, 60 s)"
tests/fuzz/run_fuzz.sh 60 build ckpt
echo "== fuzz the user-data readers, providers and workload_meta (libFuzzer + ASan/UBSan, 20 s)"
tests/fuzz/run_fuzz.sh 20 build data

echo "== CUDA OFF build: no CUDA symbols, gpu tests skip"
cmake -S . -B build-nocuda -DCMAKE_BUILD_TYPE=Release -DMIXPREC_WERROR=ON -DMIXPREC_CUDA=OFF >/dev/null
cuda_tests=$(for f in tests/test_cuda_*.c; do basename "$f" .c; done)
# shellcheck disable=SC2086 # one target per word
cmake --build build-nocuda -j"$jobs" --target mixprec mixprec_cli $cuda_tests
ctest --test-dir build-nocuda -R '^test_cuda_' --output-on-failure

echo "== device kit and its dry run (docs/gpu.md)"
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  scripts/gpu-kit.sh
  rc=0
  scripts/gpu-check.sh --dry-run >build-kit/dry-run.log 2>&1 || rc=$?
  if [ $rc -ne 77 ]; then
    cat build-kit/dry-run.log
    echo "scripts/gpu-check.sh --dry-run: exit $rc, expected 77 (the kit is defective)"
    exit 1
  fi
  tail -2 build-kit/dry-run.log
else
  echo "no nvcc: skipped"
fi

echo "== tests with the reference kernels (MIXPREC_FORCE_ISA=generic)"
MIXPREC_FORCE_ISA=generic MIXPREC_TEST_QUICK=1 ctest --test-dir build --output-on-failure -j"$jobs" \
  -LE 'cuda|cmake|emu_only|kernel_agnostic'

echo "== tests on the mock device (MIXPREC_MOCK_DEVICE=1: tensors unreadable outside backend calls)"
MIXPREC_MOCK_DEVICE=1 MIXPREC_TEST_QUICK=1 ctest --test-dir build --output-on-failure -j"$jobs" \
  -LE 'cpu_view|gpu|cuda|cmake|emu_only'

echo "== ASan + UBSan build and tests"
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DMIXPREC_SANITIZE=ON >/dev/null
cmake --build build-san -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  MIXPREC_TEST_QUICK=1 ctest --test-dir build-san --output-on-failure -j"$jobs" -LE 'cuda|cmake'

echo "== install + pkg-config example"
stage=$(mktemp -d)
cmake --install build --prefix "$stage" >/dev/null
PKG_CONFIG_PATH="$stage/lib/pkgconfig:$stage/lib/x86_64-linux-gnu/pkgconfig" \
  make -s -C examples clean all
examples/train_tiny
examples/train_run "$stage/run"  # guard, checkpoints, stop + resume, metrics via mxp_run
make -s -C examples clean
rm -rf "$stage"
echo "== all tests passed"
