#include "kernels/x86_avx512/gemm_internal.h"
#include "kernels/kernels.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int M=atoi(argv[1]),N=atoi(argv[2]),K=atoi(argv[3]); int ta=argv[4][0]=='T', tb=argv[4][1]=='T';
  int th=atoi(argv[5]); int iters=atoi(argv[6]);
  uint16_t *A=malloc((size_t)M*K*2),*B=malloc((size_t)N*K*2); float*C=aligned_alloc(64,(size_t)M*N*4);
  for(size_t i=0;i<(size_t)M*K;i++)A[i]=0x3f80+(i%7); for(size_t i=0;i<(size_t)N*K;i++)B[i]=0x3f00+(i%5);
  mxp_gemm_args g={.trans_a=ta,.trans_b=tb,.M=M,.N=N,.K=K,.a_type=MXP_DTYPE_BF16,.A=A,.lda=ta?M:K,.b_type=MXP_DTYPE_BF16,.B=B,.ldb=tb?K:N,.C=C,.ldc=N,.alpha=1,.beta=0};
  mxp_avx512_gemm_opts o={MXP_GEMM_PATH_AUTO,th,false};
  for(int i=0;i<50;i++)mxp_avx512_gemm_ex(&g,&o);
  double best=1e9; for(int r=0;r<7;r++){double t0=now();for(int i=0;i<iters;i++)mxp_avx512_gemm_ex(&g,&o);double t=(now()-t0)/iters;if(t<best)best=t;}
  printf("%dx%dx%d %s th%d: %.2f us, %.1f GF/s\n",M,N,K,argv[4],th,best*1e6,2.0*M*N*K/best*1e-9);
}
