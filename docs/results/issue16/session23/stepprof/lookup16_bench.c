#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
__attribute__((noinline)) static void l0(uint16_t *ao, const uint16_t *T16, const uint16_t *src, size_t n){
  for (size_t i = 0; i < n; i++) ao[i] = T16[src[i]];
}
__attribute__((noinline)) static void l1(uint16_t *ao, const uint16_t *T16, const uint16_t *src, size_t n){
  size_t i=0;
  for (; i + 4 <= n; i += 4) {
    uint64_t s; memcpy(&s, src + i, 8);
    uint64_t o = (uint64_t)T16[s & 0xffff] | (uint64_t)T16[(s >> 16) & 0xffff] << 16 |
                 (uint64_t)T16[(s >> 32) & 0xffff] << 32 | (uint64_t)T16[s >> 48] << 48;
    memcpy(ao + i, &o, 8);
  }
  for (; i < n; i++) ao[i] = T16[src[i]];
}
__attribute__((noinline)) static void l2(uint16_t *ao, const uint16_t *T16, const uint16_t *src, size_t n){
  size_t i=0;
  for (; i + 2 <= n; i += 2) {
    uint32_t s; memcpy(&s, src + i, 4);
    uint32_t o = (uint32_t)T16[s & 0xffff] | (uint32_t)T16[s >> 16] << 16;
    memcpy(ao + i, &o, 4);
  }
  for (; i < n; i++) ao[i] = T16[src[i]];
}
/* gather with 32-bit loads at 2-byte offsets: T16 read as dwords at index*2 */
__attribute__((noinline)) static void l3(uint16_t *ao, const uint16_t *T16, const uint16_t *src, size_t n){
  size_t i=0;
  for (; i + 16 <= n; i += 16) {
    __m512i idx = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void*)(src+i)));
    __m512i g = _mm512_i32gather_epi32(idx, (const void*)T16, 2);
    _mm256_storeu_si256((void*)(ao+i), _mm512_cvtepi32_epi16(g));
  }
  for (; i < n; i++) ao[i] = T16[src[i]];
}
static double ms(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
static uint16_t bf(float f){uint32_t u; memcpy(&u,&f,4); return (uint16_t)((u+0x7fff+((u>>16)&1))>>16);}
int main(){
  size_t n=1024; uint16_t *T=malloc(65538*2); for(int i=0;i<65538;i++) T[i]=(uint16_t)(i*2654435761u>>7);
  uint16_t *src=malloc(n*2),*o[4]; for(int k=0;k<4;k++)o[k]=malloc(n*2);
  for(size_t i=0;i<n;i++){double u1=(rand()+1.0)/(RAND_MAX+2.0),u2=rand()/(double)RAND_MAX; src[i]=bf((float)(1.5*sqrt(-2*log(u1))*cos(6.2831853*u2)));}
  void (*f[4])(uint16_t*,const uint16_t*,const uint16_t*,size_t)={l0,l1,l2,l3};
  double best[4]={1e9,1e9,1e9,1e9};
  for(int r=0;r<2001;r++) for(int k=0;k<4;k++){double a=ms(); for(int j=0;j<20;j++) f[k](o[k],T,src,n); double b=ms()-a; if(b<best[k])best[k]=b;}
  for(int k=0;k<4;k++) printf("l%d %.3f ns/elem %s\n",k,best[k]*1e6/(20*n), memcmp(o[0],o[k],n*2)?"DIFF":"same");
}
