#!/bin/bash
# scripts/gpu-kit.sh: build the device kit on this machine (nvcc needed, no
# GPU) for scripts/gpu-check.sh to run on the lent GPU machine, which has no
# network and no Debian build packages (docs/gpu.md, issue 28 part 1).
#
#   1. a Release tree with MIXPREC_CUDA=ON, MPI and MuJoCo off, in $BUILD:
#      the library, the CLI, the GPU tests (tests/test_cuda_*.c) and the GPU
#      benchmarks (bench/bench_cuda*.c);
#   2. one folder $KIT (ignored by git): bin/ (those executables), lib/
#      (libmixprec and the ldd closure of every binary, libcudart included,
#      minus what the device machine has: glibc's libraries, libstdc++,
#      libgcc_s, libcuda), manifest.tsv (what gpu-check.sh runs) and
#      kit-info.txt (commit, toolchain, files with sizes and sha256).
#      cuBLASLt is not carried (~540 MB): the library dlopen()s it and
#      gpu-check.sh finds it on the device.
#
# usage: scripts/gpu-kit.sh            (from anywhere; works in the repo root)
#   BUILD=dir  build tree (default build-kit)   KIT=dir  kit (default gpu-kit)
#   JOBS=n     parallel build jobs (default nproc)
# Exit: 0 kit written (its size printed); 1 build or packing failed (the
# previous kit, if any, is left as it was).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-kit}
KIT=${KIT:-gpu-kit}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
LIMIT_MIB=40
t0=$(date +%s)
die() { echo "gpu-kit: $*" >&2; exit 1; }

NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || die "no nvcc (looked at CUDACXX, PATH, /usr/local/cuda/bin/nvcc): the kit needs the CUDA toolkit"

# Libraries the device machine brings itself: glibc's own (they must match
# its ld.so), the C++ / gcc runtimes, and the driver's libcuda.
SYSTEM_LIBS='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so)'

mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMIXPREC_WERROR=ON -DMIXPREC_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DMIXPREC_WITH_MPI=OFF -DMIXPREC_WITH_MUJOCO=OFF \
    >"$BUILD/kit-configure.log" 2>&1 ||
    { tail -20 "$BUILD/kit-configure.log" >&2; die "configure failed (log: $BUILD/kit-configure.log)"; }
TESTS=$(cd tests && ls test_cuda_*.c 2>/dev/null | sed 's/\.c$//' | tr '\n' ' ')
BENCHES=$(cd bench && ls bench_cuda*.c 2>/dev/null | sed 's/\.c$//' | tr '\n' ' ')
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"$JOBS" --target mixprec mixprec_cli $TESTS $BENCHES >/dev/null ||
    die "build failed (rerun: cmake --build $BUILD --target mixprec_cli $TESTS $BENCHES)"

stage="$KIT.tmp"
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
cp "$BUILD/mixprec" "$stage/bin/"
for t in $TESTS $BENCHES; do cp "$BUILD/$t" "$stage/bin/"; done
LIBMXP=$(readlink -f "$BUILD/libmixprec.so")
SONAME=$(readelf -d "$LIBMXP" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$SONAME" ] || die "no SONAME in $LIBMXP"
cp "$LIBMXP" "$stage/lib/$SONAME"

# The closure: ldd lists every transitive dependency; copy each one that
# the device machine does not bring, under the name the loader asks for.
for f in "$stage"/bin/* "$stage/lib/$SONAME"; do
    ldd "$f" | awk '$2 == "=>" {print $1, $3}' | while read -r name path; do
        grep -Eq "$SYSTEM_LIBS" <<<"$name" && continue
        [ "$name" = "$SONAME" ] && continue
        [ -f "$path" ] || die "$f: $name not found on this machine (ldd: $path)"
        [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
    done
done
[ -e "$stage/lib/libcudart.so.13" ] || ls "$stage"/lib/libcudart.so.* >/dev/null 2>&1 ||
    die "libcudart is not in the closure of $SONAME (is the CUDA runtime linked shared?)"
if grep -q 'NEEDED.*libcublasLt' <<<"$(readelf -d "$LIBMXP")"; then
    die "$SONAME links libcublasLt: it must be dlopen()ed (src/backend/cuda/device.cu)"
fi
# The cuBLASLt the library will dlopen (its soname is compiled in).
LT_SONAME=$(grep -aoE 'libcublasLt\.so\.[0-9]+' "$LIBMXP" | awk 'NR == 1')
[ -n "$LT_SONAME" ] || die "no libcublasLt soname in $SONAME"

# manifest.tsv: kind, name, path in the kit, arguments (@KIT@ = the kit's
# absolute path on the device). gpu-check.sh runs one step per test and
# bench line; a GPU test that needs data copies it into the kit here and
# takes its path as an argument.
{
    echo "# kind	name	path	args"
    echo "cli	mixprec	bin/mixprec	"
    for t in $TESTS; do echo "test	$t	bin/$t	"; done
    for b in $BENCHES; do echo "bench	$b	bin/$b	"; done
} >"$stage/manifest.tsv"

{
    echo "kit built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)')"
    echo "glibc $(ldd --version | head -1 | awk '{print $NF}'); $(gcc --version | head -1)"
    echo "nvcc $("$NVCC" --version | tail -1)"
    echo "cublaslt_soname $LT_SONAME"
    echo "cmake -DCMAKE_BUILD_TYPE=Release -DMIXPREC_WERROR=ON -DMIXPREC_CUDA=ON -DMIXPREC_WITH_MPI=OFF -DMIXPREC_WITH_MUJOCO=OFF"
    echo "files (bytes, sha256):"
    (cd "$stage" && find bin lib -type f | sort | while read -r f; do
        printf '  %-40s %10d %s\n' "$f" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -c1-16)"
    done)
} >"$stage/kit-info.txt"

kib=$(du -sk "$stage" | cut -f1)
[ "$kib" -lt $((LIMIT_MIB * 1024)) ] || die "kit is $((kib / 1024)) MiB, over the ${LIMIT_MIB} MiB limit (see $stage)"
rm -rf "$KIT"
mv "$stage" "$KIT"
gz=$(tar -C "$KIT" -cf - . | gzip -6 | wc -c)
echo "gpu-kit: $KIT: $(ls "$KIT/bin" | wc -l) programs, $(ls "$KIT/lib" | wc -l) libraries," \
    "$(awk -v k="$kib" -v g="$gz" 'BEGIN { printf "%.1f MiB (%.1f MiB gzip)", k / 1024, g / 1048576 }');" \
    "cuBLASLt ($LT_SONAME) found on the device;" \
    "$(($(date +%s) - t0)) s"
