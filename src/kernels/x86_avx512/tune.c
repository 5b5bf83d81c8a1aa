/* kernels/x86_avx512/tune.c: the AVX-512 GEMM's per-CPU choices, from
 * cpuid (contract in gemm_internal.h, mxp_avx512_tune). */
#include "kernels/x86_avx512/gemm_internal.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

static mxp_avx512_tune tune;
static pthread_once_t tune_once = PTHREAD_ONCE_INIT;

/* Size in bytes of the data or unified cache of `level` from cpuid leaf
 * `leaf` (4 on Intel, 0x8000001D on AMD: the same layout), 0 if unknown. */
static size_t cache_bytes(unsigned leaf, int level) {
    for (unsigned i = 0; i < 16; i++) {
        unsigned a, b, c, d;
        __cpuid_count(leaf, i, a, b, c, d);
        unsigned type = a & 0x1F;
        if (type == 0) break;
        if ((int)((a >> 5) & 7) != level || type == 2) continue; /* 2: instruction */
        size_t ways = ((b >> 22) & 0x3FF) + 1, parts = ((b >> 12) & 0x3FF) + 1;
        size_t line = (b & 0xFFF) + 1, sets = (size_t)c + 1;
        return ways * parts * line * sets;
    }
    return 0;
}

static void detect(void) {
    unsigned a, b, c, d;
    char vendor[13] = {0};
    __cpuid(0, a, b, c, d);
    unsigned max_leaf = a;
    memcpy(vendor, &b, 4);
    memcpy(vendor + 4, &d, 4);
    memcpy(vendor + 8, &c, 4);
    bool intel = strcmp(vendor, "GenuineIntel") == 0;
    unsigned ext_max = __get_cpuid_max(0x80000000u, NULL);
    unsigned leaf = intel ? 4u : 0x8000001Du;
    bool have_leaf = intel ? max_leaf >= 4 : ext_max >= 0x8000001Du;
    tune.l2_bytes = have_leaf ? cache_bytes(leaf, 2) : 0;
    tune.nc = MXP_GEMM_NC;
    if (intel) {
        /* Measured on family 6 model 207 (Xeon, AVX512-FP16, 48 KiB L1d,
         * 2 MiB L2; docs/kernels.md "The second machine: Intel Xeon"):
         *  - vdpbf16ps runs at half the FP32 FMA rate (81 against 165
         *    GFLOP/s in register loops): BF16 pairs are widened instead;
         *  - FP32 operands with rows 2-4 KiB apart (ld 512, 1024) read in
         *    place lost 1.1-2x against packing (1024^3 NN, 4096x1024x1024
         *    NN, 256x512x2048 NN): in place up to ld 256 only;
         *  - a packed op(B) block of KC x NC FP32 sized to half of L2 (NC
         *    512 here, not 1024) read 1.09-1.18x faster on the 2048-wide
         *    training GEMMs;
         *  - an FP32 op(B) = B with ld 512 read in place when C has at most
         *    256 rows ran 1.03-1.25x as fast as packed in the one-thread GEMM
         *    harness under load (docs/results/issue31/gemm-tune-2026-11-28.txt),
         *    but the 512x3 batch-256 fp32 training step (2 threads, quiet)
         *    took 6.23 ms with it against 5.94 ms without (medians of 7,
         *    alternating): off (in_place_b_max_ld = in_place_max_ld);
         *  - an edge of 1-2 columns of C past the last full 32-column
         *    micro-panel (N = 65) takes the column kernel (4 tiles' rows on
         *    the lanes, nr FMAs per k step instead of 14): 512x65x2048 NT
         *    1.08-1.16x. */
        tune.dpbf16_fast = false;
        tune.in_place_max_ld = 256;
        tune.in_place_b_max_ld = 256; /* 512 measured slower in the step, above */
        tune.in_place_b_max_m = 256;
        tune.cols_max_nr = MXP_GEMM_COLS_MAX;
        if (tune.l2_bytes) {
            size_t nc = tune.l2_bytes / 2 / ((size_t)MXP_GEMM_KC * sizeof(float));
            nc = nc / MXP_GEMM_NR * MXP_GEMM_NR;
            if (nc >= MXP_GEMM_NR && nc < tune.nc) tune.nc = nc;
        }
    } else {
        /* AMD Zen 4 and others: the constants measured on Zen 4 (gemm.c,
         * gemm_internal.h; docs/results/kernels-passes.md) */
        tune.dpbf16_fast = true;
        tune.in_place_max_ld = 1024;
        tune.in_place_b_max_ld = 1024;
        tune.in_place_b_max_m = SIZE_MAX;
        tune.cols_max_nr = 0;
    }
}

const mxp_avx512_tune *mxp_avx512_tune_get(void) {
    pthread_once(&tune_once, detect);
    return &tune;
}
