/* backend/device.c: training.device parsing and the host side of the CUDA
 * device queries (public contract: include/mixprec/device.h).
 *
 * Entry points: mxp_device_parse, mxp_device_format, mxp_cuda_built,
 * mxp_cuda_device_count, mxp_cuda_device_info, mxp_cuda_build_version,
 * mxp_device_require.
 * With MIXPREC_HAVE_CUDA the queries call the CUDA side
 * (backend/cuda/cuda_backend.h, implemented in backend/cuda/device.cu);
 * without it this file references no CUDA symbol at all, so an OFF build
 * links and loads nothing of CUDA (tests/test_cuda_build.sh checks nm -D).
 */
#include <mixprec/device.h>

#include <stdio.h>
#include <string.h>

#ifdef MIXPREC_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

enum { DEVICE_ORDINAL_MAX = 1023 };

static const char *const kind_names[] = {"cpu", "cuda"};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == MXP_DEVICE_KIND_COUNT,
               "kind_names must cover mxp_device_kind");

mxp_status mxp_device_parse(const char *text, mxp_device *out, mxp_error *err) {
    if (!text || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_device_parse: NULL argument");
    if (strcmp(text, "cpu") == 0) {
        *out = (mxp_device){MXP_DEVICE_CPU, 0};
        return MXP_OK;
    }
    if (strcmp(text, "cuda") == 0) {
        *out = (mxp_device){MXP_DEVICE_CUDA, 0};
        return MXP_OK;
    }
    if (strncmp(text, "cuda:", 5) == 0 && text[5] != '\0') {
        int v = 0;
        const char *p = text + 5;
        for (; *p >= '0' && *p <= '9' && v <= DEVICE_ORDINAL_MAX; p++) v = v * 10 + (*p - '0');
        if (*p == '\0' && v <= DEVICE_ORDINAL_MAX) {
            *out = (mxp_device){MXP_DEVICE_CUDA, v};
            return MXP_OK;
        }
    }
    return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                         "device '%.64s' is not valid; accepted: cpu, cuda, cuda:N (N = 0..%d)",
                         text, DEVICE_ORDINAL_MAX);
}

void mxp_device_format(const mxp_device *d, char *buf, size_t n) {
    if (!buf || n == 0) return;
    if (!d || (unsigned)d->kind >= MXP_DEVICE_KIND_COUNT)
        snprintf(buf, n, "unknown");
    else if (d->kind == MXP_DEVICE_CPU)
        snprintf(buf, n, "%s", kind_names[d->kind]);
    else
        snprintf(buf, n, "%s:%d", kind_names[d->kind], d->index);
}

#ifdef MIXPREC_HAVE_CUDA

bool mxp_cuda_built(void) { return true; }
int mxp_cuda_build_version(void) { return mxp_cudab_build_version(); }

mxp_status mxp_cuda_device_count(int *n, mxp_error *err) {
    if (!n) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_cuda_device_count: NULL");
    char why[256] = "";
    *n = mxp_cudab_device_count(why, sizeof why);
    if (*n > 0) return MXP_OK;
    *n = 0;
    return mxp_error_set(err, MXP_ERR_UNSUPPORTED, "no CUDA device: %s", why);
}

mxp_status mxp_cuda_device_info(int index, mxp_gpu_info *out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_cuda_device_info: NULL");
    memset(out, 0, sizeof *out);
    int n = 0;
    mxp_status s = mxp_cuda_device_count(&n, err);
    if (s != MXP_OK) return s;
    if (index < 0 || index >= n)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "CUDA device %d does not exist; accepted: 0..%d", index, n - 1);
    char why[256] = "";
    if (mxp_cudab_device_info(index, out, why, sizeof why) != 0)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED, "CUDA device %d: %s", index, why);
    return MXP_OK;
}

#else /* !MIXPREC_HAVE_CUDA */

static const char kNoCuda[] =
    "this build has no CUDA backend (configured with MIXPREC_CUDA=OFF, or AUTO without "
    "nvcc); rebuild with -DMIXPREC_CUDA=ON";

bool mxp_cuda_built(void) { return false; }
int mxp_cuda_build_version(void) { return 0; }

mxp_status mxp_cuda_device_count(int *n, mxp_error *err) {
    if (n) *n = 0;
    return mxp_error_set(err, MXP_ERR_UNSUPPORTED, "%s", kNoCuda);
}

mxp_status mxp_cuda_device_info(int index, mxp_gpu_info *out, mxp_error *err) {
    if (out) memset(out, 0, sizeof *out);
    return mxp_error_set(err, MXP_ERR_UNSUPPORTED, "%s", kNoCuda);
}

#endif /* MIXPREC_HAVE_CUDA */

mxp_status mxp_device_require(const mxp_device *d, mxp_error *err) {
    if (!d || (unsigned)d->kind >= MXP_DEVICE_KIND_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_device_require: no device; accepted: cpu, cuda, cuda:N");
    if (d->kind == MXP_DEVICE_CPU) return MXP_OK;
    mxp_gpu_info info; /* built without CUDA, no device, or no such ordinal: named */
    return mxp_cuda_device_info(d->index, &info, err);
}
