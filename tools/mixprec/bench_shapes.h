/* tools/mixprec/bench_shapes.h: the GEMM shapes `mixprec bench kernels`
 * measures, shared with bench/bench_gemm_cpu.c (the one-thread CPU-time
 * comparison against oneDNN).
 *
 *   core      square and rectangular BLAS-style shapes plus the batch-32
 *             world-model layers (the list every earlier pass reported);
 *   training  every GEMM a training step of the benchmark MLPs issues, by
 *             model and pass (docs/kernels.md "Where the time goes"):
 *             the hidden x hidden layers for hidden 256, 512, 2048 at batch
 *             32, 128, 256, 512, and the first (72 -> H) and last (H -> 65)
 *             layers of 72-512x3-65 at batch 256 and 72-2048x3-65 at batch
 *             512. A linear layer x[B, in] W[out, in]^T issues
 *               fwd  y  = x W^T     NT  M = B,   N = out, K = in
 *               dX   dx = dY W      NN  M = B,   N = in,  K = out
 *               dW   dW  = dY^T x   TN  M = out, N = in,  K = B  (beta 0)
 *             (src/nn/layer_linear.c; the first layer has no dX). The dW
 *             GEMM writes (beta 0) in the step's first micro-batch, which
 *             with the default grad_accum_steps = 1 is every step
 *             (nn_grad_beta); later micro-batches accumulate (beta 1).
 */
#ifndef MIXPREC_TOOLS_BENCH_SHAPES_H
#define MIXPREC_TOOLS_BENCH_SHAPES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct bench_gemm_shape {
    char label[32]; /* "square", "h512 b256 dW", "mlp2048 in fwd", ... */
    int64_t M, N, K;
    bool trans_a, trans_b;
    float beta;    /* 0 (C written) or 1 (C accumulated into) */
    bool training; /* a training-step shape: measured for f32, bf16, f16 */
} bench_gemm_shape;

typedef enum bench_shape_set {
    BENCH_SHAPES_CORE,
    BENCH_SHAPES_TRAINING,
    BENCH_SHAPES_ALL,
    BENCH_SHAPES_COUNT
} bench_shape_set;

static const char *const bench_shape_set_names[] = {"core", "training", "all"};
_Static_assert(sizeof bench_shape_set_names / sizeof bench_shape_set_names[0] ==
                   BENCH_SHAPES_COUNT, "one name per shape set");

enum { BENCH_SHAPES_MAX = 64 };

static inline int bench_shape_add(bench_gemm_shape *out, int n, const char *label, int64_t M,
                                  int64_t N, int64_t K, bool ta, bool tb, float beta) {
    if (n >= BENCH_SHAPES_MAX) return n;
    bench_gemm_shape *s = &out[n];
    snprintf(s->label, sizeof s->label, "%s", label);
    s->M = M;
    s->N = N;
    s->K = K;
    s->trans_a = ta;
    s->trans_b = tb;
    s->beta = beta;
    s->training = false;
    return n + 1;
}

/* The three GEMMs of a linear layer in -> out at batch B, labelled
 * "<name> fwd|dX|dW"; with_dx false for a first layer. */
static inline int bench_shape_layer(bench_gemm_shape *out, int n, const char *name, int64_t B,
                                    int64_t in, int64_t o, bool with_fwd, bool with_dx,
                                    bool with_dw) {
    char l[32];
    int first = n;
    if (with_fwd) {
        snprintf(l, sizeof l, "%s fwd", name);
        n = bench_shape_add(out, n, l, B, o, in, false, true, 0.0f);
    }
    if (with_dx) {
        snprintf(l, sizeof l, "%s dX", name);
        n = bench_shape_add(out, n, l, B, in, o, false, false, 0.0f);
    }
    if (with_dw) {
        snprintf(l, sizeof l, "%s dW", name);
        n = bench_shape_add(out, n, l, o, in, B, true, false, 0.0f);
    }
    for (int i = first; i < n; i++) out[i].training = true;
    return n;
}

/* Fill out[] (BENCH_SHAPES_MAX entries) with the shapes of `set`; quick
 * trims the core list to its small shapes. Returns the count. */
static inline int bench_shapes_fill(bench_shape_set set, bool quick, bench_gemm_shape *out) {
    int n = 0;
    if (set == BENCH_SHAPES_CORE || set == BENCH_SHAPES_ALL) {
        n = bench_shape_add(out, n, "square", 256, 256, 256, false, false, 0.0f);
        n = bench_shape_add(out, n, "square", 512, 512, 512, false, false, 0.0f);
        n = bench_shape_add(out, n, "square", 1024, 1024, 1024, false, false, 0.0f);
        if (!quick) {
            n = bench_shape_add(out, n, "square", 2048, 2048, 2048, false, false, 0.0f);
            n = bench_shape_add(out, n, "wide-k", 256, 2048, 512, false, false, 0.0f);
            n = bench_shape_add(out, n, "deep-k", 256, 512, 2048, false, false, 0.0f);
            n = bench_shape_add(out, n, "tall", 4096, 1024, 1024, false, false, 0.0f);
        }
        n = bench_shape_add(out, n, "wm-256 fwd", 32, 256, 256, false, true, 0.0f);
        n = bench_shape_add(out, n, "wm-256 bwd dX", 32, 256, 256, false, false, 0.0f);
        n = bench_shape_add(out, n, "wm-256 bwd dW", 256, 256, 32, true, false, 0.0f);
        n = bench_shape_add(out, n, "wm-2048 fwd", 32, 2048, 2048, false, true, 0.0f);
        if (!quick) {
            n = bench_shape_add(out, n, "wm-2048 bwd dX", 32, 2048, 2048, false, false, 0.0f);
            n = bench_shape_add(out, n, "wm-2048 bwd dW", 2048, 2048, 32, true, false, 0.0f);
        }
    }
    if (set == BENCH_SHAPES_TRAINING || set == BENCH_SHAPES_ALL) {
        static const int64_t hidden[] = {256, 512, 2048}, batch[] = {32, 128, 256, 512};
        for (int h = 0; h < 3; h++)
            for (int b = 0; b < 4; b++) {
                char name[16];
                snprintf(name, sizeof name, "h%lld b%lld", (long long)hidden[h],
                         (long long)batch[b]);
                n = bench_shape_layer(out, n, name, batch[b], hidden[h], hidden[h], true, true,
                                      true);
            }
        /* the MLPs' first and last layers (their hidden layers are above) */
        n = bench_shape_layer(out, n, "mlp512 in", 256, 72, 512, true, false, true);
        n = bench_shape_layer(out, n, "mlp512 out", 256, 512, 65, true, true, true);
        n = bench_shape_layer(out, n, "mlp2048 in", 512, 72, 2048, true, false, true);
        n = bench_shape_layer(out, n, "mlp2048 out", 512, 2048, 65, true, true, true);
    }
    return n;
}

#endif /* MIXPREC_TOOLS_BENCH_SHAPES_H */
