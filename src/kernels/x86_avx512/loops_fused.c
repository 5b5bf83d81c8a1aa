/* kernels/x86_avx512/loops_fused.c: the AVX-512 fused passes.
 *
 * Entry point: mxp_avx512_bias_act_store (contract: mxp_epilogue in
 * kernels/kernels.h). The row loop is the reference's (mxp_epilogue_rows,
 * kernels/generic/fused.c) run over THIS table's kernels, so the bits are
 * those of the unfused AVX-512 sequence (add_bias, convert, absmax, GELU,
 * ...) by construction. Passes of EPI_PAR_MIN elements or more are split
 * into one block of rows per pool thread; the parts' absmax / non-finite
 * counts are combined in part order (max and sum: exact, so the result does
 * not depend on the thread count). EPI_PAR_MIN is lower than the plain
 * element-wise threshold (PAR_MIN) because this pass does the work of up to
 * seven of them per element (a GELU alone costs tens of flops per element).
 */
#include "kernels/x86_avx512/loops_simd.h"

#include "kernels/generic/generic.h"

enum { EPI_PAR_MIN = 1 << 15, EPI_PARTS_MAX = 64 };

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
    if ((size_t)e->B * (size_t)e->C >= EPI_PAR_MIN) {
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
