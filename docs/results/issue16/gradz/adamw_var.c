#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <stdint.h>
static double tnow(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
#define VAR(NAME, DENOM, UPD) \
__attribute__((target("avx512f,avx512bf16,avx512vl"),noinline)) static void NAME(const float *g, float *m, float *v, float *w, size_t n) { \
    const __m512 vb1 = _mm512_set1_ps(0.9f), vb2 = _mm512_set1_ps(0.999f), vomb1 = _mm512_set1_ps(0.1f), vomb2 = _mm512_set1_ps(0.001f); \
    const __m512 veps = _mm512_set1_ps(1e-8f), vdecay = _mm512_set1_ps(1.0f), vstep = _mm512_set1_ps(1e-3f), vbc2 = _mm512_set1_ps(getenv("BC2") ? (float)atof(getenv("BC2")) : 0.7f); \
    for (size_t i = 0; i < n; i += 16) { \
        __m512 gi = _mm512_loadu_ps(g + i); \
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(vomb1, gi)); \
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_loadu_ps(v + i)), _mm512_mul_ps(_mm512_mul_ps(vomb2, gi), gi)); \
        _mm512_storeu_ps(m + i, mi); _mm512_storeu_ps(v + i, vi); \
        __m512 denom = DENOM; \
        __m512 wi = _mm512_loadu_ps(w + i); \
        wi = UPD; \
        _mm512_storeu_ps(w + i, wi); \
    } }
VAR(full, _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), vbc2), veps), _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom))))
VAR(nodiv1, _mm512_add_ps(_mm512_sqrt_ps(vi), veps), _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom))))
VAR(nosqrt, _mm512_add_ps(_mm512_div_ps(vi, vbc2), veps), _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom))))
VAR(nodiv2, _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), vbc2), veps), _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_mul_ps(mi, denom))))
VAR(sqrtonly, _mm512_add_ps(_mm512_sqrt_ps(vi), veps), _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_mul_ps(mi, denom))))
VAR(nodivsqrt, _mm512_add_ps(vi, veps), _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_mul_ps(mi, denom))))
VAR(ymmdiv, _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), vbc2), veps), _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom))))
__attribute__((target("avx512f,avx512bf16,avx512vl"),noinline)) static void masked(const float *g, float *m, float *v, float *w, size_t n) {
    const __m512 vb1 = _mm512_set1_ps(0.9f), vb2 = _mm512_set1_ps(0.999f), vomb1 = _mm512_set1_ps(0.1f), vomb2 = _mm512_set1_ps(0.001f);
    const __m512 veps = _mm512_set1_ps(1e-8f), vdecay = _mm512_set1_ps(1.0f), vstep = _mm512_set1_ps(1e-3f), vbc2 = _mm512_set1_ps(getenv("BC2") ? (float)atof(getenv("BC2")) : 0.7f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 gi = _mm512_maskz_loadu_ps(k, g + i);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_maskz_loadu_ps(k, m + i)), _mm512_mul_ps(vomb1, gi));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_maskz_loadu_ps(k, v + i)), _mm512_mul_ps(_mm512_mul_ps(vomb2, gi), gi));
        _mm512_mask_storeu_ps(m + i, k, mi); _mm512_mask_storeu_ps(v + i, k, vi);
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), vbc2), veps);
        __m512 wi = _mm512_maskz_loadu_ps(k, w + i);
        wi = _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom)));
        _mm512_mask_storeu_ps(w + i, k, wi);
    } }
__attribute__((target("avx512f,avx512bf16,avx512vl"),noinline)) static void maskednodiv(const float *g, float *m, float *v, float *w, size_t n) {
    const __m512 vb1 = _mm512_set1_ps(0.9f), vb2 = _mm512_set1_ps(0.999f), vomb1 = _mm512_set1_ps(0.1f), vomb2 = _mm512_set1_ps(0.001f);
    const __m512 veps = _mm512_set1_ps(1e-8f), vdecay = _mm512_set1_ps(1.0f), vstep = _mm512_set1_ps(1e-3f), vbc2 = _mm512_set1_ps(getenv("BC2") ? (float)atof(getenv("BC2")) : 0.7f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 gi = _mm512_maskz_loadu_ps(k, g + i);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_maskz_loadu_ps(k, m + i)), _mm512_mul_ps(vomb1, gi));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_maskz_loadu_ps(k, v + i)), _mm512_mul_ps(_mm512_mul_ps(vomb2, gi), gi));
        _mm512_mask_storeu_ps(m + i, k, mi); _mm512_mask_storeu_ps(v + i, k, vi);
        __m512 denom = _mm512_add_ps(_mm512_sqrt_ps(vi), veps);
        __m512 wi = _mm512_maskz_loadu_ps(k, w + i);
        wi = _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom)));
        _mm512_mask_storeu_ps(w + i, k, wi);
    } }
__attribute__((target("avx512f,avx512bf16,avx512vl"),noinline)) static void maskedload(const float *g, float *m, float *v, float *w, size_t n) {
    const __m512 vb1 = _mm512_set1_ps(0.9f), vb2 = _mm512_set1_ps(0.999f), vomb1 = _mm512_set1_ps(0.1f), vomb2 = _mm512_set1_ps(0.001f);
    const __m512 veps = _mm512_set1_ps(1e-8f), vdecay = _mm512_set1_ps(1.0f), vstep = _mm512_set1_ps(1e-3f), vbc2 = _mm512_set1_ps(getenv("BC2") ? (float)atof(getenv("BC2")) : 0.7f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 gi = _mm512_maskz_loadu_ps(k, g + i);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_maskz_loadu_ps(k, m + i)), _mm512_mul_ps(vomb1, gi));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_maskz_loadu_ps(k, v + i)), _mm512_mul_ps(_mm512_mul_ps(vomb2, gi), gi));
        _mm512_storeu_ps(m + i, mi); _mm512_storeu_ps(v + i, vi);
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), vbc2), veps);
        __m512 wi = _mm512_maskz_loadu_ps(k, w + i);
        wi = _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom)));
        _mm512_storeu_ps(w + i, wi);
    } }
typedef void (*fn)(const float *, float *, float *, float *, size_t);
int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoul(argv[1], 0, 10) : 596048;
    float *g = aligned_alloc(64, n * 4), *m = aligned_alloc(64, n * 4), *v = aligned_alloc(64, n * 4), *w = aligned_alloc(64, n * 4);
    for (size_t i = 0; i < n; i++) { g[i] = 1e-3f * (float)((i * 2654435761u) % 1000) / 1000.f; m[i] = 0; v[i] = 1e-6f; w[i] = 0.01f; }
    struct { const char *name; fn f; } vs[] = {{"full", full}, {"no sqrt/bc2", nodiv1}, {"no sqrt", nosqrt}, {"no m/denom", nodiv2}, {"sqrt only", sqrtonly}, {"no div no sqrt", nodivsqrt}, {"masked ld+st", masked}, {"masked ld only", maskedload}, {"masked no bc2 div", maskednodiv}};
    for (int k = 0; k < 9; k++) {
        double t[60];
        for (int r = 0; r < 60; r++) { double t0 = tnow(); vs[k].f(g, m, v, w, n); t[r] = tnow() - t0; }
        qsort(t, 60, 8, cmpd);
        printf("%-16s n=%zu best %.3f ms median %.3f ms\n", vs[k].name, n, t[0] * 1e3, t[30] * 1e3);
    }
}
