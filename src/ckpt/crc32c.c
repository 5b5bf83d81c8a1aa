/* ckpt/crc32c.c: CRC32C (Castagnoli), the checksum of every checkpoint
 * tensor and header.
 *
 * Entry points: mxp_crc32c, mxp_crc32c_generic, mxp_crc32c_impl.
 * Two implementations that must agree bit for bit (tests/test_ckpt.c):
 *   - generic: slicing-by-8 over tables built once from the reflected
 *     polynomial 0x82F63B78 (Kounavis & Berry, "A Systematic Approach to
 *     Building High Performance Software-based CRC Generators", 2005);
 *   - sse4.2: the crc32 instruction (Intel SDM, CRC32), 8 bytes at a time
 *     on three interleaved streams joined by a GF(2) shift (see below),
 *     compiled with a per-function target attribute and chosen at first use
 *     from cpuid, unless MIXPREC_FORCE_ISA=generic.
 * Both take and return the CRC in the usual pre/post-inverted form, so
 * mxp_crc32c(mxp_crc32c(0, a, n), b, m) == CRC32C of a||b.
 * Reference values: RFC 3720 appendix B.4; CRC32C("123456789") = 0xE3069283.
 */
#include <mixprec/ckpt.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t mxp_crc32c_generic(uint32_t crc, const void *buf, size_t n) {
    pthread_once(&table_once, build_tables);
    const unsigned char *p = buf;
    uint32_t c = ~crc;
    while (n && ((uintptr_t)p & 7u)) {
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c; /* little-endian: the low word meets the running CRC */
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
            crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
            crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

#if defined(__x86_64__)
/* ---- hardware: three interleaved streams --------------------------------
 * The crc32 instruction has a latency of 3 cycles and a throughput of 1,
 * so three independent CRCs over consecutive blocks of LANE bytes run at
 * about three times the speed of one. The block CRCs are joined with the
 * linear map "feed LANE zero bytes" (multiplication by x^(8*LANE) modulo
 * the polynomial), applied through four 256-entry tables built once by
 * repeated squaring of the one-zero-bit map as a 32x32 matrix over GF(2).
 * All three streams work on the raw (non-inverted) register, so
 * crc(A || B) = shift_|B|(crc(A)) ^ crc_from_zero(B). */
#define LANE 4096

static uint32_t lane_shift[4][256];

/* mat: 32 columns, column i = image of bit i. */
static uint32_t gf2_apply(const uint32_t mat[32], uint32_t v) {
    uint32_t r = 0;
    for (int i = 0; v; i++, v >>= 1)
        if (v & 1) r ^= mat[i];
    return r;
}

static void gf2_square(uint32_t out[32], const uint32_t mat[32]) {
    for (int i = 0; i < 32; i++) out[i] = gf2_apply(mat, mat[i]);
}

static void build_lane_shift(void) {
    uint32_t a[32], b[32];
    /* one zero bit: shift right, xor the polynomial when bit 0 falls out */
    a[0] = CRC32C_POLY;
    for (int i = 1; i < 32; i++) a[i] = 1u << (i - 1);
    /* LANE bytes = 8 * LANE bits = 2^15 bits: square 15 times */
    int bits = 0;
    for (unsigned n = 8u * LANE; n > 1; n >>= 1) bits++;
    for (int k = 0; k < bits; k++) {
        gf2_square(b, a);
        memcpy(a, b, sizeof a);
    }
    for (uint32_t v = 0; v < 256; v++)
        for (int byte = 0; byte < 4; byte++) lane_shift[byte][v] = gf2_apply(a, v << (8 * byte));
}

static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

static inline uint32_t shift_lane(uint32_t c) {
    return lane_shift[0][c & 0xff] ^ lane_shift[1][(c >> 8) & 0xff] ^
           lane_shift[2][(c >> 16) & 0xff] ^ lane_shift[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *buf,
                                                               size_t n) {
    const unsigned char *p = buf;
    uint64_t c0 = (uint32_t)~crc;
    while (n && ((uintptr_t)p & 7u)) {
        c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
        n--;
    }
    if (n >= 3 * LANE) pthread_once(&shift_once, build_lane_shift);
    while (n >= 3 * LANE) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < LANE; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + LANE + i, 8);
            memcpy(&w2, p + 2 * LANE + i, 8);
            c0 = __builtin_ia32_crc32di(c0, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c0 = shift_lane((uint32_t)c0) ^ (uint32_t)c1;
        c0 = shift_lane((uint32_t)c0) ^ (uint32_t)c2;
        p += 3 * LANE;
        n -= 3 * LANE;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c0 = __builtin_ia32_crc32di(c0, w);
        p += 8;
        n -= 8;
    }
    while (n--) c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
    return ~(uint32_t)c0;
}
#endif

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);
static crc_fn chosen;
static const char *chosen_name = "generic";
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

static void choose(void) {
    chosen = mxp_crc32c_generic;
    chosen_name = "generic";
#if defined(__x86_64__)
    const char *force = getenv("MIXPREC_FORCE_ISA");
    bool generic = force && strcmp(force, "generic") == 0;
    __builtin_cpu_init();
    if (!generic && __builtin_cpu_supports("sse4.2")) {
        chosen = crc32c_sse42;
        chosen_name = "sse4.2";
    }
#endif
}

uint32_t mxp_crc32c(uint32_t crc, const void *buf, size_t n) {
    pthread_once(&choose_once, choose);
    return chosen(crc, buf, n);
}

const char *mxp_crc32c_impl(void) {
    pthread_once(&choose_once, choose);
    return chosen_name;
}
