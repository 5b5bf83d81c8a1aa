#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static inline __mmask16 lanes16(size_t r){return r>=16?(__mmask16)0xffff:(__mmask16)((1u<<r)-1u);}
static inline __m512i bf16_rne_bits(__m512i u) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_blend_epi32(nan, r, qnan);
}
__attribute__((noinline)) static void old_cvt(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512i u = _mm512_maskz_loadu_epi32(k, src + i);
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, k, bf16_rne_bits(u));
    }
}
/* lanes holding an FP32 subnormal */
static inline __mmask16 sub16(__m512i u){
  __mmask16 z = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_test_epi32_mask(z, u, _mm512_set1_epi32(0x007fffff));
}
__attribute__((noinline)) static void new_cvt(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i a = _mm512_loadu_si512(src + i), b = _mm512_loadu_si512(src + i + 16);
        if (sub16(a) | sub16(b)) {
            _mm512_mask_cvtepi32_storeu_epi16(dst + i, 0xffff, bf16_rne_bits(a));
            _mm512_mask_cvtepi32_storeu_epi16(dst + i + 16, 0xffff, bf16_rne_bits(b));
            continue;
        }
        __m512bh h = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(b), _mm512_castsi512_ps(a));
        _mm512_storeu_si512(dst + i, (__m512i)h);
    }
    for (; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512i u = _mm512_maskz_loadu_epi32(k, src + i);
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, k, bf16_rne_bits(u));
    }
}
static double ms(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
int main(int argc,char**argv){
  size_t n = argc>1?strtoull(argv[1],0,10):131072;
  /* exhaustive check */
  if (argc>2){
    size_t C=1<<20; uint32_t *in=malloc(C*4); uint16_t *o1=malloc(C*2),*o2=malloc(C*2); size_t bad=0;
    for (uint64_t base=0; base < (1ull<<32); base += C){
      for(size_t j=0;j<C;j++) in[j]=(uint32_t)(base+j);
      old_cvt(o1,(float*)in,C); new_cvt(o2,(float*)in,C);
      if(memcmp(o1,o2,C*2)) for(size_t j=0;j<C;j++) if(o1[j]!=o2[j]&&bad++<5) printf("0x%08x: %04x %04x\n",in[j],o1[j],o2[j]);
    }
    printf("exhaustive mismatches %zu\n",bad);
  }
  float *x=aligned_alloc(64,n*4); uint16_t *y=aligned_alloc(64,n*2);
  for(size_t i=0;i<n;i++) x[i]=(float)((rand()/(double)RAND_MAX)*2-1);
  double t0[301],t1[301];
  for(int r=0;r<301;r++){double a=ms();old_cvt(y,x,n);double b=ms();new_cvt(y,x,n);double c=ms();t0[r]=b-a;t1[r]=c-b;}
  double m0=1e9,m1=1e9; for(int r=0;r<301;r++){if(t0[r]<m0)m0=t0[r];if(t1[r]<m1)m1=t1[r];}
  printf("n=%zu old %.4f ms new %.4f ms\n",n,m0,m1);
}
