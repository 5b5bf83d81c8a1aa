/* mixprec/api.h: what marks the public boundary of libmixprec, and the
 * library's version.
 *
 * MXP_API: every function (and object) that a header of include/mixprec declares
 * carries it; libmixprec is built with -fvisibility=hidden, so what lacks
 * it is not exported from libmixprec.so. tests/test_exports.sh checks with
 * `nm -D` that the exported symbols are exactly the declared ones.
 *
 * Versions: MIXPREC_VERSION_* is the release (CMakeLists.txt's project()
 * VERSION must equal it: the configure step checks). MIXPREC_ABI_VERSION
 * is the shared library's SONAME number (libmixprec.so.N): it changes
 * whenever a public function, struct layout or enum value changes in a
 * way that breaks an existing caller, including the struct mirrors of the
 * Python binding (python/mixprec/_capi.py), which refuses a library whose
 * mxp_abi_version() differs from its own. mxp_version() and friends
 * (base.h) return the values the library was built with, which may differ
 * from the header a caller compiled against.
 */
#ifndef MIXPREC_API_H
#define MIXPREC_API_H

#if defined(__GNUC__) || defined(__clang__)
#define MXP_API __attribute__((visibility("default")))
#else
#define MXP_API
#endif

#define MIXPREC_VERSION_MAJOR 0
#define MIXPREC_VERSION_MINOR 1
#define MIXPREC_VERSION_PATCH 0
#define MIXPREC_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH: 0.1.0 is 100. */
#define MIXPREC_VERSION_NUMBER \
    (MIXPREC_VERSION_MAJOR * 10000 + MIXPREC_VERSION_MINOR * 100 + MIXPREC_VERSION_PATCH)
#define MIXPREC_ABI_VERSION 3

#endif /* MIXPREC_API_H */
