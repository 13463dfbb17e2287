/* Q5_0 weights: 32 elements per block, x = d * (q - 16), q in 0..31: low 4 bits as q4_0's nibbles (element j
 * in the low nibble of qs[j], j + 16 in the high nibble), bit 4 of element j in bit j of qh (little-endian u32).
 * Dot against Q8_0 activations: d dx (sum q x - 16 sum x). */
#include "fg_simd.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_q5_0_ref: d = max / -16 with max the first element of largest magnitude. */
static void quantize_row_q5_0_scalar(const float *x, void *vy, int64_t n) {
    block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const float *xb = x + i * QK5_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK5_0; j++)
            if (amax < fabsf(xb[j])) amax = fabsf(xb[j]), max = xb[j];
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fg_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            int q0 = (int8_t)(xb[j] * id + 16.5f), q1 = (int8_t)(xb[j + QK5_0 / 2] * id + 16.5f);
            q0 = q0 < 31 ? q0 : 31;
            q1 = q1 < 31 ? q1 : 31;
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((uint32_t)(q0 & 0x10) >> 4) << j;
            qh |= ((uint32_t)(q1 & 0x10) >> 4) << (j + QK5_0 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* q (0..31) of the 32 elements of a block. */
static inline void q5_unpack(const uint8_t *qs, const uint8_t *qh4, int q[32]) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    }
}

static void dequantize_row_q5_0_scalar(const void *vx, float *y, int64_t n) {
    const block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const float d = fg_fp16_to_fp32(x[i].d);
        int q[32];
        q5_unpack(x[i].qs, x[i].qh, q);
        for (int j = 0; j < QK5_0; j++) y[i * QK5_0 + j] = (float)(q[j] - 16) * d;
    }
}

static float vec_dot_q5_0_q8_0_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q5_0 *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        int q[32], sumi = 0;
        q5_unpack(w[i].qs, w[i].qh, q);
        for (int j = 0; j < QK5_0; j++) sumi += (q[j] - 16) * x[i].qs[j];
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d));
    }
    return sum;
}

#if FG_HAVE_X86
/* ---- AVX2 ---- */

/* One block's q (0..31) as 32 unsigned bytes in element order. */
FG_INLINE_AVX2 __m256i q5_bytes_avx2(const uint8_t *qs, const uint8_t *qh4) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const __m256i hi = _mm256_and_si256(fg_bits_to_bytes_256(qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(fg_nibbles_256(qs), hi);
}

/* Bit-exact with the scalar reference: (q - 16) * d. */
FG_TARGET_AVX2 static void dequantize_row_q5_0_avx2(const void *vx, float *y, int64_t n) {
    const block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const __m256 d = _mm256_set1_ps(fg_f16(x[i].d));
        const __m256i q = _mm256_sub_epi8(q5_bytes_avx2(x[i].qs, x[i].qh), _mm256_set1_epi8(16));
        for (int k = 0; k < 4; k++) {
            const __m128i b = k & 2 ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(k & 1 ? _mm_srli_si128(b, 8) : b));
            _mm256_storeu_ps(y + i * QK5_0 + 8 * k, _mm256_mul_ps(v, d));
        }
    }
}

/* R rows x M activations, one block per step, each weight block unpacked once for all M: (q . x - 16 sum x) in
 * int16 pairs (|.| <= 2 * 31 * 127), widened once; per (r, a) pair acc += float(s) * (dw * dx) whatever R and M. */
FG_INLINE_AVX2 void q5_0_tile_avx2(const int R, const int M, int64_t nb, const char *w, size_t stride, const char *x,
                                   size_t xs, float *y, int64_t ldy) {
    __m256 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int a = 0; a < M; a++) acc[r][a] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i xq[4], x16[4];
        __m256 dx[4];
        for (int a = 0; a < M; a++) {
            const block_q8_0 *xb = (const block_q8_0 *)(x + a * xs) + i;
            xq[a] = _mm256_loadu_si256((const __m256i *)xb->qs);
            x16[a] = _mm256_maddubs_epi16(_mm256_set1_epi8(16), xq[a]);
            dx[a] = _mm256_set1_ps(fg_f16(xb->d));
        }
        for (int r = 0; r < R; r++) {
            const block_q5_0 *b = (const block_q5_0 *)(w + r * stride) + i;
            fg_prefetch(b, stride);
            const __m256i q = q5_bytes_avx2(b->qs, b->qh);
            const __m256 dw = _mm256_set1_ps(fg_f16(b->d));
            for (int a = 0; a < M; a++) {
                const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xq[a]), x16[a]);
                const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
                acc[r][a] = _mm256_fmadd_ps(p, _mm256_mul_ps(dw, dx[a]), acc[r][a]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int a = 0; a < M; a++) y[a * ldy + r] = fg_hsum_256(acc[r][a]);
}

FG_INLINE_AVX2 void q5_0_rows_avx2(const int R, int64_t nb, const char *w, size_t stride, const void *x, float *y) {
    q5_0_tile_avx2(R, 1, nb, w, stride, (const char *)x, 0, y, 0);
}
FG_DOT_FROM_ROWS(vec_dot_q5_0_q8_0_avx2, FG_TARGET_AVX2, q5_0_rows_avx2, QK5_0)
FG_GEMV_FROM_ROWS(gemv_q5_0_q8_0_avx2, FG_TARGET_AVX2, q5_0_rows_avx2, QK5_0)
FG_GEMM_FROM_TILE(gemm_q5_0_q8_0_avx2, FG_TARGET_AVX2, q5_0_tile_avx2, QK5_0, 4, 2)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: q - 16 fits int8, so the signed dot applies directly ---- */
#define Q5_0_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_0 *x = vx;                                                                           \
        float32x4_t acc[4];                                                                                 \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);                                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const int8x16_t x0 = vld1q_s8(x[i].qs), x1 = vld1q_s8(x[i].qs + 16);                            \
            const float dx = fg_fp16_to_fp32(x[i].d);                                                       \
            for (int r = 0; r < R; r++) {                                                                   \
                const block_q5_0 *b = (const block_q5_0 *)(w + r * stride) + i;                             \
                fg_prefetch(b, stride);                                                                     \
                uint32_t qh;                                                                                \
                memcpy(&qh, b->qh, 4);                                                                      \
                const uint8x16_t q = vld1q_u8(b->qs), m = vdupq_n_u8(0x10);                                 \
                const uint8x16_t lo = vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), vandq_u8(fg_bits_to_bytes_neon(qh), m)); \
                const uint8x16_t hi = vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(fg_bits_to_bytes_neon(qh >> 16), m)); \
                int32x4_t s = DOT(vdupq_n_s32(0), vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(16)), x0);   \
                s = DOT(s, vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(16)), x1);                          \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(s), fg_fp16_to_fp32(b->d) * dx);                 \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]);                                              \
    }
#define FG_NO_TARGET
Q5_0_ROWS_NEON(q5_0_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
Q5_0_ROWS_NEON(q5_0_rows_neondp, FG_TARGET_DOTPROD, vdotq_s32)
FG_DOT_FROM_ROWS(vec_dot_q5_0_q8_0_neon, FG_NO_TARGET, q5_0_rows_neon, QK5_0)
FG_GEMV_FROM_ROWS(gemv_q5_0_q8_0_neon, FG_NO_TARGET, q5_0_rows_neon, QK5_0)
FG_DOT_FROM_ROWS(vec_dot_q5_0_q8_0_neondp, FG_TARGET_DOTPROD, q5_0_rows_neondp, QK5_0)
FG_GEMV_FROM_ROWS(gemv_q5_0_q8_0_neondp, FG_TARGET_DOTPROD, q5_0_rows_neondp, QK5_0)
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q5_0_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_q5_0_scalar, dequantize_row_q5_0_scalar, vec_dot_q5_0_q8_0_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q5_0_avx2, vec_dot_q5_0_q8_0_avx2, gemv_q5_0_q8_0_avx2, gemm_q5_0_q8_0_avx2},
    /* the AVX2 kernels, until AVX-512 twins exist (an empty entry would fall back to scalar) */
    [FG_ISA_AVX512] = {NULL, dequantize_row_q5_0_avx2, vec_dot_q5_0_q8_0_avx2, gemv_q5_0_q8_0_avx2, gemm_q5_0_q8_0_avx2},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q5_0_q8_0_neon, gemv_q5_0_q8_0_neon},
#endif
};

const fg_type_kernels fg_q5_0_kernels_ext[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {0}, /* never used: keeps the initializer non-empty off NEON */
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q5_0_q8_0_neondp, gemv_q5_0_q8_0_neondp},
#endif
};
