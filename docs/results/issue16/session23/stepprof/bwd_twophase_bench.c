#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
static inline __mmask16 lanes16(size_t r){return r>=16?(__mmask16)0xffff:(__mmask16)((1u<<r)-1u);}
static inline __m512 bw(const uint16_t *p, __mmask16 m){return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m,p)),16));}
__attribute__((noinline)) static __m512i g0(float *dx, const float *D, const uint16_t *dy, const uint16_t *s, size_t n){
  __m512i acc=_mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = lanes16(n - i);
    __m512 d = bw(dy+i,m);
    __m512i b = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s + i));
    __m512 g = _mm512_mul_ps(d, _mm512_i32gather_ps(b, D, 4));
    _mm512_mask_storeu_ps(dx + i, m, g);
    acc=_mm512_mask_max_epu32(acc,m,acc,_mm512_and_si512(_mm512_castps_si512(g),_mm512_set1_epi32(0x7fffffff)));
  }
  return acc;
}
__attribute__((noinline)) static __m512i g1(float *dx, const float *D, const uint16_t *dy, const uint16_t *s, size_t n){
  for (size_t i = 0; i < n; i++) dx[i] = D[s[i]];
  __m512i acc=_mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = lanes16(n - i);
    __m512 d = bw(dy+i,m);
    __m512 g = _mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, dx+i));
    _mm512_mask_storeu_ps(dx + i, m, g);
    acc=_mm512_mask_max_epu32(acc,m,acc,_mm512_and_si512(_mm512_castps_si512(g),_mm512_set1_epi32(0x7fffffff)));
  }
  return acc;
}
static double ms(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
static uint16_t bf(float f){uint32_t u; memcpy(&u,&f,4); return (uint16_t)((u+0x7fff+((u>>16)&1))>>16);}
int main(){
  size_t n=1024; float *D=malloc(65536*4); for(int i=0;i<65536;i++) D[i]=(float)(i%977)*0.001f;
  uint16_t *s=malloc(n*2),*dy=malloc(n*2); float *o[2]; for(int k=0;k<2;k++)o[k]=malloc(n*4);
  for(size_t i=0;i<n;i++){double u1=(rand()+1.0)/(RAND_MAX+2.0),u2=rand()/(double)RAND_MAX; s[i]=bf((float)(1.5*sqrt(-2*log(u1))*cos(6.2831853*u2))); dy[i]=bf((float)(rand()/(double)RAND_MAX-0.5)*1e-3f);}
  __m512i (*f[2])(float*,const float*,const uint16_t*,const uint16_t*,size_t)={g0,g1};
  double best[2]={1e9,1e9}; volatile int sink=0;
  for(int r=0;r<2001;r++) for(int k=0;k<2;k++){double a=ms(); for(int j=0;j<20;j++) sink+=_mm512_reduce_max_epu32(f[k](o[k],D,dy,s,n)); double b=ms()-a; if(b<best[k])best[k]=b;}
  for(int k=0;k<2;k++) printf("g%d %.3f ns/elem %s\n",k,best[k]*1e6/(20*n), memcmp(o[0],o[k],n*4)?"DIFF":"same");
}
