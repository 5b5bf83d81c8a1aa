/* base/cpu.c: CPU feature detection from cpuid and XGETBV (OS-enabled
 * register state), computed once. */
#include <mixprec/base.h>

#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static mxp_cpu_features features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = c & (1u << 27);
    features.fma = c & (1u << 12);
    features.f16c = c & (1u << 29);
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm_os = (xcr0 & 0x6) == 0x6;
    bool zmm_os = (xcr0 & 0xe6) == 0xe6;
    bool amx_os = (xcr0 & (3u << 17)) == (3u << 17);
    if (!ymm_os) {
        features.fma = features.f16c = false;
        return;
    }
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    features.avx2 = b & (1u << 5);
    if (zmm_os) {
        features.avx512f = b & (1u << 16);
        features.avx512bw = b & (1u << 30);
        features.avx512vl = b & (1u << 31);
        features.avx512_fp16 = d & (1u << 23);
    }
    features.amx_bf16 = amx_os && (d & (1u << 22));
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    (void)b1; (void)c1; (void)d1;
    if (zmm_os) features.avx512_bf16 = a1 & (1u << 5);
#endif
}

const mxp_cpu_features *mxp_cpu_features_get(void) {
    pthread_once(&features_once, detect);
    return &features;
}
