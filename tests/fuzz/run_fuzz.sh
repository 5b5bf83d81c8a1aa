#!/usr/bin/env bash
# tests/fuzz/run_fuzz.sh [SECONDS] [LIBDIR] [TARGET ...]: build each libFuzzer
# target with clang (-fsanitize=fuzzer,address,undefined; the module under
# test is compiled in and instrumented, the rest of mixprec comes from
# LIBDIR/libmixprec_internal.a, since the shared library exports only the
# public API, with the shared libraries libmixprec.so needs) and run it for
# SECONDS (60) on a copy of its
# committed seed corpus. Targets (default: both):
#   ckpt  the checkpoint loader and the predictor's reading of user-data
#         checkpoints (fuzz_ckpt.c, src/ckpt and src/models/predictor.c,
#         user_data.c, seeds corpus/)
#   data  the user-data readers, checks and providers, and workload_meta
#         (fuzz_data.c, src/data/dataset*.c and src/models/user_data.c,
#         seeds corpus_data/)
# A crash, sanitizer report, leak, a single allocation above 256 MB or an
# input running over 10 s fails the run; the input is kept in the printed
# artifact directory. Needs clang and libclang-rt-14-dev (Debian).
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")/../.."
libdir=$(realpath "${2:-build}")
shift $(($# > 2 ? 2 : $#))
targets=${*:-ckpt data}
[ -f "$libdir/libmixprec.so" ] && [ -f "$libdir/libmixprec_internal.a" ] ||
  { echo "run_fuzz: no $libdir/libmixprec.so and libmixprec_internal.a (build first)" >&2; exit 2; }
# what libmixprec.so links (its NEEDED entries) and where its RUNPATH finds them
deps=()
while read -r so; do deps+=("-l:$so"); done < <(readelf -d "$libdir/libmixprec.so" |
  sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
while read -r dir; do
  [ -d "$dir" ] && deps+=("-L$dir" "-Wl,-rpath,$dir")
done < <(readelf -d "$libdir/libmixprec.so" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p' | tr ':' '\n')
for t in $targets; do
  case $t in
    ckpt) srcs=(src/ckpt/*.c src/models/predictor.c src/models/user_data.c)
          seeds=tests/fuzz/corpus ;;
    data) srcs=(src/data/dataset*.c src/data/transitions.c src/models/user_data.c)
          seeds=tests/fuzz/corpus_data ;;
    *) echo "run_fuzz: unknown target '$t'; accepted: ckpt, data" >&2; exit 2 ;;
  esac
  out=$(mktemp -d /tmp/mixprec-fuzz.XXXXXX)
  clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -D_GNU_SOURCE -Iinclude -Isrc $(pkg-config --cflags hdf5) "tests/fuzz/fuzz_$t.c" \
    "${srcs[@]}" "$libdir/libmixprec_internal.a" "${deps[@]}" -lm -o "$out/fuzz_$t"
  mkdir -p "$out/corpus" "$out/artifacts"
  "$out/fuzz_$t" -max_total_time="$secs" -malloc_limit_mb=256 -rss_limit_mb=2048 \
    -max_len=65536 -timeout=10 -print_final_stats=1 -artifact_prefix="$out/artifacts/" \
    "$out/corpus" "$seeds" 2>"$out/log" || {
    tail -40 "$out/log" >&2
    echo "run_fuzz: $t FAILED; reproducer(s) in $out/artifacts" >&2
    exit 1
  }
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|Done [0-9]+ runs" "$out/log" || true
  rm -rf "$out"
  echo "run_fuzz: $t ${secs}s without findings"
done
