/* throwaway: C bits of mxp_avx512_gemm_ex from two builds on BF16/FP8 operands with planted
 * BF16 subnormals (A rows, B columns), every transpose, several alpha/beta, 1-2 threads. */
#include "kernels/kernels.h"
#include "kernels/x86_avx512/gemm_internal.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef void (*fn)(const mxp_gemm_args *, const mxp_avx512_gemm_opts *);
static uint64_t st = 88172645463325252ull;
static uint32_t rnd(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return (uint32_t)st; }
static uint16_t bf(float x) { uint32_t u; memcpy(&u, &x, 4); return (uint16_t)(u >> 16); }
int main(int argc, char **argv) {
    fn f[2]; void (*ti[2])(void);
    for (int i = 0; i < 2; i++) {
        void *l = dlopen(argv[1 + i], RTLD_NOW | RTLD_LOCAL);
        if (!l) { fprintf(stderr, "%s\n", dlerror()); return 2; }
        f[i] = (fn)dlsym(l, "mxp_avx512_gemm_ex");
        ti[i] = (void (*)(void))dlsym(l, "mxp_avx512_gemm_tables_init");
        if (ti[i]) ti[i]();
    }
    int shapes[][3] = {{256, 512, 512}, {100, 70, 96}, {29, 33, 65}, {512, 512, 256}, {64, 2048, 72},
                       {300, 300, 1100}, {14, 32, 2}, {512, 65, 256}};
    long bad = 0, runs = 0, flaggedruns = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int tr = 0; tr < 4; tr++)
            for (int v = 0; v < 6; v++) {
                int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
                bool ta = tr & 1, tb = tr >> 1;
                int lda = ta ? M : K, ldb = tb ? K : N;
                mxp_dtype at = v == 5 ? MXP_DTYPE_F8_E4M3 : MXP_DTYPE_BF16;
                size_t na = (size_t)M * K, nb = (size_t)K * N;
                uint16_t *A = malloc(na * 2), *B = malloc(nb * 2);
                uint8_t *A8 = malloc(na);
                for (size_t i = 0; i < na; i++) {
                    A[i] = bf(((int)(rnd() % 2001) - 1000) / 700.0f);
                    A8[i] = (uint8_t)(rnd() & 0x77);
                }
                for (size_t i = 0; i < nb; i++) B[i] = bf(((int)(rnd() % 2001) - 1000) / 900.0f);
                /* plant subnormals: v 0: none; 1: some A rows; 2: some B cols; 3: both; 4: many A rows; 5 fp8 A + B cols */
                int rows_a = v == 1 || v == 3 ? 5 : v == 4 ? M / 3 + 1 : 0;
                int cols_b = v == 2 || v == 3 || v == 5 ? 3 : 0;
                for (int t = 0; t < rows_a; t++) {
                    int i = (int)(rnd() % (unsigned)M), k = (int)(rnd() % (unsigned)K);
                    A[ta ? (size_t)k * lda + i : (size_t)i * lda + k] = (uint16_t)(0x0001 + rnd() % 0x7f) | (rnd() & 1 ? 0x8000 : 0);
                }
                for (int t = 0; t < cols_b; t++) {
                    int j = (int)(rnd() % (unsigned)N), k = (int)(rnd() % (unsigned)K);
                    B[tb ? (size_t)j * ldb + k : (size_t)k * ldb + j] = (uint16_t)(0x0001 + rnd() % 0x7f);
                }
                if (rows_a || cols_b) flaggedruns++;
                float *C[2];
                float beta = v % 3 == 0 ? 0.f : v % 3 == 1 ? 1.f : 0.5f, alpha = v == 4 ? 0.75f : 1.f;
                for (int th = 1; th <= 2; th++) {
                    for (int i = 0; i < 2; i++) {
                        C[i] = malloc((size_t)M * N * 4);
                        for (size_t e = 0; e < (size_t)M * N; e++) C[i][e] = (float)(e % 7) * 1e-3f;
                        mxp_gemm_args g = {ta, tb, M, N, K, at, at == MXP_DTYPE_BF16 ? (void *)A : (void *)A8, lda,
                                           MXP_DTYPE_BF16, B, ldb, C[i], N, alpha, beta};
                        mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_DPBF16, th, false};
                        f[i](&g, &o);
                    }
                    runs++;
                    if (memcmp(C[0], C[1], (size_t)M * N * 4)) {
                        bad++;
                        printf("DIFF %dx%dx%d ta%d tb%d v%d th%d\n", M, N, K, ta, tb, v, th);
                    }
                    free(C[0]); free(C[1]);
                }
                free(A); free(B); free(A8);
            }
    printf("%ld runs (%ld flagged cases), %ld differ\n", runs, flaggedruns, bad);
    return bad != 0;
}
