/* tests/test_cuda_lt_desc.c: the real cuBLASLt descriptors of the linear
 * layer's GEMMs, built WITHOUT a device (label `gpu`, so it travels in the
 * device kit too). For each GEMM (FWD with bias, DX, DW accumulating) of odd
 * shapes and each operand dtype (F32, BF16, F16): the description of
 * mxp_lt_linear is first compared with hand-written values (which buffer is
 * A/B, op, m/n/k, rows x cols and ld of each layout, as derived in
 * backend/cuda/lt_map.h), then mxp_cudab_lt_desc_check creates the matmul
 * descriptor and the three layouts with libcublasLt (the code path of
 * mxp_cudab_lt_plan_create) and reads every attribute back: transposes,
 * CUBLAS_COMPUTE_32F (no TF32), FP32 scale type, the bias epilogue,
 * layout rows/cols/ld/type. That the GEMM itself computes the right numbers
 * is tests/test_lt_map.c's naive executor on the host, and needs a GPU for
 * cuBLASLt itself (not run yet).
 * The FP8 plans (mxp_lt_linear_fp8, E4M3/E5M2) the same way, with the
 * fast-accumulation flag and the A/B scale pointers read back, and the
 * FP8 rules (TN, no bias epilogue, /16, not E5M2 x E5M2) refused first.
 * Exits 77 (skipped): a build without CUDA, or libcublasLt cannot be loaded
 * or cannot create the objects here.
 */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#ifndef MIXPREC_HAVE_CUDA
int main(void) {
    printf("test_cuda_lt_desc: SKIP (built without CUDA)\n");
    return 77;
}
#else
#include <dlfcn.h>

#include "backend/cuda/cuda_backend.h"

typedef struct hand {
    mxp_lt_gemm which;
    mxp_lt_operand a_op, b_op;
    bool ta, tb;
    int64_t m, n, k, a_rows, a_cols, lda, b_rows, b_cols, ldb, ldc;
    float beta;
    bool bias;
} hand;

int main(void) {
    const int64_t B = 3, I = 5, O = 7; /* all different: a swap shows */
    const hand want[3] = {
        /* Y^T (O x B) = W (stored I x O, op T) X^T (I x B) + b */
        {MXP_LT_FWD, MXP_LT_W, MXP_LT_X, true, false, O, B, I, I, O, I, I, B, I, O, 0.0f, true},
        /* dX^T (I x B) = W^T (I x O) dY^T (O x B) */
        {MXP_LT_DX, MXP_LT_W, MXP_LT_DY, false, false, I, B, O, I, O, I, O, B, O, I, 0.0f, false},
        /* dW^T (I x O) += X^T (I x B) dY (stored O x B, op T) */
        {MXP_LT_DW, MXP_LT_X, MXP_LT_DY, false, true, I, O, B, I, B, I, O, B, O, I, 1.0f, false},
    };
    char why[300];
    for (int i = 0; i < 3; i++) {
        const hand *h = &want[i];
        mxp_lt_desc d;
        CHECK_MSG(mxp_lt_linear(h->which, B, I, O, true, true, &d, why, sizeof why) == 0, "%s",
                  why);
        CHECK_MSG(d.a_op == h->a_op && d.b_op == h->b_op && d.trans_a == h->ta &&
                      d.trans_b == h->tb && d.m == h->m && d.n == h->n && d.k == h->k &&
                      d.a_rows == h->a_rows && d.a_cols == h->a_cols && d.lda == h->lda &&
                      d.b_rows == h->b_rows && d.b_cols == h->b_cols && d.ldb == h->ldb &&
                      d.ldc == h->ldc && d.beta == h->beta && d.bias == h->bias,
                  "%s: the description differs from the hand derivation",
                  mxp_lt_gemm_name(h->which));
    }
    /* hold the library open for the whole test, never closed: each check's
     * own dlopen / dlclose then costs a reference count, not a 500 MB load,
     * and libcublasLt's own one-time allocations (its static libstdc++'s
     * 72 KiB exception pool) stay reachable from its loaded globals instead
     * of showing as a leak under LeakSanitizer once it is unloaded (NULL is
     * fine: the check reports the failure itself) */
    void *hold = dlopen(mxp_cudab_lt_soname(), RTLD_NOW | RTLD_LOCAL);
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {37, 19, 23}, {256, 512, 512}};
    const mxp_dtype dts[3] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};
    int checked = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int w = 0; w < MXP_LT_GEMM_COUNT; w++)
            for (int t = 0; t < 3; t++) {
                mxp_lt_desc d;
                if (mxp_lt_linear((mxp_lt_gemm)w, shapes[s][0], shapes[s][1], shapes[s][2], true,
                                  true, &d, why, sizeof why)) {
                    CHECK_MSG(false, "%s", why);
                    continue;
                }
                int rc = mxp_cudab_lt_desc_check(&d, dts[t], why, sizeof why);
                if (rc == 77) {
                    if (test_failures == 0) {
                        printf("test_cuda_lt_desc: SKIP (%s)\n", why);
                        return 77;
                    }
                    return test_finish("test_cuda_lt_desc");
                }
                CHECK_MSG(rc == 0, "%s %lldx%lldx%lld dtype %d: %s", mxp_lt_gemm_name((mxp_lt_gemm)w),
                          (long long)shapes[s][0], (long long)shapes[s][1],
                          (long long)shapes[s][2], (int)dts[t], why);
                checked++;
            }
    /* an operand dtype cuBLASLt is not given is refused, with the reason */
    mxp_lt_desc d;
    mxp_lt_linear(MXP_LT_FWD, 2, 3, 4, true, false, &d, why, sizeof why);
    CHECK(mxp_cudab_lt_desc_check(&d, MXP_DTYPE_F8_E4M3, why, sizeof why) == 1 &&
          strstr(why, "accepted F32, BF16, F16"));
    /* FP8 (mxp_lt_linear_fp8, TN): E4M3 x E4M3 forward, E4M3 x E5M2
     * backward; the descriptors, layouts (FP8 types), fast accumulation off
     * and the A/B scale pointers read back */
    const int64_t shapes8[][3] = {{16, 16, 16}, {32, 256, 64}, {512, 2048, 2048}};
    for (size_t s = 0; s < sizeof shapes8 / sizeof shapes8[0]; s++)
        for (int w = 0; w < MXP_LT_GEMM_COUNT; w++) {
            mxp_lt_desc d8;
            CHECK(mxp_lt_linear_fp8((mxp_lt_gemm)w, shapes8[s][0], shapes8[s][1], shapes8[s][2],
                                    w == MXP_LT_DW, &d8, why, sizeof why) == 0);
            const mxp_dtype b8 = w == MXP_LT_FWD ? MXP_DTYPE_F8_E4M3 : MXP_DTYPE_F8_E5M2;
            int rc = mxp_cudab_lt8_desc_check(&d8, MXP_DTYPE_F8_E4M3, b8, why, sizeof why);
            CHECK_MSG(rc == 0, "fp8 %s %lldx%lldx%lld: %s", mxp_lt_gemm_name((mxp_lt_gemm)w),
                      (long long)shapes8[s][0], (long long)shapes8[s][1],
                      (long long)shapes8[s][2], why);
            checked++;
        }
    /* refused before cuBLASLt: not TN, a dimension not / 16, E5M2 x E5M2 */
    mxp_lt_desc e;
    mxp_lt_linear(MXP_LT_FWD, 16, 16, 16, true, false, &e, why, sizeof why);
    CHECK(mxp_cudab_lt8_desc_check(&e, MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E4M3, why, sizeof why) ==
              1 && strstr(why, "bias"));
    mxp_lt_linear(MXP_LT_DX, 16, 16, 16, false, false, &e, why, sizeof why);
    CHECK(mxp_cudab_lt8_desc_check(&e, MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E5M2, why, sizeof why) ==
              1 && strstr(why, "TN"));
    mxp_lt_linear_fp8(MXP_LT_FWD, 24, 16, 16, false, &e, why, sizeof why);
    CHECK(mxp_cudab_lt8_desc_check(&e, MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E4M3, why, sizeof why) ==
              1 && strstr(why, "multiples of 16"));
    mxp_lt_linear_fp8(MXP_LT_FWD, 16, 16, 16, false, &e, why, sizeof why);
    CHECK(mxp_cudab_lt8_desc_check(&e, MXP_DTYPE_F8_E5M2, MXP_DTYPE_F8_E5M2, why, sizeof why) ==
              1 && strstr(why, "not both"));
    printf("test_cuda_lt_desc: %d descriptor sets created and read back without a device\n",
           checked);
    (void)hold;
    return test_finish("test_cuda_lt_desc");
}
#endif
