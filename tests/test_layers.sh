#!/bin/bash
# tests/test_layers.sh CLI SRCDIR: the module order of docs/design.md holds.
#   - scripts/include-graph.sh --check passes on the tree: no file of src/
#     includes a module above its own (nor the umbrella header), and every
#     src/ folder is a placed module;
#   - the check fails, naming the file, on a planted upward include (a copy
#     of the tree where src/base/alloc.c includes "run/run_internal.h"), so
#     it is not a check that cannot fail;
#   - tests/, tools/, bench/ and examples/ reach internal headers only
#     through the mixprec_internal target's include path ("module/x.h"),
#     never by a relative path into src/; examples/ (built against the
#     installed library) include nothing but <mixprec/...> and the C
#     library.
set -u
SRC=$2
fail=0
err() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$(bash "$SRC/scripts/include-graph.sh" --check "$SRC" 2>&1) ||
    err "include-graph.sh --check failed on the tree:
$(grep -v '^[a-z]' <<<"$out")"
grep -q '^kernels -> num ' <<<"$out" || err "the graph lacks kernels -> num: $(head -5 <<<"$out")"

mkdir -p "$tmp/tree"
cp -r "$SRC/src" "$SRC/include" "$SRC/scripts" "$tmp/tree/"
echo '#include "run/run_internal.h"' >>"$tmp/tree/src/base/alloc.c"
bad=$(bash "$tmp/tree/scripts/include-graph.sh" --check "$tmp/tree" 2>&1)
rc=$?
[ $rc -eq 1 ] || err "a planted upward include (base -> run) passed the check (exit $rc)"
grep -q '^FAIL: src/base/alloc.c (base) includes run' <<<"$bad" ||
    err "the planted upward include is not named: $(grep FAIL <<<"$bad")"

rel=$(grep -rnE '#[[:space:]]*include[[:space:]]*"(\.\./)+src/|#[[:space:]]*include[[:space:]]*"src/' \
    "$SRC/tests" "$SRC/tools" "$SRC/bench" "$SRC/examples" --include='*.c' --include='*.h' |
    sed "s|$SRC/||")
[ -z "$rel" ] || err "relative includes into src/ (link mixprec_internal instead):
$rel"
ex=$(grep -nE '#[[:space:]]*include[[:space:]]*"' "$SRC"/examples/*.c | sed "s|$SRC/||")
[ -z "$ex" ] || err "examples/ includes a non-public header:
$ex"

[ $fail -eq 0 ] && echo "OK: module order kept; a planted upward include is caught"
exit $fail
