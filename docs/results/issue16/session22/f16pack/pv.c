#include "gemm_pack.c"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
/* variant: rcontig w=14 with line-assembled stores */
static const int32_t rc14_idx[7][16] __attribute__((aligned(64))) = {
#define L(o,i) ((i) + (o) + ((i) >= 14 - (o) ? 2 : 0))
#define R(o) {L(o,0),L(o,1),L(o,2),L(o,3),L(o,4),L(o,5),L(o,6),L(o,7),L(o,8),L(o,9),L(o,10),L(o,11),L(o,12),L(o,13),L(o,14),L(o,15)}
    R(0), R(2), R(4), R(6), R(8), R(10), R(12)};
/* 16 k x 14 rows: rows of k loaded by ld(k), stored as 14 full zmm */
#define GROUP14(LD, pd) do { \
    for (int h = 0; h < 2; h++) { \
        __m512 a_ = LD(8 * h); \
        for (int j = 0; j < 7; j++) { \
            __m512 b_ = LD(8 * h + j + 1); \
            _mm512_storeu_ps((pd) + 16 * (7 * h + j), _mm512_permutex2var_ps(a_, _mm512_load_si512(rc14_idx[j]), b_)); \
            a_ = b_; \
        } \
    } } while (0)
static inline __attribute__((always_inline)) void
pack_rc14_new(mxp_dtype t, const mxp_gemm_src *x, size_t r0, size_t rows, size_t k0,
                   size_t kc, float *dst) {
    const int w = 14;
    const size_t ld = x->ld;
    const void *base = x->base;
    for (size_t kg = 0; kg < kc; kg += PACK_KGROUP) {
        const size_t ke = min_sz(kc, kg + PACK_KGROUP);
        for (size_t p0 = 0; p0 < rows; p0 += (size_t)w) {
            const size_t prow = min_sz((size_t)w, rows - p0);
            const __mmask16 m = lanes16(prow);
            float *pd = dst + p0 * kc + kg * (size_t)w;
            const size_t at = (k0 + kg) * ld + r0 + p0;
            if (ke - kg == PACK_KGROUP) {
#define LDK(k) load16_f32(t, base, at + (size_t)(k) * ld, m)
                GROUP14(LDK, pd);
            } else {
                for (size_t k = 0; k < ke - kg; k++)
                    _mm512_mask_storeu_ps(pd + k * w, lanes16(14), load16_f32(t, base, at + k * ld, m));
            }
        }
    }
}
__attribute__((noinline)) void xnew(const mxp_gemm_src *x, size_t rows, size_t kc, float *d){switch(x->type){case MXP_DTYPE_F16: pack_rc14_new(MXP_DTYPE_F16,x,0,rows,0,kc,d);break;case MXP_DTYPE_BF16: pack_rc14_new(MXP_DTYPE_BF16,x,0,rows,0,kc,d);break;default: pack_rc14_new(MXP_DTYPE_F32,x,0,rows,0,kc,d);}}
__attribute__((noinline)) void xold(const mxp_gemm_src *x, size_t rows, size_t kc, float *d){mxp_avx512_pack_f32(x,0,rows,0,kc,14,d);}
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static int cmpd(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return x<y?-1:x>y;}
int main(void){
  uint16_t *src=aligned_alloc(64,(size_t)4096*4096*2);
  for(size_t i=0;i<(size_t)4096*4096;i++) src[i]=(uint16_t)(0x3c00 ^ (i*2654435761u>>18 & 0x3fff));
  float *d0=aligned_alloc(64,(size_t)1024*1024*4+4096),*d1=aligned_alloc(64,(size_t)1024*1024*4+4096);
  /* correctness sweep */
  int bad=0;
  for(int ty=0;ty<3;ty++) for(size_t rows=1;rows<=60;rows+=(rows<30?1:7)) for(size_t kc=1;kc<=70;kc+=(kc<40?1:5)){
    mxp_gemm_src x={(mxp_dtype)ty,src,rows+3,false};
    size_t np=(rows+13)/14; memset(d0,0x55,np*14*kc*4+256); memset(d1,0x55,np*14*kc*4+256);
    xold(&x,rows,kc,d0); xnew(&x,rows,kc,d1);
    if(memcmp(d0,d1,np*14*kc*4+256)){ if(bad++<5) printf("DIFF ty%d rows %zu kc %zu\n",ty,rows,kc);}
  }
  printf("correctness: %d bad\n",bad);
  struct {size_t rows,kc,ld;} cs[]={{336,256,512},{336,512,256},{336,512,512},{65,256,65},{336,256,256},{336,128,256}};
  for(int c=0;c<6;c++){ mxp_gemm_src x={MXP_DTYPE_F16,src,cs[c].ld,false}; double t[2][15];
    for(int r=0;r<15;r++){ for(int v=0;v<2;v++){ double t0=now(); for(int i=0;i<50;i++) (v?xnew:xold)(&x,cs[c].rows,cs[c].kc,v?d1:d0); t[v][r]=(now()-t0)/50;}}
    qsort(t[0],15,8,cmpd);qsort(t[1],15,8,cmpd);
    printf("rows %zu kc %zu ld %zu: old %.2f us new %.2f us new/old %.3f\n",cs[c].rows,cs[c].kc,cs[c].ld,t[0][7]*1e6,t[1][7]*1e6,t[1][7]/t[0][7]);}
}
