#define _POSIX_C_SOURCE 200809L
/* A/B of adamw_range: separate recast pass (HEAD~1) vs BF16 store in the loop (HEAD). */
#include "kernels/x86_avx512/loops_simd.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
enum { OPT_CHUNK = 1024 };
typedef struct { float *master; uint16_t *work; const float *g; float *m, *v; size_t n;
  float b1, b2, omb1, omb2, eps, decay, step_size, bc2_sqrt; } ctx;
static void cvt(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512i a = _mm512_loadu_si512(src + i), b = _mm512_loadu_si512(src + i + 16);
        if (f32_subnormal_lanes(a) | f32_subnormal_lanes(b)) {
            _mm512_mask_cvtepi32_storeu_epi16(dst + i, 0xffff, bf16_rne_bits(a));
            _mm512_mask_cvtepi32_storeu_epi16(dst + i + 16, 0xffff, bf16_rne_bits(b));
            continue;
        }
        const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(b), _mm512_castsi512_ps(a));
        _mm512_storeu_si512(dst + i, (__m512i)h);
    }
    for (; i < n; i += 16) { __mmask16 k = lanes16(n - i); bf16_store16(dst + i, _mm512_maskz_loadu_ps(k, src + i), k); }
}
#define BODY(FUSED) \
    const __m512 vb1 = _mm512_set1_ps(c->b1), vb2 = _mm512_set1_ps(c->b2); \
    const __m512 vomb1 = _mm512_set1_ps(c->omb1), vomb2 = _mm512_set1_ps(c->omb2); \
    const __m512 veps = _mm512_set1_ps(c->eps), vdecay = _mm512_set1_ps(c->decay); \
    const __m512 vstep = _mm512_set1_ps(c->step_size), vbc2 = _mm512_set1_ps(c->bc2_sqrt); \
    for (size_t off = 0; off < c->n; off += OPT_CHUNK) { \
        size_t len = c->n - off < OPT_CHUNK ? c->n - off : OPT_CHUNK; \
        float *wp = c->master + off; const float *gc = c->g + off; float *mc = c->m + off, *vc = c->v + off; \
        uint16_t *wbc = c->work + off; \
        for (size_t i = 0; i < len; i += 16) { \
            __mmask16 k = lanes16(len - i); \
            __m512 gi = _mm512_maskz_loadu_ps(k, gc + i); \
            __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_maskz_loadu_ps(k, mc + i)), _mm512_mul_ps(vomb1, gi)); \
            __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_maskz_loadu_ps(k, vc + i)), _mm512_mul_ps(_mm512_mul_ps(vomb2, gi), gi)); \
            _mm512_mask_storeu_ps(mc + i, k, mi); _mm512_mask_storeu_ps(vc + i, k, vi); \
            __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), vbc2), veps); \
            __m512 wi = _mm512_maskz_loadu_ps(k, wp + i); \
            wi = _mm512_sub_ps(_mm512_mul_ps(wi, vdecay), _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom))); \
            _mm512_mask_storeu_ps(wp + i, k, wi); \
            if (FUSED) bf16_store16(wbc + i, wi, k); \
        } \
        if (!(FUSED)) cvt(wbc, wp, len); \
    }
__attribute__((noinline)) static void a_sep(const ctx *c) { BODY(0) }
__attribute__((noinline)) static void a_fus(const ctx *c) { BODY(1) }
static double ms(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
static int cmpd(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return (x>y)-(x<y);}
int main(int argc, char **argv){
  size_t n = argc > 1 ? strtoull(argv[1],0,10) : 528384; int reps = 101;
  ctx c[2];
  for (int v=0; v<2; v++){ c[v].n=n; c[v].master=aligned_alloc(64,n*4); c[v].work=aligned_alloc(64,n*2); c[v].m=aligned_alloc(64,n*4); c[v].v=aligned_alloc(64,n*4);
    c[v].b1=0.9f;c[v].b2=0.999f;c[v].omb1=0.1f;c[v].omb2=0.001f;c[v].eps=1e-8f;c[v].decay=0.99999f;c[v].step_size=1e-3f;c[v].bc2_sqrt=0.3f; }
  float *g=aligned_alloc(64,n*4); c[0].g=c[1].g=g;
  srand(1); for(size_t i=0;i<n;i++){ g[i]=(rand()/(float)RAND_MAX-0.5f)*1e-2f; for(int v=0;v<2;v++){c[v].master[i]=(rand()/(float)RAND_MAX-0.5f)*0.1f; c[v].m[i]=0; c[v].v[i]=0;} }
  for(size_t i=0;i<n;i++){c[1].master[i]=c[0].master[i];}
  double t[2][101];
  for(int r=0;r<reps;r++){ for(int v=0; v<2; v++){ int w = (r&1)? 1-v : v; double a=ms(); if(w) a_fus(&c[1]); else a_sep(&c[0]); t[w][r]=ms()-a; } }
  for(int v=0;v<2;v++){ qsort(t[v],reps,sizeof(double),cmpd); printf("%s n=%zu best %.4f med %.4f ms\n", v?"fused   ":"separate", n, t[v][0], t[v][reps/2]); }
  printf("%s\n", memcmp(c[0].work,c[1].work,n*2)||memcmp(c[0].master,c[1].master,n*4) ? "DIFF" : "same bits");
}
