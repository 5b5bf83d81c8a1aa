/* kernels/x86_avx512fp16/gemm_f16acc.c: the FP16 fast-accumulate GEMM on
 * AVX512-FP16 hardware (vfmadd231ph).
 *
 * Entry point: mxp_avx512fp16_gemm_f16acc (slot gemm_f16acc of the AVX-512
 * table when cpuid reports AVX512-FP16; kernels/x86_avx512/table.c).
 *
 * Numerics: exactly those of the emulation in kernels/generic/gemm_f16acc.c
 * (its file comment is the contract): per element of C, acc16 = +0, then
 * acc16 = RNE_fp16(a*b + acc16) for k = 0, 1, ... (vfmadd231ph rounds once,
 * handles FP16 subnormals and ignores MXCSR's DAZ and FTZ, as the emulation
 * does in double), acc32 += (float)acc16 and acc16 = +0 after every `kper`
 * products and after the last (vcvtph2psx + vaddps), then C = alpha*acc32
 * (+ beta*C) with separate roundings. Operands that are not both FP16 go to
 * the emulation (vfmadd231ph reads FP16 only). tests/test_gemm_f16acc_isa.c
 * compares the two bit for bit.
 *
 * Scheme (BLIS-shaped, see kernels/x86_avx512/gemm_internal.h): threads cut
 * C into column or row ranges; each range loops over NC-column blocks, K
 * chunks of KC products (a multiple of kper, so a chunk starts with acc16 =
 * 0 and only acc32 carries over, in a per-thread FP32 buffer), and MC-row
 * blocks; op(B) is packed per (column block, K chunk) into NR-wide panels,
 * op(A) per (row block, K chunk) into MR-wide panels, both as FP16 bits. The
 * microkernel holds an MR x NR tile: MR FP16 accumulators (one zmm of 32
 * lanes per row) and 2*MR FP32 accumulators, 24 of the 32 zmm registers,
 * and per k step loads one zmm of op(B) and issues MR vfmadd231ph with the
 * op(A) element broadcast from memory. Every element of C sees the same
 * instruction sequence whatever the cut, so results do not depend on the
 * thread count.
 */
#include "kernels/x86_avx512fp16/avx512fp16.h"

#include "kernels/generic/generic.h"
#include "kernels/threads.h"

#include <assert.h>
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

enum {
    MR = 8,            /* rows of the register tile */
    NV = 1,            /* zmm of FP16 per row */
    NR = 32 * NV,      /* columns */
    MC = 64,           /* rows of op(A) per packed block (MR multiple) */
    KC_TARGET = 256,   /* products per K chunk when kper divides it */
    NC_MAX = 1024,     /* columns of op(B) per packed block (NR multiple) */
    ACC_BYTES = 2 << 20, /* per-thread FP32 acc buffer: range rows x NC */
    MAX_PARTS = 64,
};
static_assert(MR % 8 == 0 && NR % 8 == 0 && MC % MR == 0 && NC_MAX % NR == 0,
              "panels are packed 8 x 8 at a time; blocks are whole panels");
static_assert(NR == 32 && MR == 8, "pack() copies a whole panel row as one zmm (NR) or xmm (MR)");
/* Below this many flops (2*M*N*K) one thread runs the product (as in
 * kernels/x86_avx512/gemm.c: a fork costs more than it saves). */
#define THREAD_MIN_FLOPS (2.0 * 32 * 256 * 256)

/* The packed panels hold FP16 bits written as uint16_t; the microkernel
 * reads them as _Float16 through this type (no strict-aliasing question). */
typedef _Float16 f16_alias __attribute__((may_alias));

typedef struct f16_scratch {
    uint16_t *ap;  /* MC x kc_max FP16: MR-wide panels */
    uint16_t *bp;  /* kc_max x NC_MAX FP16: NR-wide panels */
    float *acc;    /* acc32 of the current column block, tile by tile */
    size_t kc_cap, acc_cap;
} f16_scratch;

static f16_scratch scratch[MAX_PARTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct f16_plan {
    const mxp_gemm_args *g;
    size_t M, N, K, kc, kper;
    bool split_n;
    int parts;
} f16_plan;

/* Grow slot s to kc products per chunk and `acc` floats of acc32 (caller
 * holds `lock`). */
static bool scratch_ensure(f16_scratch *s, size_t kc, size_t acc) {
    if (s->kc_cap < kc) {
        mxp_free(s->ap);
        mxp_free(s->bp);
        s->ap = mxp_calloc((size_t)MC * kc, sizeof(uint16_t));
        s->bp = mxp_calloc((size_t)NC_MAX * kc, sizeof(uint16_t));
        s->kc_cap = s->ap && s->bp ? kc : 0;
        if (!s->kc_cap) return false;
    }
    if (s->acc_cap < acc) {
        mxp_free(s->acc);
        s->acc = mxp_calloc(acc, sizeof(float));
        s->acc_cap = s->acc ? acc : 0;
        if (!s->acc_cap) return false;
    }
    return true;
}

/* ---- packing ------------------------------------------------------------ */

/* 8 x 8 transpose of 16-bit values: rows src[r*ss .. +8) to columns,
 * dst[c*ds + r] = src[r*ss + c], for rows < nr (others read as 0). */
static inline void transpose8(const uint16_t *src, size_t ss, int nr, uint16_t *dst, size_t ds) {
    __m128i v[8];
    for (int r = 0; r < 8; r++)
        v[r] = r < nr ? _mm_loadu_si128((const __m128i *)(src + (size_t)r * ss))
                      : _mm_setzero_si128();
    __m128i a0 = _mm_unpacklo_epi16(v[0], v[1]), a1 = _mm_unpackhi_epi16(v[0], v[1]);
    __m128i a2 = _mm_unpacklo_epi16(v[2], v[3]), a3 = _mm_unpackhi_epi16(v[2], v[3]);
    __m128i a4 = _mm_unpacklo_epi16(v[4], v[5]), a5 = _mm_unpackhi_epi16(v[4], v[5]);
    __m128i a6 = _mm_unpacklo_epi16(v[6], v[7]), a7 = _mm_unpackhi_epi16(v[6], v[7]);
    __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
    __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
    __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
    __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
    __m128i c[8] = {_mm_unpacklo_epi64(b0, b4), _mm_unpackhi_epi64(b0, b4),
                    _mm_unpacklo_epi64(b1, b5), _mm_unpackhi_epi64(b1, b5),
                    _mm_unpacklo_epi64(b2, b6), _mm_unpackhi_epi64(b2, b6),
                    _mm_unpacklo_epi64(b3, b7), _mm_unpackhi_epi64(b3, b7)};
    for (int k = 0; k < 8; k++) _mm_storeu_si128((__m128i *)(dst + (size_t)k * ds), c[k]);
}

/* Pack X[r0 .. r0+rows)[k0 .. k0+kc) (FP16; element (r, k) at r*ld + k when
 * k_contig, else k*ld + r) into panels of width w (MR or NR): panel p at
 * dst + p*w*kc holds X[r0 + p*w + r][k0 + k] at k*w + r, rows past `rows`
 * zero. */
static void pack(const uint16_t *x, size_t ld, bool k_contig, size_t r0, size_t rows,
                 size_t k0, size_t kc, int w, uint16_t *dst) {
    for (size_t p0 = 0; p0 < rows; p0 += (size_t)w) {
        uint16_t *d = dst + p0 * kc;
        size_t nr = rows - p0 < (size_t)w ? rows - p0 : (size_t)w;
        if (!k_contig) { /* rows of a panel are contiguous for each k */
            const uint16_t *s = x + k0 * ld + r0 + p0;
            if (nr == NR && w == NR) /* whole panels: one zmm per k, no call */
                for (size_t k = 0; k < kc; k++)
                    _mm512_store_si512((__m512i *)(d + k * NR),
                                       _mm512_loadu_si512((const void *)(s + k * ld)));
            else if (nr == MR && w == MR)
                for (size_t k = 0; k < kc; k++)
                    _mm_storeu_si128((__m128i *)(d + k * MR),
                                     _mm_loadu_si128((const __m128i *)(s + k * ld)));
            else
                for (size_t k = 0; k < kc; k++) {
                    memcpy(d + k * (size_t)w, s + k * ld, nr * sizeof(uint16_t));
                    memset(d + k * (size_t)w + nr, 0, ((size_t)w - nr) * 2);
                }
            continue;
        }
        size_t k = 0;
        for (; k + 8 <= kc; k += 8)
            for (size_t r = 0; r < (size_t)w; r += 8) {
                int n8 = nr > r ? (int)(nr - r < 8 ? nr - r : 8) : 0;
                transpose8(x + (r0 + p0 + r) * ld + k0 + k, ld, n8, d + k * (size_t)w + r,
                           (size_t)w);
            }
        for (; k < kc; k++)
            for (size_t r = 0; r < (size_t)w; r++)
                d[k * (size_t)w + r] = r < nr ? x[(r0 + p0 + r) * ld + k0 + k] : 0;
    }
}

/* ---- microkernel -------------------------------------------------------- */

/* How the tile leaves the microkernel. */
typedef enum tile_out {
    TILE_KEEP,  /* acc32 to the acc buffer (more K chunks follow) */
    TILE_FINAL, /* C = alpha*acc32 (+ beta*C when beta != 0) */
} tile_out;

/* One MR x NR tile over kc products of a chunk that starts at a promotion
 * boundary: ap (kc x MR) and bp (kc x NR) packed panels; acc is the tile's
 * acc32 (MR x NR floats, row-major; read unless `first`). The last chunk's
 * promotion happens at its end whatever its length. */
static void ukernel(size_t kc, size_t kper, const uint16_t *ap, const uint16_t *bp, float *acc,
                    bool first, tile_out out, const f16_plan *p, size_t i0, size_t j0, size_t mr,
                    size_t nr) {
    __m512 a32[MR][2 * NV];
    for (int r = 0; r < MR; r++)
        for (int h = 0; h < 2 * NV; h++)
            a32[r][h] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + r * NR + h * 16);
    const f16_alias *a = (const f16_alias *)ap;
    for (size_t k0 = 0; k0 < kc; k0 += kper) {
        size_t n = kc - k0 < kper ? kc - k0 : kper;
        __m512h h[MR][NV];
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) h[r][v] = _mm512_setzero_ph();
        const f16_alias *ak = a + k0 * MR;
        const uint16_t *bk = bp + k0 * NR;
        for (size_t k = 0; k < n; k++) {
            __m512h b[NV];
            for (int v = 0; v < NV; v++) b[v] = _mm512_load_ph(bk + k * NR + v * 32);
            for (int r = 0; r < MR; r++) {
                __m512h x = _mm512_set1_ph(ak[k * MR + r]);
                for (int v = 0; v < NV; v++) h[r][v] = _mm512_fmadd_ph(x, b[v], h[r][v]);
            }
        }
        for (int r = 0; r < MR; r++) /* promote: acc32 += (float)acc16 */
            for (int v = 0; v < NV; v++) {
                /* through memory: vcvtph2psx from a register also needs a
                 * shuffle (vextracti64x4) and competes with the FMAs for
                 * ports 0 and 5; from memory it reads faster (h512 b256
                 * fwd/dX/dW, one thread: 142-151 / 127-140 / 136-145 GF/s
                 * against 127-141 / 128-129 / 135-143, interleaved runs) */
                _Alignas(64) uint16_t t[32];
                _mm512_store_ph(t, h[r][v]);
                a32[r][2 * v] = _mm512_add_ps(a32[r][2 * v], _mm512_cvtxph_ps(_mm256_load_ph(t)));
                a32[r][2 * v + 1] =
                    _mm512_add_ps(a32[r][2 * v + 1], _mm512_cvtxph_ps(_mm256_load_ph(t + 16)));
            }
    }
    if (out == TILE_KEEP) {
        for (int r = 0; r < MR; r++)
            for (int h = 0; h < 2 * NV; h++) _mm512_store_ps(acc + r * NR + h * 16, a32[r][h]);
        return;
    }
    const mxp_gemm_args *g = p->g;
    __m512 alpha = _mm512_set1_ps(g->alpha), beta = _mm512_set1_ps(g->beta);
    for (size_t r = 0; r < mr; r++) {
        float *c = g->C + (i0 + r) * (size_t)g->ldc + j0;
        for (int h = 0; h < 2 * NV; h++) {
            size_t off = (size_t)h * 16;
            if (off >= nr) break;
            __mmask16 m = nr - off >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nr - off)) - 1u);
            __m512 v = _mm512_mul_ps(alpha, a32[r][h]);
            if (g->beta != 0.0f)
                v = _mm512_add_ps(v, _mm512_mul_ps(beta, _mm512_maskz_loadu_ps(m, c + off)));
            _mm512_mask_storeu_ps(c + off, m, v);
        }
    }
}

/* ---- driver ------------------------------------------------------------- */

/* C[m0 .. m1)[n0 .. n1) with slot s. */
static void range(const f16_plan *p, size_t m0, size_t m1, size_t n0, size_t n1,
                  f16_scratch *s) {
    const mxp_gemm_args *g = p->g;
    const uint16_t *A = g->A, *B = g->B;
    /* op(A): rows i, columns k; op(B)^T: rows j, columns k */
    bool a_kc = !g->trans_a, b_kc = g->trans_b;
    size_t rows = m1 - m0, tiles_m = (rows + MR - 1) / MR;
    size_t nc_max = s->acc_cap / (tiles_m * MR);
    nc_max = nc_max / NR * NR;
    if (nc_max > NC_MAX) nc_max = NC_MAX;
    for (size_t jc = n0; jc < n1; jc += nc_max) {
        size_t nc = n1 - jc < nc_max ? n1 - jc : nc_max;
        size_t tiles_n = (nc + NR - 1) / NR;
        for (size_t pc = 0; pc < p->K; pc += p->kc) {
            size_t kc = p->K - pc < p->kc ? p->K - pc : p->kc;
            bool first = pc == 0, last = pc + kc == p->K;
            pack(B, (size_t)g->ldb, b_kc, jc, nc, pc, kc, NR, s->bp);
            for (size_t ic = m0; ic < m1; ic += MC) {
                size_t mc = m1 - ic < MC ? m1 - ic : MC;
                pack(A, (size_t)g->lda, a_kc, ic, mc, pc, kc, MR, s->ap);
                for (size_t jt = 0; jt < tiles_n; jt++) {
                    size_t j0 = jc + jt * NR, nr = jc + nc - j0 < NR ? jc + nc - j0 : NR;
                    for (size_t i = 0; i < mc; i += MR) {
                        size_t tm = (ic - m0 + i) / MR, mr = mc - i < MR ? mc - i : MR;
                        float *acc = s->acc + (tm * tiles_n + jt) * (size_t)(MR * NR);
                        ukernel(kc, p->kper, s->ap + i * kc, s->bp + jt * NR * kc, acc, first,
                                last ? TILE_FINAL : TILE_KEEP, p, ic + i, j0, mr, nr);
                    }
                }
            }
        }
    }
}

static void part(void *ctx, int index, int count) {
    const f16_plan *p = ctx;
    size_t ext = p->split_n ? p->N : p->M, unit = p->split_n ? NR : MR;
    size_t units = (ext + unit - 1) / unit;
    size_t lo = units * (size_t)index / (size_t)count * unit;
    size_t hi = units * (size_t)(index + 1) / (size_t)count * unit;
    if (hi > ext) hi = ext;
    if (lo >= hi) return;
    if (p->split_n)
        range(p, 0, p->M, lo, hi, &scratch[index]);
    else
        range(p, lo, hi, 0, p->N, &scratch[index]);
}

void mxp_avx512fp16_gemm_f16acc(const mxp_gemm_args *g, int k) {
    if (g->a_type != MXP_DTYPE_F16 || g->b_type != MXP_DTYPE_F16 || g->M <= 0 || g->N <= 0 ||
        g->K <= 0) {
        mxp_generic_gemm_f16acc(g, k);
        return;
    }
    if (k < 1) k = 1;
    if (k > MXP_F16ACC_K_MAX) k = MXP_F16ACC_K_MAX;
    f16_plan p = {.g = g, .M = (size_t)g->M, .N = (size_t)g->N, .K = (size_t)g->K,
                  .kper = (size_t)k};
    p.kc = p.kper >= KC_TARGET ? p.kper : KC_TARGET / p.kper * p.kper;
    if (p.kc > p.K) p.kc = p.K;
    int threads = mxp_threads_max();
    if (threads > MAX_PARTS) threads = MAX_PARTS;
    if (2.0 * (double)p.M * (double)p.N * (double)p.K < THREAD_MIN_FLOPS) threads = 1;
    size_t tiles_m = (p.M + MR - 1) / MR, tiles_n = (p.N + NR - 1) / NR;
    p.split_n = tiles_n >= (size_t)threads && (tiles_n >= tiles_m || tiles_m < (size_t)threads);
    size_t tiles = p.split_n ? tiles_n : tiles_m;
    p.parts = (size_t)threads < tiles ? threads : (int)tiles;
    /* acc buffer: the part's rows (rounded to MR) times at least NR columns */
    size_t rows = p.split_n ? tiles_m * MR : (tiles_m + (size_t)p.parts - 1) / (size_t)p.parts * MR;
    size_t acc = (size_t)ACC_BYTES / sizeof(float);
    if (acc < rows * NR) acc = rows * NR;
    pthread_mutex_lock(&lock);
    bool ok = true;
    for (int i = 0; i < p.parts && ok; i++) ok = scratch_ensure(&scratch[i], p.kc, acc);
    if (!ok) {
        pthread_mutex_unlock(&lock);
        mxp_log(MXP_LOG_WARN, "kernels: no memory for the AVX512-FP16 GEMM buffers; "
                              "using the emulated FP16 fast-accumulate GEMM for this call");
        mxp_generic_gemm_f16acc(g, k);
        return;
    }
    mxp_threads_run(p.parts, part, &p);
    pthread_mutex_unlock(&lock);
}
