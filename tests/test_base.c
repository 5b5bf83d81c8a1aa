/* tests/test_base.c: base module: status names, error context, size
 * overflow checks, aligned allocation, Philox known-answer vectors, RNG
 * distribution sanity, log callback filtering. */
#include <mixprec/base.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "testutil.h"

static int log_calls;
static char last_msg[256];
static void capture(void *user, mxp_log_level level, const char *msg) {
    (void)user;
    (void)level;
    log_calls++;
    snprintf(last_msg, sizeof last_msg, "%s", msg);
}

int main(void) {
    /* status names are distinct and stable */
    CHECK(strcmp(mxp_status_name(MXP_OK), "ok") == 0);
    CHECK(strcmp(mxp_status_name(MXP_ERR_CONFIG), "config_error") == 0);
    CHECK(strcmp(mxp_status_name((mxp_status)99), "unknown_status") == 0);

    mxp_error err;
    CHECK(mxp_error_set(&err, MXP_ERR_INVALID_ARG, "x=%d", 7) == MXP_ERR_INVALID_ARG);
    CHECK(err.status == MXP_ERR_INVALID_ARG && strcmp(err.msg, "x=7") == 0);
    CHECK(mxp_error_set(NULL, MXP_ERR_IO, "ignored") == MXP_ERR_IO);
    mxp_error_clear(&err);
    CHECK(err.status == MXP_OK && err.msg[0] == '\0');

    size_t s = 0;
    CHECK(mxp_size_mul(1u << 20, 1u << 10, &s) && s == (size_t)1 << 30);
    CHECK(!mxp_size_mul(SIZE_MAX / 2, 3, &s));
    CHECK(!mxp_size_add(SIZE_MAX, 1, &s));
    CHECK(mxp_calloc(SIZE_MAX / 4, 8) == NULL);

    unsigned char *p = mxp_calloc(100, 3);
    CHECK(p != NULL && ((uintptr_t)p % MXP_ALIGN) == 0);
    int zero = 1;
    for (int i = 0; i < 300; i++) zero &= p[i] == 0;
    CHECK(zero);
    mxp_free(p);
    mxp_free(NULL);

    /* Philox4x32-10 known-answer tests (Random123 kat_vectors):
     * ctr=0, key=0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8 */
    static const uint32_t kat0[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(mxp_rng_at(0, (uint64_t)i) == kat0[i], "philox word %d = %08x", i,
                  mxp_rng_at(0, (uint64_t)i));

    mxp_rng r;
    mxp_rng_init(&r, 42);
    double sum = 0, sumsq = 0, nsum = 0, nsq = 0;
    const int N = 200000;
    for (int i = 0; i < N; i++) {
        float u = mxp_rng_uniform(&r);
        CHECK(u >= 0.0f && u < 1.0f);
        sum += u;
        sumsq += (double)u * u;
        float z = mxp_rng_normal(&r);
        nsum += z;
        nsq += (double)z * z;
    }
    CHECK_CLOSE(sum / N, 0.5, 0.005, 0);
    CHECK_CLOSE(sumsq / N - (sum / N) * (sum / N), 1.0 / 12, 0.002, 0);
    CHECK_CLOSE(nsum / N, 0.0, 0.01, 0);
    CHECK_CLOSE(nsq / N, 1.0, 0.02, 0);
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) counts[mxp_rng_below(&r, 7)]++;
    for (int i = 0; i < 7; i++) CHECK_CLOSE(counts[i], 10000, 400, 0);
    /* the state is just (seed, counter): same position, same value */
    mxp_rng a, b;
    mxp_rng_init(&a, 9);
    mxp_rng_init(&b, 9);
    for (int i = 0; i < 5; i++) mxp_rng_u32(&a);
    b.counter = 5;
    CHECK(mxp_rng_u32(&a) == mxp_rng_u32(&b));

    /* mxp_rng_uniform_fill = that many mxp_rng_uniform calls, bit for bit,
     * from any counter (block-aligned or not, across a 2^32 carry), and the
     * counter ends where the calls leave it */
    static const uint64_t starts[] = {0, 1, 3, 4, 7, 0xfffffffdull};
    static const size_t lens[] = {0, 1, 2, 3, 4, 5, 13, 64};
    float got[64];
    for (size_t si = 0; si < sizeof starts / sizeof starts[0]; si++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            mxp_rng f = {0x1234567890abcdefull, starts[si]}, u = f;
            mxp_rng_uniform_fill(&f, got, lens[li]);
            for (size_t i = 0; i < lens[li]; i++) {
                float want = mxp_rng_uniform(&u);
                CHECK_MSG(memcmp(&got[i], &want, sizeof want) == 0,
                          "fill from %llu, n %zu: [%zu] = %.9g, uniform %.9g",
                          (unsigned long long)starts[si], lens[li], i, got[i], want);
            }
            CHECK(f.counter == u.counter);
        }

    /* the log callback honours the level filter */
    mxp_log_set_callback(capture, NULL);
    mxp_log_set_level(MXP_LOG_WARN);
    mxp_log(MXP_LOG_INFO, "dropped");
    mxp_log(MXP_LOG_WARN, "kept %d", 1);
    CHECK(log_calls == 1 && strcmp(last_msg, "kept 1") == 0);
    mxp_log_set_callback(NULL, NULL);

    const mxp_cpu_features *f = mxp_cpu_features_get();
    CHECK(f == mxp_cpu_features_get());
    CHECK(mxp_time_now() > 0);
    return test_finish("test_base");
}
