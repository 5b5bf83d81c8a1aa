#!/bin/bash
# tests/test_cuda_configure.sh CLI SRCDIR: the MIXPREC_CUDA configure rules,
# with the CUDA compiler hidden (CUDACXX pointing nowhere) so the answer does
# not depend on the machine:
#   - ON without nvcc is a configure error naming what is missing;
#   - AUTO without nvcc configures, with the backend off;
#   - a value other than AUTO|ON|OFF is an error naming the accepted ones.
set -u
SRC=$2
fail=0
err() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CUDACXX=/nonexistent/nvcc

cmake -S "$SRC" -B "$tmp/on" -DMIXPREC_CUDA=ON >"$tmp/on.log" 2>&1 && err "MIXPREC_CUDA=ON without nvcc configured"
grep -q "MIXPREC_CUDA=ON but no working CUDA compiler (nvcc) was found" "$tmp/on.log" ||
    err "ON without nvcc: no message naming the missing nvcc: $(grep -A3 'CMake Error' "$tmp/on.log")"

cmake -S "$SRC" -B "$tmp/auto" >"$tmp/auto.log" 2>&1 || err "AUTO without nvcc failed to configure: $(tail -5 "$tmp/auto.log")"
grep -q "CUDA backend OFF (MIXPREC_CUDA=AUTO and no nvcc found)" "$tmp/auto.log" || err "AUTO without nvcc: backend not reported off"

cmake -S "$SRC" -B "$tmp/bad" -DMIXPREC_CUDA=maybe >"$tmp/bad.log" 2>&1 && err "MIXPREC_CUDA=maybe configured"
grep -q "MIXPREC_CUDA='maybe' is not valid; accepted: AUTO, ON, OFF" "$tmp/bad.log" || err "MIXPREC_CUDA=maybe: message"
[ $fail -eq 0 ] && echo "test_cuda_configure: OK"
exit $fail
