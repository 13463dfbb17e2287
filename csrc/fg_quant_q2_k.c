/* Q2_K weights: super-blocks of 256 = 16 sub-blocks of 16, x = d * sc_j * q - dmin * m_j, q in 0..3, scales[j]
 * = sc_j | m_j << 4 (4 bits each); fp16 d and dmin LAST. Element 128h + 32j + l (l < 32): bits 2j..2j+1 of
 * qs[32h + l]. Dot against Q8_K: sum_s d dx sc_s (q . x)_s - dmin dx sum_s m_s bsums_s. */
#include "fg_simd.h"
#include "fg_kquant_ref.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_q2_K_ref. */
static void quantize_row_q2_k_scalar(const float *x, void *vy, int64_t n) {
    block_q2_K *y = vy;
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = fg_make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = (uint8_t)fg_nearest_int(iscale * scales[j]);
            y[i].d = fg_fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = 0;
            y[i].d = fg_fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] |= (uint8_t)(fg_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = fg_fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = fg_fp32_to_fp16(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fg_fp16_to_fp32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = fg_fp16_to_fp32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (uint8_t)fg_clampi(fg_nearest_int((x[16 * j + ii] + dm) / d), 0, 3);
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

/* q (0..3) of the 256 elements of a block, in element order. */
static inline void q2_k_unpack(const block_q2_K *b, uint8_t q[QK_K]) {
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) q[128 * h + 32 * j + l] = (b->qs[32 * h + l] >> (2 * j)) & 3;
}

static void dequantize_row_q2_k_scalar(const void *vx, float *y, int64_t n) {
    const block_q2_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fg_fp16_to_fp32(x[i].d), min = fg_fp16_to_fp32(x[i].dmin);
        uint8_t q[QK_K];
        q2_k_unpack(&x[i], q);
        for (int s = 0; s < QK_K / 16; s++) {
            const float dl = d * (x[i].scales[s] & 0xF), ml = min * (x[i].scales[s] >> 4);
            for (int k = 0; k < 16; k++) y[16 * s + k] = dl * q[16 * s + k] - ml;
        }
    }
}

static float vec_dot_q2_k_q8_k_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q2_K *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t q[QK_K];
        q2_k_unpack(&w[i], q);
        int sumi = 0, summ = 0;
        for (int s = 0; s < QK_K / 16; s++) {
            int p = 0;
            for (int k = 0; k < 16; k++) p += q[16 * s + k] * x[i].qs[16 * s + k];
            sumi += (w[i].scales[s] & 0xF) * p;
            summ += (w[i].scales[s] >> 4) * x[i].bsums[s];
        }
        sum += fg_fp16_to_fp32(w[i].d) * x[i].d * (float)sumi - fg_fp16_to_fp32(w[i].dmin) * x[i].d * (float)summ;
    }
    return sum;
}

#if FG_HAVE_X86
/* Bit-exact with the scalar reference: (d * sc) * q - dmin * m. */
FG_TARGET_AVX2 static void dequantize_row_q2_k_avx2(const void *vx, float *y, int64_t n) {
    const block_q2_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fg_f16(x[i].d), min = fg_f16(x[i].dmin);
        for (int h = 0; h < 2; h++) {
            __m256i q2 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int j = 0; j < 4; j++, q2 = _mm256_srli_epi16(q2, 2)) {
                const __m256i u = _mm256_and_si256(q2, _mm256_set1_epi8(3));
                for (int v = 0; v < 2; v++) {
                    const uint8_t sc = x[i].scales[8 * h + 2 * j + v];
                    const __m128i q = v ? _mm256_extracti128_si256(u, 1) : _mm256_castsi256_si128(u);
                    fg_store_i8x16_ps(y + 128 * h + 32 * j + 16 * v, q, _mm256_set1_ps(d * (sc & 0xF)),
                                      _mm256_set1_ps(min * (sc >> 4)));
                }
            }
        }
    }
}

/* ---- AVX2: q (0..3) . x by maddubs, weighted per 16-element sub-block by its scale in the widening madd;
 * the mins term is bsums . mins. ---- */
FG_INLINE_AVX2 void q2_k_rows_avx2(const int R, int64_t nb, const char *w, size_t stride, const void *vx, float *y) {
    const block_q8_K *x = vx;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[4], accm[4];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps(), accm[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q2_K *b[4];
        __m256i isum[4];
        for (int r = 0; r < R; r++) {
            b[r] = (const block_q2_K *)(w + r * stride) + i;
            fg_prefetch(b[r], stride);
            fg_prefetch((const char *)b[r] + 64, stride);
            isum[r] = _mm256_setzero_si256();
        }
        for (int h = 0; h < 2; h++) {
            __m256i q2[4];
            for (int r = 0; r < R; r++) q2[r] = _mm256_loadu_si256((const __m256i *)(b[r]->qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i xs = _mm256_loadu_si256((const __m256i *)(x[i].qs + 128 * h + 32 * j));
                for (int r = 0; r < R; r++) {
                    const __m256i u = _mm256_and_si256(q2[r], m3);
                    q2[r] = _mm256_srli_epi16(q2[r], 2);
                    const int s = 8 * h + 2 * j;
                    const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(b[r]->scales[s + 1] & 0xF),
                                                        _mm_set1_epi16(b[r]->scales[s] & 0xF));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xs), sv));
                }
            }
        }
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)x[i].bsums);
        for (int r = 0; r < R; r++) {
            const __m128i sc = _mm_loadu_si128((const __m128i *)b[r]->scales);
            const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0f)));
            const __m256 pm = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, mins));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(fg_f16(b[r]->d) * x[i].d), acc[r]);
            accm[r] = _mm256_fmadd_ps(pm, _mm256_set1_ps(fg_f16(b[r]->dmin) * x[i].d), accm[r]);
        }
    }
    for (int r = 0; r < R; r++) y[r] = fg_hsum_256(acc[r]) - fg_hsum_256(accm[r]);
}
FG_DOT_FROM_ROWS(vec_dot_q2_k_q8_k_avx2, FG_TARGET_AVX2, q2_k_rows_avx2, QK_K)
FG_GEMV_FROM_ROWS(gemv_q2_k_q8_k_avx2, FG_TARGET_AVX2, q2_k_rows_avx2, QK_K)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: q (0..3) fits int8; each 16-byte vector is one sub-block, weighted by its scale ---- */
#define Q2_K_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_K *x = vx;                                                                           \
        float32x4_t acc[4];                                                                                 \
        float accm[4];                                                                                      \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f), accm[r] = 0.0f;                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const int16x8_t bs0 = vld1q_s16(x[i].bsums), bs1 = vld1q_s16(x[i].bsums + 8);                   \
            const block_q2_K *b[4];                                                                         \
            int32x4_t isum[4];                                                                              \
            for (int r = 0; r < R; r++) {                                                                   \
                b[r] = (const block_q2_K *)(w + r * stride) + i;                                            \
                fg_prefetch(b[r], stride);                                                                  \
                fg_prefetch((const char *)b[r] + 64, stride);                                               \
                isum[r] = vdupq_n_s32(0);                                                                   \
            }                                                                                               \
            for (int h = 0; h < 2; h++) {                                                                   \
                uint8x16_t q0[4], q1[4];                                                                    \
                for (int r = 0; r < R; r++)                                                                 \
                    q0[r] = vld1q_u8(b[r]->qs + 32 * h), q1[r] = vld1q_u8(b[r]->qs + 32 * h + 16);          \
                for (int j = 0; j < 4; j++) {                                                               \
                    const int8_t *xq = x[i].qs + 128 * h + 32 * j;                                          \
                    const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);                              \
                    for (int r = 0; r < R; r++) {                                                           \
                        const uint8x16_t m3 = vdupq_n_u8(3);                                                \
                        const int32x4_t z = vdupq_n_s32(0);                                                 \
                        const int s = 8 * h + 2 * j;                                                        \
                        const int32x4_t p0 = DOT(z, vreinterpretq_s8_u8(vandq_u8(q0[r], m3)), x0);          \
                        const int32x4_t p1 = DOT(z, vreinterpretq_s8_u8(vandq_u8(q1[r], m3)), x1);          \
                        q0[r] = vshrq_n_u8(q0[r], 2), q1[r] = vshrq_n_u8(q1[r], 2);                         \
                        isum[r] = vmlaq_n_s32(isum[r], p0, b[r]->scales[s] & 0xF);                          \
                        isum[r] = vmlaq_n_s32(isum[r], p1, b[r]->scales[s + 1] & 0xF);                      \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
            for (int r = 0; r < R; r++) {                                                                   \
                const uint8x16_t m = vshrq_n_u8(vld1q_u8(b[r]->scales), 4);                                 \
                const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m)));                       \
                const int16x8_t m1 = vreinterpretq_s16_u16(vmovl_high_u8(m));                               \
                int32x4_t pm = vmull_s16(vget_low_s16(bs0), vget_low_s16(m0));                              \
                pm = vmlal_high_s16(pm, bs0, m0);                                                           \
                pm = vmlal_s16(pm, vget_low_s16(bs1), vget_low_s16(m1));                                    \
                pm = vmlal_high_s16(pm, bs1, m1);                                                           \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(isum[r]), fg_fp16_to_fp32(b[r]->d) * x[i].d);    \
                accm[r] += fg_fp16_to_fp32(b[r]->dmin) * x[i].d * (float)vaddvq_s32(pm);                    \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]) - accm[r];                                    \
    }
Q2_K_ROWS_NEON(q2_k_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
Q2_K_ROWS_NEON(q2_k_rows_neondp, FG_TARGET_DOTPROD, vdotq_s32)
FG_DOT_FROM_ROWS(vec_dot_q2_k_q8_k_neon, FG_NO_TARGET, q2_k_rows_neon, QK_K)
FG_GEMV_FROM_ROWS(gemv_q2_k_q8_k_neon, FG_NO_TARGET, q2_k_rows_neon, QK_K)
FG_DOT_FROM_ROWS(vec_dot_q2_k_q8_k_neondp, FG_TARGET_DOTPROD, q2_k_rows_neondp, QK_K)
FG_GEMV_FROM_ROWS(gemv_q2_k_q8_k_neondp, FG_TARGET_DOTPROD, q2_k_rows_neondp, QK_K)
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q2_k_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q2_k_scalar, dequantize_row_q2_k_scalar, vec_dot_q2_k_q8_k_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q2_k_avx2, vec_dot_q2_k_q8_k_avx2, gemv_q2_k_q8_k_avx2},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q2_k_q8_k_neon, gemv_q2_k_q8_k_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q2_k_q8_k_neondp, gemv_q2_k_q8_k_neondp},
#endif
};
