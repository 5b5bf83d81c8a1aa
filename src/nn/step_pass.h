/* nn/step_pass.h: a trainer step's forward/backward passes with their
 * result slots in backend memory the trainer owns (internal; step_pass.c).
 *
 * The trainer (train/trainer.c) reserves one slot block per pass (per
 * micro-batch, times the ensemble's members) in its backend's report area,
 * runs the passes without reading anything back, and after the step's one
 * report hands the host copy of the blocks back to read, micro-batch by
 * micro-batch: the site, the monitor's statistics and the loss are those
 * mxp_model_step would have returned (docs/design.md "A training step").
 * Every call here runs inside the caller's backend bracket.
 */
#ifndef MIXPREC_NN_STEP_PASS_H
#define MIXPREC_NN_STEP_PASS_H

#include <mixprec/model.h>

#include "backend/step_ctl.h"

/* Bytes of one pass's slot block (a multiple of 64). */
size_t nn_step_block_bytes(const mxp_model *m);
/* Blocks a step of n_batches micro-batches writes. */
int nn_step_blocks(const mxp_model *m, int n_batches);
/* Offset of a block's loss slot (a double) inside the block. */
size_t nn_step_loss_offset(void);

/* Begin a step whose passes write into `blocks` (backend memory,
 * nn_step_blocks(m, n_batches) * nn_step_block_bytes(m) bytes); the host
 * records grow when needed (MXP_ERR_OUT_OF_MEMORY). */
mxp_status nn_step_begin(mxp_model *m, void *blocks, int n_batches, mxp_error *err);

/* Per-layer loss scaling in this step's passes: layer l's output gradient
 * carries the scale groups[layer_group[l]].scale (l < the model's layer
 * count), in the step's group table in backend memory (backend/step_ctl.h,
 * uploaded by begin); the backward reads it there, at the rescale of dX
 * between two groups (nn_grad_rescale). Until nn_step_end; without the
 * call, one loss scale (or the host array of mxp_model_set_grad_scales). */
void nn_step_group_scales(mxp_model *m, const mxp_step_group_in *groups,
                          const int *layer_group);

/* The training pass (forward, loss, backward) of micro-batch i, whose loss
 * gradient is multiplied by (float)((double)*scale * num / den): the loss
 * scale read from the control block where it lives (backend memory), the
 * micro-batch's weight B_i / B_total as integers. The parameter gradients
 * are written (*grad_beta == 0) or added (1): the control block's
 * grad_beta, read by the gradient kernels where it lives; the pass then
 * sets *grad_beta = 1 there, so the next micro-batch adds. Errors as
 * mxp_model_step. */
mxp_status nn_step_pass(mxp_model *m, int i, const mxp_batch *b, const float *scale,
                        float *grad_beta, int64_t num, int64_t den, mxp_error *err);

/* After the report: micro-batch i's first non-finite site (zeroed when
 * none), monitor records and loss, from `host_blocks` (the host copy of
 * the blocks). Call for i = 0, 1, ... in order. */
void nn_step_read(mxp_model *m, int i, const void *host_blocks, mxp_nonfinite_site *site,
                  double *loss);

/* End of the step: the passes' blocks and the group table are the
 * trainer's no longer. */
void nn_step_end(mxp_model *m);

#endif /* MIXPREC_NN_STEP_PASS_H */
