// throwaway: time mxp_avx512_pack_f32 alone (thread CPU time), ours vs base .so
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
typedef struct { int type; const void *base; size_t ld; bool k_contig; } src_t;
typedef void (*pack_fn)(const src_t *, size_t, size_t, size_t, size_t, int, float *);
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  void *l0=dlopen(argv[1],RTLD_NOW|RTLD_LOCAL), *l1=dlopen(argv[2],RTLD_NOW|RTLD_LOCAL);
  if(!l0||!l1){fprintf(stderr,"%s\n",dlerror());return 1;}
  pack_fn f[2]={(pack_fn)dlsym(l0,"mxp_avx512_pack_f32"),(pack_fn)dlsym(l1,"mxp_avx512_pack_f32")};
  void (*ti[2])(void)={(void(*)(void))dlsym(l0,"mxp_avx512_gemm_tables_init"),(void(*)(void))dlsym(l1,"mxp_avx512_gemm_tables_init")};
  if(!f[0]||!f[1]){fprintf(stderr,"no sym\n");return 1;}
  ti[0]();ti[1]();
  int type=atoi(argv[3]); /* dtype enum value */
  size_t es=(size_t)atoi(argv[4]);
  // cases: name kcontig rows kc ld w
  struct {const char*n;bool kc_;size_t rows,kc,ld;int w;} cs[]={
    {"NN A 128x256 (kcontig w14)",1,128,256,256,14},
    {"NN A 336x256 (kcontig w14)",1,336,256,256,14},
    {"NN A 128x512 (kcontig w14)",1,128,512,512,14},
    {"NN A 336x512 (kcontig w14)",1,336,512,512,14},
    {"NN B 256x256 (rcontig w32)",0,256,256,256,32},
    {"NN B 512x512 (rcontig w32)",0,512,512,512,32},
    {"TN A 336x256 ld512 (rcontig w14)",0,336,256,512,14},
    {"TN A 336x512 ld256 (rcontig w14)",0,336,512,256,14},
    {"TN A 65x256 ld65 (rcontig w14)",0,65,256,65,14},
    {"TN B 72x512 ld72 (rcontig w32)",0,72,256,72,32},
    {"TN B 512x256 ld512 (rcontig w32)",0,512,256,512,32},
  };
  size_t nbytes=(size_t)4096*4096*es; unsigned char *src=aligned_alloc(64,nbytes);
  for(size_t i=0;i<nbytes/2;i++) ((uint16_t*)src)[i]=(uint16_t)(0x3c00 ^ (i*2654435761u>>20 & 0x3ff));
  float *d[2]={aligned_alloc(64,(size_t)1024*1024*4+256),aligned_alloc(64,(size_t)1024*1024*4+256)};
  int reps=atoi(argv[5]);
  for(size_t c=0;c<sizeof cs/sizeof cs[0];c++){
    src_t x={type,src,cs[c].ld,cs[c].kc_};
    double t[2][64]; size_t el=cs[c].rows*cs[c].kc;
    int inner = (int)(4e6/el)+1;
    for(int r=0;r<reps;r++) for(int v=0;v<2;v++){
      f[v](&x,0,cs[c].rows,0,cs[c].kc,cs[c].w,d[v]);
      double t0=now(); for(int i=0;i<inner;i++) f[v](&x,0,cs[c].rows,0,cs[c].kc,cs[c].w,d[v]); t[v][r]=(now()-t0)/inner;
    }
    qsort(t[0],reps,sizeof(double),cmp);qsort(t[1],reps,sizeof(double),cmp);
    size_t np=(cs[c].rows+cs[c].w-1)/cs[c].w;
    int same=memcmp(d[0],d[1],np*cs[c].w*cs[c].kc*4)==0;
    printf("%-36s ours %7.2f us (%.3f ns/el)  base %7.2f us (%.3f ns/el)  ours/base %.3f %s\n",cs[c].n,
      t[0][reps/2]*1e6,t[0][reps/2]*1e9/el,t[1][reps/2]*1e6,t[1][reps/2]*1e9/el,t[0][reps/2]/t[1][reps/2],same?"same":"DIFF");
  }
  return 0;
}
