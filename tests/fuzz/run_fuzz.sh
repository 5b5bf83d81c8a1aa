#!/usr/bin/env bash
# tests/fuzz/run_fuzz.sh [SECONDS] [LIBDIR]: build the checkpoint-loader
# fuzz target with clang (-fsanitize=fuzzer,address,undefined; the
# checkpoint module is compiled in and instrumented, the rest of mixprec
# comes from LIBDIR/libmixprec.so) and run it for SECONDS (60) on a copy
# of the committed seed corpus. A crash, sanitizer report, leak, or a
# single allocation above 256 MB fails the run; the input is kept in the
# printed artifact directory. Needs clang and libclang-rt-14-dev (Debian).
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")/../.."
libdir=$(realpath "${2:-build}")
[ -f "$libdir/libmixprec.so" ] || { echo "run_fuzz: no $libdir/libmixprec.so (build first)" >&2; exit 2; }
out=$(mktemp -d /tmp/mixprec-fuzz.XXXXXX)
clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -D_GNU_SOURCE -Iinclude -Isrc tests/fuzz/fuzz_ckpt.c src/ckpt/*.c \
  -L"$libdir" -lmixprec -ljansson -lm -Wl,-rpath,"$libdir" -o "$out/fuzz_ckpt"
mkdir -p "$out/corpus" "$out/artifacts"
"$out/fuzz_ckpt" -max_total_time="$secs" -malloc_limit_mb=256 -rss_limit_mb=2048 \
  -max_len=65536 -timeout=10 -print_final_stats=1 -artifact_prefix="$out/artifacts/" \
  "$out/corpus" tests/fuzz/corpus 2>"$out/log" || {
  tail -40 "$out/log" >&2
  echo "run_fuzz: FAILED; reproducer(s) in $out/artifacts" >&2
  exit 1
}
grep -E "^stat::(number_of_executed_units|peak_rss_mb)|Done [0-9]+ runs" "$out/log" || true
rm -rf "$out"
echo "run_fuzz: ${secs}s without findings"
