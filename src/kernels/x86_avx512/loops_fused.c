/* kernels/x86_avx512/loops_fused.c: the AVX-512 fused passes.
 *
 * Entry points: mxp_avx512_bias_act_store, mxp_avx512_act_bwd_store
 * (contracts: mxp_epilogue, mxp_act_bwd in kernels/kernels.h). The loops are
 * the reference's (mxp_epilogue_rows, mxp_act_bwd_range in
 * kernels/generic/fused.c) run over THIS table's kernels, so the bits are
 * those of the unfused AVX-512 sequence (add_bias, convert, absmax, GELU,
 * ...) by construction. The backward pass splits [0, n) at PAR_ALIGN
 * boundaries (par_range). Passes of EPI_PAR_MIN elements or more are split
 * into one block of rows per pool thread; the parts' absmax / non-finite
 * counts are combined in part order (max and sum: exact, so the result does
 * not depend on the thread count). The thresholds (below) are lower than
 * the plain element-wise one (PAR_MIN) because these passes do the work of
 * two to seven of those per element.
 */
#include "kernels/x86_avx512/loops_simd.h"

#include "kernels/generic/generic.h"

/* Pool thresholds (elements): with an activation the pass costs tens of
 * flops per element, so 32K elements (~0.1 ms on one core) pay for a
 * fork/join (microseconds); a plain store + scan (act NONE) is a few
 * cycles per element and forks from 128K on. Below: on the caller. */
enum { EPI_PAR_MIN = 1 << 15, EPI_STORE_PAR_MIN = 1 << 17, EPI_PARTS_MAX = 64 };

typedef struct epi_ctx {
    const mxp_kernels *k;
    const mxp_epilogue *e;
    mxp_epilogue_part part[EPI_PARTS_MAX];
} epi_ctx;

static void epi_task(void *ctx, int i, int count) {
    epi_ctx *c = ctx;
    const int64_t B = c->e->B;
    mxp_epilogue_rows(c->k, c->e, B * i / count, B * (i + 1) / count, &c->part[i]);
}

void mxp_avx512_bias_act_store(mxp_epilogue *e) {
    epi_ctx c = {.k = mxp_kernels_avx512(), .e = e};
    int count = 1;
    const size_t min = e->act == MXP_ACT_NONE ? EPI_STORE_PAR_MIN : EPI_PAR_MIN;
    if ((size_t)e->B * (size_t)e->C >= min) {
        count = mxp_threads_max();
        if (count > EPI_PARTS_MAX) count = EPI_PARTS_MAX;
        if (count > e->B) count = (int)e->B;
    }
    if (count > 1) mxp_threads_run(count, epi_task, &c);
    else epi_task(&c, 0, 1);
    mxp_epilogue_part *t = &c.part[0];
    for (int i = 1; i < count; i++) {
        const mxp_epilogue_part *o = &c.part[i];
        if (o->y_amax > t->y_amax) t->y_amax = o->y_amax;
        if (o->a_amax > t->a_amax) t->a_amax = o->a_amax;
        t->y_nonfinite += o->y_nonfinite;
        t->a_nonfinite += o->a_nonfinite;
    }
    e->y_amax = t->y_amax;
    e->y_nonfinite = t->y_nonfinite;
    e->a_amax = t->a_amax;
    e->a_nonfinite = t->a_nonfinite;
}

typedef struct bwd_ctx {
    const mxp_kernels *k;
    const mxp_act_bwd *e;
    float amax[EPI_PARTS_MAX];
    int64_t nonfinite[EPI_PARTS_MAX];
} bwd_ctx;

static void bwd_task(void *ctx, int i, int count) {
    bwd_ctx *c = ctx;
    size_t lo, hi;
    par_range(c->e->n, i, count, &lo, &hi);
    mxp_act_bwd_range(c->k, c->e, lo, hi, &c->amax[i], &c->nonfinite[i]);
}

void mxp_avx512_act_bwd_store(mxp_act_bwd *e) {
    bwd_ctx c = {.k = mxp_kernels_avx512(), .e = e};
    int count = 1;
    if (e->n >= EPI_PAR_MIN) {
        count = mxp_threads_max();
        if (count > EPI_PARTS_MAX) count = EPI_PARTS_MAX;
    }
    if (count > 1) mxp_threads_run(count, bwd_task, &c);
    else bwd_task(&c, 0, 1);
    for (int i = 1; i < count; i++) {
        if (c.amax[i] > c.amax[0]) c.amax[0] = c.amax[i];
        c.nonfinite[0] += c.nonfinite[i];
    }
    e->dx_amax = c.amax[0];
    e->dx_nonfinite = c.nonfinite[0];
}
