#!/bin/bash
# tests/test_exports.sh CLI SRCDIR: libmixprec.so exports exactly what the
# public headers declare, no more and no less (docs/design.md "The public
# boundary").
#
# The library is compiled with -fvisibility=hidden and every public
# declaration in include/mixprec/*.h carries MXP_API (mixprec/api.h). The
# oracle for "declared" is the compiler, not MXP_API: GCC's -aux-info lists
# every function prototype that the headers declare (file:line), and any
# file-scope `extern` object declaration of the headers counts as data.
# The exports are `nm -D --defined-only` of the library (MIXPREC_LIB, set by
# CMakeLists.txt; else libmixprec.so beside the CLI), without the linker's
# own __bss_start, _edata, _end, _init, _fini.
#
# Both differences are printed, each name with what to do about it. Exits
# 77 (skipped) for a static build or when no GCC is found.
set -u
CLI=$1
SRC=$2
LIB=${MIXPREC_LIB:-$(dirname "$CLI")/libmixprec.so}
CC_AUX=${MXP_GCC:-gcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -f "$LIB" ] || ! readelf -h "$LIB" 2>/dev/null | grep -q 'Type: *DYN'; then
    echo "SKIP: $LIB is not a shared library (BUILD_SHARED_LIBS=OFF?)"
    exit 77
fi
if ! command -v "$CC_AUX" >/dev/null; then
    echo "SKIP: no GCC ($CC_AUX) for -aux-info"
    exit 77
fi

# ---- declared: every prototype of include/mixprec/*.h -----------------------
: >"$tmp/all.c"
for h in "$SRC"/include/mixprec/*.h; do
    echo "#include <mixprec/$(basename "$h")>" >>"$tmp/all.c"
done
"$CC_AUX" -std=c11 -I"$SRC/include" -aux-info "$tmp/aux.txt" -fsyntax-only "$tmp/all.c" ||
    { echo "FAIL: the public headers do not compile together"; exit 1; }
# "/* .../include/mixprec/run.h:212:NC */ extern mxp_status mxp_run_train (...);"
sed -n 's|^/\* [^ ]*/include/mixprec/\([a-z_0-9]*\.h\):\([0-9]*\):[A-Z]* \*/ .*[ *]\([A-Za-z_][A-Za-z_0-9]*\) (.*|\3 \1:\2|p' \
    "$tmp/aux.txt" | sort -u -k1,1 >"$tmp/declared_where"
# data: file-scope `extern TYPE NAME[...]?;` (not extern "C")
for h in "$SRC"/include/mixprec/*.h; do
    grep -nE '^(MXP_API +)?extern +[^"(]*[ *]([A-Za-z_][A-Za-z_0-9]*) *(\[[^]]*\])* *;' "$h" |
        sed -E "s|^([0-9]+):.*[ *]([A-Za-z_][A-Za-z_0-9]*) *(\[[^]]*\])* *;.*|\2 $(basename "$h"):\1|"
done | sort -u -k1,1 >"$tmp/data_where"
sort -u -k1,1 "$tmp/declared_where" "$tmp/data_where" >"$tmp/where"
cut -d' ' -f1 "$tmp/where" | sort -u >"$tmp/declared"
n_decl=$(wc -l <"$tmp/declared")
[ "$n_decl" -gt 100 ] || { echo "FAIL: only $n_decl declarations found in the headers (-aux-info broken?)"; exit 1; }

# ---- exported --------------------------------------------------------------
nm -D --defined-only "$LIB" | awk '{print $NF}' |
    grep -vxE '__bss_start|_edata|_end|_init|_fini' | sort -u >"$tmp/exported"
n_exp=$(wc -l <"$tmp/exported")

comm -23 "$tmp/declared" "$tmp/exported" >"$tmp/missing"
comm -13 "$tmp/declared" "$tmp/exported" >"$tmp/extra"
fail=0
if [ -s "$tmp/missing" ]; then
    fail=1
    echo "FAIL: declared in include/mixprec but NOT exported by $LIB ($(wc -l <"$tmp/missing")):"
    while read -r s; do
        echo "  $s  ($(grep -m1 "^$s " "$tmp/where" | cut -d' ' -f2))"
    done <"$tmp/missing"
    echo "  -> a public declaration needs MXP_API in front of it (mixprec/api.h): the library"
    echo "     is built with -fvisibility=hidden, so a declaration without MXP_API (for example"
    echo "     one added on a branch merged since) is hidden. If it has MXP_API, the function"
    echo "     is declared but defined nowhere in src/: define it or remove the declaration."
fi
if [ -s "$tmp/extra" ]; then
    fail=1
    echo "FAIL: exported by $LIB but declared in no public header ($(wc -l <"$tmp/extra")):"
    sed 's/^/  /' "$tmp/extra"
    echo "  -> only include/mixprec/*.h is public: remove the visibility(\"default\") / MXP_API"
    echo "     from the internal definition (declare it in an internal header of src/), or"
    echo "     declare it in the public header of its module with MXP_API."
fi
echo "$n_decl declared, $n_exp exported"
[ $fail -eq 0 ] && echo "OK: the exports of $(basename "$LIB") are exactly the public declarations"
exit $fail
