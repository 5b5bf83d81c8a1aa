/* backend/devmem.h: memory a backend owns, and the mock device (internal).
 *
 * A device backend's tensors live where the host cannot dereference them;
 * the host reaches them only through backend operations and counted
 * copies. The mock device proves that contract on the CPU
 * (docs/design.md "The mock device"): with MIXPREC_MOCK_DEVICE=1 every
 * region from mxp_dev_alloc is mapped PROT_NONE except while some thread
 * is inside a backend operation (mxp_dev_enter .. mxp_dev_leave), so a
 * host read or write from anywhere else faults at once (SIGSEGV) instead
 * of working by accident; copies in and out (mxp_dev_download/_upload) are
 * counted. Without it (the default) the regions are ordinary host memory
 * and enter/leave cost one uncontended mutex lock each.
 *
 * The protection is process-wide: while one thread is inside, every region
 * is accessible to every thread (the kernel thread pool works inside its
 * caller's bracket). Brackets nest.
 */
#ifndef MIXPREC_BACKEND_DEVMEM_H
#define MIXPREC_BACKEND_DEVMEM_H

#include <mixprec/base.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Read MIXPREC_MOCK_DEVICE once ("0" or unset: host memory; "1": the mock
 * device); an invalid value is MXP_ERR_CONFIG naming it and what is
 * accepted, every time this is called. */
mxp_status mxp_dev_init(mxp_error *err);
/* The mock device is on (after a successful mxp_dev_init). */
bool mxp_dev_is_mock(void);

/* `bytes` of zeroed backend memory, 64-byte aligned (NULL: out of memory or
 * too many regions). Mock: its own page-aligned mapping, protected unless
 * inside a bracket. */
void *mxp_dev_alloc(size_t bytes);
/* n * size bytes (NULL also when the product overflows). */
void *mxp_dev_calloc(size_t n, size_t size);
/* NULL: no-op. */
void mxp_dev_free(void *p);

/* The bracket of one backend operation. */
void mxp_dev_enter(void);
void mxp_dev_leave(void);

/* Counted copies between host memory and backend memory (n bytes). */
void mxp_dev_download(void *host, const void *dev, size_t n);
void mxp_dev_upload(void *dev, const void *host, size_t n);
/* Count a transfer done another way inside a bracket (a converting copy,
 * a single value read by the host): d2h true: device to host. */
void mxp_dev_count(bool d2h, size_t n);

typedef struct mxp_dev_stats {
    int64_t d2h_calls, d2h_bytes; /* downloads */
    int64_t h2d_calls, h2d_bytes; /* uploads */
    int64_t brackets;             /* outermost enters */
    int64_t regions;              /* live regions */
    int64_t protect_errors;       /* mock: failed mprotect calls (0 unless broken) */
} mxp_dev_stats;
void mxp_dev_stats_get(mxp_dev_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* MIXPREC_BACKEND_DEVMEM_H */
