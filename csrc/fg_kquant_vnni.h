/* AVX-512 VNNI gemm of the K-quants (Q4_K, Q5_K, Q6_K) for many activations: rows in lanes, 16 rows per zmm.
 *
 * The design of the AVX2 rows8 gemm (fg_kquant.h), twice as wide and without its int16 stage: per super-block, 16
 * weight rows are unpacked once (in zmm: fg_transpose16_epi32) and every activation passes over them. A
 * sub-block of SUB groups (4 elements each: 32 elements for Q4_K/Q5_K, 16 for Q6_K) is SUB dpbusd (unsigned weights
 * x signed activations, summed in int32: nothing saturates) times the rows' scale in int32 lanes. The integer sums
 * are the scalar reference's exactly (Q4_K/Q5_K: |sumi| < 8 * 32 * 31 * 128 * 63; Q6_K: < 16 * 16 * 63 * 128 * 128,
 * both < 2^31), and each lane takes the rows8 float step in its order, so results equal the AVX2 gemm, gemv and
 * vec_dot bit for bit. Fewer than FG_KQ_ROWS8_MIN_M activations take the AVX2 kernel (FEW).
 *
 * The unpacked super-block is the panel (FG_GEMM_FROM_PANEL's idea: unpacked once, read by every activation): the
 * activations run over it FG_KQ_MT at a time, their int32 sums in registers through all sub-blocks, so a sub-block
 * costs each activation its SUB dpbusd, a vpshufb and a dpwssd (the scale; no sums kept in memory between
 * sub-blocks), and the bsums term is 8 dpwssd (Q4_K, Q5_K mins) or none (Q6_K: each chain starts at -32 bsums). */
#ifndef FG_KQUANT_VNNI_H
#define FG_KQUANT_VNNI_H

#include "fg_kquant.h"

#if FG_HAVE_X86
/* ---- The K-quant gemv (one activation) on AVX-512 VNNI: tiles of 8 rows, each row's super-block i in zmm
 * (q4_k_tile_vnni, q6_k_tile_vnni in fg_quant_q4_k.c, q6_k.c), the 8 rows' block sums reduced together and each row
 * taking the scalar reference's float step in its order. TILE(R, nb, w, stride, ahead, x, y, ystride): rows
 * w + r * stride (r < R) into y[r * ystride]; each (row, block) asks for the bytes `ahead` of it.
 *
 * The rows of a tile are 8 streams (FG_KQ_GEMV_VNNI): the matrix is cut into 8 runs of rows and tile t takes row t of
 * each run, so every run is read in address order, block after block and row after row, as 8 ascending streams (the
 * bandwidth probe's pattern, fg_bandwidth.c), each asking for the bytes fg_stream_ahead on (fg_simd.h). Tiles of 8
 * adjacent rows read rows narrower than a 4 KB page (2048 wide: 1152 bytes of Q4_K) back and forth within a page, which
 * the hardware prefetcher follows badly: one thread over 600 MB of 2048-wide rows read Q4_K at 9.6 GB/s so (the AVX2
 * tile 9.2) and at 14.9 as streams, Q6_K 8.4 (AVX2) -> 12.7, against a 15.4 GB/s probe in the same process (2 vCPUs,
 * other work running; 8192-wide rows gain less, their rows already span pages). Rows left over (nrows % 8) take one
 * tile of adjacent rows. ---- */
#define FG_KQ_GEMV_PREFETCH(b, ahead, bs)                                                                   \
    do {                                                                                                     \
        for (size_t c_ = 0; c_ < (bs); c_ += 64) _mm_prefetch((const char *)(b) + (ahead) + c_, _MM_HINT_T0); \
        _mm_prefetch((const char *)(b) + (ahead) + (bs) - 1, _MM_HINT_T0);                                  \
    } while (0)
#define FG_KQ_GEMV_VNNI(DOT, GEMV, TILE)                                                                      \
    FG_TARGET_AVX512_VNNI static float DOT(int64_t n, const void *w, const void *x) {                         \
        float y;                                                                                              \
        TILE(1, n / QK_K, (const char *)w, 0, 0, (const block_q8_K *)x, &y, 1);                               \
        return y;                                                                                             \
    }                                                                                                         \
    FG_TARGET_AVX512_VNNI static void GEMV(int64_t n, const void *w, size_t stride, const void *x, float *y,  \
                                           int64_t nrows) {                                                   \
        const int64_t q = nrows / 8; /* rows per stream */                                                     \
        const size_t ahead = fg_stream_ahead(stride);                                                         \
        for (int64_t t = 0; t < q; t++)                                                                       \
            TILE(8, n / QK_K, (const char *)w + t * stride, q * stride, ahead,                                \
                 (const block_q8_K *)x, y + t, q);                                                            \
        if (nrows > 8 * q)                                                                                    \
            TILE((int)(nrows - 8 * q), n / QK_K, (const char *)w + 8 * q * stride, stride, 8 * stride,        \
                 (const block_q8_K *)x, y + 8 * q, 1);                                                        \
    }

typedef struct {
    __m512i q[64];   /* group g (elements 4g..4g+3): lane r = row r's 4 unsigned weights */
    __m512i sc[16];  /* sub-block j: lane r = row r's scale s as the int16 pair (s, 256 s) (fg_kq_sc_pairs) */
    __m512i corr[8]; /* int16 pairs: lane r = the pair that multiplies (bsums[2t], bsums[2t+1]) (Q4_K, Q5_K) */
    __m512 d, dmin;  /* lane r: row r's (0 past the last row) */
} fg_kq_rows16;

/* Scales as int32 lanes (-128..127) -> the int16 pairs (s, 256 s) that fg_kq_rows16_tile's dpwssd takes. */
FG_INLINE_AVX512_VNNI __m512i fg_kq_sc_pairs(__m512i s) {
    return _mm512_or_si512(_mm512_and_si512(s, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(s, 24));
}

/* Q4_K (five = 0) / Q5_K rows [0, R) (R <= 16) of super-block i into u, in zmm: per row its 8 scales and 8 mins as
 * int32 (fg_unpack_scales_k4_avx2), then 64 elements at a time: the 32 bytes of nibbles in both 256-bit halves give
 * elements 64c..64c+31 (low nibbles) and 64c+32..64c+63 (high; Q5_K: bit 4 from bits 2c, 2c+1 of qh), each
 * transposed once (fg_k4_rows8_avx2 twice and joined: ~2x the ops). */
FG_INLINE_AVX512_VNNI void fg_k4_rows16_vnni(const int five, int R, const char *w, size_t stride, int64_t i,
                                             fg_kq_rows16 *u) {
    const size_t bs = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const size_t qs_off = five ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    const __m512i m4 = _mm512_set1_epi8(0x0f), m10 = _mm512_set1_epi8(0x10);
    uint16_t dh[16] = {0}, mh[16] = {0};
    __m512i v[16]; /* [r] -> [g] */
    for (int r = 0; r < 16; r++) {
        const uint8_t *b = (const uint8_t *)w + r * stride + i * bs;
        v[r] = r < R ? _mm512_cvtepu8_epi32(fg_unpack_scales_k4_avx2(b + 4)) : _mm512_setzero_si512();
        if (r < R) memcpy(&dh[r], b, 2), memcpy(&mh[r], b + 2, 2);
    }
    fg_transpose16_epi32(v); /* v[j]: scale j; v[8 + t]: min t */
    for (int j = 0; j < 8; j++) u->sc[j] = fg_kq_sc_pairs(v[j]);
    for (int t = 0; t < 8; t++) u->corr[t] = _mm512_or_si512(v[8 + t], _mm512_slli_epi32(v[8 + t], 16)); /* (m, m) */
    u->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh));
    u->dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)mh));
    for (int c = 0; c < 4; c++) {
        for (int r = 0; r < 16; r++) {
            const uint8_t *b = (const uint8_t *)w + r * stride + i * bs;
            if (r >= R) {
                v[r] = _mm512_setzero_si512();
                continue;
            }
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + qs_off + 32 * c)));
            v[r] = _mm512_and_si512(_mm512_mask_blend_epi64(0xf0, q, _mm512_srli_epi16(q, 4)), m4);
            if (five) { /* bits 2c (low half), 2c + 1 (high) of qh -> bit 4 (16-bit shifts; the mask drops the rest) */
                const __m512i hb = _mm512_srli_epi16(
                    _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + offsetof(block_q5_K, qh)))), 2 * c);
                v[r] = _mm512_or_si512(v[r], _mm512_and_si512(_mm512_mask_blend_epi64(0xf0, _mm512_slli_epi16(hb, 4),
                                                                                     _mm512_slli_epi16(hb, 3)), m10));
            }
        }
        fg_transpose16_epi32(v);
        for (int g = 0; g < 16; g++) u->q[16 * c + g] = v[g];
    }
}

/* corr . bsums of activation block xb, per lane (dpwssd: int16 pairs into int32). */
FG_INLINE_AVX512_VNNI __m512i fg_kq_rows16_corr(const fg_kq_rows16 *u, const block_q8_K *xb) {
    __m512i c = _mm512_setzero_si512();
    for (int t = 0; t < 8; t++) {
        int32_t b2;
        memcpy(&b2, xb->bsums + 2 * t, 4);
        c = _mm512_dpwssd_epi32(c, u->corr[t], _mm512_set1_epi32(b2));
    }
    return c;
}

/* M activations (a constant: their sums stay in registers) of super-block i (x: the first, xstride apart) over the
 * 16 rows of u: y[a * ldy + r] = (first ? 0 : y) + the rows8 float step, lane r (row r) where mask. Per sub-block its
 * SUB groups are one dpbusd chain per activation, t (|t| < 2^17), scaled exactly by the rows' scale s as the int16
 * pairs (t & 255, t >> 8) . (s, 256 s) (|256 s| <= 32768: Q6_K's int8 scales fit). Q6_K's chain of sub-block j
 * starts at -32 bsums[j] (its 16 elements are one bsum's), so it sums (q - 32) x and isum is the reference's sumi
 * (sum_j scale_j (t_j - 32 bsums_j), the same integer: |t_j - 32 bsums_j| <= 16 * 32 * 128) at a broadcast load
 * per chain, where 8 dpwssd of corr . bsums per activation were (port 0 per activation, 16 rows and super-block:
 * 64 dpbusd, 16 mullo of 2 uops and 8 dpwssd before, 64 dpbusd and 16 dpwssd now). Q4_K's and Q5_K's mins term
 * (corr . bsums) goes in the float step. */
FG_INLINE_AVX512_VNNI void fg_kq_rows16_tile(const fg_kq_rows16 *u, const int M, const int sub, const int has_min,
                                             const char *x, size_t xstride, int64_t i, int first, __mmask16 mask,
                                             float *y, int64_t ldy) {
    __m512i isum[16];
    union {
        __m512i v;
        int32_t j[16];
    } off[16]; /* Q6_K: off[a].j[j] = -32 bsums[j] of activation a, as int32 */
    for (int a = 0; a < M; a++) {
        isum[a] = _mm512_setzero_si512();
        if (!has_min) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)((const block_q8_K *)(x + a * xstride) + i)->bsums);
            off[a].v = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_cvtepi16_epi32(bs), 5));
        }
    }
    /* bytes (0, zero, 1, 2) of each int32 lane t: the int16 pair (t & 255, t >> 8), exact for |t| < 2^23 */
    const __m512i split = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -128, 1, 2, 4, -128, 5, 6, 8, -128, 9, 10, 12, -128,
                                                               13, 14));
    for (int j = 0; j < 64 / sub; j++) {
        const __m512i sc = u->sc[j];
        /* the M chains side by side, a group g at a time (M independent dpbusd per weight vector: dpbusd's latency
         * is ~5 cycles at 2 a cycle), their sums in registers throughout (#pragma GCC unroll; FG_NO_UNROLL_JAM on the
         * gemm: gcc would otherwise jam two sub-blocks and keep the sums in memory, 1.1-1.3x slower). Q6_K's chain
         * starts at -32 bsums[j] (sub = 4: a sub-block is one bsum's 16 elements), a broadcast load: no corr . bsums
         * (8 dpwssd) per activation */
        __m512i t[16];
#pragma GCC unroll 16
        for (int a = 0; a < M; a++)
            t[a] = has_min ? _mm512_setzero_si512() : _mm512_set1_epi32(off[a].j[j]);
        for (int g = 0; g < sub; g++) {
            const __m512i q = u->q[sub * j + g];
#pragma GCC unroll 16
            for (int a = 0; a < M; a++)
                t[a] = fg_dpbusd_bcst(t[a], q, ((const block_q8_K *)(x + a * xstride) + i)->qs + 4 * (sub * j + g));
        }
        /* (t & 255) s + (t >> 8) 256 s: a p5 shuffle and one dpwssd, where mullo (2 port-0 uops) + add were */
#pragma GCC unroll 16
        for (int a = 0; a < M; a++) isum[a] = _mm512_dpwssd_epi32(isum[a], _mm512_shuffle_epi8(t[a], split), sc);
    }
    for (int a = 0; a < M; a++) {
        const block_q8_K *xb = (const block_q8_K *)(x + a * xstride) + i;
        const __m512 dx = _mm512_set1_ps(xb->d);
        __m512 f = _mm512_mul_ps(_mm512_mul_ps(u->d, dx), _mm512_cvtepi32_ps(isum[a]));
        if (has_min) /* (d dx) sumi - (dmin dx) summ */
            f = _mm512_sub_ps(f, _mm512_mul_ps(_mm512_mul_ps(u->dmin, dx), _mm512_cvtepi32_ps(fg_kq_rows16_corr(u, xb))));
        float *ya = y + a * ldy;
        const __m512 prev = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, ya);
        _mm512_mask_storeu_ps(ya, mask, _mm512_add_ps(prev, f));
    }
}

/* The gemm: blocks of 16 rows; per super-block the rows are unpacked once, then every activation passes over them,
 * FG_KQ_MT at a time, accumulating into y super-block by super-block as the reference. ROWS16(R, w, stride, i, u)
 * unpacks the 16 rows (q6_k_rows16_vnni, fg_k4_rows16_vnni), SUB is its groups per scale, FEW the AVX2 gemm for
 * few activations. */
#define FG_KQ_MT 8
#define FG_KQ_GEMM_VNNI(NAME, ROWS16, SUB, HAS_MIN, FEW)                                                          \
    FG_TARGET_AVX512_VNNI FG_NO_UNROLL_JAM static void NAME(int64_t n, const void *w, size_t stride,             \
                                                            const void *xq, size_t xq_stride, int64_t m, float *y, \
                                                            int64_t ldy, int64_t nrows) {                        \
        if (m < FG_KQ_ROWS8_MIN_M) {                                                                            \
            FEW(n, w, stride, xq, xq_stride, m, y, ldy, nrows);                                                 \
            return;                                                                                             \
        }                                                                                                       \
        fg_kq_rows16 u;                                                                                         \
        for (int64_t k0 = 0; k0 < n / QK_K; k0 += FG_KQ_KC) { /* columns of FG_KQ_KC, as FG_KQ_GEMM_AVX2 */      \
          const int64_t k1 = n / QK_K - k0 < FG_KQ_KC ? n / QK_K : k0 + FG_KQ_KC;                              \
          for (int64_t rb = 0; rb < nrows; rb += 16) {                                                          \
            const int R = nrows - rb < 16 ? (int)(nrows - rb) : 16;                                             \
            const __mmask16 mask = (__mmask16)((1u << R) - 1u);                                                 \
            for (int64_t i = k0; i < k1; i++) {                                                                 \
                ROWS16(R, (const char *)w + rb * stride, stride, i, &u);                                         \
                for (int64_t a = 0; a < m; a += FG_KQ_MT) {                                                     \
                    const int M = m - a < FG_KQ_MT ? (int)(m - a) : FG_KQ_MT;                                   \
                    FG_TILE_M_8(fg_kq_rows16_tile, &u, M, SUB, HAS_MIN, (const char *)xq + a * xq_stride, xq_stride, \
                                i, i == 0, mask, y + a * ldy + rb, ldy)                                         \
                }                                                                                               \
            }                                                                                                   \
          }                                                                                                     \
        }                                                                                                       \
    }
#endif /* FG_HAVE_X86 */

#endif
