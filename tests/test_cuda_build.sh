#!/bin/bash
# tests/test_cuda_build.sh CLI SRCDIR: the CUDA build switch, seen from the
# outside (no GPU needed).
#   - a build without the backend (MIXPREC_CUDA=OFF, or AUTO without nvcc)
#     exports and imports no CUDA symbol and links no CUDA library
#     (nm -D / ldd of libmixprec), and doctor says why there is no GPU;
#   - a build with it imports the CUDA runtime, and doctor names the device
#     or the runtime's reason for having none;
#   - training.device: cuda without a usable device (no CUDA in the build,
#     or no GPU) is a clear error, exit 2, and nothing is written (with a
#     GPU it trains: scripts/gpu-check.sh covers that); a malformed value
#     names what is accepted.
set -u
CLI=$1
fail=0
err() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the shared library of this build (the CLI links the static internal one)
LIB=${MIXPREC_LIB:-$(dirname "$CLI")/libmixprec.so}
[ -f "$LIB" ] || { echo "FAIL: cannot find libmixprec beside $CLI"; exit 1; }
doctor=$("$CLI" doctor 2>&1) || err "doctor exited $?"
if grep -q "built without CUDA" <<<"$doctor"; then
    # CUDA runtime / cuBLAS imports, or the internal CUDA side (mxp_cudab_*);
    # the public mxp_cuda_* queries exist in every build and say "no CUDA".
    syms=$(nm -D "$LIB" | grep -E ' U (cuda|cublas|cu[A-Z])|mxp_cudab_' | head -5)
    [ -z "$syms" ] || err "OFF build has CUDA symbols: $syms"
    libs=$(ldd "$LIB" "$CLI" | grep -E 'lib(cuda|cudart|cublas|cublasLt)\.so')
    [ -z "$libs" ] || err "OFF build links CUDA libraries: $libs"
else
    nm -D "$LIB" | grep -q ' U cudaGetDeviceCount' || err "CUDA build does not import cudaGetDeviceCount"
    grep -Eq '^gpu +(none: no CUDA device: .+|[0-9]+ +.+compute capability [0-9]+\.[0-9]+.*driver)' <<<"$doctor" ||
        err "doctor names neither a GPU nor why there is none: $(grep -E '^(gpu|cuda)' <<<"$doctor")"
fi

out="$tmp/run"
if ! grep -Eq '^gpu +[0-9]+ ' <<<"$doctor"; then # no usable GPU here
    "$CLI" train --quiet training.device=cuda "output.dir=$out" checkpoint.dir="$out/ck" >"$tmp/o" 2>"$tmp/e"
    rc=$?
    [ $rc -eq 2 ] || err "training.device=cuda: exit $rc, expected 2"
    grep -q "training.device=cuda: " "$tmp/e" || err "training.device=cuda: no error naming the key: $(cat "$tmp/e")"
    [ ! -e "$out" ] || err "training.device=cuda wrote $out"
fi
for bad in gpu cuda: cuda:-1 cuda:1x "cuda 0" cuda:99999; do
    "$CLI" train --quiet "training.device=$bad" "output.dir=$out" >"$tmp/o" 2>"$tmp/e"
    rc=$?
    [ $rc -eq 2 ] || err "training.device=$bad: exit $rc, expected 2"
    grep -q "accepted: cpu, cuda, cuda:N" "$tmp/e" || err "training.device=$bad: message $(cat "$tmp/e")"
done
[ ! -e "$out" ] || err "a bad training.device wrote $out"
"$CLI" config show training.device=cuda:3 2>&1 | grep -q "training.device: \"cuda:3\"" ||
    err "config show does not print training.device=cuda:3"
[ $fail -eq 0 ] && echo "test_cuda_build: OK"
exit $fail
