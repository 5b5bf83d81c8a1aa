// throwaway (f16wide, session 23): the widening floor and the packers, thread CPU time, one thread.
// gcc -O2 -mavx512f -mavx512bw -mavx512vl -mf16c widenbench.c -ldl -o widenbench
// widenbench OURS.so REPS
#define _GNU_SOURCE
#include <dlfcn.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef struct { int type; const void *base; size_t ld; bool k_contig; } src_t;
typedef void (*pack_fn)(const src_t *, size_t, size_t, size_t, size_t, int, float *);
typedef void (*widen_fn)(const src_t *, size_t, size_t, size_t, size_t, float *, size_t);
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
/* the floor: rows x n FP16 (ld apart) -> FP32 rows (ldd apart), 4 x (32 B load, vcvtph2ps, 64 B store) */
__attribute__((noinline)) static void floor_widen(const uint16_t *s, size_t ld, size_t rows, size_t n, float *d, size_t ldd){
  for(size_t r=0;r<rows;r++){const uint16_t*p=s+r*ld;float*q=d+r*ldd;
    for(size_t e=0;e<n;e+=64){
      __m512 a=_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(p+e)));
      __m512 b=_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(p+e+16)));
      __m512 c=_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(p+e+32)));
      __m512 f=_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(p+e+48)));
      _mm512_storeu_ps(q+e,a);_mm512_storeu_ps(q+e+16,b);_mm512_storeu_ps(q+e+32,c);_mm512_storeu_ps(q+e+48,f);}}
}
int main(int argc,char**argv){
  void *l=dlopen(argv[1],RTLD_NOW|RTLD_LOCAL); if(!l){fprintf(stderr,"%s\n",dlerror());return 1;}
  pack_fn pk=(pack_fn)dlsym(l,"mxp_avx512_pack_f32"); widen_fn wd=(widen_fn)dlsym(l,"mxp_avx512_widen_f32");
  ((void(*)(void))dlsym(l,"mxp_avx512_gemm_tables_init"))();
  int reps=atoi(argv[2]); const int F16=3; /* patched below */
  (void)F16;
  int type=atoi(argv[3]);
  struct {const char*n;bool kc_;size_t rows,kc,ld;} cs[]={
    {"A 128x256 ld256 (NN dX h256 b128)",1,128,256,256},
    {"A 336x256 ld256",1,336,256,256},
    {"A 128x512 ld512",1,128,512,512},
    {"A 336x512 ld512",1,336,512,512},
    {"A 32x256 ld256",1,32,256,256},
    {"B 256x256 ld256 (k-major, NN op(B))",0,256,256,256},
    {"A^T 336x256 ld512 (k-major, TN dW)",0,336,256,512},
    {"A^T 336x512 ld2048 (k-major, TN dW)",0,336,512,2048},
    {"A^T 336x256 ld2048 (k-major, TN dW)",0,336,256,2048},
    {"A^T 65x256 ld65 (k-major, TN dW)",0,65,256,65},
    {"B 512x512 ld512 (k-major)",0,512,512,512},
  };
  size_t nbytes=(size_t)4096*1024*2; uint16_t *src=aligned_alloc(64,nbytes);
  for(size_t i=0;i<nbytes/2;i++) src[i]=(uint16_t)(0x3c00 ^ (i*2654435761u>>20 & 0x3ff));
  float *d=aligned_alloc(64,(size_t)1024*1024*4+256);
  for(size_t c=0;c<sizeof cs/sizeof cs[0];c++){
    src_t x={type,src,cs[c].ld,cs[c].kc_}; size_t el=cs[c].rows*cs[c].kc; int w=(cs[c].kc_||cs[c].n[1]=='^')?14:32;
    double t[3][64]; int inner=(int)(4e6/el)+1;
    size_t lines=cs[c].kc_?cs[c].rows:cs[c].kc, n=cs[c].kc_?cs[c].kc:cs[c].rows;
    for(int r=0;r<reps;r++){
      double t0;
      pk(&x,0,cs[c].rows,0,cs[c].kc,w,d); t0=now(); for(int i=0;i<inner;i++) pk(&x,0,cs[c].rows,0,cs[c].kc,w,d); t[0][r]=(now()-t0)/inner;
      if(wd){wd(&x,0,cs[c].rows,0,cs[c].kc,d,n); t0=now(); for(int i=0;i<inner;i++) wd(&x,0,cs[c].rows,0,cs[c].kc,d,n); t[1][r]=(now()-t0)/inner;} else t[1][r]=0;
      floor_widen(src,cs[c].ld,lines,n,d,n); t0=now(); for(int i=0;i<inner;i++) floor_widen(src,cs[c].ld,lines,n,d,n); t[2][r]=(now()-t0)/inner;
    }
    for(int v=0;v<3;v++) qsort(t[v],reps,sizeof(double),cmp);
    printf("%-38s pack %6.2f us (%.3f ns/el)  widen %6.2f us (%.3f ns/el)  floor %6.2f us (%.3f ns/el)\n",cs[c].n,
      t[0][reps/2]*1e6,t[0][reps/2]*1e9/el,t[1][reps/2]*1e6,t[1][reps/2]*1e9/el,t[2][reps/2]*1e6,t[2][reps/2]*1e9/el);
  }
  return 0;
}
