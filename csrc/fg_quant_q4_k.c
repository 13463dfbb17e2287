/* Q4_K weights: super-blocks of 256 = 8 sub-blocks of 32, x = d * sc_j * q - dmin * m_j with q in 0..15 and
 * 6-bit (sc_j, m_j) packed in scales[12] (fg_kquant_ref.h). qs: 4 runs of 32 bytes, run k holds sub-block 2k in its
 * low nibbles and 2k+1 in its high nibbles. Dot against Q8_K:
 *   sum_j d dx sc_j (q . x)_j - dmin dx sum_j m_j (sum x)_j, where (sum x)_j = bsums[2j] + bsums[2j+1]. */
#include "fg_simd.h"
#include "fg_kquant.h"
#include "fg_kquant_vnni.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_q4_K_ref. */
static void quantize_row_q4_k_scalar(const float *x, void *vy, int64_t n) {
    block_q4_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        fg_quantize_k4_scales(x, 15, -1.f, 20, y[i].scales, &y[i].d, &y[i].dmin, L);
        for (int j = 0; j < QK_K; j += 64)
            for (int l = 0; l < 32; ++l) y[i].qs[j / 2 + l] = L[j + l] | (L[j + l + 32] << 4);
    }
}

static void dequantize_row_q4_k_scalar(const void *vx, float *y, int64_t n) {
    const block_q4_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fg_fp16_to_fp32(x[i].d), min = fg_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int j = 0; j < QK_K / 32; j += 2, q += 32) {
            uint8_t sc, m;
            fg_scale_min_k4(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            fg_scale_min_k4(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

static float vec_dot_q4_k_q8_k_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q4_K *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sm[16]; /* scales 0..7, mins 0..7 */
        fg_unpack_scales_k4(w[i].scales, sm);
        const int8_t *q8 = x[i].qs;
        int sumi = 0, summ = 0;
        for (int j = 0; j < QK_K / 64; j++, q8 += 64) {
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (w[i].qs[32 * j + l] & 0xF) * q8[l];
                s1 += (w[i].qs[32 * j + l] >> 4) * q8[l + 32];
            }
            sumi += sm[2 * j] * s0 + sm[2 * j + 1] * s1;
        }
        for (int g = 0; g < QK_K / 16; g++) summ += x[i].bsums[g] * sm[8 + g / 2];
        sum += fg_fp16_to_fp32(w[i].d) * x[i].d * (float)sumi - fg_fp16_to_fp32(w[i].dmin) * x[i].d * (float)summ;
    }
    return sum;
}

/* The row-interleaved copy (block_q4_K_r16; fg_pack_fn): super-block i of 16 rows side by side, scales unpacked. */
static void pack_q4_k_r16(int64_t n, const void *w, size_t stride, void *wp, int64_t ngroups) {
    block_q4_K_r16 *o = wp;
    for (int64_t g = 0; g < ngroups; g++)
        for (int64_t i = 0; i < n / QK_K; i++, o++)
            for (int r = 0; r < FG_PACK_ROWS; r++) {
                const char *row = (const char *)w + (size_t)(g * FG_PACK_ROWS + r) * stride;
                const block_q4_K *b = (const block_q4_K *)row + i;
                uint8_t sm[16]; /* scales 0..7, mins 0..7 */
                fg_unpack_scales_k4(b->scales, sm);
                o->d[r] = b->d, o->dmin[r] = b->dmin;
                for (int j = 0; j < 8; j++) o->sc[j][r] = sm[j], o->mn[j / 2][r][j % 2] = sm[8 + j];
                for (int q = 0; q < 32; q++) memcpy(o->qs[q][r], b->qs + 4 * q, 4);
            }
}

/* The gemv from that copy: vec_dot's integer sums and float step per row, so equal to it bit for bit. */
static void gemv_packed_q4_k_scalar(int64_t n, const void *wp, const void *vx, float *y, int64_t ngroups) {
    const block_q4_K_r16 *b = wp;
    for (int64_t g = 0; g < ngroups; g++, y += FG_PACK_ROWS) {
        float sum[FG_PACK_ROWS] = {0};
        for (int64_t i = 0; i < n / QK_K; i++, b++) {
            const block_q8_K *x = (const block_q8_K *)vx + i;
            for (int r = 0; r < FG_PACK_ROWS; r++) {
                int sumi = 0, summ = 0;
                for (int e = 0; e < QK_K; e++) { /* element e: sub-block e / 32, byte 32 (e / 64) + e % 32 of qs */
                    const int j = e / 32, byte = 32 * (e / 64) + e % 32;
                    const int q = (b->qs[byte / 4][r][byte % 4] >> (4 * (j % 2))) & 0xF;
                    sumi += b->sc[j][r] * q * x->qs[e];
                }
                for (int j = 0; j < 8; j++) summ += b->mn[j / 2][r][j % 2] * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
                sum[r] += fg_fp16_to_fp32(b->d[r]) * x->d * (float)sumi -
                          fg_fp16_to_fp32(b->dmin[r]) * x->d * (float)summ;
            }
        }
        memcpy(y, sum, sizeof(sum));
    }
}

#if FG_HAVE_X86
/* ---- AVX2 ---- */

/* x's sums of sub-blocks 2t and 2t + 1 (bsums in pairs) as the int16 halves of one int32: the packed gemvs' mins
 * term takes (m_2t, m_2t+1) . (them) in one madd per row. */
static inline int32_t q4_k_r16_bsum_pair(const block_q8_K *x, int t) {
    return (int32_t)(uint16_t)(x->bsums[4 * t] + x->bsums[4 * t + 1]) |
           (int32_t)((uint32_t)(uint16_t)(x->bsums[4 * t + 2] + x->bsums[4 * t + 3]) << 16);
}

/* Bit-exact with the scalar reference: (d * sc) * q, then - dmin * m (no FMA). */
FG_TARGET_AVX2 static void dequantize_row_q4_k_avx2(const void *vx, float *y, int64_t n) {
    const block_q4_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fg_f16(x[i].d), min = fg_f16(x[i].dmin);
        uint8_t sm[16];
        fg_unpack_scales_k4(x[i].scales, sm);
        for (int j = 0; j < QK_K / 32; j += 2) {
            const __m128i q0 = _mm_loadu_si128((const __m128i *)(x[i].qs + 16 * j));
            const __m128i q1 = _mm_loadu_si128((const __m128i *)(x[i].qs + 16 * j + 16));
            const __m128i m4 = _mm_set1_epi8(0x0f);
            const __m128i v[4] = {_mm_and_si128(q0, m4), _mm_and_si128(q1, m4), /* sub-block j: 32 low nibbles */
                                  _mm_and_si128(_mm_srli_epi16(q0, 4), m4), _mm_and_si128(_mm_srli_epi16(q1, 4), m4)};
            for (int h = 0; h < 2; h++) {
                const __m256 dd = _mm256_set1_ps(d * sm[j + h]), mm = _mm256_set1_ps(min * sm[8 + j + h]);
                for (int k = 0; k < 4; k++) {
                    const __m128i b = k & 1 ? _mm_srli_si128(v[2 * h + k / 2], 8) : v[2 * h + k / 2];
                    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
                    _mm256_storeu_ps(y + 32 * (j + h) + 8 * k, _mm256_sub_ps(_mm256_mul_ps(dd, q), mm));
                }
            }
        }
        y += QK_K;
    }
}

/* The tile (fg_kquant_x86.h) with Q4_K's layout. */
FG_INLINE_AVX2 void q4_k_tile_avx2(int R, const int A, int64_t nb, const char *w, size_t stride, size_t ahead,
                                   const char *x, size_t xstride, float *y, int64_t ldy) {
    fg_k4_tile_avx2(0, R, A, nb, w, stride, ahead, x, xstride, y, ldy);
}
FG_INLINE_AVX2 void q4_k_rows8_avx2(const int gpm, int R, const char *w, size_t stride, int64_t i, fg_kq_rows8 *u) {
    fg_k4_rows8_avx2(0, gpm, R, w, stride, i, u);
}
FG_KQ_GEMM_AVX2(gemm_q4_k_q8_k_rows8_avx2, q4_k_rows8_avx2, 8, 1) /* 8 groups: 8 * 2 * 15 * 128 < 32768 */
FG_KQ_KERNELS_AVX2(vec_dot_q4_k_q8_k_avx2, gemv_q4_k_q8_k_avx2, gemm_q4_k_q8_k_avx2, q4_k_tile_avx2,
                   gemm_q4_k_q8_k_rows8_avx2)
FG_INLINE_AVX512_VNNI void q4_k_rows16_vnni(int R, const char *w, size_t stride, int64_t i, fg_kq_rows16 *u) {
    fg_k4_rows16_vnni(0, R, w, stride, i, u);
}
FG_KQ_GEMM_VNNI(gemm_q4_k_q8_k_vnni, q4_k_rows16_vnni, 8, 1, gemm_q4_k_q8_k_avx2)

/* The gemv (and vec_dot) on AVX-512 VNNI: the AVX2 tile's loop (8 rows, one activation, each row's super-block
 * whole) with its integer sums made in zmm. A row's 128 bytes of nibbles are two zmm, qs 0..63 and 64..127: in
 * the first, the low nibbles are sub-blocks 0 (lanes 0-7) and 2 (lanes 8-15), the high ones 1 and 3; in the second
 * 4, 6 and 5, 7. Each is one dpbusd against the activation bytes in that order (x[4], per super-block), whose int32
 * lanes (|v| <= 4 * 15 * 128) the low and high results pack into int16 (packs: exact), 128-bit lane i holding 4
 * sums of each; one dpwssd takes each pair of them times its sub-block's scale, the int16 scales put in place by
 * one in-lane byte shuffle of the 8 scales (q4_k_sc16). Per super-block: 4 dpbusd, 2 packs, 2 shuffles, 2 dpwssd,
 * where a scale permute and a dpwssd per dpbusd took 13% more time in L2 (AMD EPYC, Zen 4). The integer sums and
 * the float step are the AVX2 tile's, so the results equal it (and the scalar reference) bit for bit. The tiles
 * run as 8 streams (FG_KQ_GEMV_VNNI, fg_kquant_vnni.h). */
FG_INLINE_AVX512_VNNI void q4_k_x_vnni(const int8_t *q8, __m512i x[4]) {
    for (int h = 0; h < 2; h++) { /* x[2h]: elements 128h + 0..31 | 64..95; x[2h + 1]: 32..63 | 96..127 */
        const int8_t *p = q8 + 128 * h;
        for (int k = 0; k < 2; k++)
            x[2 * h + k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 32 * k))),
                                              _mm256_loadu_si256((const __m256i *)(p + 64 + 32 * k)), 1);
    }
}
/* The byte shuffle of the 8 scales (in every 128-bit lane) that gives nibble zmm k's packed sums their scales as
 * int16: lane i < 2 takes scale 4k (int16 0-3) and 4k + 1 (4-7), lane i >= 2 scales 4k + 2 and 4k + 3. */
FG_INLINE_AVX512_VNNI __m512i q4_k_sc16(int k) {
    int8_t c[64];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) {
            c[16 * i + 2 * j] = (int8_t)(4 * k + (i >= 2 ? 2 : 0) + (j >= 4));
            c[16 * i + 2 * j + 1] = (int8_t)0x80; /* a zero high byte */
        }
    return _mm512_loadu_si512((const void *)c);
}
/* Row b's super-block against xb (x: its bytes as q4_k_x_vnni lays them out): the 8 partial sums of the scaled dot
 * (*isum) and of the mins term (*msum, bsums . mins). */
FG_INLINE_AVX512_VNNI void q4_k_block_vnni(const uint8_t *b, const block_q8_K *xb, const __m512i x[4],
                                           const __m512i sc16[2], __m256i *isum, __m256i *msum) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m128i sm8 = fg_unpack_scales_k4_avx2(b + 4), m8 = _mm_srli_si128(sm8, 8);
    *msum = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums),
                              _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8))); /* m_j at 2j, 2j+1 */
    const __m512i sc = _mm512_broadcast_i32x4(sm8);                              /* scales 0..7, mins 0..7 */
    __m512i s = _mm512_setzero_si512();
    for (int k = 0; k < 2; k++) {
        const __m512i q = _mm512_loadu_si512((const void *)(b + offsetof(block_q4_K, qs) + 64 * k));
        const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        const __m512i p = _mm512_packs_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, x[2 * k]),
                                             _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, x[2 * k + 1]));
        s = _mm512_dpwssd_epi32(s, p, _mm512_shuffle_epi8(sc, sc16[k]));
    }
    *isum = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}
FG_INLINE_AVX512_VNNI void q4_k_tile_vnni(int R, int64_t nb, const char *w, size_t stride, size_t ahead,
                                          const block_q8_K *x, float *y, int64_t ystride) {
    const __m512i sc16[2] = {q4_k_sc16(0), q4_k_sc16(1)};
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m512i xv[4];
        q4_k_x_vnni(x[i].qs, xv);
        __m256i isum[8], msum[8]; /* per row: 8 int32 partial sums of the scaled dot and of the mins term */
        uint16_t dh[8] = {0}, mh[8] = {0};
        for (int l = R; l < 8; l++) isum[l] = msum[l] = _mm256_setzero_si256();
        for (int r = 0; r < R; r++) {
            const uint8_t *b = (const uint8_t *)w + r * stride + i * sizeof(block_q4_K);
            FG_KQ_GEMV_PREFETCH(b, ahead, sizeof(block_q4_K));
            memcpy(&dh[r], b, 2);
            memcpy(&mh[r], b + 2, 2);
            q4_k_block_vnni(b, x + i, xv, sc16, &isum[r], &msum[r]);
        }
        const __m256 dx = _mm256_set1_ps(x[i].d);
        const __m256 sumi = _mm256_cvtepi32_ps(fg_hsum8_epi32(isum)), summ = _mm256_cvtepi32_ps(fg_hsum8_epi32(msum));
        const __m256 t0 = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh)), dx), sumi);
        const __m256 t1 = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)mh)), dx), summ);
        acc = _mm256_add_ps(acc, _mm256_sub_ps(t0, t1)); /* sum += (d dx) sumi - (dmin dx) summ */
    }
    float t[8];
    _mm256_storeu_ps(t, acc);
    for (int r = 0; r < R; r++) y[r * ystride] = t[r];
}
FG_KQ_GEMV_VNNI(vec_dot_q4_k_q8_k_vnni, gemv_q4_k_q8_k_vnni, q4_k_tile_vnni)

/* The gemv from the row-interleaved copy (block_q4_K_r16): one load gives the 16 rows' qs bytes 4g..4g+3 in its
 * dword lanes, whose low nibbles are 4 weights of sub-block 2k and high nibbles 4 of 2k + 1 (g = 8k + ..), each a
 * dpbusd against one broadcast activation dword; a sub-block's int32 sums times its scales (mullo), the mins term
 * one dpwssd per pair of sub-blocks; no transpose, no horizontal sum, no scale unpacking. Integer sums and float step
 * are the scalar reference's. benchmarks/gemv_repack.c measured its speed against the tiles' gemv. */
#ifndef FG_PACKED_AHEAD
#define FG_PACKED_AHEAD 2368
#endif
#ifndef FG_PACKED_STREAMS
#define FG_PACKED_STREAMS 4
#endif
/* acc + the float step of packed block b with its integer sums isum, msum. */
FG_INLINE_AVX512_VNNI __m512 q4_k_r16_step_vnni(const block_q4_K_r16 *b, const block_q8_K *x, __m512i isum,
                                               __m512i msum, __m512 acc) {
    const __m512 dx = _mm512_set1_ps(x->d);
    const __m512 t0 = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->d)), dx),
                                    _mm512_cvtepi32_ps(isum));
    const __m512 t1 = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b->dmin)), dx),
                                    _mm512_cvtepi32_ps(msum));
    return _mm512_add_ps(acc, _mm512_sub_ps(t0, t1)); /* sum += (d dx) sumi - (dmin dx) summ */
}
/* S groups g[s] (S <= FG_PACKED_STREAMS) side by side, their blocks read a 64-byte line at a time in turn (one
 * stream per group ran at 9.3-10.9 GB/s from DRAM, a quarter block at a time 14-15, a line 15.0-15.2: the row
 * gemv's speed). */
FG_INLINE_AVX512_VNNI void q4_k_r16_groups_vnni(const int S, const block_q4_K_r16 *const *g, int64_t nb,
                                               const block_q8_K *x, float *const *y) {
    __m512 acc[FG_PACKED_STREAMS];
    for (int s = 0; s < S; s++) acc[s] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m512i isum[FG_PACKED_STREAMS], msum[FG_PACKED_STREAMS];
        for (int s = 0; s < S; s++) isum[s] = msum[s] = _mm512_setzero_si512();
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        for (int k = 0; k < 4; k++) {
            __m512i slo[FG_PACKED_STREAMS], shi[FG_PACKED_STREAMS];
            for (int s = 0; s < S; s++) slo[s] = shi[s] = _mm512_setzero_si512();
            for (int j = 0; j < 8; j++)
                for (int s = 0; s < S; s++) {
                    const block_q4_K_r16 *b = g[s] + i;
                    _mm_prefetch((const char *)b->qs[8 * k + j] + FG_PACKED_AHEAD, _MM_HINT_T0);
                    const __m512i q = _mm512_loadu_si512((const void *)b->qs[8 * k + j]);
                    slo[s] = fg_dpbusd_bcst(slo[s], _mm512_and_si512(q, m4), x[i].qs + 64 * k + 4 * j);
                    const __m512i qh = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                    shi[s] = fg_dpbusd_bcst(shi[s], qh, x[i].qs + 64 * k + 32 + 4 * j);
                }
            for (int s = 0; s < S; s++) {
                const block_q4_K_r16 *b = g[s] + i;
                if (k == 0) /* the scales' lines (d .. mn: 320 bytes) of the block ahead */
                    for (int c = 0; c < 320; c += 64) _mm_prefetch((const char *)b + FG_PACKED_AHEAD + c, _MM_HINT_T0);
                const __m512i s0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b->sc[2 * k]));
                const __m512i s1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b->sc[2 * k + 1]));
                isum[s] = _mm512_add_epi32(isum[s], _mm512_add_epi32(_mm512_mullo_epi32(slo[s], s0),
                                                                     _mm512_mullo_epi32(shi[s], s1)));
                const __m512i mn = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)b->mn[k]));
                msum[s] = _mm512_dpwssd_epi32(msum[s], mn, _mm512_set1_epi32(q4_k_r16_bsum_pair(x + i, k)));
            }
        }
        for (int s = 0; s < S; s++) acc[s] = q4_k_r16_step_vnni(g[s] + i, x + i, isum[s], msum[s], acc[s]);
    }
    for (int s = 0; s < S; s++) _mm512_storeu_ps(y[s], acc[s]);
}
FG_TARGET_AVX512_VNNI static void gemv_packed_q4_k_vnni(int64_t n, const void *wp, const void *vx, float *y,
                                                        int64_t ngroups) {
    const int64_t nb = n / QK_K, q = ngroups / FG_PACKED_STREAMS; /* groups per stream */
    const block_q4_K_r16 *w = wp, *g[FG_PACKED_STREAMS];
    float *ys[FG_PACKED_STREAMS];
    for (int64_t t = 0; t < q; t++) {
        for (int s = 0; s < FG_PACKED_STREAMS; s++) g[s] = w + (s * q + t) * nb, ys[s] = y + (s * q + t) * FG_PACK_ROWS;
        q4_k_r16_groups_vnni(FG_PACKED_STREAMS, g, nb, vx, ys);
    }
    for (int64_t t = FG_PACKED_STREAMS * q; t < ngroups; t++) {
        g[0] = w + t * nb, ys[0] = y + t * FG_PACK_ROWS;
        q4_k_r16_groups_vnni(1, g, nb, vx, ys);
    }
}

/* The gemv from the row-interleaved copy on AVX2: 8 rows per ymm (the copy's rows 0-7, then 8-15 of each 64-byte
 * line). maddubs of a load's nibbles against a broadcast activation dword gives each row two int16 sums of 2
 * products (|v| <= 2 * 15 * 128); a sub-block's 8 loads add up in int16 (<= 30720: exact), and one madd by the
 * sub-block's scale (in both int16 halves of the row's dword) makes the row's int32 lane; the mins term one madd per
 * pair of sub-blocks. No transpose, no horizontal sum, no scale unpacking; the integer sums and the float step are
 * the scalar reference's, so the results equal it bit for bit. */
#ifndef FG_PACKED_STREAMS_AVX2
#define FG_PACKED_STREAMS_AVX2 4
#endif
/* Row half h (rows 8h..8h+7) of packed block b: its mins term (int32 per row) . x's sub-block sums. */
FG_INLINE_AVX2 __m256i q4_k_r16_mins_avx2(const block_q4_K_r16 *b, const block_q8_K *x, int h) {
    __m256i m = _mm256_setzero_si256();
    for (int t = 0; t < 4; t++) {
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->mn[t][8 * h]));
        m = _mm256_add_epi32(m, _mm256_madd_epi16(mn, _mm256_set1_epi32(q4_k_r16_bsum_pair(x, t))));
    }
    return m;
}
/* Sub-block j's 6-bit scales of rows 8h..8h+7 as int16 pairs (sc, sc), one per dword. */
FG_INLINE_AVX2 __m256i q4_k_r16_sc_avx2(const block_q4_K_r16 *b, int j, int h) {
    const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)&b->sc[j][8 * h]));
    return _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
}
/* S groups g[s] (S <= FG_PACKED_STREAMS_AVX2) side by side, their blocks read in turn half a 64-byte line (8 rows) at
 * a time, rows 0-7 of a sub-block pair's 8 lines, then rows 8-15 (in L1 by then); 2 streams read 13.7-14.0 GB/s from
 * DRAM, 4 14.9-15.1, 8 14.4-14.9. */
FG_INLINE_AVX2 void q4_k_r16_groups_avx2(const int S, const block_q4_K_r16 *const *g, int64_t nb,
                                         const block_q8_K *x, float *const *y) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[FG_PACKED_STREAMS_AVX2][2];
    for (int s = 0; s < S; s++) acc[s][0] = acc[s][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i isum[FG_PACKED_STREAMS_AVX2][2];
        for (int s = 0; s < S; s++) isum[s][0] = isum[s][1] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++)
            for (int h = 0; h < 2; h++) {
                __m256i lo[FG_PACKED_STREAMS_AVX2], hi[FG_PACKED_STREAMS_AVX2]; /* int16 pair sums, 8 rows */
                for (int s = 0; s < S; s++) lo[s] = hi[s] = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++) {
                    int32_t xl, xh;
                    memcpy(&xl, x[i].qs + 64 * k + 4 * j, 4);
                    memcpy(&xh, x[i].qs + 64 * k + 32 + 4 * j, 4);
                    const __m256i bl = _mm256_set1_epi32(xl), bh = _mm256_set1_epi32(xh);
                    for (int s = 0; s < S; s++) {
                        const uint8_t *line = g[s][i].qs[8 * k + j][0];
                        if (h == 0) _mm_prefetch((const char *)line + sizeof(block_q4_K_r16), _MM_HINT_T0);
                        const __m256i q = _mm256_loadu_si256((const __m256i *)(line + 32 * h));
                        lo[s] = _mm256_add_epi16(lo[s], _mm256_maddubs_epi16(_mm256_and_si256(q, m4), bl));
                        const __m256i qh = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                        hi[s] = _mm256_add_epi16(hi[s], _mm256_maddubs_epi16(qh, bh));
                    }
                }
                for (int s = 0; s < S; s++) {
                    const __m256i a = _mm256_madd_epi16(lo[s], q4_k_r16_sc_avx2(g[s] + i, 2 * k, h));
                    const __m256i b = _mm256_madd_epi16(hi[s], q4_k_r16_sc_avx2(g[s] + i, 2 * k + 1, h));
                    isum[s][h] = _mm256_add_epi32(isum[s][h], _mm256_add_epi32(a, b));
                }
            }
        const __m256 dx = _mm256_set1_ps(x[i].d);
        for (int s = 0; s < S; s++) {
            const block_q4_K_r16 *b = g[s] + i;
            for (int c = 0; c < 320; c += 64) _mm_prefetch((const char *)b + sizeof(block_q4_K_r16) + c, _MM_HINT_T0);
            for (int h = 0; h < 2; h++) {
                const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)&b->d[8 * h]));
                const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)&b->dmin[8 * h]));
                const __m256 t0 = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[s][h]));
                const __m256 summ = _mm256_cvtepi32_ps(q4_k_r16_mins_avx2(b, x + i, h));
                const __m256 t1 = _mm256_mul_ps(_mm256_mul_ps(dm, dx), summ);
                acc[s][h] = _mm256_add_ps(acc[s][h], _mm256_sub_ps(t0, t1)); /* sum += (d dx) sumi - (dmin dx) summ */
            }
        }
    }
    for (int s = 0; s < S; s++) _mm256_storeu_ps(y[s], acc[s][0]), _mm256_storeu_ps(y[s] + 8, acc[s][1]);
}
FG_TARGET_AVX2 static void gemv_packed_q4_k_avx2(int64_t n, const void *wp, const void *vx, float *y, int64_t ngroups) {
    const int64_t nb = n / QK_K, q = ngroups / FG_PACKED_STREAMS_AVX2; /* groups per stream */
    const block_q4_K_r16 *w = wp, *g[FG_PACKED_STREAMS_AVX2];
    float *ys[FG_PACKED_STREAMS_AVX2];
    for (int64_t t = 0; t < q; t++) {
        for (int s = 0; s < FG_PACKED_STREAMS_AVX2; s++)
            g[s] = w + (s * q + t) * nb, ys[s] = y + (s * q + t) * FG_PACK_ROWS;
        q4_k_r16_groups_avx2(FG_PACKED_STREAMS_AVX2, g, nb, vx, ys);
    }
    for (int64_t t = FG_PACKED_STREAMS_AVX2 * q; t < ngroups; t++) {
        g[0] = w + t * nb, ys[0] = y + t * FG_PACK_ROWS;
        q4_k_r16_groups_avx2(1, g, nb, vx, ys);
    }
}
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: nibbles 0..15 fit int8; each 16-byte vector lies inside one 32-element sub-block, whose scale
 * weights the int32 partial sums; the mins term is (bsums pairwise) . mins in int16 x int16 -> int32. ---- */
#define Q4_K_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_K *x = vx;                                                                           \
        float32x4_t acc[4];                                                                                 \
        float accm[4];                                                                                      \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f), accm[r] = 0.0f;                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const int16x8_t bsp = vpaddq_s16(vld1q_s16(x[i].bsums), vld1q_s16(x[i].bsums + 8)); /* per 32 */ \
            const block_q4_K *b[4];                                                                         \
            uint8_t sm[4][16];                                                                              \
            int32x4_t isum[4];                                                                              \
            for (int r = 0; r < R; r++) {                                                                   \
                b[r] = (const block_q4_K *)(w + r * stride) + i;                                            \
                fg_prefetch(b[r], stride);                                                                  \
                fg_prefetch((const char *)b[r] + 64, stride);                                               \
                fg_prefetch((const char *)b[r] + 128, stride);                                              \
                fg_unpack_scales_k4(b[r]->scales, sm[r]);                                                   \
                isum[r] = vdupq_n_s32(0);                                                                   \
            }                                                                                               \
            for (int k = 0; k < QK_K / 64; k++) {                                                           \
                const int8_t *xq = x[i].qs + 64 * k;                                                        \
                const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);                                  \
                const int8x16_t x2 = vld1q_s8(xq + 32), x3 = vld1q_s8(xq + 48);                             \
                for (int r = 0; r < R; r++) {                                                               \
                    const uint8x16_t q0 = vld1q_u8(b[r]->qs + 32 * k), q1 = vld1q_u8(b[r]->qs + 32 * k + 16); \
                    const uint8x16_t m4 = vdupq_n_u8(0x0f);                                                 \
                    int32x4_t p0 = DOT(vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(q0, m4)), x0);          \
                    p0 = DOT(p0, vreinterpretq_s8_u8(vandq_u8(q1, m4)), x1);                                \
                    int32x4_t p1 = DOT(vdupq_n_s32(0), vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), x2);         \
                    p1 = DOT(p1, vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)), x3);                               \
                    isum[r] = vmlaq_n_s32(isum[r], p0, sm[r][2 * k]);                                       \
                    isum[r] = vmlaq_n_s32(isum[r], p1, sm[r][2 * k + 1]);                                   \
                }                                                                                           \
            }                                                                                               \
            for (int r = 0; r < R; r++) {                                                                   \
                const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm[r] + 8)));                  \
                const int32x4_t pm = vmlal_high_s16(vmull_s16(vget_low_s16(bsp), vget_low_s16(mins)), bsp, mins); \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(isum[r]), fg_fp16_to_fp32(b[r]->d) * x[i].d);    \
                accm[r] += fg_fp16_to_fp32(b[r]->dmin) * x[i].d * (float)vaddvq_s32(pm);                    \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]) - accm[r];                                    \
    }
Q4_K_ROWS_NEON(q4_k_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
FG_DOT_FROM_ROWS(vec_dot_q4_k_q8_k_neon, FG_NO_TARGET, q4_k_rows_neon, QK_K)
FG_GEMV_FROM_ROWS(gemv_q4_k_q8_k_neon, FG_NO_TARGET, q4_k_rows_neon, QK_K)
FG_KQ_KERNELS_NEON(q4_k_q8_k_neondp, FG_TARGET_DOTPROD, fg_kq_tile8_neondp, FG_KQ_Q4_K, block_q4_K)
#if FG_HAVE_I8MM
FG_KQ_KERNELS_NEON(q4_k_q8_k_neoni8mm, FG_TARGET_I8MM, fg_kq_tile8_neoni8mm, FG_KQ_Q4_K, block_q4_K)
#endif
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q4_k_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q4_k_scalar, dequantize_row_q4_k_scalar, vec_dot_q4_k_q8_k_scalar, NULL, NULL,
                       pack_q4_k_r16, gemv_packed_q4_k_scalar},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q4_k_avx2, vec_dot_q4_k_q8_k_avx2, gemv_q4_k_q8_k_avx2, gemm_q4_k_q8_k_avx2,
                     NULL, gemv_packed_q4_k_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, vec_dot_q4_k_q8_k_vnni, gemv_q4_k_q8_k_vnni, gemm_q4_k_q8_k_vnni, NULL,
                     gemv_packed_q4_k_vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q4_k_q8_k_neon, gemv_q4_k_q8_k_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q4_k_q8_k_neondp, gemv_q4_k_q8_k_neondp, gemm_q4_k_q8_k_neondp},
#if FG_HAVE_I8MM
    [FG_ROW_I8MM] = {NULL, NULL, vec_dot_q4_k_q8_k_neoni8mm, gemv_q4_k_q8_k_neoni8mm, gemm_q4_k_q8_k_neoni8mm},
#endif
#endif
};
