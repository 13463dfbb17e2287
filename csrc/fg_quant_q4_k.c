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
FG_INLINE_AVX2 void q4_k_tile_avx2(int R, const int A, int64_t nb, const char *w, size_t stride, const char *x,
                                   size_t xstride, float *y, int64_t ldy) {
    fg_k4_tile_avx2(0, R, A, nb, w, stride, x, xstride, y, ldy);
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
FG_INLINE_NEON FG_TARGET_DOTPROD void q4_k_tile8_neondp(const int R, const int M, int first, int kc, const char *w,
                                                    size_t stride, const char *x, size_t xs,
                                                    const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    fg_kq_tile8_neondp(R, M, first, kc, w, stride, x, xs, aux, y, ldy, FG_KQ_Q4_K);
}
FG_KERNELS_FROM_TILE8(vec_dot_q4_k_q8_k_neondp, gemv_q4_k_q8_k_neondp, gemm_q4_k_q8_k_neondp, FG_TARGET_DOTPROD,
                      q4_k_tile8_neondp, fg_q8_k_aux_neon, sizeof(block_q4_K), sizeof(block_q8_K), QK_K, 8)
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q4_k_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q4_k_scalar, dequantize_row_q4_k_scalar, vec_dot_q4_k_q8_k_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q4_k_avx2, vec_dot_q4_k_q8_k_avx2, gemv_q4_k_q8_k_avx2, gemm_q4_k_q8_k_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, NULL, NULL, gemm_q4_k_q8_k_vnni}, /* many activations: 16 rows per zmm */
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q4_k_q8_k_neon, gemv_q4_k_q8_k_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q4_k_q8_k_neondp, gemv_q4_k_q8_k_neondp, gemm_q4_k_q8_k_neondp},
#endif
};
