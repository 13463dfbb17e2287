/* Q5_K weights: super-blocks of 256 = 8 sub-blocks of 32, x = d * sc_j * q - dmin * m_j with q in 0..31: low
 * 4 bits as q4_K's nibbles (run k of 32 bytes: sub-block 2k low, 2k+1 high), bit 4 of element 64k + l in bit 2k
 * of qh[l] and of 64k + 32 + l in bit 2k+1; scales as q4_K. Dot against Q8_K as q4_K. */
#include "fg_simd.h"
#include "fg_kquant.h"
#include "fg_kquant_vnni.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_q5_K_ref. */
static void quantize_row_q5_k_scalar(const float *x, void *vy, int64_t n) {
    block_q5_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        fg_quantize_k4_scales(x, 31, -0.5f, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
        memset(y[i].qh, 0, QK_K / 8);
        for (int k = 0; k < QK_K / 64; k++) {
            for (int l = 0; l < 32; ++l) {
                int l1 = L[64 * k + l], l2 = L[64 * k + l + 32];
                if (l1 > 15) l1 -= 16, y[i].qh[l] |= (uint8_t)(1 << (2 * k));
                if (l2 > 15) l2 -= 16, y[i].qh[l] |= (uint8_t)(2 << (2 * k));
                y[i].qs[32 * k + l] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

static void dequantize_row_q5_k_scalar(const void *vx, float *y, int64_t n) {
    const block_q5_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fg_fp16_to_fp32(x[i].d), min = fg_fp16_to_fp32(x[i].dmin);
        for (int k = 0; k < QK_K / 64; k++) {
            uint8_t sc, m;
            fg_scale_min_k4(2 * k, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            fg_scale_min_k4(2 * k + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            const uint8_t *ql = x[i].qs + 32 * k, u1 = (uint8_t)(1 << (2 * k)), u2 = (uint8_t)(2 << (2 * k));
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (x[i].qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (x[i].qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static float vec_dot_q5_k_q8_k_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q5_K *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sm[16]; /* scales 0..7, mins 0..7 */
        fg_unpack_scales_k4(w[i].scales, sm);
        const int8_t *q8 = x[i].qs;
        int sumi = 0, summ = 0;
        for (int k = 0; k < QK_K / 64; k++, q8 += 64) {
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                const int qb = w[i].qs[32 * k + l], hb = w[i].qh[l] >> (2 * k);
                s0 += ((qb & 0xF) | ((hb & 1) << 4)) * q8[l];
                s1 += ((qb >> 4) | ((hb & 2) << 3)) * q8[l + 32];
            }
            sumi += sm[2 * k] * s0 + sm[2 * k + 1] * s1;
        }
        for (int g = 0; g < QK_K / 16; g++) summ += x[i].bsums[g] * sm[8 + g / 2];
        sum += fg_fp16_to_fp32(w[i].d) * x[i].d * (float)sumi - fg_fp16_to_fp32(w[i].dmin) * x[i].d * (float)summ;
    }
    return sum;
}

#if FG_HAVE_X86
/* Bit-exact with the scalar reference: (d * sc) * q - dmin * m. */
FG_TARGET_AVX2 static void dequantize_row_q5_k_avx2(const void *vx, float *y, int64_t n) {
    const block_q5_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fg_f16(x[i].d), min = fg_f16(x[i].dmin);
        uint8_t sm[16];
        fg_unpack_scales_k4(x[i].scales, sm);
        __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        for (int k = 0; k < QK_K / 64; k++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * k));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
            qh = _mm256_srli_epi16(qh, 2);
            for (int t = 0; t < 2; t++) {
                const __m256i u = t ? hi : lo;
                const __m256 s = _mm256_set1_ps(d * sm[2 * k + t]), m = _mm256_set1_ps(min * sm[8 + 2 * k + t]);
                fg_store_i8x16_ps(y + 64 * k + 32 * t, _mm256_castsi256_si128(u), s, m);
                fg_store_i8x16_ps(y + 64 * k + 32 * t + 16, _mm256_extracti128_si256(u, 1), s, m);
            }
        }
    }
}

/* ---- AVX2: the Q4_K tile (fg_kquant_x86.h) with the fifth bit or-ed in ---- */
FG_INLINE_AVX2 void q5_k_tile_avx2(int R, const int A, int64_t nb, const char *w, size_t stride, size_t ahead,
                                   const char *x, size_t xstride, float *y, int64_t ldy) {
    fg_k4_tile_avx2(1, R, A, nb, w, stride, ahead, x, xstride, y, ldy);
}
FG_INLINE_AVX2 void q5_k_rows8_avx2(const int gpm, int R, const char *w, size_t stride, int64_t i, fg_kq_rows8 *u) {
    fg_k4_rows8_avx2(1, gpm, R, w, stride, i, u);
}
FG_KQ_GEMM_AVX2(gemm_q5_k_q8_k_rows8_avx2, q5_k_rows8_avx2, 4, 1) /* 4 groups: 4 * 2 * 31 * 128 < 32768 */
FG_KQ_KERNELS_AVX2(vec_dot_q5_k_q8_k_avx2, gemv_q5_k_q8_k_avx2, gemm_q5_k_q8_k_avx2, q5_k_tile_avx2,
                   gemm_q5_k_q8_k_rows8_avx2)
FG_INLINE_AVX512_VNNI void q5_k_rows16_vnni(int R, const char *w, size_t stride, int64_t i, fg_kq_rows16 *u) {
    fg_k4_rows16_vnni(1, R, w, stride, i, u);
}
FG_KQ_GEMM_VNNI(gemm_q5_k_q8_k_vnni, q5_k_rows16_vnni, 8, 1, gemm_q5_k_q8_k_avx2)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: q4_K's kernel with the fifth bit or-ed in ---- */
#define Q5_K_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_K *x = vx;                                                                           \
        float32x4_t acc[4];                                                                                 \
        float accm[4];                                                                                      \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f), accm[r] = 0.0f;                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const int16x8_t bsp = vpaddq_s16(vld1q_s16(x[i].bsums), vld1q_s16(x[i].bsums + 8));             \
            const block_q5_K *b[4];                                                                         \
            uint8_t sm[4][16];                                                                              \
            int32x4_t isum[4];                                                                              \
            uint8x16_t qh0[4], qh1[4];                                                                      \
            for (int r = 0; r < R; r++) {                                                                   \
                b[r] = (const block_q5_K *)(w + r * stride) + i;                                            \
                fg_prefetch(b[r], stride);                                                                  \
                fg_prefetch((const char *)b[r] + 64, stride);                                               \
                fg_prefetch((const char *)b[r] + 128, stride);                                              \
                fg_unpack_scales_k4(b[r]->scales, sm[r]);                                                   \
                isum[r] = vdupq_n_s32(0);                                                                   \
                qh0[r] = vld1q_u8(b[r]->qh), qh1[r] = vld1q_u8(b[r]->qh + 16);                              \
            }                                                                                               \
            for (int k = 0; k < QK_K / 64; k++) {                                                           \
                const int8_t *xq = x[i].qs + 64 * k;                                                        \
                const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);                                  \
                const int8x16_t x2 = vld1q_s8(xq + 32), x3 = vld1q_s8(xq + 48);                             \
                for (int r = 0; r < R; r++) {                                                               \
                    const uint8x16_t q0 = vld1q_u8(b[r]->qs + 32 * k), q1 = vld1q_u8(b[r]->qs + 32 * k + 16); \
                    const uint8x16_t m4 = vdupq_n_u8(0x0f), one = vdupq_n_u8(1), two = vdupq_n_u8(2);       \
                    const uint8x16_t l0 = vorrq_u8(vandq_u8(q0, m4), vshlq_n_u8(vandq_u8(qh0[r], one), 4)); \
                    const uint8x16_t l1 = vorrq_u8(vandq_u8(q1, m4), vshlq_n_u8(vandq_u8(qh1[r], one), 4)); \
                    const uint8x16_t h0 = vorrq_u8(vshrq_n_u8(q0, 4), vshlq_n_u8(vandq_u8(qh0[r], two), 3)); \
                    const uint8x16_t h1 = vorrq_u8(vshrq_n_u8(q1, 4), vshlq_n_u8(vandq_u8(qh1[r], two), 3)); \
                    qh0[r] = vshrq_n_u8(qh0[r], 2), qh1[r] = vshrq_n_u8(qh1[r], 2);                         \
                    int32x4_t p0 = DOT(vdupq_n_s32(0), vreinterpretq_s8_u8(l0), x0);                        \
                    p0 = DOT(p0, vreinterpretq_s8_u8(l1), x1);                                              \
                    int32x4_t p1 = DOT(vdupq_n_s32(0), vreinterpretq_s8_u8(h0), x2);                        \
                    p1 = DOT(p1, vreinterpretq_s8_u8(h1), x3);                                              \
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
Q5_K_ROWS_NEON(q5_k_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
FG_DOT_FROM_ROWS(vec_dot_q5_k_q8_k_neon, FG_NO_TARGET, q5_k_rows_neon, QK_K)
FG_GEMV_FROM_ROWS(gemv_q5_k_q8_k_neon, FG_NO_TARGET, q5_k_rows_neon, QK_K)
FG_KQ_KERNELS_NEON(q5_k_q8_k_neondp, FG_TARGET_DOTPROD, fg_kq_tile8_neondp, FG_KQ_Q5_K, block_q5_K)
#if FG_HAVE_I8MM
FG_KQ_KERNELS_NEON(q5_k_q8_k_neoni8mm, FG_TARGET_I8MM, fg_kq_tile8_neoni8mm, FG_KQ_Q5_K, block_q5_K)
#endif
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q5_k_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q5_k_scalar, dequantize_row_q5_k_scalar, vec_dot_q5_k_q8_k_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q5_k_avx2, vec_dot_q5_k_q8_k_avx2, gemv_q5_k_q8_k_avx2, gemm_q5_k_q8_k_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, NULL, NULL, gemm_q5_k_q8_k_vnni}, /* many activations: 16 rows per zmm */
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q5_k_q8_k_neon, gemv_q5_k_q8_k_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q5_k_q8_k_neondp, gemv_q5_k_q8_k_neondp, gemm_q5_k_q8_k_neondp},
#if FG_HAVE_I8MM
    [FG_ROW_I8MM] = {NULL, NULL, vec_dot_q5_k_q8_k_neoni8mm, gemv_q5_k_q8_k_neoni8mm, gemm_q5_k_q8_k_neoni8mm},
#endif
#endif
};
