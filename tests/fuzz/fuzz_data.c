/* tests/fuzz/fuzz_data.c: libFuzzer target for the user-data readers and
 * what eval, predict and train build from them.
 *
 * An input that starts with '{' is a checkpoint's "workload_meta" text and
 * goes through ud_meta_parse (what eval, predict, export and ckpt verify
 * accept). Any other input is a data file: it is put in a memfd and read
 * by mxp_dataset_read through /proc/self/fd/N (the .npz reader through
 * libzip, the safetensors reader), then checked as each workload
 * (mxp_dataset_check) and, when it fits one, turned into that workload's
 * provider (rows, split, standardisation: mxp_workload_provider_dataset)
 * and evaluated on a tiny model. Any crash, sanitizer report, leak, hang
 * (-timeout) or allocation above -malloc_limit_mb is a finding. Built and
 * run by tests/fuzz/run_fuzz.sh; seeds in tests/fuzz/corpus_data
 * (tests/fuzz/make_corpus_data.py). */
#include <mixprec/mixprec.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "models/user_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mxp_config g_cfg[MXP_DATASET_KIND_COUNT];
static bool g_ready;

static void setup(void) {
    static const char *const wl[MXP_DATASET_KIND_COUNT] = {
        "model.workload=world_model", "model.workload=classifier", "model.workload=regressor"};
    for (int k = 0; k < MXP_DATASET_KIND_COUNT; k++) {
        mxp_config_builder *b = NULL;
        const char *kv[] = {wl[k], "model.hidden=4", "model.depth=1", "training.batch_size=2"};
        if (mxp_config_builder_create(&b, NULL) != MXP_OK) abort();
        for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
            if (mxp_config_apply_override(b, kv[i], NULL) != MXP_OK) abort();
        if (mxp_config_resolve(b, &g_cfg[k], NULL) != MXP_OK) abort();
        mxp_config_builder_destroy(b);
    }
    g_ready = true;
}

/* The provider of workload k on d, and its evaluation on a tiny model. */
static void provide(int k, const mxp_dataset *d) {
    mxp_error err = {0};
    mxp_workload_provider wl;
    if (mxp_workload_provider_dataset(&g_cfg[k], d, &wl, &err) != MXP_OK) return;
    mxp_model_spec spec;
    mxp_model *m = NULL;
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    /* the model's widths come from the data: only small ones are built */
    if (wl.model_spec(wl.self, &spec, &err) == MXP_OK) {
        size_t params = 0;
        if (mxp_model_spec_num_params(&spec, &params, &err) == MXP_OK && params < (1u << 20) &&
            mxp_model_create(&spec, &pol, 1, &m, &err) == MXP_OK) {
            mxp_run_eval ev;
            (void)wl.evaluate(wl.self, m, &ev, &err);
        }
    }
    mxp_model_destroy(m);
    wl.destroy(wl.self);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ready) setup();
    mxp_error err = {0};
    if (size > 0 && data[0] == '{') {
        char *text = malloc(size + 1);
        if (!text) return 0;
        memcpy(text, data, size);
        text[size] = '\0';
        ud_meta m;
        if (ud_meta_parse(text, "fuzz", &m, &err) == MXP_OK) ud_meta_free(&m);
        free(text);
        return 0;
    }
    int fd = memfd_create("fuzz_data", MFD_CLOEXEC);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    mxp_dataset *d = NULL;
    if (mxp_dataset_read(path, &d, &err) == MXP_OK) {
        for (int k = 0; k < MXP_DATASET_KIND_COUNT; k++)
            if (mxp_dataset_check(d, (mxp_dataset_kind)k, NULL, &err) == MXP_OK) provide(k, d);
        mxp_dataset_destroy(d);
    }
    close(fd);
    return 0;
}
