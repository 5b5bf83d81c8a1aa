#!/bin/bash
# tests/test_cuda_ptx.sh CLI SRCDIR: the device code's numerics, checked in
# its PTX without a GPU (issue 28, "Testing without a GPU"; label `cuda`).
# Every src/backend/cuda/*.cu is compiled to PTX for sm_90 with the flags
# this build compiles it with (its CMakeFiles/mixprec.dir/flags.make, so a
# flag dropped from CMakeLists.txt or added through CMAKE_CUDA_FLAGS is
# seen), then:
#   - no floating-point contraction: no `fma.*`, no float `mad.*`
#     (--fmad=false, the device twin of the CPU's -ffp-contract=off; integer
#     mad.lo is fine);
#   - no approximate division, square root or reciprocal: no `*.approx*`
#     (div, sqrt, rcp, rsqrt, ex2, lg2, sin, cos, tanh), no `div.full`;
#   - no flush-to-zero: no `.ftz` (-ftz=false).
# Controls that prove the check can fail: kernels.cu without --fmad=false
# shows fma.rn, and with --use_fast_math shows .approx and .ftz.
# Kernels that call libdevice transcendentals (erff, expf, logf, tanhf use
# fma and ex2/rcp.approx internally, by design) are allowed those by name:
# an entry whose name contains `_libm_` (mlp_kernels.cu: GELU, tanh forward,
# softmax cross-entropy; their results are documented as close to the CPU,
# not bit-identical) may hold fma.rn/.rm.f32, ex2.approx.ftz.f32 and
# rcp.approx.ftz.f32, nothing else of the forbidden set (no div/sqrt
# approximation, no div.full); every other entry is checked in full. The
# allowance cannot tell libdevice's fma from a contraction of our own
# arithmetic inside those entries (--fmad=false keeps the latter out).
# Exit 77 (skipped): no nvcc, or a build without the CUDA backend (no CUDA
# flags to check); 1 on a finding.
set -u -f # -f: no globbing of --generate-code=...[compute_90,sm_90]
CLI=$1
SRC=$2
BUILD=$(cd "$(dirname "$CLI")" && pwd)
# the library's objects are compiled in the OBJECT target mixprec_objects
FLAGS_MAKE=$BUILD/CMakeFiles/mixprec_objects.dir/flags.make
[ -f "$FLAGS_MAKE" ] || FLAGS_MAKE=$BUILD/CMakeFiles/mixprec.dir/flags.make
fail=0
err() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -f "$FLAGS_MAKE" ] || ! grep -q '^CUDA_FLAGS = ' "$FLAGS_MAKE"; then
    echo "test_cuda_ptx: SKIP (this build compiles no CUDA: no CUDA_FLAGS in $FLAGS_MAKE)"
    exit 77
fi
NVCC=$(sed -n 's/^# compile CUDA with //p' "$FLAGS_MAKE")
if [ ! -x "$NVCC" ]; then
    echo "test_cuda_ptx: SKIP (no nvcc: '$NVCC' from $FLAGS_MAKE is not executable)"
    exit 77
fi
flags=()
for f in $(sed -n 's/^CUDA_FLAGS = //p' "$FLAGS_MAKE"); do
    case $f in
    --generate-code=*)
        [[ $f == *compute_90* ]] || err "the build does not target sm_90: $f"
        ;;
    *) flags+=("$f") ;;
    esac
done
# shellcheck disable=SC2207
defs=($(sed -n 's/^CUDA_DEFINES = //p' "$FLAGS_MAKE"))
# shellcheck disable=SC2207
incs=($(sed -n 's/^CUDA_INCLUDES = //p' "$FLAGS_MAKE")) # may name an .rsp relative to $BUILD

ptx() { # out.ptx source extra-flags...
    local out=$1 src=$2
    shift 2
    (cd "$BUILD" && "$NVCC" "${flags[@]}" "$@" -arch=sm_90 "${defs[@]}" "${incs[@]}" -ptx "$src" -o "$out") \
        >"$out.log" 2>&1 || { err "nvcc -ptx $src $*: $(tail -5 "$out.log")"; return 1; }
}
# Forbidden PTX (one extended regex per rule).
FMA='\bfma\.|\bmad(\.[a-z]+)*\.f(16|32|64)\b'
APPROX='\.approx\b|\bdiv\.full\b'
FTZ='\.ftz\b'

n=0
set +f
cus=("$SRC"/src/backend/cuda/*.cu)
set -f
for cu in "${cus[@]}"; do
    name=$(basename "$cu" .cu)
    ptx "$tmp/$name.ptx" "$cu" || continue
    n=$((n + 1))
    # drop the allowed libdevice instructions inside `_libm_` entries
    awk '/\.(entry|func)[ \t]/ { ex = ($0 ~ /_libm_/) }
         ex && /(fma\.r[nm]\.f32|ex2\.approx\.ftz\.f32|rcp\.approx\.ftz\.f32)[ \t]/ { next }
         { print }' "$tmp/$name.ptx" >"$tmp/$name.checked.ptx"
    libm=$(grep -cE '\.entry[ \t].*_libm_' "$tmp/$name.ptx")
    [ "$libm" -eq 0 ] || echo "test_cuda_ptx: $name.cu: $libm libdevice entries (fma/ex2/rcp allowed by name)"
    for rule in FMA APPROX FTZ; do
        hits=$(grep -nE "${!rule}" "$tmp/$name.checked.ptx" | head -5)
        [ -z "$hits" ] || err "$name.cu: PTX has $rule instructions: $hits"
    done
done
[ $n -gt 0 ] || err "no .cu file compiled from $SRC/src/backend/cuda"

# Controls: the same regexes do find what the flags keep out.
no_fmad=()
for f in "${flags[@]}"; do [ "$f" = --fmad=false ] || no_fmad+=("$f"); done
saved=("${flags[@]}")
flags=("${no_fmad[@]}")
if ptx "$tmp/ctl_fmad.ptx" "$SRC/src/backend/cuda/kernels.cu" --fmad=true; then
    grep -qE "$FMA" "$tmp/ctl_fmad.ptx" || err "control: kernels.cu with --fmad=true shows no fma: the FMA rule cannot fail"
fi
fast=()
for f in "${saved[@]}"; do
    case $f in --fmad=* | -prec-div=* | -prec-sqrt=* | -ftz=*) ;; *) fast+=("$f") ;; esac
done
flags=("${fast[@]}")
if ptx "$tmp/ctl_fast.ptx" "$SRC/src/backend/cuda/kernels.cu" --use_fast_math; then
    grep -qE "$APPROX" "$tmp/ctl_fast.ptx" || err "control: --use_fast_math shows no .approx: the APPROX rule cannot fail"
    grep -qE "$FTZ" "$tmp/ctl_fast.ptx" || err "control: --use_fast_math shows no .ftz: the FTZ rule cannot fail"
fi
# Control of the libdevice allowance: mlp_kernels.cu with -prec-div=false
# still shows approximate division after the allowed lines are dropped.
nodiv=()
for f in "${saved[@]}"; do [ "$f" = -prec-div=true ] || nodiv+=("$f"); done
flags=("${nodiv[@]}")
if [ -f "$SRC/src/backend/cuda/mlp_kernels.cu" ] &&
    ptx "$tmp/ctl_div.ptx" "$SRC/src/backend/cuda/mlp_kernels.cu" -prec-div=false; then
    awk '/\.(entry|func)[ \t]/ { ex = ($0 ~ /_libm_/) }
         ex && /(fma\.r[nm]\.f32|ex2\.approx\.ftz\.f32|rcp\.approx\.ftz\.f32)[ \t]/ { next }
         { print }' "$tmp/ctl_div.ptx" >"$tmp/ctl_div.checked.ptx"
    grep -qE "$APPROX" "$tmp/ctl_div.checked.ptx" ||
        err "control: mlp_kernels.cu with -prec-div=false shows no approximate division after the libdevice allowance"
fi
[ $fail -eq 0 ] && echo "test_cuda_ptx: OK ($n .cu files: no contraction, approximation or flush-to-zero in their sm_90 PTX; controls fire)"
exit $fail
