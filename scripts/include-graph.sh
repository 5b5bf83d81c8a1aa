#!/bin/bash
# scripts/include-graph.sh [--check] [REPO]: the include graph of src/ by
# module, and (--check) whether it keeps the module order of docs/design.md
# ("Modules": a module includes only modules below it in ORDER).
#
# An edge "from -> to" is a direct #include in a file of src/<from>/ (or of
# the public header of module <from>) of an internal header of src/<to>/
# ("to/....h") or of the public header that module <to> implements
# (<mixprec/run.h> is module run's). src/backend/numerics is its own module
# (header-only numerics shared by the CPU kernels and the CUDA backend).
# Printed per edge: the number of #include lines and the files holding them.
# --check exits 1 on an edge that goes up the order (not in ALLOWED), on a
# file of src/ including the umbrella <mixprec/mixprec.h>, and on a src/
# folder that is not in ORDER; the message names the file and the rule.
# Uses only bash, grep, sed, awk and sort.
set -eu
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

# lowest first; docs/design.md "Modules" explains each
ORDER="numerics base num kernels backend dist amp nn train data config ckpt guard run obs models"
# Upward edges that the design accepts, as FROM->TO@FILE (docs/design.md
# "Modules", known exceptions).
ALLOWED="config->guard@include/mixprec/config.h"

# the module of a public header
header_module() {
    case "$1" in
    api | base) echo base ;;
    model) echo nn ;;
    dataset) echo data ;;
    device) echo backend ;;
    predict | world_model | classifier | gpt) echo models ;;
    mixprec) echo UMBRELLA ;;
    *) echo "$1" ;;
    esac
}

edges=$(
    {
        find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) |
            sort | while read -r f; do
            case "$f" in
            src/backend/numerics/*) from=numerics ;;
            *) from=$(echo "$f" | cut -d/ -f2) ;;
            esac
            echo "FILE $from $f"
        done
        for f in include/mixprec/*.h; do # the umbrella mixprec.h is nobody's module
            [ "$(basename "$f")" = mixprec.h ] || echo "FILE $(header_module "$(basename "$f" .h)") $f"
        done
    } | while read -r _ from f; do
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*\(["<]\)\([^">]*\)[">].*/\1 \2/p' "$f" |
            while read -r kind path; do
                to=""
                if [ "$kind" = '"' ]; then
                    case "$path" in
                    backend/numerics/*) to=numerics ;;
                    */*) to=${path%%/*} ;;
                    esac
                else
                    case "$path" in
                    mixprec/*.h) to=$(header_module "$(basename "$path" .h)") ;;
                    esac
                fi
                [ -n "$to" ] && [ "$to" != "$from" ] && echo "$from $to $f"
            done
    done | sort -u
)

echo "# include graph of src/ by module (scripts/include-graph.sh; order: $ORDER)"
echo "$edges" | awk -v order="$ORDER" '
    BEGIN { n = split(order, o, " "); for (i = 1; i <= n; i++) rank[o[i]] = i }
    NF == 3 { key = $1 " -> " $2; cnt[key]++; files[key] = files[key] (files[key] ? ", " : "") $3
              r[key] = (rank[$1] ? rank[$1] : 99) * 100 + (rank[$2] ? rank[$2] : 99) }
    END { for (k in cnt) printf "%04d\t%-22s %2d  %s\n", r[k], k, cnt[k], files[k] }' |
    sort -n | cut -f2-

[ $check -eq 1 ] || exit 0
fail=0
for d in src/*/; do
    m=$(basename "$d")
    case " $ORDER " in *" $m "*) ;; *)
        echo "FAIL: src/$m is not a module of ORDER in scripts/include-graph.sh; place it in" \
             "the order and describe it in docs/design.md \"Modules\""
        fail=1 ;;
    esac
done
while read -r from to f; do
    [ -n "$from" ] || continue
    if [ "$to" = UMBRELLA ]; then
        echo "FAIL: $f includes <mixprec/mixprec.h>; inside the library include the headers" \
             "of the modules it uses"
        fail=1
        continue
    fi
    rf=$(echo " $ORDER " | awk -v m="$from" '{for (i = 1; i <= NF; i++) if ($i == m) print i}')
    rt=$(echo " $ORDER " | awk -v m="$to" '{for (i = 1; i <= NF; i++) if ($i == m) print i}')
    [ -n "$rf" ] && [ -n "$rt" ] || continue # unknown folders reported above
    if [ "$rt" -gt "$rf" ]; then
        case " $ALLOWED " in *" $from->$to@$f "*) continue ;; esac
        echo "FAIL: $f ($from) includes $to, which is above $from in the module order" \
             "($ORDER; docs/design.md \"Modules\")"
        fail=1
    fi
done <<<"$edges"
[ $fail -eq 0 ] && echo "OK: every include keeps the module order"
exit $fail
