/* Q4_0 weights: 32 elements per block, x = d * (q - 8), q in 0..15. Dot against Q8_0 activations. */
#include "fg_simd.h"

/* ---- scalar reference (also the tail loop of the SIMD versions) ---- */

/* llama.cpp's reference rounding (quantize_row_q4_0_ref), which gguf-py follows. */
static void quantize_row_q4_0_scalar(const float *x, void *vy, int64_t n) {
    block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float *xb = x + i * QK4_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            if (amax < fabsf(xb[j])) { amax = fabsf(xb[j]); max = xb[j]; }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fg_fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const float x0 = xb[j] * id, x1 = xb[j + QK4_0 / 2] * id;
            int q0 = (int)(x0 + 8.5f), q1 = (int)(x1 + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void dequantize_row_q4_0_scalar(const void *vx, float *y, int64_t n) {
    const block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float d = fg_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[i * QK4_0 + j] = (float)((x[i].qs[j] & 0x0f) - 8) * d;
            y[i * QK4_0 + j + QK4_0 / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static float vec_dot_q4_0_q8_0_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q4_0 *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            sumi += ((w[i].qs[j] & 0x0f) - 8) * x[i].qs[j];
            sumi += ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + QK4_0 / 2];
        }
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d));
    }
    return sum;
}


#if FG_HAVE_X86
/* ---- AVX2 ---- */

FG_TARGET_AVX2 static void dequantize_row_q4_0_avx2(const void *vx, float *y, int64_t n) {
    const block_q4_0 *x = vx;
    const __m256 eight = _mm256_set1_ps(8.0f);
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const __m256 d = _mm256_set1_ps(fg_f16(x[i].d));
        __m256 q[4];
        fg_nibbles_ps(x[i].qs, q);
        for (int k = 0; k < 4; k++) _mm256_storeu_ps(y + i * QK4_0 + 8 * k, _mm256_mul_ps(_mm256_sub_ps(q[k], eight), d));
    }
}

/* Per q8_0 activation block: its scale, and 8 * sum(q) (the q4_0 tile's correction). */
FG_INLINE_AVX2 void q4_0_aux(const char *x, int kc, fg_xaux *aux) {
    const block_q8_0 *xb = (const block_q8_0 *)x;
    for (int i = 0; i < kc; i++) {
        aux[i].d = fg_f16(xb[i].d);
        aux[i].c = fg_hsum_256i(fg_dot_u8s8_256(_mm256_set1_epi8(8), _mm256_loadu_si256((const __m256i *)xb[i].qs)));
    }
}

/* R <= 8 rows x M <= 8 activations of q4_0 . q8_0, row r in lane r (see FG_KERNELS_FROM_TILE8). Per block the rows'
 * nibbles are transposed once for all M activations (fg_rows8_dwords: lo[j] holds elements 4j..4j+3 of every row,
 * hi[j] elements 16+4j..); each activation's 4-byte groups are broadcast, so 8 maddubs give every row's block dot
 * with unsigned nibbles u = q + 8 in int16 pairs (|pair| <= 2 * 15 * 127, 8 of them < 32767), one madd widens it,
 * and sum (u - 8) x = dot(u, x) - 8 * sum(x) (aux.c). */
FG_INLINE_AVX2 void q4_0_tile8_avx2(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                    const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[8]; /* [a]: 8 rows */
    fg_load_rows8(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q4_0);
        fg_prefetch_tile8(w, stride, R, i, kc, sizeof(block_q4_0));
        __m256i lo[4], hi[4];
        fg_rows8_nibbles(wb + offsetof(block_q4_0, qs), stride, R, lo, hi);
        const __m256 dw = fg_rows8_f16(wb + offsetof(block_q4_0, d), stride, R);
        for (int a = 0; a < M; a++) {
            const int8_t *xq = ((const block_q8_0 *)(x + a * xs) + i)->qs;
            __m256i s = _mm256_maddubs_epi16(lo[0], fg_bcast32(xq));
            for (int j = 1; j < 4; j++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo[j], fg_bcast32(xq + 4 * j)));
            for (int j = 0; j < 4; j++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi[j], fg_bcast32(xq + 16 + 4 * j)));
            const __m256i dot = _mm256_sub_epi32(_mm256_madd_epi16(s, ones), _mm256_set1_epi32(aux[a][i].c));
            acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(aux[a][i].d)), acc[a]);
        }
    }
    fg_store_rows8(R, M, acc, y, ldy);
}

FG_KERNELS_FROM_TILE8(vec_dot_q4_0_q8_0_avx2, gemv_q4_0_q8_0_avx2, gemm_q4_0_q8_0_avx2, FG_TARGET_AVX2, q4_0_tile8_avx2,
                      q4_0_aux, sizeof(block_q4_0), sizeof(block_q8_0), QK4_0, 8)

/* ---- AVX-512: four blocks per step, arranged as in fg_quant_q4_1.c ---- */
#define Q4_0_ROWS_512(NAME, TARGET, DOT2)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME##_step(                                   \
        const int R, const int nblk, const char *w, size_t stride, const block_q8_0 *x, __m512 *acc) {      \
        const __m512i xlo = fg_load_4x128(x->qs, sizeof(block_q8_0), nblk);                                 \
        const __m512i xhi = fg_load_4x128(x->qs + 16, sizeof(block_q8_0), nblk);                            \
        const __m512i eight = _mm512_set1_epi8(8);                                                          \
        const __m512i x8 = DOT2(eight, xlo, eight, xhi);                                                    \
        const __m256 dx = fg_f16_pairs4(&x->d, sizeof(block_q8_0), nblk); /* even lanes: dx */              \
        for (int r = 0; r < R; r++) {                                                                       \
            const block_q4_0 *b = (const block_q4_0 *)(w + r * stride);                                     \
            __m512i lo, hi;                                                                                 \
            fg_prefetch(b, stride);                                                                         \
            fg_nibbles4_512(b->qs, sizeof(block_q4_0), nblk, &lo, &hi);                                     \
            const __m512i s = _mm512_sub_epi32(DOT2(lo, xlo, hi, xhi), x8);                                 \
            const __m256 d = _mm256_mul_ps(fg_f16_pairs4(&b->d, sizeof(block_q4_0), nblk), dx);             \
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), fg_spread4_512(d), acc[r]);                     \
        }                                                                                                   \
    }                                                                                                       \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_0 *x = vx;                                                                           \
        __m512 acc[4];                                                                                      \
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();                                           \
        int64_t i = 0;                                                                                      \
        for (; i + 4 <= nb; i += 4) NAME##_step(R, 4, w + i * sizeof(block_q4_0), stride, x + i, acc);      \
        if (i < nb) NAME##_step(R, (int)(nb - i), w + i * sizeof(block_q4_0), stride, x + i, acc);          \
        for (int r = 0; r < R; r++) y[r] = fg_hsum_512(acc[r]);                                             \
    }
Q4_0_ROWS_512(q4_0_rows_avx512, FG_TARGET_AVX512, FG_DOT2_U8S8_512_BW)
Q4_0_ROWS_512(q4_0_rows_avx512vnni, FG_TARGET_AVX512_VNNI, FG_DOT2_U8S8_512_VNNI)

/* AVX-512 gemm: a tile of R <= 4 weight rows x M <= 4 activation rows. Each weight step (four blocks) is unpacked
 * once and dotted with the M activations; every (row, activation) pair runs exactly the arithmetic of NAME##_step
 * above (same ops, same order), so results equal the gemv path bit for bit. Tiles of FG_Q4_0_GEMM_M activations. */
#define FG_Q4_0_GEMM_M 2
#define Q4_0_GEMM_512(NAME, TARGET, DOT2)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME##_gstep(                                  \
        const int R, const int M, const int nblk, const char *w, size_t stride, const char *x, size_t xs,    \
        __m512 acc[4][4]) {                                                                                 \
        const __m512i eight = _mm512_set1_epi8(8);                                                          \
        __m512i xlo[4], xhi[4], x8[4];                                                                      \
        __m256 dx[4];                                                                                       \
        for (int a = 0; a < M; a++) {                                                                       \
            const block_q8_0 *xb = (const block_q8_0 *)(x + a * xs);                                        \
            xlo[a] = fg_load_4x128(xb->qs, sizeof(block_q8_0), nblk);                                       \
            xhi[a] = fg_load_4x128(xb->qs + 16, sizeof(block_q8_0), nblk);                                  \
            x8[a] = DOT2(eight, xlo[a], eight, xhi[a]);                                                     \
            dx[a] = fg_f16_pairs4(&xb->d, sizeof(block_q8_0), nblk);                                        \
        }                                                                                                   \
        for (int r = 0; r < R; r++) {                                                                       \
            const block_q4_0 *b = (const block_q4_0 *)(w + r * stride);                                     \
            __m512i lo, hi;                                                                                 \
            fg_prefetch(b, stride);                                                                         \
            fg_nibbles4_512(b->qs, sizeof(block_q4_0), nblk, &lo, &hi);                                     \
            const __m256 dw = fg_f16_pairs4(&b->d, sizeof(block_q4_0), nblk);                               \
            for (int a = 0; a < M; a++) {                                                                   \
                const __m512i s = _mm512_sub_epi32(DOT2(lo, xlo[a], hi, xhi[a]), x8[a]);                    \
                const __m256 d = _mm256_mul_ps(dw, dx[a]);                                                  \
                acc[r][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), fg_spread4_512(d), acc[r][a]);           \
            }                                                                                               \
        }                                                                                                   \
    }                                                                                                       \
    /* y[a*ldy + r] for r < R, a < M; x: M activation rows xs bytes apart */                                \
    static inline __attribute__((always_inline)) TARGET void NAME##_tile(                                   \
        const int R, const int M, int64_t nb, const char *w, size_t stride, const char *x, size_t xs,        \
        float *y, int64_t ldy) {                                                                            \
        __m512 acc[4][4];                                                                                   \
        for (int r = 0; r < R; r++)                                                                         \
            for (int a = 0; a < M; a++) acc[r][a] = _mm512_setzero_ps();                                    \
        int64_t i = 0;                                                                                      \
        for (; i + 4 <= nb; i += 4)                                                                         \
            NAME##_gstep(R, M, 4, w + i * sizeof(block_q4_0), stride, x + i * sizeof(block_q8_0), xs, acc); \
        if (i < nb)                                                                                         \
            NAME##_gstep(R, M, (int)(nb - i), w + i * sizeof(block_q4_0), stride, x + i * sizeof(block_q8_0), \
                         xs, acc);                                                                          \
        for (int r = 0; r < R; r++)                                                                         \
            for (int a = 0; a < M; a++) y[a * ldy + r] = fg_hsum_512(acc[r][a]);                            \
    }                                                                                                       \
    static inline __attribute__((always_inline)) TARGET void NAME##_rtile(                                  \
        const int R, int M, int64_t nb, const char *w, size_t stride, const char *x, size_t xs, float *y,    \
        int64_t ldy) {                                                                                      \
        switch (M) {                                                                                        \
        case 4: NAME##_tile(R, 4, nb, w, stride, x, xs, y, ldy); break;                                     \
        case 3: NAME##_tile(R, 3, nb, w, stride, x, xs, y, ldy); break;                                     \
        case 2: NAME##_tile(R, 2, nb, w, stride, x, xs, y, ldy); break;                                     \
        default: NAME##_tile(R, 1, nb, w, stride, x, xs, y, ldy); break;                                    \
        }                                                                                                   \
    }                                                                                                       \
    TARGET static void NAME(int64_t n, const void *w, size_t stride, const void *xq, size_t xs, int64_t m,   \
                            float *y, int64_t ldy, int64_t nrows) {                                         \
        const char *wr = (const char *)w, *xr = (const char *)xq;                                           \
        const int64_t nb = n / QK4_0;                                                                       \
        for (int64_t a = 0; a < m; a += FG_Q4_0_GEMM_M) {                                                   \
            const int M = m - a < FG_Q4_0_GEMM_M ? (int)(m - a) : FG_Q4_0_GEMM_M;                           \
            const char *xa = xr + a * xs;                                                                   \
            float *ya = y + a * ldy;                                                                        \
            int64_t r = 0;                                                                                  \
            for (; r + 4 <= nrows; r += 4) NAME##_rtile(4, M, nb, wr + r * stride, stride, xa, xs, ya + r, ldy); \
            switch (nrows - r) {                                                                            \
            case 3: NAME##_rtile(3, M, nb, wr + r * stride, stride, xa, xs, ya + r, ldy); break;            \
            case 2: NAME##_rtile(2, M, nb, wr + r * stride, stride, xa, xs, ya + r, ldy); break;            \
            case 1: NAME##_rtile(1, M, nb, wr + r * stride, stride, xa, xs, ya + r, ldy); break;            \
            default: break;                                                                                 \
            }                                                                                               \
        }                                                                                                   \
    }
Q4_0_GEMM_512(gemm_q4_0_q8_0_avx512, FG_TARGET_AVX512, FG_DOT2_U8S8_512_BW)
Q4_0_GEMM_512(gemm_q4_0_q8_0_avx512vnni, FG_TARGET_AVX512_VNNI, FG_DOT2_U8S8_512_VNNI)
FG_DOT_FROM_ROWS(vec_dot_q4_0_q8_0_avx512, FG_TARGET_AVX512, q4_0_rows_avx512, QK4_0)
FG_GEMV_FROM_ROWS(gemv_q4_0_q8_0_avx512, FG_TARGET_AVX512, q4_0_rows_avx512, QK4_0)
FG_DOT_FROM_ROWS(vec_dot_q4_0_q8_0_avx512vnni, FG_TARGET_AVX512_VNNI, q4_0_rows_avx512vnni, QK4_0)
FG_GEMV_FROM_ROWS(gemv_q4_0_q8_0_avx512vnni, FG_TARGET_AVX512_VNNI, q4_0_rows_avx512vnni, QK4_0)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: nibbles minus 8 as int8 ---- */
#define Q4_0_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_0 *x = vx;                                                                           \
        float32x4_t acc[4];                                                                                 \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);                                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const int8x16_t x0 = vld1q_s8(x[i].qs), x1 = vld1q_s8(x[i].qs + 16);                            \
            const float dx = fg_fp16_to_fp32(x[i].d);                                                       \
            for (int r = 0; r < R; r++) {                                                                   \
                const block_q4_0 *b = (const block_q4_0 *)(w + r * stride) + i;                             \
                fg_prefetch(b, stride);                                                                     \
                const uint8x16_t q = vld1q_u8(b->qs);                                                       \
                const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8)); \
                const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));        \
                int32x4_t s = DOT(DOT(vdupq_n_s32(0), lo, x0), hi, x1);                                     \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(s), fg_fp16_to_fp32(b->d) * dx);                 \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]);                                              \
    }
#define FG_NO_TARGET
Q4_0_ROWS_NEON(q4_0_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
FG_DOT_FROM_ROWS(vec_dot_q4_0_q8_0_neon, FG_NO_TARGET, q4_0_rows_neon, QK4_0)
FG_GEMV_FROM_ROWS(gemv_q4_0_q8_0_neon, FG_NO_TARGET, q4_0_rows_neon, QK4_0)
FG_INLINE_NEON FG_TARGET_DOTPROD void q4_0_tile8_neondp(const int R, const int M, int first, int kc, const char *w,
                                                    size_t stride, const char *x, size_t xs,
                                                    const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    fg_b32_tile8_neondp(R, M, first, kc, w, stride, x, xs, aux, y, ldy, FG_B32_Q4_0, NULL);
}
FG_KERNELS_FROM_TILE8(vec_dot_q4_0_q8_0_neondp, gemv_q4_0_q8_0_neondp, gemm_q4_0_q8_0_neondp, FG_TARGET_DOTPROD,
                      q4_0_tile8_neondp, fg_q8_0_aux_neon, sizeof(block_q4_0), sizeof(block_q8_0), QK4_0, 8)
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q4_0_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_q4_0_scalar, dequantize_row_q4_0_scalar, vec_dot_q4_0_q8_0_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q4_0_avx2, vec_dot_q4_0_q8_0_avx2, gemv_q4_0_q8_0_avx2,
                     gemm_q4_0_q8_0_avx2},
    [FG_ISA_AVX512] = {NULL, dequantize_row_q4_0_avx2, vec_dot_q4_0_q8_0_avx512, gemv_q4_0_q8_0_avx512,
                       gemm_q4_0_q8_0_avx512},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q4_0_q8_0_neon, gemv_q4_0_q8_0_neon},
#endif
};

const fg_type_kernels fg_q4_0_kernels_ext[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {0}, /* never used: keeps the initializer non-empty without SIMD (MSVC rejects {}) */
#if FG_HAVE_X86
    [FG_ISA_AVX512] = {NULL, NULL, vec_dot_q4_0_q8_0_avx512vnni, gemv_q4_0_q8_0_avx512vnni,
                       gemm_q4_0_q8_0_avx512vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q4_0_q8_0_neondp, gemv_q4_0_q8_0_neondp,
                     gemm_q4_0_q8_0_neondp},
#endif
};
