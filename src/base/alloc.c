/* base/alloc.c: overflow-checked sizes and the pluggable, 64-byte aligned
 * allocator every mixprec object allocates through. */
#include <mixprec/base.h>

#include <stdlib.h>
#include <string.h>

bool mxp_size_mul(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

bool mxp_size_add(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static void *default_alloc(void *user, size_t size, size_t align) {
    (void)user;
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : align) != 0) return NULL;
    return p;
}

static void default_free(void *user, void *p) {
    (void)user;
    free(p);
}

static const mxp_allocator default_allocator = {default_alloc, default_free, NULL};
static mxp_allocator current = {default_alloc, default_free, NULL};

void mxp_set_allocator(const mxp_allocator *a) {
    current = a ? *a : default_allocator;
}

void *mxp_calloc(size_t n, size_t size) {
    size_t bytes;
    if (!mxp_size_mul(n, size, &bytes)) return NULL;
    /* round up to the alignment so vector tails never read past the end */
    size_t padded;
    if (!mxp_size_add(bytes, MXP_ALIGN - 1, &padded)) return NULL;
    padded &= ~(size_t)(MXP_ALIGN - 1);
    void *p = current.alloc(current.user, padded, MXP_ALIGN);
    if (p) memset(p, 0, padded);
    return p;
}

void mxp_free(void *p) {
    if (p) current.free(current.user, p);
}

char *mxp_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = mxp_calloc(n, 1);
    if (d) memcpy(d, s, n);
    return d;
}
