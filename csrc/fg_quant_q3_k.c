/* Q3_K weights: super-blocks of 256 = 16 sub-blocks of 16, x = d * s_j * (q - 4), q in 0..7, s_j six-bit signed
 * scales (fg_unpack_scales_q3k), fp16 d LAST. Element 128h + 32j + l (l < 32): low 2 bits in bits 2j..2j+1 of
 * qs[32h + l], bit 2 in bit 4h + j of hmask[l]. Dot against Q8_K: sum_s d dx s_s ((q . x)_s - 4 bsums_s). */
#include "fg_simd.h"
#include "fg_kquant_ref.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_q3_K_ref. */
static void quantize_row_q3_k_scalar(const float *x, void *vy, int64_t n) {
    block_q3_K *y = vy;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = fg_make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) amax = fabsf(scales[j]), max_scale = scales[j];
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                int8_t l = (int8_t)fg_nearest_int(iscale * scales[j]);
                l = (int8_t)(fg_clampi(l, -32, 31) + 32);
                if (j < 8) y[i].scales[j] = l & 0xF;
                else y[i].scales[j - 8] |= ((l & 0xF) << 4);
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (l << (2 * (j / 4)));
            }
            y[i].d = fg_fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = fg_fp32_to_fp16(0.f);
        }
        int8_t sc[16];
        fg_unpack_scales_q3k(y[i].scales, sc);
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fg_fp16_to_fp32(y[i].d) * sc[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (int8_t)(fg_clampi(fg_nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
        }
        memset(y[i].hmask, 0, QK_K / 8);
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
                L[j] -= 4;
            }
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

/* q - 4 (-4..3) of the 256 elements of a block, in element order. */
static inline void q3_k_unpack(const block_q3_K *b, int8_t q[QK_K]) {
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                q[128 * h + 32 * j + l] = (int8_t)(((b->qs[32 * h + l] >> (2 * j)) & 3) -
                                                   ((b->hmask[l] >> (4 * h + j)) & 1 ? 0 : 4));
}

static void dequantize_row_q3_k_scalar(const void *vx, float *y, int64_t n) {
    const block_q3_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fg_fp16_to_fp32(x[i].d);
        int8_t sc[16], q[QK_K];
        fg_unpack_scales_q3k(x[i].scales, sc);
        q3_k_unpack(&x[i], q);
        for (int e = 0; e < QK_K; e++) y[e] = d * sc[e / 16] * q[e];
    }
}

static float vec_dot_q3_k_q8_k_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q3_K *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16], q[QK_K];
        fg_unpack_scales_q3k(w[i].scales, sc);
        q3_k_unpack(&w[i], q);
        int sumi = 0;
        for (int s = 0; s < QK_K / 16; s++) {
            int p = 0;
            for (int k = 0; k < 16; k++) p += q[16 * s + k] * x[i].qs[16 * s + k];
            sumi += sc[s] * p;
        }
        sum += fg_fp16_to_fp32(w[i].d) * x[i].d * (float)sumi;
    }
    return sum;
}

#if FG_HAVE_X86
/* Bit-exact with the scalar reference: (d * s) * (q - 4). */
FG_TARGET_AVX2 static void dequantize_row_q3_k_avx2(const void *vx, float *y, int64_t n) {
    const block_q3_K *x = vx;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fg_f16(x[i].d);
        int8_t sc[16];
        fg_unpack_scales_q3k(x[i].scales, sc);
        __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        for (int h = 0; h < 2; h++) {
            __m256i q2 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i u = _mm256_or_si256(_mm256_and_si256(q2, m3), _mm256_slli_epi16(_mm256_and_si256(hm, one), 2));
                const __m256i q = _mm256_sub_epi8(u, four);
                q2 = _mm256_srli_epi16(q2, 2);
                hm = _mm256_srli_epi16(hm, 1);
                for (int v = 0; v < 2; v++)
                    fg_store_i8x16_ps(y + 128 * h + 32 * j + 16 * v,
                                      v ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q),
                                      _mm256_set1_ps(d * sc[8 * h + 2 * j + v]), _mm256_setzero_ps());
            }
        }
    }
}

/* ---- AVX2: u = q (0..7, unsigned) . x by maddubs, the int16 sums of each 16-element sub-block weighted by its
 * scale in the widening madd; the -4 offset as 4 * (bsums . scales). ---- */
FG_INLINE_AVX2 void q3_k_rows_avx2(const int R, int64_t nb, const char *w, size_t stride, const void *vx, float *y) {
    const block_q8_K *x = vx;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc[4];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q3_K *b[4];
        int8_t sc[4][16];
        __m256i isum[4], hm[4];
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)x[i].bsums);
        for (int r = 0; r < R; r++) {
            b[r] = (const block_q3_K *)(w + r * stride) + i;
            fg_prefetch(b[r], stride);
            fg_prefetch((const char *)b[r] + 64, stride);
            fg_unpack_scales_q3k(b[r]->scales, sc[r]);
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc[r]));
            isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 2));
            hm[r] = _mm256_loadu_si256((const __m256i *)b[r]->hmask);
        }
        for (int h = 0; h < 2; h++) {
            __m256i q2[4];
            for (int r = 0; r < R; r++) q2[r] = _mm256_loadu_si256((const __m256i *)(b[r]->qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i xs = _mm256_loadu_si256((const __m256i *)(x[i].qs + 128 * h + 32 * j));
                for (int r = 0; r < R; r++) {
                    const __m256i u = _mm256_or_si256(_mm256_and_si256(q2[r], m3),
                                                      _mm256_slli_epi16(_mm256_and_si256(hm[r], one), 2));
                    q2[r] = _mm256_srli_epi16(q2[r], 2);
                    hm[r] = _mm256_srli_epi16(hm[r], 1);
                    const int s = 8 * h + 2 * j;
                    const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(sc[r][s + 1]), _mm_set1_epi16(sc[r][s]));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xs), sv));
                }
            }
        }
        for (int r = 0; r < R; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(fg_f16(b[r]->d) * x[i].d), acc[r]);
    }
    for (int r = 0; r < R; r++) y[r] = fg_hsum_256(acc[r]);
}
FG_DOT_FROM_ROWS(vec_dot_q3_k_q8_k_avx2, FG_TARGET_AVX2, q3_k_rows_avx2, QK_K)
FG_GEMV_FROM_ROWS(gemv_q3_k_q8_k_avx2, FG_TARGET_AVX2, q3_k_rows_avx2, QK_K)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: q - 4 fits int8; each 16-byte vector is one sub-block, weighted by its scale ---- */
#define Q3_K_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_K *x = vx;                                                                           \
        float32x4_t acc[4];                                                                                 \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);                                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const block_q3_K *b[4];                                                                         \
            int8_t sc[4][16];                                                                               \
            int32x4_t isum[4];                                                                              \
            uint8x16_t hm0[4], hm1[4];                                                                      \
            for (int r = 0; r < R; r++) {                                                                   \
                b[r] = (const block_q3_K *)(w + r * stride) + i;                                            \
                fg_prefetch(b[r], stride);                                                                  \
                fg_prefetch((const char *)b[r] + 64, stride);                                               \
                fg_unpack_scales_q3k(b[r]->scales, sc[r]);                                                  \
                isum[r] = vdupq_n_s32(0);                                                                   \
                hm0[r] = vld1q_u8(b[r]->hmask), hm1[r] = vld1q_u8(b[r]->hmask + 16);                        \
            }                                                                                               \
            for (int h = 0; h < 2; h++) {                                                                   \
                uint8x16_t q0[4], q1[4];                                                                    \
                for (int r = 0; r < R; r++)                                                                 \
                    q0[r] = vld1q_u8(b[r]->qs + 32 * h), q1[r] = vld1q_u8(b[r]->qs + 32 * h + 16);          \
                for (int j = 0; j < 4; j++) {                                                               \
                    const int8_t *xq = x[i].qs + 128 * h + 32 * j;                                          \
                    const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);                              \
                    for (int r = 0; r < R; r++) {                                                           \
                        const uint8x16_t m3 = vdupq_n_u8(3), one = vdupq_n_u8(1);                           \
                        const uint8x16_t u0 = vorrq_u8(vandq_u8(q0[r], m3), vshlq_n_u8(vandq_u8(hm0[r], one), 2)); \
                        const uint8x16_t u1 = vorrq_u8(vandq_u8(q1[r], m3), vshlq_n_u8(vandq_u8(hm1[r], one), 2)); \
                        q0[r] = vshrq_n_u8(q0[r], 2), q1[r] = vshrq_n_u8(q1[r], 2);                         \
                        hm0[r] = vshrq_n_u8(hm0[r], 1), hm1[r] = vshrq_n_u8(hm1[r], 1);                     \
                        const int8x16_t four = vdupq_n_s8(4);                                               \
                        const int32x4_t z = vdupq_n_s32(0);                                                 \
                        const int s = 8 * h + 2 * j;                                                        \
                        isum[r] = vmlaq_n_s32(isum[r], DOT(z, vsubq_s8(vreinterpretq_s8_u8(u0), four), x0), sc[r][s]); \
                        isum[r] = vmlaq_n_s32(isum[r], DOT(z, vsubq_s8(vreinterpretq_s8_u8(u1), four), x1), sc[r][s + 1]); \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
            for (int r = 0; r < R; r++)                                                                     \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(isum[r]), fg_fp16_to_fp32(b[r]->d) * x[i].d);    \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]);                                              \
    }
Q3_K_ROWS_NEON(q3_k_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
Q3_K_ROWS_NEON(q3_k_rows_neondp, FG_TARGET_DOTPROD, vdotq_s32)
FG_DOT_FROM_ROWS(vec_dot_q3_k_q8_k_neon, FG_NO_TARGET, q3_k_rows_neon, QK_K)
FG_GEMV_FROM_ROWS(gemv_q3_k_q8_k_neon, FG_NO_TARGET, q3_k_rows_neon, QK_K)
FG_DOT_FROM_ROWS(vec_dot_q3_k_q8_k_neondp, FG_TARGET_DOTPROD, q3_k_rows_neondp, QK_K)
FG_GEMV_FROM_ROWS(gemv_q3_k_q8_k_neondp, FG_TARGET_DOTPROD, q3_k_rows_neondp, QK_K)
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q3_k_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q3_k_scalar, dequantize_row_q3_k_scalar, vec_dot_q3_k_q8_k_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q3_k_avx2, vec_dot_q3_k_q8_k_avx2, gemv_q3_k_q8_k_avx2},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q3_k_q8_k_neon, gemv_q3_k_q8_k_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q3_k_q8_k_neondp, gemv_q3_k_q8_k_neondp},
#endif
};
