/* Q4_1 weights: 32 elements per block, x = d * q + m, q in 0..15. Dot against Q8_1 activations (d, d*sum). */
#include "fg_simd.h"

/* ---- scalar reference ---- */

static void quantize_row_q4_1_scalar(const float *x, void *vy, int64_t n) {
    block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        const float *xb = x + i * QK4_1;
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK4_1; j++) {
            if (xb[j] < min) min = xb[j];
            if (xb[j] > max) max = xb[j];
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fg_fp32_to_fp16(d);
        y[i].m = fg_fp32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const float x0 = (xb[j] - min) * id, x1 = (xb[j + QK4_1 / 2] - min) * id;
            int q0 = (int)(x0 + 0.5f), q1 = (int)(x1 + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void dequantize_row_q4_1_scalar(const void *vx, float *y, int64_t n) {
    const block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        const float d = fg_fp16_to_fp32(x[i].d), m = fg_fp16_to_fp32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[i * QK4_1 + j] = (float)(x[i].qs[j] & 0x0f) * d + m;
            y[i * QK4_1 + j + QK4_1 / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

static float vec_dot_q4_1_q8_1_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q4_1 *w = vw;
    const block_q8_1 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        int sumi = 0;
        for (int j = 0; j < QK4_1 / 2; j++) {
            sumi += (w[i].qs[j] & 0x0f) * x[i].qs[j];
            sumi += (w[i].qs[j] >> 4) * x[i].qs[j + QK4_1 / 2];
        }
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d)) +
               fg_fp16_to_fp32(w[i].m) * fg_fp16_to_fp32(x[i].s);
    }
    return sum;
}


#if FG_HAVE_X86
/* ---- AVX2 ---- */

/* Bit-exact with the scalar reference: q * d, then + m (no FMA). */
FG_TARGET_AVX2 static void dequantize_row_q4_1_avx2(const void *vx, float *y, int64_t n) {
    const block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        const __m256 d = _mm256_set1_ps(fg_f16(x[i].d)), m = _mm256_set1_ps(fg_f16(x[i].m));
        __m256 q[4];
        fg_nibbles_ps(x[i].qs, q);
        for (int k = 0; k < 4; k++) {
            _mm256_storeu_ps(y + i * QK4_1 + 8 * k, _mm256_add_ps(_mm256_mul_ps(q[k], d), m));
        }
    }
}

/* R <= 8 rows x M <= 8 activations of q4_1 . q8_1, row r in lane r (see FG_KERNELS_FROM_TILE8). Per block the rows'
 * nibbles are transposed once for all M activations (fg_rows8_nibbles: lo[j] holds elements 4j..4j+3 of every row,
 * hi[j] elements 16+4j..); each activation's 4-byte groups are broadcast and NIBDOT (fg_nib8_dot_*) gives every row's
 * exact block sum. M = 1 (the gemv) reduces rows instead, two blocks at a time (NAME##_pair: each row's two blocks'
 * nibbles in one ymm, low nibbles against the activation's first 16 bytes of each block, high against the last 16,
 * DOT2 the u8.s8 dot, then fg_hsum8x2_epi32 puts the 8 rows' sums into lanes; no transpose where nothing would share
 * it). sum_j (d q_j + m) dx x_j = d dx sum(q x) + m s: fg_q8_1_step8, the scalar reference's float step, so every
 * path of every twin (AVX2: maddubs; AVX-512: the same tile with VNNI dpbusd) equals the scalar vec_dot bit for bit.
 * NAME##_at asks for each row's block `ahead` bytes on (fg_prefetch_rows8); FG_TILE8_ENTRIES gives NAME
 * (the tiles' shape) and NAME##_gemv (the streams gemv's). */
#define Q4_1_TILE8(NAME, INLINE, DOT2, NIBDOT)                                                              \
    INLINE __m256 NAME##_pair(const int R, const char *wb, size_t stride, const block_q8_1 *xb,             \
                              const fg_xaux *aux, __m256 acc) {                                             \
        const __m256i m4 = _mm256_set1_epi8(0x0f);                                                          \
        const __m256i xlo = fg_load_2x128(xb->qs, sizeof(block_q8_1), 2);                                   \
        const __m256i xhi = fg_load_2x128(xb->qs + 16, sizeof(block_q8_1), 2);                              \
        __m256i v[8], s[2]; /* v[r]: row r's partial sums, block 0 | block 1; s[b]: block b's, row r in lane r */ \
        for (int r = 0; r < 8; r++) {                                                                       \
            v[r] = _mm256_setzero_si256();                                                                  \
            if (r >= R) continue;                                                                           \
            const __m256i q = fg_load_2x128(wb + r * stride + offsetof(block_q4_1, qs), sizeof(block_q4_1), 2); \
            v[r] = DOT2(_mm256_and_si256(q, m4), xlo, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), xhi);  \
        }                                                                                                   \
        fg_hsum8x2_epi32(v, &s[0], &s[1]);                                                                  \
        for (int k = 0; k < 2; k++) {                                                                       \
            __m256 dw, mw;                                                                                  \
            fg_rows8_f16x2(wb + k * sizeof(block_q4_1), stride, R, &dw, &mw);                               \
            acc = fg_q8_1_step8(acc, s[k], dw, mw, aux + k);                                                \
        }                                                                                                   \
        return acc;                                                                                         \
    }                                                                                                       \
    INLINE void NAME##_at(const int R, const int M, int first, int kc, const char *w, size_t stride, size_t ahead, \
                          const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {    \
        __m256 acc[8]; /* [a]: 8 rows */                                                                    \
        fg_load_rows8(R, M, first, acc, y, ldy);                                                            \
        int i = 0;                                                                                          \
        if (M == 1)                                                                                         \
            for (; i + 2 <= kc; i += 2) {                                                                   \
                fg_prefetch_rows8(w, stride, ahead, R, i, kc, sizeof(block_q4_1));                          \
                fg_prefetch_rows8(w, stride, ahead, R, i + 1, kc, sizeof(block_q4_1));                      \
                acc[0] = NAME##_pair(R, w + i * sizeof(block_q4_1), stride, (const block_q8_1 *)x + i, aux[0] + i, acc[0]); \
            }                                                                                               \
        for (; i < kc; i++) {                                                                               \
            const char *wb = w + i * sizeof(block_q4_1);                                                    \
            fg_prefetch_rows8(w, stride, ahead, R, i, kc, sizeof(block_q4_1));                              \
            __m256i lo[4], hi[4];                                                                           \
            fg_rows8_nibbles(wb + offsetof(block_q4_1, qs), stride, R, lo, hi);                             \
            __m256 dw, mw;                                                                                  \
            fg_rows8_f16x2(wb, stride, R, &dw, &mw);                                                        \
            for (int a = 0; a < M; a++) {                                                                   \
                const int8_t *xq = ((const block_q8_1 *)(x + a * xs) + i)->qs;                              \
                acc[a] = fg_q8_1_step8(acc[a], NIBDOT(lo, hi, xq), dw, mw, &aux[a][i]);                     \
            }                                                                                               \
        }                                                                                                   \
        fg_store_rows8(R, M, acc, y, ldy);                                                                  \
    }                                                                                                       \
    FG_TILE8_ENTRIES(NAME, INLINE)
Q4_1_TILE8(q4_1_tile8_avx2, FG_INLINE_AVX2, FG_DOT2_U8S8_256, fg_nib8_dot_avx2)
FG_KERNELS_FROM_TILE8_STREAMS(vec_dot_q4_1_q8_1_avx2, gemv_q4_1_q8_1_avx2, gemm_q4_1_q8_1_avx2,
                              FG_TARGET_AVX2, q4_1_tile8_avx2, fg_q8_1_aux,
                              sizeof(block_q4_1), sizeof(block_q8_1), QK4_1)
/* AVX-512 + VNNI: the same tile with dpbusd (256-bit, AVX512VL) for the gemv, and its 16-row zmm twin for more
 * activations (fg_rows16_*: rows in the 16 lanes, one broadcast + dpbusd and one float step per 16 pairs). Without
 * VNNI, AVX-512 runs the AVX2 kernels. */
Q4_1_TILE8(q4_1_tile8_vnni, FG_INLINE_AVX512_VNNI, FG_DOT2_U8S8_256_VNNI, fg_nib8_dot_vnni)
FG_INLINE_AVX512_VNNI void q4_1_tile16_vnni(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                            const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    if (M == 1) {
        FG_TILE16_GEMV(q4_1_tile8_vnni, R, first, kc, w, stride, x, xs, aux, y, ldy);
        return;
    }
    __m512 acc[8]; /* [a]: 16 rows */
    fg_load_rows16(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q4_1);
        fg_prefetch_tile16(w, stride, R, i, kc, sizeof(block_q4_1));
        __m512i lo[4], hi[4];
        fg_rows16_nibbles(wb + offsetof(block_q4_1, qs), stride, R, lo, hi);
        __m512 dw, mw;
        fg_rows16_f16x2(wb, stride, R, &dw, &mw);
        for (int a = 0; a < M; a++) {
            const int8_t *xq = ((const block_q8_1 *)(x + a * xs) + i)->qs;
            acc[a] = fg_q8_1_step16(acc[a], fg_nib16_dot_vnni(_mm512_setzero_si512(), lo, hi, xq), dw, mw, &aux[a][i]);
        }
    }
    fg_store_rows16(R, M, acc, y, ldy);
}
FG_GEMM_DOT_FROM_TILE(vec_dot_q4_1_q8_1_vnni, gemm_q4_1_q8_1_vnni, FG_TARGET_AVX512_VNNI, q4_1_tile16_vnni,
                      fg_q8_1_aux, sizeof(block_q4_1), sizeof(block_q8_1), QK4_1, 8, 16)
FG_GEMV_STREAMS(gemv_q4_1_q8_1_vnni, FG_TARGET_AVX512_VNNI, q4_1_tile8_vnni_gemv, gemm_q4_1_q8_1_vnni, fg_q8_1_aux,
                sizeof(block_q4_1), sizeof(block_q8_1), QK4_1)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: nibbles 0..15 fit int8, so the signed dot applies directly ---- */
#define Q4_1_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
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
                const block_q4_1 *b = (const block_q4_1 *)(w + r * stride) + i;                             \
                fg_prefetch(b, stride);                                                                     \
                const uint8x16_t q = vld1q_u8(b->qs);                                                       \
                int32x4_t s = DOT(vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), x0);  \
                s = DOT(s, vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), x1);                                      \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(s), fg_fp16_to_fp32(b->d) * dx);                 \
                accm[r] += fg_fp16_to_fp32(b->m) * sx;                                                      \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]) + accm[r];                                    \
    }
Q4_1_ROWS_NEON(q4_1_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
FG_DOT_FROM_ROWS(vec_dot_q4_1_q8_1_neon, FG_NO_TARGET, q4_1_rows_neon, QK4_1)
FG_GEMV_FROM_ROWS(gemv_q4_1_q8_1_neon, FG_NO_TARGET, q4_1_rows_neon, QK4_1)
FG_INLINE_NEON FG_TARGET_DOTPROD void q4_1_tile8_neondp(const int R, const int M, int first, int kc, const char *w,
                                                    size_t stride, const char *x, size_t xs,
                                                    const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    fg_b32_tile8_neondp(R, M, first, kc, w, stride, x, xs, aux, y, ldy, FG_B32_Q4_1, NULL);
}
FG_KERNELS_FROM_TILE8(vec_dot_q4_1_q8_1_neondp, gemv_q4_1_q8_1_neondp, gemm_q4_1_q8_1_neondp, FG_TARGET_DOTPROD,
                      q4_1_tile8_neondp, fg_q8_1_aux_neon, sizeof(block_q4_1), sizeof(block_q8_1), QK4_1, 8)
#if FG_HAVE_I8MM
FG_B32_KERNELS_NEONI8MM(q4_1_q8_1, FG_B32_Q4_1, NULL, fg_q8_1_aux_neon, sizeof(block_q4_1), sizeof(block_q8_1), QK4_1)
#endif
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q4_1_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q4_1_scalar, dequantize_row_q4_1_scalar, vec_dot_q4_1_q8_1_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q4_1_avx2, vec_dot_q4_1_q8_1_avx2, gemv_q4_1_q8_1_avx2, gemm_q4_1_q8_1_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, vec_dot_q4_1_q8_1_vnni, gemv_q4_1_q8_1_vnni, gemm_q4_1_q8_1_vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q4_1_q8_1_neon, gemv_q4_1_q8_1_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q4_1_q8_1_neondp, gemv_q4_1_q8_1_neondp, gemm_q4_1_q8_1_neondp},
#if FG_HAVE_I8MM
    [FG_ROW_I8MM] = {NULL, NULL, vec_dot_q4_1_q8_1_neoni8mm, gemv_q4_1_q8_1_neoni8mm, gemm_q4_1_q8_1_neoni8mm},
#endif
#endif
};
