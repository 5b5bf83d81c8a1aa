/* backend/cuda/device.cu: CUDA device queries and the backend context
 * (device, one non-blocking stream, a cuBLASLt handle and workspace, the
 * device-resident step control block and its aux area, the grad-pass
 * partials).
 *
 * Entry points: the query and context functions of cuda_backend.h.
 * Errors: every CUDA / cuBLASLt call is checked; the text of the failing
 * call's error goes to why[n]. Nothing prints or exits.
 * References: CUDA Runtime API (cudaGetDeviceCount, cudaGetDeviceProperties,
 * cudaMemGetInfo, cudaDriverGetVersion), cuBLASLt (cublasLtCreate, opened
 * with dlopen when a context is created).
 */
#include "backend/cuda/cuda_internal.cuh"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* cuBLASLt is opened when a context is created, not when libmixprec loads:
 * linking it would add ~0.16 s to every process start (measured with
 * ctypes.CDLL on this machine), also for runs that never touch a GPU. */
#define MXP_STR2(x) #x
#define MXP_STR(x) MXP_STR2(x)
#define MXP_CUBLASLT_SONAME "libcublasLt.so." MXP_STR(CUBLAS_VER_MAJOR)

static int lt_open(mxp_cudab_ctx *c, char *why, size_t n) {
    c->lt_lib = dlopen(MXP_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!c->lt_lib) {
        if (why && n) snprintf(why, n, "cannot load %s: %s", MXP_CUBLASLT_SONAME, dlerror());
        return 1;
    }
    c->lt_create = (cublasStatus_t(*)(cublasLtHandle_t *))dlsym(c->lt_lib, "cublasLtCreate");
    c->lt_destroy = (cublasStatus_t(*)(cublasLtHandle_t))dlsym(c->lt_lib, "cublasLtDestroy");
    if (!c->lt_create || !c->lt_destroy) {
        if (why && n) snprintf(why, n, "%s lacks cublasLtCreate/cublasLtDestroy", MXP_CUBLASLT_SONAME);
        return 1;
    }
    if (mxp_cudab_lt_fns_resolve(c->lt_lib, &c->lt_fns, why, n)) return 1;
    if (c->lt_create(&c->lt) != CUBLAS_STATUS_SUCCESS) {
        c->lt = NULL;
        if (why && n) snprintf(why, n, "cublasLtCreate failed");
        return 1;
    }
    return 0;
}

static_assert(sizeof(mxp_step_ctl) < 4096, "the control block stays small");

int mxp_cudab_fail(cudaError_t e, const char *what, char *why, size_t n) {
    if (why && n) snprintf(why, n, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return 1;
}

extern "C" int mxp_cudab_build_version(void) { return CUDART_VERSION; }

extern "C" int mxp_cudab_device_count(char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        mxp_cudab_fail(e, "cudaGetDeviceCount", why, n);
        (void)cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    if (count == 0 && why && n) snprintf(why, n, "the CUDA runtime reports 0 devices");
    return count;
}

extern "C" int mxp_cudab_device_info(int index, mxp_gpu_info *out, char *why, size_t n) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, index);
    if (e != cudaSuccess) return mxp_cudab_fail(e, "cudaGetDeviceProperties", why, n);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->index = index;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->total_mem = p.totalGlobalMem;
    out->multiprocessors = p.multiProcessorCount;
    if ((e = cudaDriverGetVersion(&out->driver_version)) != cudaSuccess)
        return mxp_cudab_fail(e, "cudaDriverGetVersion", why, n);
    if ((e = cudaRuntimeGetVersion(&out->runtime_version)) != cudaSuccess)
        return mxp_cudab_fail(e, "cudaRuntimeGetVersion", why, n);
    int prev = 0;
    if ((e = cudaGetDevice(&prev)) != cudaSuccess) return mxp_cudab_fail(e, "cudaGetDevice", why, n);
    if ((e = cudaSetDevice(index)) != cudaSuccess) return mxp_cudab_fail(e, "cudaSetDevice", why, n);
    size_t fr = 0, tot = 0;
    e = cudaMemGetInfo(&fr, &tot);
    cudaSetDevice(prev);
    if (e != cudaSuccess) return mxp_cudab_fail(e, "cudaMemGetInfo", why, n);
    out->free_mem = fr;
    return 0;
}

extern "C" int mxp_cudab_ctx_create(int device, mxp_cudab_ctx **out, char *why, size_t n) {
    *out = NULL;
    mxp_cudab_ctx *c = (mxp_cudab_ctx *)calloc(1, sizeof *c);
    if (!c) {
        if (why && n) snprintf(why, n, "out of host memory for the CUDA context");
        return 1;
    }
    c->device = device;
    cudaError_t e;
    if ((e = cudaSetDevice(device)) != cudaSuccess) goto fail_cuda_set;
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        mxp_cudab_fail(e, "cudaStreamCreateWithFlags", why, n);
        goto fail;
    }
    if (lt_open(c, why, n)) goto fail;
    c->lt_workspace_bytes = MXP_CUDAB_LT_WORKSPACE;
    if ((e = cudaMalloc(&c->lt_workspace, c->lt_workspace_bytes)) != cudaSuccess ||
        (e = cudaMalloc((void **)&c->ctl, MXP_CUDAB_AUX_OFF + MXP_CUDAB_AUX_CAP)) !=
            cudaSuccess ||
        (e = cudaMalloc((void **)&c->partials,
                        MXP_CUDAB_REDUCE_BLOCKS * sizeof(mxp_gradpass_acc))) != cudaSuccess ||
        (e = cudaMalloc(&c->mk_partials, MXP_CUDAB_MK_PARTIAL_BYTES)) != cudaSuccess) {
        mxp_cudab_fail(e, "cudaMalloc (context buffers)", why, n);
        goto fail;
    }
    if ((e = cudaMemsetAsync(c->ctl, 0, MXP_CUDAB_AUX_OFF + MXP_CUDAB_AUX_CAP, c->stream)) !=
        cudaSuccess) {
        mxp_cudab_fail(e, "cudaMemsetAsync", why, n);
        goto fail;
    }
    *out = c;
    return 0;
fail_cuda_set:
    mxp_cudab_fail(e, "cudaSetDevice", why, n);
fail:
    mxp_cudab_ctx_destroy(c);
    return 1;
}

extern "C" void mxp_cudab_ctx_destroy(mxp_cudab_ctx *c) {
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    cudaFree(c->mk_partials);
    cudaFree(c->partials);
    cudaFree(c->ctl);
    cudaFree(c->lt_workspace);
    if (c->lt) c->lt_destroy(c->lt);
    if (c->lt_lib) dlclose(c->lt_lib);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" int mxp_cudab_alloc(mxp_cudab_ctx *c, size_t bytes, void **out, char *why, size_t n) {
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *out = NULL;
        return mxp_cudab_fail(e, "cudaMalloc", why, n);
    }
    return 0;
}

extern "C" void mxp_cudab_free(mxp_cudab_ctx *c, void *p) { cudaFree(p); }

extern "C" int mxp_cudab_upload(mxp_cudab_ctx *c, void *dst, const void *src, size_t bytes,
                                char *why, size_t n) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream);
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "cudaMemcpyAsync (upload)", why, n);
}

extern "C" int mxp_cudab_download(mxp_cudab_ctx *c, void *dst, const void *src, size_t bytes,
                                  char *why, size_t n) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream);
    if (e != cudaSuccess) return mxp_cudab_fail(e, "cudaMemcpyAsync (download)", why, n);
    c->d2h_copies++;
    return 0;
}

extern "C" int mxp_cudab_zero(mxp_cudab_ctx *c, void *dst, size_t bytes, char *why, size_t n) {
    cudaError_t e = cudaMemsetAsync(dst, 0, bytes, c->stream);
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "cudaMemsetAsync (zero)", why, n);
}

extern "C" int mxp_cudab_timer_mark(mxp_cudab_ctx *c, void **ev, char *why, size_t n) {
    cudaEvent_t e0;
    cudaError_t e = cudaEventCreate(&e0);
    if (e != cudaSuccess) return mxp_cudab_fail(e, "cudaEventCreate", why, n);
    if ((e = cudaEventRecord(e0, c->stream)) != cudaSuccess) {
        cudaEventDestroy(e0);
        return mxp_cudab_fail(e, "cudaEventRecord", why, n);
    }
    *ev = (void *)e0;
    return 0;
}

extern "C" int mxp_cudab_timer_ms(void *ev0, void *ev1, float *ms, char *why, size_t n) {
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)ev1);
    if (e == cudaSuccess) e = cudaEventElapsedTime(ms, (cudaEvent_t)ev0, (cudaEvent_t)ev1);
    cudaEventDestroy((cudaEvent_t)ev0);
    cudaEventDestroy((cudaEvent_t)ev1);
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "cudaEventElapsedTime", why, n);
}

extern "C" mxp_step_ctl *mxp_cudab_ctl_dev(mxp_cudab_ctx *c) { return c->ctl; }

extern "C" int mxp_cudab_sync(mxp_cudab_ctx *c, char *why, size_t n) {
    cudaError_t e = cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "cudaStreamSynchronize", why, n);
}

extern "C" int mxp_cudab_ctl_set(mxp_cudab_ctx *c, const mxp_step_ctl *host, char *why,
                                 size_t n) {
    return mxp_cudab_upload(c, c->ctl, host, sizeof *host, why, n);
}

extern "C" int mxp_cudab_report(mxp_cudab_ctx *c, mxp_step_ctl *host, char *why, size_t n) {
    if (mxp_cudab_download(c, host, c->ctl, sizeof *host, why, n)) return 1;
    return mxp_cudab_sync(c, why, n);
}

extern "C" int64_t mxp_cudab_d2h_count(const mxp_cudab_ctx *c) { return c->d2h_copies; }

extern "C" void *mxp_cudab_aux_dev(mxp_cudab_ctx *c) {
    return (unsigned char *)c->ctl + MXP_CUDAB_AUX_OFF;
}

extern "C" int mxp_cudab_report_aux(mxp_cudab_ctx *c, void *host, size_t aux_bytes, char *why,
                                    size_t n) {
    if (aux_bytes > MXP_CUDAB_AUX_CAP)
        return mxp_cudab_why(why, n, "report: %zu aux bytes; accepted <= %zu", aux_bytes,
                             MXP_CUDAB_AUX_CAP);
    if (mxp_cudab_download(c, host, c->ctl, MXP_CUDAB_AUX_OFF + aux_bytes, why, n)) return 1;
    return mxp_cudab_sync(c, why, n);
}
