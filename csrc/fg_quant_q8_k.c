/* Q8_K: the activation type of the K-quant weights. Block of 256: float d, int8 qs[256], int16 bsums[16]
 * (sum of qs per 16). d = max / -127 where max is the first element of largest magnitude (sign kept), so
 * qs = round_half_even(-127 x / max) clamped to 127: byte-identical to ggml's quantize_row_q8_K_ref, except that
 * an all-zero block also gets zero bsums (ggml leaves them unwritten; they multiply zero anyway), and a block with
 * a NaN or an inf gets d = NaN and zero quants (fg_absmax: every dot with it is NaN; ggml's would be garbage). */
#include "fg_simd.h"
#include "fg_kquant_ref.h"

/* ---- scalar reference ---- */

static void quantize_row_q8_k_scalar(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0, amax = 0, m = 0;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) amax = ax, max = x[j];
            m = fg_absmax(m, x[j]);
        }
        if (!FG_FINITE(m)) {
            memset(&y[i], 0, sizeof(block_q8_K));
            y[i].d = NAN;
            continue;
        }
        if (!amax) {
            memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = fg_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += y[i].qs[16 * g + k];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

static void dequantize_row_q8_k_scalar(const void *vx, float *y, int64_t n) {
    const block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++) y[i * QK_K + j] = x[i].d * x[i].qs[j];
}

#if FG_HAVE_X86
/* ---- AVX2: same d and the same rounding (round-half-even of the same float product) ---- */

FG_TARGET_AVX2 static void quantize_row_q8_k_avx2(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256i amax8 = _mm256_setzero_si256();
        for (int j = 0; j < QK_K; j += 8)
            amax8 = _mm256_max_epi32(amax8, _mm256_castps_si256(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j))));
        const float amax = fg_hmax_abs_256i(amax8);
        if (!FG_FINITE(amax)) {
            memset(&y[i], 0, sizeof(block_q8_K));
            y[i].d = NAN;
            continue;
        }
        if (!amax) {
            memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        /* the first element reaching amax gives the sign */
        const __m256 am = _mm256_set1_ps(amax);
        int first = 0;
        for (int j = 0; j < QK_K; j += 8) {
            const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), am, _CMP_EQ_OQ));
            if (mask) { first = j + __builtin_ctz((unsigned)mask); break; }
        }
        const float iscale = -127.f / x[first];
        const __m256 is = _mm256_set1_ps(iscale), lim = _mm256_set1_ps(127.0f);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), is),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[k] = _mm256_cvtps_epi32(_mm256_min_ps(v, lim));
            }
            /* (32 x int32) -> 32 x int8 in element order; 16-element sums from the int16 stage */
            const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
            __m256i p = _mm256_packs_epi16(p01, p23);
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), p);
            const int s0 = fg_hsum_256i(_mm256_add_epi32(q[0], q[1])), s1 = fg_hsum_256i(_mm256_add_epi32(q[2], q[3]));
            y[i].bsums[j / 16] = (int16_t)s0;
            y[i].bsums[j / 16 + 1] = (int16_t)s1;
        }
        y[i].d = 1 / iscale;
    }
}

FG_TARGET_AVX2 static void dequantize_row_q8_k_avx2(const void *vx, float *y, int64_t n) {
    const block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256 d = _mm256_set1_ps(x[i].d);
        for (int j = 0; j < QK_K; j += 8) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + j)));
            _mm256_storeu_ps(y + i * QK_K + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
        }
    }
}
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: same d, and vcvtnq rounds half to even like fg_nearest_int ---- */
static void quantize_row_q8_k_neon(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float32x4_t amax4 = vdupq_n_f32(0.0f);
        for (int j = 0; j < QK_K; j += 4) amax4 = vmaxq_f32(amax4, vabsq_f32(vld1q_f32(x + j)));
        const float amax = vmaxvq_f32(amax4); /* FMAX and FMAXV keep NaN, as fg_absmax does */
        if (!FG_FINITE(amax)) {
            memset(&y[i], 0, sizeof(block_q8_K));
            y[i].d = NAN;
            continue;
        }
        if (!amax) {
            memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        int first = 0; /* the first element reaching amax gives the sign */
        while (fabsf(x[first]) != amax) first++;
        const float iscale = -127.f / x[first];
        for (int j = 0; j < QK_K; j += 16) {
            int32x4_t q[4];
            for (int k = 0; k < 4; k++) {
                q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4 * k), iscale)), vdupq_n_s32(127));
            }
            const int16x8_t a = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
            const int16x8_t b = vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]));
            vst1q_s8(y[i].qs + j, vcombine_s8(vmovn_s16(a), vmovn_s16(b)));
            y[i].bsums[j / 16] = (int16_t)(vaddvq_s16(a) + vaddvq_s16(b));
        }
        y[i].d = 1 / iscale;
    }
}
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q8_k_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q8_k_scalar, dequantize_row_q8_k_scalar, NULL, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {quantize_row_q8_k_avx2, dequantize_row_q8_k_avx2, NULL, NULL},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {quantize_row_q8_k_neon, NULL, NULL, NULL},
#endif
};
