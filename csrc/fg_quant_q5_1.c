/* Q5_1 weights: 32 elements per block, x = d * q + m, q in 0..31 laid out as q5_0 (low nibbles in qs, bit 4 of
 * element j in bit j of qh). Dot against Q8_1 activations (d, s = d * sum q): d dx sum(q x) + m s. */
#include "fg_simd.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_q5_1_ref. */
static void quantize_row_q5_1_scalar(const float *x, void *vy, int64_t n) {
    block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        const float *xb = x + i * QK5_1;
        float min = 3.402823466e+38f, max = -3.402823466e+38f; /* FLT_MAX */
        for (int j = 0; j < QK5_1; j++) {
            if (xb[j] < min) min = xb[j];
            if (xb[j] > max) max = xb[j];
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fg_fp32_to_fp16(d);
        y[i].m = fg_fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const uint8_t q0 = (uint8_t)((xb[j] - min) * id + 0.5f);
            const uint8_t q1 = (uint8_t)((xb[j + QK5_1 / 2] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((uint32_t)(q0 & 0x10) >> 4) << j;
            qh |= ((uint32_t)(q1 & 0x10) >> 4) << (j + QK5_1 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* q (0..31) of the 32 elements of a block. */
static inline void q5_1_unpack(const uint8_t *qs, const uint8_t *qh4, int q[32]) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    }
}

static void dequantize_row_q5_1_scalar(const void *vx, float *y, int64_t n) {
    const block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        const float d = fg_fp16_to_fp32(x[i].d), m = fg_fp16_to_fp32(x[i].m);
        int q[32];
        q5_1_unpack(x[i].qs, x[i].qh, q);
        for (int j = 0; j < QK5_1; j++) y[i * QK5_1 + j] = (float)q[j] * d + m;
    }
}

static float vec_dot_q5_1_q8_1_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q5_1 *w = vw;
    const block_q8_1 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        int q[32], sumi = 0;
        q5_1_unpack(w[i].qs, w[i].qh, q);
        for (int j = 0; j < QK5_1; j++) sumi += q[j] * x[i].qs[j];
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d)) +
               fg_fp16_to_fp32(w[i].m) * fg_fp16_to_fp32(x[i].s);
    }
    return sum;
}

#if FG_HAVE_X86
/* ---- AVX2 ---- */

/* One block's q (0..31) as 32 unsigned bytes in element order. */
FG_INLINE_AVX2 __m256i q5_1_bytes_avx2(const uint8_t *qs, const uint8_t *qh4) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const __m256i hi = _mm256_and_si256(fg_bits_to_bytes_256(qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(fg_nibbles_256(qs), hi);
}

/* Bit-exact with the scalar reference: q * d, then + m (no FMA). */
FG_TARGET_AVX2 static void dequantize_row_q5_1_avx2(const void *vx, float *y, int64_t n) {
    const block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        const __m256 d = _mm256_set1_ps(fg_f16(x[i].d)), m = _mm256_set1_ps(fg_f16(x[i].m));
        const __m256i q = q5_1_bytes_avx2(x[i].qs, x[i].qh);
        for (int k = 0; k < 4; k++) {
            const __m128i b = k & 2 ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(k & 1 ? _mm_srli_si128(b, 8) : b));
            _mm256_storeu_ps(y + i * QK5_1 + 8 * k, _mm256_add_ps(_mm256_mul_ps(v, d), m));
        }
    }
}

/* R <= 8 rows x M <= 8 activations of q5_1 . q8_1, row r in lane r (see FG_KERNELS_FROM_TILE8). Per block each row's
 * q (0..31) is unpacked once in element order; one activation (the gemv) dots every row with it and reduces the 8
 * rows' partial sums into lanes, more share a transpose (v[g] lane r: row r's elements 4g..4g+3) against their
 * broadcast 4-byte groups, 4 maddubs summed in int16 (4 * 2 * 31 * 127 < 32767) per madd. Either way every lane takes
 * the scalar reference's float step, sum += (float)sumi * (dw * dx) + mw * sx, so all paths equal it bit for bit.
 * Each row's block asks for the bytes `ahead` of it (fg_prefetch_rows8): 8 rows on in the tiles (q5_1_tile8_avx2),
 * fg_stream_ahead on in the gemv (q5_1_tile8_avx2_gemv, FG_GEMV_STREAMS). */
FG_INLINE_AVX2 void q5_1_tile8_avx2_at(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                       size_t ahead, const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y,
                                       int64_t ldy) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[8]; /* [a]: 8 rows */
    fg_load_rows8(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q5_1);
        __m256i v[8]; /* [r]: row r's 32 q in element order */
        fg_prefetch_rows8(w, stride, ahead, R, i, kc, sizeof(block_q5_1));
        for (int r = 0; r < 8; r++) {
            v[r] = _mm256_setzero_si256();
            if (r >= R) continue;
            const block_q5_1 *b = (const block_q5_1 *)(wb + r * stride);
            v[r] = q5_1_bytes_avx2(b->qs, b->qh);
        }
        __m256 dw, mw;
        fg_rows8_f16x2(wb, stride, R, &dw, &mw);
        if (M == 1) { /* nothing to share a transpose with */
            const __m256i xq = _mm256_loadu_si256((const __m256i *)((const block_q8_1 *)x + i)->qs);
            for (int r = 0; r < 8; r++) v[r] = fg_dot_u8s8_256(v[r], xq);
            acc[0] = fg_q8_1_step8(acc[0], fg_hsum8_epi32(v), dw, mw, &aux[0][i]);
            continue;
        }
        fg_transpose8_epi32(v);
        for (int a = 0; a < M; a++) {
            const int8_t *xq = ((const block_q8_1 *)(x + a * xs) + i)->qs;
            __m256i s[2];
            for (int h = 0; h < 2; h++) {
                s[h] = _mm256_maddubs_epi16(v[4 * h], fg_bcast32(xq + 16 * h));
                for (int g = 4 * h + 1; g < 4 * h + 4; g++) s[h] = _mm256_add_epi16(s[h], _mm256_maddubs_epi16(v[g], fg_bcast32(xq + 4 * g)));
            }
            const __m256i sumi = _mm256_add_epi32(_mm256_madd_epi16(s[0], ones), _mm256_madd_epi16(s[1], ones));
            acc[a] = fg_q8_1_step8(acc[a], sumi, dw, mw, &aux[a][i]);
        }
    }
    fg_store_rows8(R, M, acc, y, ldy);
}
FG_TILE8_ENTRIES(q5_1_tile8_avx2, FG_INLINE_AVX2)

FG_KERNELS_FROM_TILE8_STREAMS(vec_dot_q5_1_q8_1_avx2, gemv_q5_1_q8_1_avx2, gemm_q5_1_q8_1_avx2,
                              FG_TARGET_AVX2, q5_1_tile8_avx2, fg_q8_1_aux,
                              sizeof(block_q5_1), sizeof(block_q8_1), QK5_1)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: q 0..31 fits int8, so the signed dot applies directly ---- */
#define Q5_1_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_1 *x = vx;                                                                           \
        float32x4_t acc[4];                                                                                 \
        float accm[4];                                                                                      \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f), accm[r] = 0.0f;                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const int8x16_t x0 = vld1q_s8(x[i].qs), x1 = vld1q_s8(x[i].qs + 16);                            \
            const float dx = fg_fp16_to_fp32(x[i].d), sx = fg_fp16_to_fp32(x[i].s);                         \
            for (int r = 0; r < R; r++) {                                                                   \
                const block_q5_1 *b = (const block_q5_1 *)(w + r * stride) + i;                             \
                fg_prefetch(b, stride);                                                                     \
                uint32_t qh;                                                                                \
                memcpy(&qh, b->qh, 4);                                                                      \
                const uint8x16_t q = vld1q_u8(b->qs), m = vdupq_n_u8(0x10);                                 \
                const uint8x16_t lo = vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), vandq_u8(fg_bits_to_bytes_neon(qh), m)); \
                const uint8x16_t hi = vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(fg_bits_to_bytes_neon(qh >> 16), m)); \
                int32x4_t s = DOT(vdupq_n_s32(0), vreinterpretq_s8_u8(lo), x0);                             \
                s = DOT(s, vreinterpretq_s8_u8(hi), x1);                                                    \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(s), fg_fp16_to_fp32(b->d) * dx);                 \
                accm[r] += fg_fp16_to_fp32(b->m) * sx;                                                      \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]) + accm[r];                                    \
    }
Q5_1_ROWS_NEON(q5_1_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
FG_DOT_FROM_ROWS(vec_dot_q5_1_q8_1_neon, FG_NO_TARGET, q5_1_rows_neon, QK5_1)
FG_GEMV_FROM_ROWS(gemv_q5_1_q8_1_neon, FG_NO_TARGET, q5_1_rows_neon, QK5_1)
FG_INLINE_NEON FG_TARGET_DOTPROD void q5_1_tile8_neondp(const int R, const int M, int first, int kc, const char *w,
                                                    size_t stride, const char *x, size_t xs,
                                                    const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    fg_b32_tile8_neondp(R, M, first, kc, w, stride, x, xs, aux, y, ldy, FG_B32_Q5_1, NULL);
}
FG_KERNELS_FROM_TILE8(vec_dot_q5_1_q8_1_neondp, gemv_q5_1_q8_1_neondp, gemm_q5_1_q8_1_neondp, FG_TARGET_DOTPROD,
                      q5_1_tile8_neondp, fg_q8_1_aux_neon, sizeof(block_q5_1), sizeof(block_q8_1), QK5_1, 8)
#if FG_HAVE_I8MM
FG_B32_KERNELS_NEONI8MM(q5_1_q8_1, FG_B32_Q5_1, NULL, fg_q8_1_aux_neon, sizeof(block_q5_1), sizeof(block_q8_1), QK5_1)
#endif
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q5_1_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q5_1_scalar, dequantize_row_q5_1_scalar, vec_dot_q5_1_q8_1_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q5_1_avx2, vec_dot_q5_1_q8_1_avx2, gemv_q5_1_q8_1_avx2, gemm_q5_1_q8_1_avx2},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q5_1_q8_1_neon, gemv_q5_1_q8_1_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q5_1_q8_1_neondp, gemv_q5_1_q8_1_neondp, gemm_q5_1_q8_1_neondp},
#if FG_HAVE_I8MM
    [FG_ROW_I8MM] = {NULL, NULL, vec_dot_q5_1_q8_1_neoni8mm, gemv_q5_1_q8_1_neoni8mm, gemm_q5_1_q8_1_neoni8mm},
#endif
#endif
};
