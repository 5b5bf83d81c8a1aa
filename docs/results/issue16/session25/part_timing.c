#include "kernels/x86_avx512/gemm_internal.h"
#include "kernels/kernels.h"
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>
extern volatile unsigned long long mxp_tim[8][2], mxp_tim_t0;
int main(int argc,char**argv){
  int M=atoi(argv[1]),N=atoi(argv[2]),K=atoi(argv[3]); int ta=argv[4][0]=='T', tb=argv[4][1]=='T';
  int iters=atoi(argv[5]);
  uint16_t *A=malloc((size_t)M*K*2),*B=malloc((size_t)N*K*2); float*C=aligned_alloc(64,(size_t)M*N*4);
  for(size_t i=0;i<(size_t)M*K;i++)A[i]=0x3f80+(i%7); for(size_t i=0;i<(size_t)N*K;i++)B[i]=0x3f00+(i%5);
  mxp_gemm_args g={.trans_a=ta,.trans_b=tb,.M=M,.N=N,.K=K,.a_type=MXP_DTYPE_BF16,.A=A,.lda=ta?M:K,.b_type=MXP_DTYPE_BF16,.B=B,.ldb=tb?K:N,.C=C,.ldc=N,.alpha=1,.beta=0};
  mxp_avx512_gemm_opts o={MXP_GEMM_PATH_AUTO,2,false};
  for(int i=0;i<100;i++)mxp_avx512_gemm_ex(&g,&o);
  for(int i=0;i<8;i++)mxp_tim[i][0]=mxp_tim[i][1]=0;
  unsigned long long tot=0;
  for(int i=0;i<iters;i++){unsigned long long a=__rdtsc();mxp_avx512_gemm_ex(&g,&o);tot+=__rdtsc()-a;}
  double f=1.0/iters/1000.0; /* kcycles (TSC) */
  printf("%s: call %.1f kTSC; part0 start %.2f end %.1f; part1 start %.2f end %.1f\n",argv[4],tot*f,mxp_tim[0][0]*f,mxp_tim[0][1]*f,mxp_tim[1][0]*f,mxp_tim[1][1]*f);
}
