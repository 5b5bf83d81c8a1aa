/* backend/cuda/dstep_internal.h: the device step's plan, shared by
 * dstep_plan.c (made once: buffers, storage dtypes, GEMM plans, host
 * staging) and dstep_run.c (the step). Internal to those two files.
 */
#ifndef MIXPREC_BACKEND_CUDA_DSTEP_INTERNAL_H
#define MIXPREC_BACKEND_CUDA_DSTEP_INTERNAL_H

#include "backend/cuda/dstep.h"
#include "backend/cuda/step_bodies.h"

/* Device slab alignment in elements: 128 (256 bytes in BF16/FP16, 512 in
 * FP32), so every weight, bias and gradient a cuBLASLt GEMM reads or
 * writes starts where cudaMalloc's own buffers do: the algorithm chosen at
 * plan time assumes the default 256-byte operand alignment
 * (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES). The padding elements are
 * zeros in every slab and stay zero (gradient 0, AdamW/SGD of zeros); the
 * grad pass counts them among n and zeros, nothing else sees them. */
#define MXP_DS_ALIGN 128

/* The GEMM plans of a linear layer: cuBLASLt's three, plus dW with beta 1
 * (micro-batches after the first add into the slab). */
enum { MXP_DS_DW_ACC = MXP_LT_GEMM_COUNT, MXP_DS_GEMMS };

struct mxp_ds_plan {
    mxp_ds_spec s;
    const mxp_ds_ops *ops;
    void *dev;
    int L;
    int K;            /* micro-batches */
    int64_t rows_max; /* rows of the largest micro-batch (every buffer is sized for it) */
    int nvar;         /* row-count variants: 1, or 2 (rows_max, rows_max - 1) */
    int64_t width[MXP_DS_MAX_LAYERS + 1];
    int64_t off_w[MXP_DS_MAX_LAYERS], off_b[MXP_DS_MAX_LAYERS]; /* host slab; -1: none */
    int64_t dev_w[MXP_DS_MAX_LAYERS], dev_b[MXP_DS_MAX_LAYERS]; /* device slabs (padded) */
    int64_t cnt_w[MXP_DS_MAX_LAYERS], cnt_b[MXP_DS_MAX_LAYERS]; /* elements */
    mxp_dtype st[MXP_DS_MAX_LAYERS + 1]; /* storage of acts[l] */
    size_t P;  /* parameters (the CPU slab) */
    size_t PD; /* device slab elements: every tensor starts on a MXP_DS_ALIGN boundary */
    int64_t maxw;
    /* device buffers (rows: rows_max unless named) */
    float *master, *grads, *m, *v, *pw32; /* pw32: the work copy widened (= master in fp32) */
    void *work;                           /* = master in fp32 */
    void *acts[MXP_DS_MAX_LAYERS + 1];
    bool x_direct;  /* fp32 with one micro-batch: x is uploaded into acts[0] */
    float *x32;     /* [batch, in_dim] (NULL when x_direct) */
    float *target;  /* [batch, out] (MSE) */
    int32_t *labels; /* [batch] (XENT) */
    float *y32, *sa, *sb, *dx32;
    double *loss_slots; /* [K] when K > 1 (else the control block's slot); in the
                         * aux area when scans, else its own buffer */
    /* scans (a table with aux ops and slots that fit): per micro-batch S =
     * 2 L + 2 slots, [0, L) the layer outputs, L the loss gradient, L + 1 + l
     * layer l's input gradient (l >= 1), 2 L + 1 a planted backward fault's
     * parameter gradient (written only then); in the aux area after the
     * loss slots */
    bool scans;
    int S;
    size_t aux_bytes, scan_off; /* the aux area's used bytes; the scans' offset in it */
    mxp_ds_scan *scan_d; /* device */
    const mxp_ds_scan *scan_h; /* the host mirror (in the staging) */
    const double *loss_h;
    void *g[2];         /* activation gradients, ping-pong, in the low dtype */
    float *ln_mean[MXP_DS_MAX_LAYERS], *ln_rstd[MXP_DS_MAX_LAYERS];
    void *lt[MXP_DS_MAX_LAYERS][2][MXP_DS_GEMMS];          /* [layer][variant][gemm] */
    mxp_lt_desc desc[MXP_DS_MAX_LAYERS][2][MXP_DS_GEMMS];
    /* host staging (page-locked when the table has host_alloc): the control
     * block (the host's mirror between steps: written at the step's start,
     * the report's destination), then x, then y or labels */
    void *stage;
    mxp_step_ctl *ctl;
    float *x_h, *y_h;
    int32_t *lab_h;
    /* the captured step (spec.graphs on a table with graph ops) */
    bool use_graphs;
    bool warm;         /* a step ran (eagerly): later steps may be graphed */
    void *graph;       /* NULL: none yet / dropped */
    float graph_scale; /* the loss scale baked into it */
    /* FP8 (spec.fp8; dstep_fp8.c): per linear layer, FP8 or BF16 (and why);
     * its first scaling slot (x, W, dY); the device state; the quantised
     * operands' scratch (1-byte codes): x, x^T, W, W^T, dY, dY^T */
    bool f8_on[MXP_DS_MAX_LAYERS];
    char f8_why[MXP_DS_MAX_LAYERS][192];
    int f8_slot[MXP_DS_MAX_LAYERS];
    int f8_n; /* slots */
    void *f8_st;
    float *f8_scale, *f8_inv, *f8_amax; /* in f8_st */
    uint8_t *q_x, *q_xt, *q_w, *q_wt, *q_g, *q_gt;
    mxp_ds_fault fault; /* mxp_ds_set_fault (dstep_run.c) */
};

/* dstep_fp8.c (the FP8 part of the plan and the step; no-ops for a plan
 * without spec.fp8): classify the linear layers (before the storage
 * rules, which depend on it); the state and scratch; a linear layer's FP8
 * GEMM plans for variant v; reset the state (set_params); free. */
void mxp_ds_f8_classify(mxp_ds_plan *p);
int mxp_ds_f8_alloc(mxp_ds_plan *p, char *why, size_t n);
int mxp_ds_f8_gemm_plans(mxp_ds_plan *p, int l, int v, int64_t rows, char *why, size_t n);
int mxp_ds_f8_reset(mxp_ds_plan *p, char *why, size_t n);
void mxp_ds_f8_free(mxp_ds_plan *p);
/* The step: forward of FP8 linear layer l on x32 [B, in] into y [B, out]
 * (FP32, bias added); backward from dy32 [B, out] (FP32 values of the
 * stored dY) and x32 (the layer input as FP32): dW (beta 0, or 1 with
 * acc) into the grad slab, dX [B, in] into dx32 when not NULL; the
 * end-of-pass scaling update. */
int mxp_ds_f8_forward(mxp_ds_plan *p, int l, int v, int64_t B, const float *x32, float *y,
                      char *why, size_t n);
int mxp_ds_f8_backward(mxp_ds_plan *p, int l, int v, bool acc, int64_t B, const float *dy32,
                       const float *x32, float *dx32, char *why, size_t n);
int mxp_ds_f8_update(mxp_ds_plan *p, char *why, size_t n);

static inline size_t mxp_ds_dsize(mxp_dtype t) { return t == MXP_DTYPE_F32 ? 4 : 2; }

#endif /* MIXPREC_BACKEND_CUDA_DSTEP_INTERNAL_H */
