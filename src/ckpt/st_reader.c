/* ckpt/st_reader.c: a safetensors reader that treats every file as hostile.
 *
 * Entry points: mxp_st_file_read / _parse / _destroy, the accessors,
 * mxp_st_file_verify, mxp_st_tensor_get; internal ckpt_header_crc,
 * ckpt_crc_hex / _parse, ckpt_count_nonfinite, ckpt_st_dtype_*.
 *
 * Order of checks (each failure names the file and the problem):
 *   file size >= 8; header length N <= 100 MB and <= size - 8 (before any
 *   allocation beyond 8 bytes); header valid UTF-8, starts with '{', nests
 *   at most MXP_ST_MAX_DEPTH deep (scanned before the JSON parser runs);
 *   JSON without duplicate keys; "__metadata__" a string->string object;
 *   every other entry exactly {dtype, shape, data_offsets} with a known
 *   dtype, at most 8 non-negative dims whose product (times the element
 *   size) does not overflow and equals end - begin; offsets sorted are
 *   contiguous from 0 and end exactly at the end of the file.
 * Reference: github.com/huggingface/safetensors (README "Format";
 * safetensors/src/tensor.rs, Metadata::validate).
 */
#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

struct mxp_st_file {
    char *label;
    unsigned char *buf; /* the whole file [size]: mapped read-only, or a copy */
    size_t size;
    bool mapped; /* buf is an mmap of the file (munmap), else mxp_free */
    size_t header_len;
    const unsigned char *data; /* buf + 8 + header_len */
    size_t data_len;
    json_t *root;           /* owns the name and metadata strings */
    mxp_st_tensor *tensors; /* [n_tensors], sorted by data offset */
    int n_tensors;
    int *by_name;                  /* [n_tensors] indices sorted by name */
    const char **meta_k, **meta_v; /* [n_meta] sorted by key */
    int n_meta;
};

static const mxp_dtype kDtypes[] = {MXP_DTYPE_F32, MXP_DTYPE_F16, MXP_DTYPE_BF16, MXP_DTYPE_F8_E4M3,
                                    MXP_DTYPE_F8_E5M2};

const char *ckpt_st_dtype_name(mxp_dtype t) {
    const mxp_dtype_traits *tr = mxp_dtype_info(t);
    return tr ? tr->st_name : NULL;
}

bool ckpt_st_dtype_parse(const char *s, mxp_dtype *out) {
    for (size_t i = 0; i < sizeof kDtypes / sizeof kDtypes[0]; i++)
        if (strcmp(s, mxp_dtype_info(kDtypes[i])->st_name) == 0) {
            *out = kDtypes[i];
            return true;
        }
    return false;
}

void ckpt_crc_hex(uint32_t crc, char buf[9]) { snprintf(buf, 9, "%08" PRIx32, crc); }

bool ckpt_crc_parse(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        v = v << 4 | (uint32_t)d;
    }
    if (s[8] != '\0') return false;
    *out = v;
    return true;
}

static uint32_t crc_str(uint32_t crc, const char *s) { return mxp_crc32c(crc, s, strlen(s) + 1); }

uint32_t ckpt_header_crc(const ckpt_canon_tensor *t, int n_tensors, const char *const *keys,
                         const char *const *values, int n_meta) {
    uint32_t crc = 0;
    char buf[64];
    for (int i = 0; i < n_tensors; i++) {
        crc = crc_str(crc, t[i].name);
        crc = crc_str(crc, ckpt_st_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].ndim; d++) {
            snprintf(buf, sizeof buf, "%lld,", (long long)t[i].shape[d]);
            crc = mxp_crc32c(crc, buf, strlen(buf));
        }
        snprintf(buf, sizeof buf, ";%llu,%llu", (unsigned long long)t[i].begin,
                 (unsigned long long)t[i].end);
        crc = crc_str(crc, buf);
    }
    for (int i = 0; i < n_meta; i++) {
        if (strcmp(keys[i], ST_META_HEADER_CRC) == 0) continue;
        crc = crc_str(crc, keys[i]);
        crc = crc_str(crc, values[i]);
    }
    return crc;
}

float mxp_st_tensor_get(const mxp_st_tensor *t, size_t i) {
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case MXP_DTYPE_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case MXP_DTYPE_F16: {
        mxp_fp16 h;
        memcpy(&h.bits, p + 2 * i, 2);
        return mxp_fp16_to_f32(h);
    }
    case MXP_DTYPE_BF16: {
        mxp_bf16 h;
        memcpy(&h.bits, p + 2 * i, 2);
        return mxp_bf16_to_f32(h);
    }
    case MXP_DTYPE_F8_E4M3:
        return mxp_fp8_e4m3_to_f32((mxp_fp8_e4m3){p[i]});
    case MXP_DTYPE_F8_E5M2:
        return mxp_fp8_e5m2_to_f32((mxp_fp8_e5m2){p[i]});
    default:
        return NAN;
    }
}

size_t ckpt_count_nonfinite(mxp_dtype t, const void *data, size_t n) {
    const unsigned char *p = data;
    size_t bad = 0;
    switch (t) {
    case MXP_DTYPE_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            bad += (u & 0x7f800000u) == 0x7f800000u;
        }
        break;
    case MXP_DTYPE_F16:
    case MXP_DTYPE_BF16: {
        uint16_t mask = t == MXP_DTYPE_F16 ? 0x7c00u : 0x7f80u;
        for (size_t i = 0; i < n; i++) {
            uint16_t u;
            memcpy(&u, p + 2 * i, 2);
            bad += (u & mask) == mask;
        }
        break;
    }
    case MXP_DTYPE_F8_E4M3:
        for (size_t i = 0; i < n; i++) bad += (p[i] & 0x7fu) == 0x7fu; /* only NaN */
        break;
    case MXP_DTYPE_F8_E5M2:
        for (size_t i = 0; i < n; i++) bad += (p[i] & 0x7cu) == 0x7cu;
        break;
    default:
        bad = n;
    }
    return bad;
}

/* Largest |bits| (sign masked off) of n aligned words, in blocks of 16 so
 * that the compiler vectorizes the max-reduction at -O2. */
/* All-finite test, one pass, any alignment: a value is non-finite iff its
 * exponent field is all ones, i.e. iff (bits & ~sign) + (1 << man_bits)
 * carries into the sign position; OR-ing those sums over the tensor and
 * testing the sign bit once needs only and/add/or, which SSE2 (the x86-64
 * baseline) does 4 or 8 lanes at a time. */
bool ckpt_all_finite(mxp_dtype t, const void *data, size_t n) {
    const unsigned char *p = data;
    size_t i = 0;
    if (t == MXP_DTYPE_F32) {
        uint32_t acc = 0;
#if defined(__SSE2__)
        const __m128i mask = _mm_set1_epi32(0x7fffffff), carry = _mm_set1_epi32(0x00800000);
        __m128i a0 = _mm_setzero_si128(), a1 = a0;
        for (; i + 8 <= n; i += 8) {
            __m128i v0 = _mm_loadu_si128((const __m128i *)(const void *)(p + 4 * i));
            __m128i v1 = _mm_loadu_si128((const __m128i *)(const void *)(p + 4 * i + 16));
            a0 = _mm_or_si128(a0, _mm_add_epi32(_mm_and_si128(v0, mask), carry));
            a1 = _mm_or_si128(a1, _mm_add_epi32(_mm_and_si128(v1, mask), carry));
        }
        if (_mm_movemask_ps(_mm_castsi128_ps(_mm_or_si128(a0, a1)))) return false;
#endif
        for (; i < n; i++) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            acc |= (u & 0x7fffffffu) + 0x00800000u;
        }
        return !(acc & 0x80000000u);
    }
    if (t == MXP_DTYPE_F16 || t == MXP_DTYPE_BF16) {
        const uint16_t carry16 = t == MXP_DTYPE_F16 ? 0x0400u : 0x0080u;
        uint16_t acc = 0;
#if defined(__SSE2__)
        const __m128i mask = _mm_set1_epi16(0x7fff), carry = _mm_set1_epi16((short)carry16);
        __m128i a0 = _mm_setzero_si128();
        for (; i + 8 <= n; i += 8) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));
            a0 = _mm_or_si128(a0, _mm_add_epi16(_mm_and_si128(v, mask), carry));
        }
        if (_mm_movemask_epi8(a0) & 0xaaaa) return false; /* sign bit: high byte of a lane */
#endif
        for (; i < n; i++) {
            uint16_t u;
            memcpy(&u, p + 2 * i, 2);
            acc |= (uint16_t)((u & 0x7fffu) + carry16);
        }
        return !(acc & 0x8000u);
    }
    return ckpt_count_nonfinite(t, data, n) == 0;
}

/* ---- header checks before JSON ------------------------------------------ */

/* Offset of the first byte that is not valid UTF-8 (RFC 3629: no overlong
 * forms, no surrogates, <= U+10FFFF), or n when all are valid. */
static size_t utf8_bad_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return i;
        }
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return i;
        i += len;
    }
    return n;
}

/* Deepest nesting of [ and { outside strings; stops counting past limit. */
static int json_depth(const unsigned char *s, size_t n, int limit) {
    int depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"')
            in_str = true;
        else if (c == '{' || c == '[') {
            if (++depth > max) max = depth;
            if (max > limit) return max;
        } else if (c == '}' || c == ']')
            depth--;
    }
    return max;
}

/* ---- parsing ------------------------------------------------------------- */

void mxp_st_file_destroy(mxp_st_file *f) {
    if (!f) return;
    if (f->root) json_decref(f->root);
    mxp_free(f->label);
    if (f->mapped)
        munmap(f->buf, f->size);
    else
        mxp_free(f->buf);
    mxp_free(f->tensors);
    mxp_free(f->by_name);
    mxp_free(f->meta_k);
    mxp_free(f->meta_v);
    mxp_free(f);
}

static int cmp_offset(const void *a, const void *b) {
    const mxp_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_name_idx(const void *a, const void *b, void *ctx) {
    const mxp_st_tensor *t = ctx;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

static int cmp_meta(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Non-negative JSON integer into *out. */
static bool json_u64(const json_t *j, uint64_t *out) {
    if (!json_is_integer(j) || json_integer_value(j) < 0) return false;
    *out = (uint64_t)json_integer_value(j);
    return true;
}

static mxp_status parse_tensor(mxp_st_file *f, const char *name, json_t *v, mxp_st_tensor *t,
                               mxp_error *err) {
    const char *L = f->label;
    if (!json_is_object(v))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header entry '%.80s' is not an object {dtype, shape, "
                             "data_offsets}",
                             L, name);
    if (name[0] == '\0')
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: a tensor has an empty name", L);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: tensor '%.80s' has unexpected field '%.40s'; accepted: "
                                 "dtype, shape, data_offsets",
                                 L, name, key);
    }
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!jd || !js || !jo)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: tensor '%.80s' lacks '%s'", L, name,
                             !jd   ? "dtype"
                             : !js ? "shape"
                                   : "data_offsets");
    if (!json_is_string(jd))
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: tensor '%.80s': dtype is not a string", L,
                             name);
    if (!ckpt_st_dtype_parse(json_string_value(jd), &t->dtype))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: tensor '%.80s' has unknown or unsupported dtype '%.20s'; "
                             "accepted: F32, F16, BF16, F8_E4M3, F8_E5M2",
                             L, name, json_string_value(jd));
    if (!json_is_array(js) || json_array_size(js) > MXP_ST_MAX_DIMS)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: tensor '%.80s': shape must be an array of at most %d "
                             "non-negative integers",
                             L, name, MXP_ST_MAX_DIMS);
    t->name = name;
    t->ndim = (int)json_array_size(js);
    size_t numel = 1;
    bool overflow = false;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t dim;
        if (!json_u64(json_array_get(js, (size_t)d), &dim) || dim > INT64_MAX)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: tensor '%.80s': shape[%d] is not a non-negative integer", L,
                                 name, d);
        t->shape[d] = (int64_t)dim;
        if (dim > SIZE_MAX || !mxp_size_mul(numel, (size_t)dim, &numel)) overflow = true;
    }
    size_t nbytes = 0;
    if (overflow || !mxp_size_mul(numel, mxp_dtype_info(t->dtype)->size, &nbytes))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: tensor '%.80s': the element count of its shape overflows", L,
                             name);
    t->numel = numel;
    t->nbytes = nbytes;
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_u64(json_array_get(jo, 0), &t->begin) || !json_u64(json_array_get(jo, 1), &t->end))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: tensor '%.80s': data_offsets must be [begin, end], two "
                             "non-negative integers",
                             L, name);
    if (t->end < t->begin)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: tensor '%.80s': data_offsets [%llu, %llu] end before they "
                             "begin",
                             L, name, (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > f->data_len)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: tensor '%.80s': data_offsets [%llu, %llu] run past the data "
                             "section (%zu bytes): truncated file or bad offsets",
                             L, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                             f->data_len);
    if (t->end - t->begin != nbytes)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: tensor '%.80s': data_offsets [%llu, %llu] hold %llu bytes but "
                             "dtype %s and its shape need %zu",
                             L, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                             (unsigned long long)(t->end - t->begin), json_string_value(jd),
                             nbytes);
    t->data = f->data + t->begin;
    return MXP_OK;
}

static mxp_status parse_metadata(mxp_st_file *f, json_t *v, mxp_error *err) {
    if (!json_is_object(v))
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: __metadata__ is not an object of strings",
                             f->label);
    size_t n = json_object_size(v);
    f->meta_k = mxp_calloc(n + 1, sizeof *f->meta_k);
    f->meta_v = mxp_calloc(n + 1, sizeof *f->meta_v);
    if (!f->meta_k || !f->meta_v)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: metadata", f->label);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        if (!json_is_string(val))
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: __metadata__ value of '%.80s' is not a string", f->label,
                                 key);
        f->meta_k[f->n_meta++] = key;
    }
    qsort(f->meta_k, (size_t)f->n_meta, sizeof *f->meta_k, cmp_meta);
    for (int i = 0; i < f->n_meta; i++)
        f->meta_v[i] = json_string_value(json_object_get(v, f->meta_k[i]));
    return MXP_OK;
}

/* Check the layout of f->buf and build the tables. */
static mxp_status parse_header(mxp_st_file *f, mxp_error *err) {
    const char *L = f->label;
    const unsigned char *h = f->buf + 8;
    const size_t n = f->header_len;
    size_t bad = utf8_bad_at(h, n);
    if (bad < n)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header is not valid UTF-8 (byte 0x%02x at header offset %zu)", L,
                             h[bad], bad);
    if (h[0] != '{')
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header does not start with '{' (a JSON object)", L);
    int depth = json_depth(h, n, MXP_ST_MAX_DEPTH);
    if (depth > MXP_ST_MAX_DEPTH)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header JSON nests more than %d levels deep; a safetensors "
                             "header needs 3",
                             L, MXP_ST_MAX_DEPTH);
    json_error_t je;
    f->root = json_loadb((const char *)h, n, JSON_REJECT_DUPLICATES, &je);
    if (!f->root)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header is not valid JSON: %s (line %d, column %d)", L, je.text,
                             je.line, je.column);
    if (!json_is_object(f->root))
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: header is not a JSON object", L);
    size_t count = json_object_size(f->root);
    f->tensors = mxp_calloc(count + 1, sizeof *f->tensors);
    f->by_name = mxp_calloc(count + 1, sizeof *f->by_name);
    if (!f->tensors || !f->by_name)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: %zu header entries", L, count);
    const char *key;
    json_t *val;
    mxp_status s;
    json_object_foreach(f->root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if ((s = parse_metadata(f, val, err)) != MXP_OK) return s;
            continue;
        }
        if ((s = parse_tensor(f, key, val, &f->tensors[f->n_tensors], err)) != MXP_OK) return s;
        f->n_tensors++;
    }
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_offset);
    uint64_t at = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const mxp_st_tensor *t = &f->tensors[i];
        if (t->begin < at)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: tensor '%.80s' data_offsets [%llu, %llu] overlap tensor "
                                 "'%.80s' (ends at %llu)",
                                 L, t->name, (unsigned long long)t->begin,
                                 (unsigned long long)t->end, f->tensors[i - 1].name,
                                 (unsigned long long)at);
        if (t->begin > at)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: %llu unclaimed bytes before tensor '%.80s' (offset %llu): "
                                 "tensors must be contiguous",
                                 L, (unsigned long long)(t->begin - at), t->name,
                                 (unsigned long long)t->begin);
        at = t->end;
    }
    if (at != f->data_len)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: the tensors cover %llu bytes but the data section holds %zu: "
                             "trailing bytes after the last tensor",
                             L, (unsigned long long)at, f->data_len);
    for (int i = 0; i < f->n_tensors; i++) f->by_name[i] = i;
    qsort_r(f->by_name, (size_t)f->n_tensors, sizeof *f->by_name, cmp_name_idx, f->tensors);
    return MXP_OK;
}

/* Validate the 8-byte length prefix against the file size. */
static mxp_status check_prefix(const char *label, const unsigned char *first8, size_t size,
                               size_t *header_len, mxp_error *err) {
    if (size < 8)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: file is %zu bytes; a safetensors file starts with an 8-byte "
                             "header length (truncated?)",
                             label, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | first8[i];
    if (n > MXP_ST_MAX_HEADER)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header length %llu exceeds the %llu-byte limit", label,
                             (unsigned long long)n, (unsigned long long)MXP_ST_MAX_HEADER);
    if (n > size - 8)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header length %llu runs past the end of the file (%zu bytes): "
                             "truncated file or bad header length",
                             label, (unsigned long long)n, size);
    if (n < 2)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header length %llu is too small for a JSON object", label,
                             (unsigned long long)n);
    *header_len = (size_t)n;
    return MXP_OK;
}

/* Take ownership of buf [size] (mapped: an mmap) and parse it. */
static mxp_status parse_owned(unsigned char *buf, size_t size, bool mapped, const char *label,
                              mxp_st_file **out, mxp_error *err) {
    mxp_st_file *f = mxp_calloc(1, sizeof *f);
    if (!f) {
        if (mapped)
            munmap(buf, size);
        else
            mxp_free(buf);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: reader", label);
    }
    f->buf = buf;
    f->size = size;
    f->mapped = mapped;
    f->label = mxp_strdup(label);
    if (!f->label) {
        mxp_st_file_destroy(f);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: reader", label);
    }
    mxp_status s = check_prefix(label, buf, size, &f->header_len, err);
    if (s == MXP_OK) {
        f->data = buf + 8 + f->header_len;
        f->data_len = size - 8 - f->header_len;
        s = parse_header(f, err);
    }
    if (s != MXP_OK) {
        mxp_st_file_destroy(f);
        return s;
    }
    *out = f;
    return MXP_OK;
}

mxp_status mxp_st_file_parse(const void *bytes, size_t n, const char *label, mxp_st_file **out,
                             mxp_error *err) {
    if (!out || (!bytes && n))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_st_file_parse: NULL");
    *out = NULL;
    if (!label) label = "<memory>";
    unsigned char *buf = mxp_calloc(n ? n : 1, 1);
    if (!buf) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: %zu bytes", label, n);
    if (n) memcpy(buf, bytes, n);
    return parse_owned(buf, n, false, label, out, err);
}

/* Read exactly n bytes at offset (pread loop); false with errno on failure
 * or on a short read (errno 0). */
static bool read_at(int fd, unsigned char *dst, size_t n, off_t off) {
    while (n) {
        ssize_t r = pread(fd, dst, n > (1u << 30) ? (1u << 30) : n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0;
            return false;
        }
        dst += r;
        off += r;
        n -= (size_t)r;
    }
    return true;
}

mxp_status mxp_st_file_read(const char *path, mxp_st_file **out, mxp_error *err) {
    if (!path || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_st_file_read: NULL");
    *out = NULL;
    int fd;
    mxp_status os = mxp_open_regular(path, 0, "checkpoint", &fd, err);
    if (os != MXP_OK) return os;
    struct stat st = {0};
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mxp_error_set(err, MXP_ERR_IO, "%s: %s", path, strerror(e));
    }
    size_t size = (size_t)st.st_size;
    unsigned char first8[8] = {0};
    size_t hl;
    mxp_status s = MXP_OK;
    if (size >= 8 && !read_at(fd, first8, 8, 0))
        s = mxp_error_set(err, MXP_ERR_IO, "%s: cannot read: %s", path,
                          errno ? strerror(errno) : "file shrank while reading");
    if (s == MXP_OK) s = check_prefix(path, first8, size, &hl, err);
    /* Map the file read-only (no copy, no zeroing: the page cache is used
     * in place); fall back to reading it into memory. Our writer never
     * modifies a file in place, so the mapping cannot shrink under us. */
    unsigned char *buf = NULL;
    bool mapped = false;
    if (s == MXP_OK) {
        void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (p != MAP_FAILED) {
            buf = p;
            mapped = true;
        } else if (!(buf = mxp_calloc(size, 1))) {
            s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: cannot hold the %zu-byte file", path,
                              size);
        }
    }
    if (s == MXP_OK && !mapped && !read_at(fd, buf, size, 0))
        s = mxp_error_set(err, MXP_ERR_IO, "%s: cannot read: %s", path,
                          errno ? strerror(errno) : "file shrank while reading");
    close(fd);
    if (s != MXP_OK) {
        mxp_free(buf);
        return s;
    }
    return parse_owned(buf, size, mapped, path, out, err);
}

/* ---- accessors ---------------------------------------------------------- */

const char *mxp_st_file_label(const mxp_st_file *f) { return f->label; }
size_t mxp_st_file_size(const mxp_st_file *f) { return f->size; }
int mxp_st_file_num_tensors(const mxp_st_file *f) { return f->n_tensors; }

const mxp_st_tensor *mxp_st_file_tensor(const mxp_st_file *f, int i) {
    return (i >= 0 && i < f->n_tensors) ? &f->tensors[i] : NULL;
}

const mxp_st_tensor *mxp_st_file_find(const mxp_st_file *f, const char *name) {
    int lo = 0, hi = f->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const mxp_st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

int mxp_st_file_num_meta(const mxp_st_file *f) { return f->n_meta; }
const char *mxp_st_file_meta_key(const mxp_st_file *f, int i) {
    return (i >= 0 && i < f->n_meta) ? f->meta_k[i] : NULL;
}
const char *mxp_st_file_meta_value(const mxp_st_file *f, int i) {
    return (i >= 0 && i < f->n_meta) ? f->meta_v[i] : NULL;
}

const char *mxp_st_file_meta(const mxp_st_file *f, const char *key) {
    int lo = 0, hi = f->n_meta - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(key, f->meta_k[mid]);
        if (c == 0) return f->meta_v[mid];
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* ---- integrity ------------------------------------------------------------ */

mxp_status mxp_st_file_verify(const mxp_st_file *f, mxp_error *err) {
    const char *L = f->label;
    const char *algo = mxp_st_file_meta(f, ST_META_CHECKSUM_ALGO);
    const char *sums = mxp_st_file_meta(f, ST_META_CHECKSUMS);
    const char *hcrc = mxp_st_file_meta(f, ST_META_HEADER_CRC);
    if (!algo || !sums || !hcrc)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: no checksums (metadata '%s', '%s' and '%s' are required)", L,
                             ST_META_CHECKSUM_ALGO, ST_META_CHECKSUMS, ST_META_HEADER_CRC);
    if (strcmp(algo, "crc32c") != 0)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: checksum algorithm '%.20s'; accepted: crc32c", L, algo);
    uint32_t want;
    if (!ckpt_crc_parse(hcrc, &want))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header_crc32c '%.20s' is not 8 lower-case hex digits", L, hcrc);
    ckpt_canon_tensor *ct = mxp_calloc((size_t)f->n_tensors + 1, sizeof *ct);
    if (!ct) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: verify", L);
    for (int i = 0; i < f->n_tensors; i++) {
        const mxp_st_tensor *t = &f->tensors[i];
        ct[i] = (ckpt_canon_tensor){t->name, t->dtype, t->ndim, t->shape, t->begin, t->end};
    }
    uint32_t got = ckpt_header_crc(ct, f->n_tensors, f->meta_k, f->meta_v, f->n_meta);
    mxp_free(ct);
    if (got != want)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header checksum mismatch (crc32c %08x, stored %08x): the "
                             "header was modified or corrupted",
                             L, got, want);
    json_error_t je;
    json_t *js = json_loads(sums, JSON_REJECT_DUPLICATES, &je);
    if (!js || !json_is_object(js)) {
        if (js) json_decref(js);
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: metadata 'checksums' is not a JSON object",
                             L);
    }
    mxp_status s = MXP_OK;
    if (json_object_size(js) != (size_t)f->n_tensors)
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: 'checksums' lists %zu tensors, the file holds %d", L,
                          json_object_size(js), f->n_tensors);
    for (int i = 0; s == MXP_OK && i < f->n_tensors; i++) {
        const mxp_st_tensor *t = &f->tensors[i];
        json_t *jv = json_object_get(js, t->name);
        uint32_t stored;
        if (!jv || !json_is_string(jv) || !ckpt_crc_parse(json_string_value(jv), &stored)) {
            s = mxp_error_set(err, MXP_ERR_FORMAT, "%s: tensor '%.80s' has no valid checksum", L,
                              t->name);
            break;
        }
        uint32_t c = mxp_crc32c(0, t->data, t->nbytes);
        if (c != stored)
            s = mxp_error_set(err, MXP_ERR_FORMAT,
                              "%s: tensor '%.80s' checksum mismatch (crc32c %08x, stored %08x): "
                              "its data is corrupted",
                              L, t->name, c, stored);
    }
    json_decref(js);
    return s;
}

mxp_status ckpt_read_meta_value(const char *path, const char *key, char *buf, size_t n,
                                mxp_error *err) {
    int fd;
    mxp_status s = mxp_open_regular(path, 0, "checkpoint", &fd, err);
    if (s != MXP_OK) return s;
    struct stat st = {0};
    unsigned char first8[8];
    size_t hl = 0;
    if (fstat(fd, &st) != 0)
        s = mxp_error_set(err, MXP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!read_at(fd, first8, (size_t)st.st_size < 8 ? 0 : 8, 0))
        s = mxp_error_set(err, MXP_ERR_IO, "%s: cannot read", path);
    if (s == MXP_OK) s = check_prefix(path, first8, (size_t)st.st_size, &hl, err);
    char *h = NULL;
    if (s == MXP_OK && !(h = mxp_calloc(hl + 1, 1)))
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: header", path);
    if (s == MXP_OK && !read_at(fd, (unsigned char *)h, hl, 8))
        s = mxp_error_set(err, MXP_ERR_IO, "%s: cannot read the header", path);
    close(fd);
    if (s != MXP_OK) {
        mxp_free(h);
        return s;
    }
    json_error_t je;
    json_t *root = json_loadb(h, hl, JSON_REJECT_DUPLICATES, &je);
    mxp_free(h);
    json_t *v = json_object_get(json_object_get(root, "__metadata__"), key);
    if (json_is_string(v))
        snprintf(buf, n, "%s", json_string_value(v));
    else
        s = mxp_error_set(err, MXP_ERR_FORMAT, "%s: metadata '%s' is missing", path, key);
    if (root) json_decref(root);
    return s;
}
