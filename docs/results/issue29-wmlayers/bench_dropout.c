#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "kernels/kernels.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
  size_t n = 256*512; float *x = malloc(n*4), *y = malloc(n*4);
  for (size_t i=0;i<n;i++) x[i]=(float)i*1e-3f;
  const mxp_kernels *t[2] = {mxp_kernels_generic(), mxp_kernels_get()};
  for (int k=0;k<2;k++){ double best=1e9; for(int r=0;r<7;r++){ double t0=now(); for(int it=0;it<20;it++) t[k]->dropout(y,x,n,42,(uint64_t)it<<40,858993459u,1.25f); double d=(now()-t0)/20; if(d<best)best=d;}
    printf("%s dropout [256 x 512]: %.3f ms (%.2f Gelem/s)\n", t[k]->isa, best*1e3, n/best*1e-9);}
  return 0;}
