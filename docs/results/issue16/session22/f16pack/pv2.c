#include "gemm_pack.c"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline __attribute__((always_inline)) __m512 widen16(mxp_dtype t, __m256i h) {
    if (t == MXP_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* 16 rows (vr of them with data) x 32 k of a 16-bit X (k contiguous) at
 * x(row0, k): transposed as 16-bit words (3 in-lane unpack stages and one
 * vpermt2q stage), then widened column by column: column c (16 rows) to
 * pd + c*w with mask smask. */
static inline __attribute__((always_inline)) void
kc16_block32(mxp_dtype t, const uint16_t *p, size_t ld, size_t vr, int w, __mmask16 smask, float *pd) {
    __m512i r[16], a[16], b[16], c[16];
    for (size_t i = 0; i < 16; i++) {
        if (i >= vr) { r[i] = _mm512_setzero_si512(); continue; }
        _mm_prefetch((const char *)(p + i * ld) + PREFETCH_BYTES, _MM_HINT_T0);
        r[i] = _mm512_loadu_si512(p + i * ld);
    }
    for (int q = 0; q < 8; q++) {
        a[2 * q] = _mm512_unpacklo_epi16(r[2 * q], r[2 * q + 1]);
        a[2 * q + 1] = _mm512_unpackhi_epi16(r[2 * q], r[2 * q + 1]);
    }
    for (int g = 0; g < 4; g++)
        for (int h = 0; h < 2; h++) {
            b[4 * g + 2 * h] = _mm512_unpacklo_epi32(a[4 * g + h], a[4 * g + 2 + h]);
            b[4 * g + 2 * h + 1] = _mm512_unpackhi_epi32(a[4 * g + h], a[4 * g + 2 + h]);
        }
    for (int o = 0; o < 2; o++)
        for (int m = 0; m < 4; m++) {
            c[8 * o + 2 * m] = _mm512_unpacklo_epi64(b[8 * o + m], b[8 * o + 4 + m]);
            c[8 * o + 2 * m + 1] = _mm512_unpackhi_epi64(b[8 * o + m], b[8 * o + 4 + m]);
        }
    const __m512i i0 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i i1 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (int q = 0; q < 8; q++) {
        __m512i z0 = _mm512_permutex2var_epi64(c[q], i0, c[8 + q]);
        __m512i z1 = _mm512_permutex2var_epi64(c[q], i1, c[8 + q]);
        _mm512_mask_storeu_ps(pd + (size_t)q * w, smask, widen16(t, _mm512_castsi512_si256(z0)));
        _mm512_mask_storeu_ps(pd + (size_t)(8 + q) * w, smask, widen16(t, _mm512_extracti64x4_epi64(z0, 1)));
        _mm512_mask_storeu_ps(pd + (size_t)(16 + q) * w, smask, widen16(t, _mm512_castsi512_si256(z1)));
        _mm512_mask_storeu_ps(pd + (size_t)(24 + q) * w, smask, widen16(t, _mm512_extracti64x4_epi64(z1, 1)));
    }
}
static inline __attribute__((always_inline)) void
kc14_a(mxp_dtype t, const mxp_gemm_src *x, size_t r0, size_t rows, size_t k0, size_t kc, int w, float *dst) {
    size_t ld = x->ld;
    for (size_t p0 = 0; p0 < rows; p0 += (size_t)w) {
        size_t prow = min_sz((size_t)w, rows - p0);
        float *pd = dst + p0 * kc;
        for (int s = 0; s < w; s += 16) {
            __mmask16 smask = lanes16((size_t)(w - s));
            size_t vr = slice_rows(prow, s);
            const size_t row0 = r0 + p0 + (size_t)s;
            size_t kk = 0;
            for (; kk + 32 <= kc; kk += 32)
                kc16_block32(t, (const uint16_t *)x->base + row0 * ld + k0 + kk, ld, vr, w, smask, pd + kk * (size_t)w + s);
            for (; kk < kc; kk += 16) {
                size_t kn = min_sz(16, kc - kk);
                __m512 v[16];
                for (size_t r = 0; r < 16; r++) {
                    if (r >= vr) { v[r] = _mm512_setzero_ps(); continue; }
                    size_t at = (row0 + r) * ld + k0 + kk;
                    prefetch_elem(t, x->base, at);
                    v[r] = load16_f32(t, x->base, at, lanes16(kn));
                }
                mxp_avx512_transpose16(v);
                for (size_t c = 0; c < kn; c++)
                    _mm512_mask_storeu_ps(pd + (kk + c) * (size_t)w + s, smask, v[c]);
            }
        }
    }
}
static int gw=14;
__attribute__((noinline)) void xold(const mxp_gemm_src *x, size_t rows, size_t kc, float *d);
__attribute__((noinline)) void xnew(const mxp_gemm_src *x, size_t rows, size_t kc, float *d){switch(x->type){case MXP_DTYPE_F16: kc14_a(MXP_DTYPE_F16,x,0,rows,0,kc,gw,d);break;case MXP_DTYPE_BF16: kc14_a(MXP_DTYPE_BF16,x,0,rows,0,kc,gw,d);break;default: xold(x,rows,kc,d);}}
__attribute__((noinline)) void xold(const mxp_gemm_src *x, size_t rows, size_t kc, float *d){mxp_avx512_pack_f32(x,0,rows,0,kc,gw,d);}
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static int cmpd(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return x<y?-1:x>y;}
int main(void){
  uint16_t *src=aligned_alloc(64,(size_t)4096*4096*2);
  for(size_t i=0;i<(size_t)4096*4096;i++) src[i]=(uint16_t)(0x3c00 ^ (i*2654435761u>>18 & 0x3fff));
  float *d0=aligned_alloc(64,(size_t)1024*1024*4+4096),*d1=aligned_alloc(64,(size_t)1024*1024*4+4096);
  int bad=0;
  for(int ty=0;ty<3;ty++) for(size_t rows=1;rows<=60;rows+=(rows<30?1:7)) for(size_t kc=1;kc<=100;kc+=(kc<40?1:5)){
    mxp_gemm_src x={(mxp_dtype)ty,src,kc+3,true};
    for(gw=14;gw<=32;gw+=18){size_t np=(rows+gw-1)/gw; memset(d0,0x55,np*gw*kc*4+256); memset(d1,0x55,np*gw*kc*4+256);
    xold(&x,rows,kc,d0); xnew(&x,rows,kc,d1);
    if(memcmp(d0,d1,np*gw*kc*4+256)){ if(bad++<5) printf("DIFF ty%d rows %zu kc %zu w %d\n",ty,rows,kc,gw);}}
  }
  printf("correctness: %d bad\n",bad);
  struct {size_t rows,kc,ld;int w;} cs[]={{128,256,256,14},{336,512,512,14},{128,512,2048,14},{336,512,2048,14},{1024,512,2048,32},{512,512,512,32},{65,512,2048,32},{2048,512,2048,32}};
  for(int c=0;c<8;c++){ gw=cs[c].w; mxp_gemm_src x={MXP_DTYPE_F16,src,cs[c].ld,true}; double t[2][15];
    for(int r=0;r<15;r++){ for(int v=0;v<2;v++){ double t0=now(); for(int i=0;i<50;i++) (v?xnew:xold)(&x,cs[c].rows,cs[c].kc,v?d1:d0); t[v][r]=(now()-t0)/50;}}
    qsort(t[0],15,8,cmpd);qsort(t[1],15,8,cmpd);
    printf("w %d rows %zu kc %zu ld %zu: old %.2f us new %.2f us new/old %.3f\n",gw,cs[c].rows,cs[c].kc,cs[c].ld,t[0][7]*1e6,t[1][7]*1e6,t[1][7]/t[0][7]);}
}
