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

#if FG_HAVE_X86
/* ---- AVX2 ---- */

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
    [FG_ISA_SCALAR] = {quantize_row_q4_k_scalar, dequantize_row_q4_k_scalar, vec_dot_q4_k_q8_k_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q4_k_avx2, vec_dot_q4_k_q8_k_avx2, gemv_q4_k_q8_k_avx2, gemm_q4_k_q8_k_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, vec_dot_q4_k_q8_k_vnni, gemv_q4_k_q8_k_vnni, gemm_q4_k_q8_k_vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q4_k_q8_k_neon, gemv_q4_k_q8_k_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q4_k_q8_k_neondp, gemv_q4_k_q8_k_neondp, gemm_q4_k_q8_k_neondp},
#if FG_HAVE_I8MM
    [FG_ROW_I8MM] = {NULL, NULL, vec_dot_q4_k_q8_k_neoni8mm, gemv_q4_k_q8_k_neoni8mm, gemm_q4_k_q8_k_neoni8mm},
#endif
#endif
};
