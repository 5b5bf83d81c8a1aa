/* tests/test_gpt_workload.c: the character-level GPT workload and
 * `mixprec sample`.
 *
 *   - on a crafted text (a period-5 pattern, gzip-compressed): vocabulary,
 *     split sizes, training lowers the held-out loss far below ln(V), and
 *     greedy sampling continues the pattern exactly; the same seed gives
 *     the same text;
 *   - errors name the file or key: missing file, text too short, gpt.embd
 *     not a multiple of gpt.heads, a prompt byte absent from the text;
 *   - the CLI trains it (--json), writes model.safetensors, and
 *     `mixprec sample --checkpoint` continues the pattern from it; a
 *     missing checkpoint is a usage error;
 *   - the Jargon File (Debian jargon-text), when installed: a few steps in
 *     mixed_bf16 give finite losses.
 */
#include <mixprec/gpt.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "testutil.h"

static char g_dir[128];
static const char *const PATTERN = "hello"; /* period 5: h e l l o */

static void write_text(const char *name, size_t n, bool gz) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = PATTERN[i % 5];
    if (gz) {
        gzFile f = gzopen(p, "wb");
        CHECK(f && gzwrite(f, buf, (unsigned)n) == (int)n && gzclose(f) == Z_OK);
    } else {
        FILE *f = fopen(p, "wb");
        CHECK(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0);
    }
    free(buf);
}

/* A small GPT config on g_dir/name plus extra overrides. */
static mxp_status make_cfg(const char *name, const char *extra, mxp_config *cfg, mxp_error *err) {
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, err);
    char kv[400];
    snprintf(kv, sizeof kv, "data.text_file=%s/%s", g_dir, name);
    const char *base[] = {"model.workload=gpt", "gpt.layers=1", "gpt.embd=16", "gpt.heads=2",
                          "gpt.context=8", "training.batch_size=4", "training.lr=0.01",
                          "training.epochs=2", kv};
    for (size_t i = 0; s == MXP_OK && i < sizeof base / sizeof base[0]; i++)
        s = mxp_config_apply_override(b, base[i], err);
    if (s == MXP_OK && extra) s = mxp_config_apply_override(b, extra, err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, err);
    mxp_config_builder_destroy(b);
    return s;
}

static void test_pattern(void) {
    write_text("hello.txt.gz", 4000, true);
    mxp_config cfg;
    mxp_error err = {0};
    CHECK_OK(make_cfg("hello.txt.gz", NULL, &cfg, &err), &err);
    mxp_gpt *g = NULL;
    CHECK_OK(mxp_gpt_create(&cfg, &g, &err), &err);
    if (!g) return;
    CHECK(mxp_gpt_vocab_size(g) == 4); /* e h l o */
    CHECK(mxp_gpt_train_chars(g) == 3600 && mxp_gpt_val_chars(g) == 400);
    CHECK(mxp_gpt_tokens_per_epoch(g) == (3599 / 8) / 4 * 4 * 8);
    double v0 = 0, v1 = 0;
    CHECK_OK(mxp_gpt_evaluate(g, &v0, &err), &err);
    CHECK_CLOSE(v0, log(4.0), 0.2, 0); /* untrained: near uniform */
    CHECK_OK(mxp_gpt_train(g, 2, &err), &err);
    CHECK_OK(mxp_gpt_evaluate(g, &v1, &err), &err);
    printf("  pattern: held-out loss %.4f -> %.4f nats/char\n", v0, v1);
    CHECK(v1 < 0.1);
    char out[64], out2[64];
    CHECK_OK(mxp_gpt_sample(g, "hel", 20, 1e-4f, 1, out, &err), &err);
    CHECK_MSG(strcmp(out, "lohellohellohellohel") == 0, "greedy: '%s'", out);
    CHECK_OK(mxp_gpt_sample(g, "", 30, 1.0f, 9, out, &err), &err);
    CHECK_OK(mxp_gpt_sample(g, "", 30, 1.0f, 9, out2, &err), &err);
    CHECK(strlen(out) == 30 && strcmp(out, out2) == 0);
    CHECK(mxp_gpt_sample(g, "hex", 5, 1.0f, 1, out, &err) == MXP_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "prompt byte 2 (0x78)"), "%s", err.msg);
    CHECK(mxp_gpt_sample(g, "h", 5, 0.0f, 1, out, &err) == MXP_ERR_INVALID_ARG);
    mxp_gpt_destroy(g);
}

static void test_errors(void) {
    mxp_config cfg;
    mxp_error err = {0};
    mxp_gpt *g = NULL;
    CHECK_OK(make_cfg("missing.txt", NULL, &cfg, &err), &err);
    CHECK(mxp_gpt_create(&cfg, &g, &err) == MXP_ERR_IO && !g);
    CHECK_MSG(strstr(err.msg, "missing.txt") && strstr(err.msg, "data.text_file"), "%s",
              err.msg);
    write_text("short.txt", 60, false);
    CHECK_OK(make_cfg("short.txt", NULL, &cfg, &err), &err);
    CHECK(mxp_gpt_create(&cfg, &g, &err) == MXP_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "short.txt") && strstr(err.msg, "windows"), "%s", err.msg);
    CHECK_OK(make_cfg("hello.txt.gz", "gpt.embd=15", &cfg, &err), &err);
    CHECK(mxp_gpt_create(&cfg, &g, &err) == MXP_ERR_CONFIG);
    CHECK_MSG(strstr(err.msg, "gpt.embd=15") && strstr(err.msg, "gpt.heads=2"), "%s", err.msg);
    CHECK_OK(make_cfg("hello.txt.gz", "data.train_subset=3", &cfg, &err), &err);
    CHECK(mxp_gpt_create(&cfg, &g, &err) == MXP_ERR_CONFIG);
    CHECK(strstr(err.msg, "data.train_subset=3") != NULL);
}

/* Run a shell command, capture stdout into out; returns the exit status. */
static int run(const char *cmd, char *out, size_t n) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t k = fread(out, 1, n - 1, f);
    out[k] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void) {
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd,
             "%s train --json --quiet model.workload=gpt data.text_file=%s/hello.txt.gz "
             "gpt.layers=1 gpt.embd=16 gpt.heads=2 gpt.context=8 training.batch_size=4 "
             "training.lr=0.01 training.epochs=2 output.dir=%s/run 2>/dev/null",
             MXP_CLI_PATH, g_dir, g_dir);
    int rc = run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "\"workload\":\"gpt\"") && strstr(out, "\"val_loss\":") &&
                  strstr(out, "\"val_bits_per_char\":"),
              "train rc %d: %s", rc, out);
    snprintf(cmd, sizeof cmd,
             "%s sample --checkpoint %s/run/model.safetensors --prompt hel --length 10 "
             "--temperature 0.0001 2>/dev/null",
             MXP_CLI_PATH, g_dir);
    rc = run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strcmp(out, "hellohellohel\n") == 0, "sample rc %d: '%s'", rc, out);
    snprintf(cmd, sizeof cmd, "%s sample --checkpoint %s/nope.safetensors 2>&1", MXP_CLI_PATH,
             g_dir);
    rc = run(cmd, out, sizeof out);
    CHECK_MSG(rc == 2 && strstr(out, "nope.safetensors"), "missing ckpt rc %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s sample 2>&1", MXP_CLI_PATH);
    rc = run(cmd, out, sizeof out);
    CHECK_MSG(rc == 2 && strstr(out, "--checkpoint"), "no ckpt rc %d: %s", rc, out);
}

static void test_jargon(void) {
    const char *path = "/usr/share/doc/jargon-text/jargon.txt.gz";
    if (access(path, R_OK) != 0) {
        printf("  note: %s not installed (Debian jargon-text); skipped\n", path);
        return;
    }
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config cfg;
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    const char *kv[] = {"model.workload=gpt", "gpt.layers=1", "gpt.embd=32", "gpt.context=32",
                        "training.batch_size=8", "data.train_subset=24", "data.test_subset=8",
                        "training.precision=mixed_bf16"};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        CHECK_OK(mxp_config_apply_override(b, kv[i], &err), &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    mxp_gpt *g = NULL;
    CHECK_OK(mxp_gpt_create(&cfg, &g, &err), &err);
    if (!g) return;
    CHECK(mxp_gpt_vocab_size(g) > 90 && mxp_gpt_train_chars(g) > 1000000);
    CHECK_OK(mxp_gpt_train(g, 1, &err), &err);
    double v = 0;
    CHECK_OK(mxp_gpt_evaluate(g, &v, &err), &err);
    printf("  jargon: vocab %lld, %lld train / %lld held-out bytes, val loss %.3f after 3 steps\n",
           (long long)mxp_gpt_vocab_size(g), (long long)mxp_gpt_train_chars(g),
           (long long)mxp_gpt_val_chars(g), v);
    CHECK(isfinite(v) && v < log((double)mxp_gpt_vocab_size(g)) + 0.5);
    mxp_gpt_destroy(g);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mxp_test_gptw_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    test_pattern();
    test_errors();
    test_cli();
    test_jargon();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
    return test_finish("test_gpt_workload");
}
