/* IQ4_NL weights: 32 elements per block, x = d * kvalues[q] with q a 4-bit index into 16 non-uniform levels
 * (fg_kvalues_iq4nl, -127..113), nibbles as q4_0. Dot against Q8_0 activations: d dx sum kvalues[q] x. */
#include "fg_simd.h"
#include "fg_kquant.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_iq4_nl_ref (bytes identical except the nibbles of all-zero blocks, see fg_quantize_iq4). */
static void quantize_row_iq4_nl_scalar(const float *x, void *vy, int64_t n) {
    block_iq4_nl *y = vy;
    uint8_t L[QK4_NL];
    float scale;
    uint16_t unused_h;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        memset(L, 0, sizeof L);
        fg_quantize_iq4(QK4_NL, x + i * QK4_NL, &y[i].d, y[i].qs, &unused_h, NULL, &scale, L, -1);
    }
}

/* ggml's quantize_iq4_nl without importance weights (what llama-quantize writes): ntry = 7. The final pass
 * recomputes every index from the chosen scale, so all-zero blocks are deterministic here (zero scale, index 8). */
void fg_quantize_row_iq4_nl_search(const float *x, void *vy, int64_t n) {
    block_iq4_nl *y = vy;
    uint8_t L[QK4_NL];
    float scale;
    uint16_t unused_h;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        memset(L, 0, sizeof L);
        fg_quantize_iq4(QK4_NL, x + i * QK4_NL, &y[i].d, y[i].qs, &unused_h, NULL, &scale, L, 7);
    }
}

static void dequantize_row_iq4_nl_scalar(const void *vx, float *y, int64_t n) {
    const block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const float d = fg_fp16_to_fp32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * fg_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + 16] = d * fg_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

static float vec_dot_iq4_nl_q8_0_scalar(int64_t n, const void *vw, const void *vx) {
    const block_iq4_nl *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += fg_kvalues_iq4nl[w[i].qs[j] & 0xf] * x[i].qs[j];
            sumi += fg_kvalues_iq4nl[w[i].qs[j] >> 4] * x[i].qs[j + 16];
        }
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d));
    }
    return sum;
}

#if FG_HAVE_X86
/* ---- AVX2: levels by byte shuffle, then the signed . signed dot as |k| . (x with k's sign) ---- */
/* 16 packed nibbles -> their 32 levels in element order */
FG_INLINE_AVX2 __m256i iq4_levels_avx2(const uint8_t *qs) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)fg_kvalues_iq4nl));
    return _mm256_shuffle_epi8(table, fg_nibbles_256(qs));
}

/* Bit-exact with the scalar reference: d * level. */
FG_TARGET_AVX2 static void dequantize_row_iq4_nl_avx2(const void *vx, float *y, int64_t n) {
    const block_iq4_nl *x = vx;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)fg_kvalues_iq4nl));
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const __m256i k = _mm256_shuffle_epi8(table, fg_nibbles_256(x[i].qs));
        const __m256 d = _mm256_set1_ps(fg_f16(x[i].d));
        fg_store_i8x16_ps(y, _mm256_castsi256_si128(k), d, _mm256_setzero_ps());
        fg_store_i8x16_ps(y + 16, _mm256_extracti128_si256(k, 1), d, _mm256_setzero_ps());
    }
}

/* R <= 8 rows x M <= 8 activations of iq4_nl . q8_0, row r in lane r (see FG_KERNELS_FROM_TILE8). One activation
 * (the gemv) dots each row's levels in element order and reduces the 8 rows' partial sums into lanes; more share
 * the rows' nibbles transposed once per block (fg_rows8_dwords) and looked up in the table (k[j]: elements 4j..4j+3
 * of every row, k[4 + j]: 16 + 4j..), against their broadcast 4-byte groups. The signed . signed dot is |k| . (x
 * with k's sign); a pair reaches 2 * 127 * 127, so each group is widened by its own madd. Every lane takes the scalar
 * reference's float step, sum += (float)sumi * (dw * dx) (no FMA), so all paths equal it bit for bit. */
FG_INLINE_AVX2 void iq4_nl_tile8_avx2(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                      const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)fg_kvalues_iq4nl));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[8]; /* [a]: 8 rows */
    fg_load_rows8(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_iq4_nl);
        fg_prefetch_tile8(w, stride, R, i, kc, sizeof(block_iq4_nl));
        const __m256 dw = fg_rows8_f16(wb + offsetof(block_iq4_nl, d), stride, R);
        __m256i dot[8]; /* [a]: the 8 rows' block sums */
        if (M == 1) { /* nothing to share a transpose with */
            const __m256i xq = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)x + i)->qs);
            __m256i v[8]; /* [r]: row r's 8 partial sums */
            for (int r = 0; r < 8; r++) {
                v[r] = _mm256_setzero_si256();
                if (r >= R) continue;
                const __m256i k = iq4_levels_avx2((const uint8_t *)wb + r * stride + offsetof(block_iq4_nl, qs));
                v[r] = fg_dot_u8s8_256(_mm256_sign_epi8(k, k), _mm256_sign_epi8(xq, k));
            }
            dot[0] = fg_hsum8_epi32(v);
        } else {
            __m256i t[4], k[8], ak[8];
            fg_rows8_dwords(wb + offsetof(block_iq4_nl, qs), stride, R, t);
            for (int j = 0; j < 4; j++) {
                k[j] = _mm256_shuffle_epi8(table, _mm256_and_si256(t[j], m4));
                k[4 + j] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(t[j], 4), m4));
            }
            for (int g = 0; g < 8; g++) ak[g] = _mm256_sign_epi8(k[g], k[g]);
            for (int a = 0; a < M; a++) {
                const int8_t *xq = ((const block_q8_0 *)(x + a * xs) + i)->qs;
                dot[a] = fg_dot_u8s8_256(ak[0], _mm256_sign_epi8(fg_bcast32(xq), k[0]));
                for (int g = 1; g < 8; g++)
                    dot[a] = _mm256_add_epi32(dot[a], fg_dot_u8s8_256(ak[g], _mm256_sign_epi8(fg_bcast32(xq + 4 * g), k[g])));
            }
        }
        for (int a = 0; a < M; a++) {
            const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(dot[a]), _mm256_mul_ps(dw, _mm256_set1_ps(aux[a][i].d)));
            acc[a] = _mm256_add_ps(acc[a], p);
        }
    }
    fg_store_rows8(R, M, acc, y, ldy);
}

FG_KERNELS_FROM_TILE8(vec_dot_iq4_nl_q8_0_avx2, gemv_iq4_nl_q8_0_avx2, gemm_iq4_nl_q8_0_avx2, FG_TARGET_AVX2,
                      iq4_nl_tile8_avx2, fg_q8_0_aux, sizeof(block_iq4_nl), sizeof(block_q8_0), QK4_NL, 8)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: levels by table lookup, signed dot ---- */
#define IQ4_NL_ROWS_NEON(NAME, TARGET, DOT)                                                                 \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_0 *x = vx;                                                                           \
        const int8x16_t table = vld1q_s8(fg_kvalues_iq4nl);                                                 \
        float32x4_t acc[4];                                                                                 \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);                                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const int8x16_t x0 = vld1q_s8(x[i].qs), x1 = vld1q_s8(x[i].qs + 16);                            \
            const float dx = fg_fp16_to_fp32(x[i].d);                                                       \
            for (int r = 0; r < R; r++) {                                                                   \
                const block_iq4_nl *b = (const block_iq4_nl *)(w + r * stride) + i;                         \
                fg_prefetch(b, stride);                                                                     \
                const uint8x16_t q = vld1q_u8(b->qs);                                                       \
                int32x4_t s = DOT(vdupq_n_s32(0), vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0f))), x0);    \
                s = DOT(s, vqtbl1q_s8(table, vshrq_n_u8(q, 4)), x1);                                        \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(s), fg_fp16_to_fp32(b->d) * dx);                 \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]);                                              \
    }
#define FG_NO_TARGET
IQ4_NL_ROWS_NEON(iq4_nl_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
IQ4_NL_ROWS_NEON(iq4_nl_rows_neondp, FG_TARGET_DOTPROD, vdotq_s32)
FG_DOT_FROM_ROWS(vec_dot_iq4_nl_q8_0_neon, FG_NO_TARGET, iq4_nl_rows_neon, QK4_NL)
FG_GEMV_FROM_ROWS(gemv_iq4_nl_q8_0_neon, FG_NO_TARGET, iq4_nl_rows_neon, QK4_NL)
FG_DOT_FROM_ROWS(vec_dot_iq4_nl_q8_0_neondp, FG_TARGET_DOTPROD, iq4_nl_rows_neondp, QK4_NL)
FG_GEMV_FROM_ROWS(gemv_iq4_nl_q8_0_neondp, FG_TARGET_DOTPROD, iq4_nl_rows_neondp, QK4_NL)
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_iq4_nl_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_iq4_nl_scalar, dequantize_row_iq4_nl_scalar, vec_dot_iq4_nl_q8_0_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_iq4_nl_avx2, vec_dot_iq4_nl_q8_0_avx2, gemv_iq4_nl_q8_0_avx2,
                     gemm_iq4_nl_q8_0_avx2},
    /* the AVX2 kernels, until AVX-512 twins exist (an empty entry would fall back to scalar) */
    [FG_ISA_AVX512] = {NULL, dequantize_row_iq4_nl_avx2, vec_dot_iq4_nl_q8_0_avx2, gemv_iq4_nl_q8_0_avx2,
                       gemm_iq4_nl_q8_0_avx2},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_iq4_nl_q8_0_neon, gemv_iq4_nl_q8_0_neon},
#endif
};

const fg_type_kernels fg_iq4_nl_kernels_ext[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {0}, /* never used: keeps the initializer non-empty off NEON */
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_iq4_nl_q8_0_neondp, gemv_iq4_nl_q8_0_neondp},
#endif
};
