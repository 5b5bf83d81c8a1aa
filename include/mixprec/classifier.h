/* mixprec/classifier.h: the Fashion-MNIST classifier workload, read with
 * data.h's IDX reader (mxp_idx_read).
 *
 * The classifier is an MLP (model.depth x [linear(model.hidden) ->
 * [layernorm] -> activation], then linear(10)) trained with softmax
 * cross-entropy on the Fashion-MNIST training split (Debian package
 * dataset-fashion-mnist) and evaluated on its official 10,000-image test
 * split. Pixels are scaled to [0, 1] and standardised with the dataset's
 * training mean and std (0.2860, 0.3530). Batches are drawn without
 * replacement from a seeded per-epoch permutation (drop-last), so the same
 * seed and config give bit-identical losses.
 */
#ifndef MIXPREC_CLASSIFIER_H
#define MIXPREC_CLASSIFIER_H

#include <mixprec/world_model.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the Fashion-MNIST dataset -------------------------------------------- */

#define MXP_FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define MXP_FMNIST_CLASSES 10

/* One split: images [n, rows*cols] unsigned bytes, labels [n] in [0, 10). */
typedef struct mxp_image_split {
    int64_t n;
    int64_t rows, cols;
    const uint8_t *images;
    const uint8_t *labels;
} mxp_image_split;

typedef struct mxp_fmnist mxp_fmnist;

/* Load train-{images-idx3,labels-idx1}-ubyte and t10k-... from dir, each
 * as NAME or NAME.gz. Keeps the first max_train / max_test examples (0:
 * all). Checks shapes (images 3-D, labels 1-D, matching counts, equal image
 * sizes in both splits) and labels < 10, naming the file on error. */
MXP_API mxp_status mxp_fmnist_load(const char *dir, int64_t max_train, int64_t max_test,
                                   mxp_fmnist **out, mxp_error *err);
MXP_API void mxp_fmnist_destroy(mxp_fmnist *d);
MXP_API mxp_image_split mxp_fmnist_train(const mxp_fmnist *d);
MXP_API mxp_image_split mxp_fmnist_test(const mxp_fmnist *d);

/* ---- the classifier workload ---------------------------------------------- */

typedef struct mxp_classifier mxp_classifier;

/* Load the dataset (cfg->data_dir or the default directory, subsets
 * cfg->train_subset / cfg->test_subset) and build model + trainer. The
 * largest batch is cfg->batch_size; evaluation runs in chunks. */
MXP_API mxp_status mxp_classifier_create(const mxp_config *cfg, mxp_classifier **out,
                                         mxp_error *err);
/* As create, on an already loaded dataset (borrowed: it must outlive cl). */
MXP_API mxp_status mxp_classifier_create_with_data(const mxp_config *cfg, const mxp_fmnist *data,
                                                   mxp_classifier **out, mxp_error *err);
MXP_API void mxp_classifier_destroy(mxp_classifier *cl);
MXP_API void mxp_classifier_set_progress(mxp_classifier *cl, mxp_progress_fn fn, void *user);

/* Train num_epochs more epochs (the LR schedule planned over the run, docs/run.md). */
MXP_API mxp_status mxp_classifier_train(mxp_classifier *cl, int64_t num_epochs, mxp_error *err);

/* Mean cross-entropy and top-1 accuracy (fraction in [0, 1]) on the test
 * split, forward only, in the working precision. */
MXP_API mxp_status mxp_classifier_evaluate(mxp_classifier *cl, double *loss, double *accuracy,
                                           mxp_error *err);

MXP_API mxp_trainer *mxp_classifier_trainer(mxp_classifier *cl);
MXP_API mxp_model *mxp_classifier_model(mxp_classifier *cl);
/* The numerical-safety guard (guard.h; created when guard.enabled or a
 * fault is configured, its canary probing the first test images), or NULL.
 * Rollbacks move the data position back, as in the world model. */
MXP_API mxp_guard *mxp_classifier_guard(mxp_classifier *cl);
/* True when the last train() was ended by a guard rule with action stop. */
MXP_API bool mxp_classifier_stopped(const mxp_classifier *cl);
/* Training examples used per epoch (after drop-last). */
MXP_API int64_t mxp_classifier_samples_per_epoch(const mxp_classifier *cl);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_CLASSIFIER_H */
