/* backend/cuda/lt_gemm.cu: the linear layer's GEMMs on cuBLASLt, from the
 * descriptions of lt_map.h (the row-/column-major mapping lives there,
 * host-tested by tests/test_lt_map.c; this file only turns a description
 * into cuBLASLt objects and runs them).
 *
 * Entry points (contracts in cuda_backend.h): mxp_cudab_lt_plan_create /
 * _destroy (descriptors, layouts and the algorithm chosen ONCE per shape),
 * mxp_cudab_lt_run, mxp_cudab_lt_desc_check (the descriptors of a
 * description built and read back; needs libcublasLt, no device), and
 * mxp_cudab_lt_fns_resolve (the dlsym table, used by device.cu's lt_open);
 * FP8: mxp_cudab_lt8_plan_create, mxp_cudab_lt8_run (A/B scale pointers
 * per run), mxp_cudab_lt8_desc_check.
 * Numerics: CUBLAS_COMPUTE_32F (FP32 accumulation, never TF32: the _FAST_
 * compute types are not used), FP32 scale type, C/D FP32; A/B FP32, BF16
 * or FP16; bias FP32 through CUBLASLT_EPILOGUE_BIAS. FP8 plans: A/B
 * E4M3/E5M2 (not both E5M2) in the TN layout, C/D FP32, fast accumulation
 * off, no epilogue (cuBLASLt's FP8 kernels with an FP32 D take a BF16
 * bias only: the FP32 bias is added by a kernel after), m, n, k multiples
 * of 16 (checked before cuBLASLt sees them).
 * NOT yet run on a GPU (docs/gpu.md); the descriptor round trip is
 * host-tested (tests/test_cuda_lt_desc.c) where libcublasLt loads.
 */
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/lt_map.h"

#include <dlfcn.h>
#include <stdarg.h>

#include <type_traits>
#include <stdio.h>
#include <string.h>

struct mxp_cudab_lt_plan {
    const mxp_cudab_lt_fns *f;
    mxp_lt_desc d;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    size_t workspace; /* what the chosen algorithm needs */
};

int mxp_cudab_lt_fns_resolve(void *lib, mxp_cudab_lt_fns *f, char *why, size_t n) {
#define LT_SYM(field, name)                                                                 \
    f->field = (decltype(f->field))dlsym(lib, #name);                                      \
    if (!f->field) return mxp_cudab_why(why, n, "libcublasLt lacks " #name);                      \
    static_assert(std::is_same<decltype(f->field), decltype(&name)>::value,                 \
                  "mxp_cudab_lt_fns." #field " does not match cublasLt.h's " #name);
    LT_SYM(desc_create, cublasLtMatmulDescCreate)
    LT_SYM(desc_destroy, cublasLtMatmulDescDestroy)
    LT_SYM(desc_set, cublasLtMatmulDescSetAttribute)
    LT_SYM(desc_get, cublasLtMatmulDescGetAttribute)
    LT_SYM(layout_create, cublasLtMatrixLayoutCreate)
    LT_SYM(layout_destroy, cublasLtMatrixLayoutDestroy)
    LT_SYM(layout_get, cublasLtMatrixLayoutGetAttribute)
    LT_SYM(pref_create, cublasLtMatmulPreferenceCreate)
    LT_SYM(pref_destroy, cublasLtMatmulPreferenceDestroy)
    LT_SYM(pref_set, cublasLtMatmulPreferenceSetAttribute)
    LT_SYM(heuristic, cublasLtMatmulAlgoGetHeuristic)
    LT_SYM(matmul, cublasLtMatmul)
#undef LT_SYM
    return 0;
}

/* CUDA data type of an A/B operand; -1 for an unsupported dtype. */
static int lt_ab_type(mxp_dtype t) {
    switch (t) {
    case MXP_DTYPE_F32: return CUDA_R_32F;
    case MXP_DTYPE_BF16: return CUDA_R_16BF;
    case MXP_DTYPE_F16: return CUDA_R_16F;
    default: return -1;
    }
}

static void lt_objs_free(mxp_cudab_lt_plan *p) {
    if (p->c) p->f->layout_destroy(p->c);
    if (p->b) p->f->layout_destroy(p->b);
    if (p->a) p->f->layout_destroy(p->a);
    if (p->op) p->f->desc_destroy(p->op);
    p->a = p->b = p->c = NULL;
    p->op = NULL;
}

/* CUDA data type of an FP8 operand; -1 for another dtype. */
static int lt_f8_type(mxp_dtype t) {
    switch (t) {
    case MXP_DTYPE_F8_E4M3: return CUDA_R_8F_E4M3;
    case MXP_DTYPE_F8_E5M2: return CUDA_R_8F_E5M2;
    default: return -1;
    }
}

/* An FP8 pair cuBLASLt runs: TN, no bias epilogue, E4M3/E5M2 and not both
 * E5M2, m, n, k multiples of 16. */
static int lt_f8_check(const mxp_lt_desc *d, mxp_dtype a, mxp_dtype b, char *why, size_t n) {
    if (lt_f8_type(a) < 0 || lt_f8_type(b) < 0 ||
        (a == MXP_DTYPE_F8_E5M2 && b == MXP_DTYPE_F8_E5M2))
        return mxp_cudab_why(why, n, "cuBLASLt FP8 GEMM: operand dtypes %d x %d: accepted "
                                     "F8_E4M3 / F8_E5M2, not both F8_E5M2",
                             (int)a, (int)b);
    if (!d->trans_a || d->trans_b || d->bias)
        return mxp_cudab_why(why, n, "cuBLASLt FP8 GEMM: accepted only TN (A transposed, B not) "
                                     "without a bias epilogue");
    if (d->m % 16 || d->n % 16 || d->k % 16)
        return mxp_cudab_why(why, n, "cuBLASLt FP8 GEMM: m=%lld n=%lld k=%lld: accepted "
                                     "multiples of 16",
                             (long long)d->m, (long long)d->n, (long long)d->k);
    return 0;
}

/* The matmul descriptor and the three layouts of d (host only): A/B of
 * CUDA types at, bt; fp8: fast accumulation off (FP32 accumulation
 * throughout), no epilogue. */
static int lt_objs_make2(mxp_cudab_lt_plan *p, const mxp_lt_desc *d, int abt, int bbt, bool fp8,
                         char *why, size_t n) {
    const mxp_cudab_lt_fns *f = p->f;
    if (d->m < 1 || d->n < 1 || d->k < 1)
        return mxp_cudab_why(why, n, "cuBLASLt GEMM: m=%lld n=%lld k=%lld: each must be >= 1",
                       (long long)d->m, (long long)d->n, (long long)d->k);
    p->d = *d;
    cublasStatus_t s;
#define LT_TRY(call, what)                                                                  \
    if ((s = (call)) != CUBLAS_STATUS_SUCCESS) {                                            \
        lt_objs_free(p);                                                                    \
        return mxp_cudab_why(why, n, "cuBLASLt %s failed (status %d)", what, (int)s);             \
    }
    LT_TRY(f->desc_create(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate")
    int32_t ta = d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(f->desc_set(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA")
    LT_TRY(f->desc_set(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB")
    uint32_t epi = d->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    LT_TRY(f->desc_set(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "set EPILOGUE")
    if (fp8) {
        int8_t fast = 0;
        LT_TRY(f->desc_set(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast),
               "set FAST_ACCUM")
    }
    if (d->bias) {
        int32_t bt = CUDA_R_32F;
        LT_TRY(f->desc_set(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
               "set BIAS_DATA_TYPE")
    }
    LT_TRY(f->layout_create(&p->a, (cudaDataType_t)abt, (uint64_t)d->a_rows, (uint64_t)d->a_cols, d->lda),
           "cublasLtMatrixLayoutCreate (A)")
    LT_TRY(f->layout_create(&p->b, (cudaDataType_t)bbt, (uint64_t)d->b_rows, (uint64_t)d->b_cols, d->ldb),
           "cublasLtMatrixLayoutCreate (B)")
    LT_TRY(f->layout_create(&p->c, CUDA_R_32F, (uint64_t)d->m, (uint64_t)d->n, d->ldc),
           "cublasLtMatrixLayoutCreate (C/D)")
#undef LT_TRY
    return 0;
}

static int lt_objs_make(mxp_cudab_lt_plan *p, const mxp_lt_desc *d, mxp_dtype ab, char *why,
                        size_t n) {
    int abt = lt_ab_type(ab);
    if (abt < 0) return mxp_cudab_why(why, n, "cuBLASLt GEMM: operand dtype %d: accepted F32, BF16, F16", (int)ab);
    return lt_objs_make2(p, d, abt, abt, false, why, n);
}

/* The objects of d (FP8 when a != MXP_DTYPE_COUNT: A a, B b; else A/B ab),
 * then the heuristic's algorithm. */
static int lt_plan_make(mxp_cudab_ctx *c, const mxp_lt_desc *d, mxp_dtype ab, bool fp8,
                        mxp_dtype a, mxp_dtype b, mxp_cudab_lt_plan **out, char *why,
                        size_t n) {
    *out = NULL;
    mxp_cudab_lt_plan *p = (mxp_cudab_lt_plan *)calloc(1, sizeof *p);
    if (!p) return mxp_cudab_why(why, n, "out of host memory for a cuBLASLt plan");
    p->f = &c->lt_fns;
    if (fp8 ? (lt_f8_check(d, a, b, why, n) ||
               lt_objs_make2(p, d, lt_f8_type(a), lt_f8_type(b), true, why, n))
            : lt_objs_make(p, d, ab, why, n)) {
        free(p);
        return 1;
    }
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t ws = c->lt_workspace_bytes;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t s = c->lt_fns.pref_create(&pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = c->lt_fns.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = c->lt_fns.heuristic(c->lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &res, &found);
    if (pref) c->lt_fns.pref_destroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found < 1) {
        lt_objs_free(p);
        free(p);
        return mxp_cudab_why(why, n,
                       "cuBLASLt found no algorithm for m=%lld n=%lld k=%lld (status %d, %d results)",
                       (long long)d->m, (long long)d->n, (long long)d->k, (int)s, found);
    }
    p->algo = res.algo;
    p->workspace = res.workspaceSize;
    *out = p;
    return 0;
}

extern "C" int mxp_cudab_lt_plan_create(mxp_cudab_ctx *c, const mxp_lt_desc *d, mxp_dtype ab,
                                        mxp_cudab_lt_plan **out, char *why, size_t n) {
    return lt_plan_make(c, d, ab, false, ab, ab, out, why, n);
}

extern "C" int mxp_cudab_lt8_plan_create(mxp_cudab_ctx *c, const mxp_lt_desc *d, mxp_dtype a,
                                         mxp_dtype b, mxp_cudab_lt_plan **out, char *why,
                                         size_t n) {
    return lt_plan_make(c, d, a, true, a, b, out, why, n);
}

extern "C" void mxp_cudab_lt_plan_destroy(mxp_cudab_lt_plan *p) {
    if (!p) return;
    lt_objs_free(p);
    free(p);
}

extern "C" int mxp_cudab_lt_run(mxp_cudab_ctx *c, mxp_cudab_lt_plan *p, const void *A,
                                const void *B, float *D, const float *bias, char *why,
                                size_t n) {
    if (p->d.bias) {
        if (!bias) return mxp_cudab_why(why, n, "cuBLASLt GEMM: the plan has a bias epilogue but bias is NULL");
        cublasStatus_t s = p->f->desc_set(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        if (s != CUBLAS_STATUS_SUCCESS)
            return mxp_cudab_why(why, n, "cuBLASLt set BIAS_POINTER failed (status %d)", (int)s);
    }
    float alpha = p->d.alpha, beta = p->d.beta;
    cublasStatus_t s = p->f->matmul(c->lt, p->op, &alpha, A, p->a, B, p->b, &beta, D, p->c, D,
                                    p->c, &p->algo, c->lt_workspace, p->workspace, c->stream);
    if (s != CUBLAS_STATUS_SUCCESS) return mxp_cudab_why(why, n, "cublasLtMatmul failed (status %d)", (int)s);
    return 0;
}

extern "C" int mxp_cudab_lt8_run(mxp_cudab_ctx *c, mxp_cudab_lt_plan *p, const void *A,
                                 const void *B, float *D, const float *a_scale,
                                 const float *b_scale, char *why, size_t n) {
    if (!a_scale || !b_scale)
        return mxp_cudab_why(why, n, "cuBLASLt FP8 GEMM: NULL scale pointer");
    cublasStatus_t s =
        p->f->desc_set(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = p->f->desc_set(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                           sizeof b_scale);
    if (s != CUBLAS_STATUS_SUCCESS)
        return mxp_cudab_why(why, n, "cuBLASLt set A/B_SCALE_POINTER failed (status %d)", (int)s);
    return mxp_cudab_lt_run(c, p, A, B, D, NULL, why, n);
}

/* ---- the descriptor round trip (no device) -------------------------------- */

#define MXP_STR2(x) #x
#define MXP_STR(x) MXP_STR2(x)

extern "C" const char *mxp_cudab_lt_soname(void) {
    return "libcublasLt.so." MXP_STR(CUBLAS_VER_MAJOR);
}

/* The round trip of d with A/B CUDA types at, bt (fp8: the FP8 form). */
static int lt_desc_check(const mxp_lt_desc *d, int at, int bt, bool fp8, char *why, size_t n) {
    const char *so = mxp_cudab_lt_soname();
    void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        mxp_cudab_why(why, n, "cannot load %s: %s", so, dlerror());
        return 77;
    }
    mxp_cudab_lt_fns f;
    mxp_cudab_lt_plan p;
    memset(&p, 0, sizeof p);
    p.f = &f;
    int rc = 0;
    if (mxp_cudab_lt_fns_resolve(lib, &f, why, n) || lt_objs_make2(&p, d, at, bt, fp8, why, n)) {
        dlclose(lib);
        return 77;
    }
    /* read every attribute back */
    int32_t ta = -1, tb = -1, ct = -1, st = -1;
    uint32_t epi = 99;
    size_t w = 0;
    f.desc_get(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, &w);
    f.desc_get(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, &w);
    f.desc_get(p.op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct, &w);
    f.desc_get(p.op, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &st, sizeof st, &w);
    f.desc_get(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, &w);
    int8_t fast = 1;
    const float *sp_in = (const float *)(uintptr_t)0x1000, *sa = NULL, *sb = NULL;
    if (fp8) {
        f.desc_get(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast, &w);
        /* the scale pointers a run sets: settable and read back */
        if (f.desc_set(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sp_in, sizeof sp_in) ||
            f.desc_set(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sp_in, sizeof sp_in))
            rc = mxp_cudab_why(why, n, "cuBLASLt refused the A/B scale pointers");
        f.desc_get(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa, &w);
        f.desc_get(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb, &w);
        if (rc == 0 && (fast != 0 || sa != sp_in || sb != sp_in))
            rc = mxp_cudab_why(why, n, "FP8 descriptor reads back fast accumulation %d, scale "
                                       "pointers %p %p",
                               (int)fast, (const void *)sa, (const void *)sb);
    }
    if (rc == 0 && (ta != (d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N) || tb != (d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N) ||
        ct != CUBLAS_COMPUTE_32F || st != CUDA_R_32F ||
        epi != (uint32_t)(d->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT)))
        rc = mxp_cudab_why(why, n,
                     "matmul descriptor reads back transa %d transb %d compute %d scale %d "
                     "epilogue %u",
                     ta, tb, ct, st, epi);
    const cublasLtMatrixLayout_t lay[3] = {p.a, p.b, p.c};
    const int64_t want[3][3] = {{d->a_rows, d->a_cols, d->lda},
                                {d->b_rows, d->b_cols, d->ldb},
                                {d->m, d->n, d->ldc}};
    const uint32_t want_t[3] = {(uint32_t)at, (uint32_t)bt, CUDA_R_32F};
    for (int i = 0; i < 3 && rc == 0; i++) {
        uint64_t rows = 0, cols = 0;
        int64_t ld = 0;
        uint32_t t = 0;
        f.layout_get(lay[i], CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows, &w);
        f.layout_get(lay[i], CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols, &w);
        f.layout_get(lay[i], CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld, &w);
        f.layout_get(lay[i], CUBLASLT_MATRIX_LAYOUT_TYPE, &t, sizeof t, &w);
        if ((int64_t)rows != want[i][0] || (int64_t)cols != want[i][1] || ld != want[i][2] || t != want_t[i])
            rc = mxp_cudab_why(why, n,
                         "layout %c reads back %llux%llu ld %lld type %u, described "
                         "%lldx%lld ld %lld type %u",
                         "ABC"[i], (unsigned long long)rows, (unsigned long long)cols, (long long)ld, t,
                         (long long)want[i][0], (long long)want[i][1], (long long)want[i][2], want_t[i]);
    }
    lt_objs_free(&p);
    dlclose(lib);
    return rc;
}

extern "C" int mxp_cudab_lt_desc_check(const mxp_lt_desc *d, mxp_dtype ab, char *why, size_t n) {
    if (lt_ab_type(ab) < 0)
        return mxp_cudab_why(why, n, "cuBLASLt GEMM: operand dtype %d: accepted F32, BF16, F16", (int)ab);
    return lt_desc_check(d, lt_ab_type(ab), lt_ab_type(ab), false, why, n);
}

extern "C" int mxp_cudab_lt8_desc_check(const mxp_lt_desc *d, mxp_dtype a, mxp_dtype b,
                                        char *why, size_t n) {
    if (lt_f8_check(d, a, b, why, n)) return 1;
    return lt_desc_check(d, lt_f8_type(a), lt_f8_type(b), true, why, n);
}
