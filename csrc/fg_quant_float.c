/* Float weights: F32, F16, BF16, each dotted against F32 activations. */
#include "fg_simd.h"

/* ---- scalar reference ---- */

static void quantize_row_f32_scalar(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
static void dequantize_row_f32_scalar(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

static float vec_dot_f32_f32_scalar(int64_t n, const void *vw, const void *vx) {
    const float *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += w[i] * x[i];
    return sum;
}

static void quantize_row_f16_scalar(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = fg_fp32_to_fp16(x[i]);
}

static void dequantize_row_f16_scalar(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = fg_fp16_to_fp32(x[i]);
}

static float vec_dot_f16_f32_scalar(int64_t n, const void *vw, const void *vx) {
    const uint16_t *w = vw;
    const float *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += fg_fp16_to_fp32(w[i]) * x[i];
    return sum;
}

static void quantize_row_bf16_scalar(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = fg_fp32_to_bf16(x[i]);
}

static void dequantize_row_bf16_scalar(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = fg_bf16_to_fp32(x[i]);
}

static float vec_dot_bf16_f32_scalar(int64_t n, const void *vw, const void *vx) {
    const uint16_t *w = vw;
    const float *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += fg_bf16_to_fp32(w[i]) * x[i];
    return sum;
}


/* Scalar tails of the SIMD loops below, one per weight format. */
static inline float load_f32(const void *w, int64_t j) { return ((const float *)w)[j]; }
static inline float load_f16(const void *w, int64_t j) { return fg_fp16_to_fp32(((const uint16_t *)w)[j]); }
static inline float load_bf16(const void *w, int64_t j) { return fg_bf16_to_fp32(((const uint16_t *)w)[j]); }

#if FG_HAVE_X86
/* ---- AVX2: 8 weights per step, converted to f32 by LOAD8(row, j) ---- */
#define LOAD8_F32(p, j) _mm256_loadu_ps((const float *)(p) + (j))
#define LOAD8_F16(p, j) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)(p) + (j))))
#define LOAD8_BF16(p, j) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)(p) + (j)))), 16))

#define FLOAT_ROWS_AVX2(NAME, LOAD8, LOAD1)                                                                 \
    FG_INLINE_AVX2 void NAME(const int R, int64_t n, const char *w, size_t stride, const void *vx, float *y) { \
        const float *x = vx;                                                                                \
        __m256 acc[4];                                                                                      \
        for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();                                           \
        int64_t j = 0;                                                                                      \
        for (; j + 8 <= n; j += 8) {                                                                        \
            const __m256 xv = _mm256_loadu_ps(x + j);                                                       \
            for (int r = 0; r < R; r++) acc[r] = _mm256_fmadd_ps(LOAD8(w + r * stride, j), xv, acc[r]);     \
        }                                                                                                   \
        for (int r = 0; r < R; r++) {                                                                       \
            float s = fg_hsum_256(acc[r]);                                                                  \
            for (int64_t k = j; k < n; k++) s += LOAD1(w + r * stride, k) * x[k];                           \
            y[r] = s;                                                                                       \
        }                                                                                                   \
    }
FLOAT_ROWS_AVX2(f32_rows_avx2, LOAD8_F32, load_f32)
FLOAT_ROWS_AVX2(f16_rows_avx2, LOAD8_F16, load_f16)
FLOAT_ROWS_AVX2(bf16_rows_avx2, LOAD8_BF16, load_bf16)
FG_DOT_FROM_ROWS(vec_dot_f32_f32_avx2, FG_TARGET_AVX2, f32_rows_avx2, 1)
FG_GEMV_FROM_ROWS(gemv_f32_f32_avx2, FG_TARGET_AVX2, f32_rows_avx2, 1)
FG_DOT_FROM_ROWS(vec_dot_f16_f32_avx2, FG_TARGET_AVX2, f16_rows_avx2, 1)
FG_GEMV_FROM_ROWS(gemv_f16_f32_avx2, FG_TARGET_AVX2, f16_rows_avx2, 1)
FG_DOT_FROM_ROWS(vec_dot_bf16_f32_avx2, FG_TARGET_AVX2, bf16_rows_avx2, 1)
FG_GEMV_FROM_ROWS(gemv_bf16_f32_avx2, FG_TARGET_AVX2, bf16_rows_avx2, 1)

/* Conversions are exact, so these match the scalar reference bit for bit. */
FG_TARGET_AVX2 static void dequantize_row_f16_avx2(const void *vx, float *y, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, LOAD8_F16(vx, j));
    for (; j < n; j++) y[j] = load_f16(vx, j);
}

FG_TARGET_AVX2 static void dequantize_row_bf16_avx2(const void *vx, float *y, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, LOAD8_BF16(vx, j));
    for (; j < n; j++) y[j] = load_bf16(vx, j);
}

/* ---- AVX-512: 16 weights per step, the tail as one masked step ---- */
#define LOAD16_F32(p, j, m) _mm512_maskz_loadu_ps((m), (const float *)(p) + (j))
#define LOAD16_F16(p, j, m) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((m), (const uint16_t *)(p) + (j)))
#define LOAD16_BF16(p, j, m) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16((m), (const uint16_t *)(p) + (j))), 16))

#define FLOAT_ROWS_AVX512(NAME, LOAD16)                                                                     \
    FG_INLINE_AVX512 void NAME(const int R, int64_t n, const char *w, size_t stride, const void *vx, float *y) { \
        const float *x = vx;                                                                                \
        __m512 acc[4];                                                                                      \
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();                                           \
        for (int64_t j = 0; j < n; j += 16) {                                                               \
            const __mmask16 m = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);                    \
            const __m512 xv = _mm512_maskz_loadu_ps(m, x + j);                                              \
            for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(LOAD16(w + r * stride, j, m), xv, acc[r]); \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = fg_hsum_512(acc[r]);                                             \
    }
FLOAT_ROWS_AVX512(f32_rows_avx512, LOAD16_F32)
FLOAT_ROWS_AVX512(f16_rows_avx512, LOAD16_F16)
FLOAT_ROWS_AVX512(bf16_rows_avx512, LOAD16_BF16)
FG_DOT_FROM_ROWS(vec_dot_f32_f32_avx512, FG_TARGET_AVX512, f32_rows_avx512, 1)
FG_GEMV_FROM_ROWS(gemv_f32_f32_avx512, FG_TARGET_AVX512, f32_rows_avx512, 1)
FG_DOT_FROM_ROWS(vec_dot_f16_f32_avx512, FG_TARGET_AVX512, f16_rows_avx512, 1)
FG_GEMV_FROM_ROWS(gemv_f16_f32_avx512, FG_TARGET_AVX512, f16_rows_avx512, 1)
FG_DOT_FROM_ROWS(vec_dot_bf16_f32_avx512, FG_TARGET_AVX512, bf16_rows_avx512, 1)
FG_GEMV_FROM_ROWS(gemv_bf16_f32_avx512, FG_TARGET_AVX512, bf16_rows_avx512, 1)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: 4 weights per step ---- */
#define LOAD4_F32(p, j) vld1q_f32((const float *)(p) + (j))
#define LOAD4_F16(p, j) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(p) + (j))))
#define LOAD4_BF16(p, j) vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)(p) + (j)), 16))

#define FLOAT_ROWS_NEON(NAME, LOAD4, LOAD1)                                                                 \
    static inline void NAME(const int R, int64_t n, const char *w, size_t stride, const void *vx, float *y) { \
        const float *x = vx;                                                                                \
        float32x4_t acc[4];                                                                                 \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);                                             \
        int64_t j = 0;                                                                                      \
        for (; j + 4 <= n; j += 4) {                                                                        \
            const float32x4_t xv = vld1q_f32(x + j);                                                        \
            for (int r = 0; r < R; r++) acc[r] = vfmaq_f32(acc[r], LOAD4(w + r * stride, j), xv);           \
        }                                                                                                   \
        for (int r = 0; r < R; r++) {                                                                       \
            float s = vaddvq_f32(acc[r]);                                                                   \
            for (int64_t k = j; k < n; k++) s += LOAD1(w + r * stride, k) * x[k];                           \
            y[r] = s;                                                                                       \
        }                                                                                                   \
    }
#define FG_NO_TARGET
FLOAT_ROWS_NEON(f32_rows_neon, LOAD4_F32, load_f32)
FLOAT_ROWS_NEON(f16_rows_neon, LOAD4_F16, load_f16)
FLOAT_ROWS_NEON(bf16_rows_neon, LOAD4_BF16, load_bf16)
FG_DOT_FROM_ROWS(vec_dot_f32_f32_neon, FG_NO_TARGET, f32_rows_neon, 1)
FG_GEMV_FROM_ROWS(gemv_f32_f32_neon, FG_NO_TARGET, f32_rows_neon, 1)
FG_DOT_FROM_ROWS(vec_dot_f16_f32_neon, FG_NO_TARGET, f16_rows_neon, 1)
FG_GEMV_FROM_ROWS(gemv_f16_f32_neon, FG_NO_TARGET, f16_rows_neon, 1)
FG_DOT_FROM_ROWS(vec_dot_bf16_f32_neon, FG_NO_TARGET, bf16_rows_neon, 1)
FG_GEMV_FROM_ROWS(gemv_bf16_f32_neon, FG_NO_TARGET, bf16_rows_neon, 1)
#endif /* FG_HAVE_NEON */

#if FG_HAVE_X86
#define X86_ROWS(t, a) [FG_ISA_AVX2] = {NULL, a, vec_dot_##t##_f32_avx2, gemv_##t##_f32_avx2}, \
                       [FG_ISA_AVX512] = {NULL, a, vec_dot_##t##_f32_avx512, gemv_##t##_f32_avx512},
#else
#define X86_ROWS(t, a)
#endif
#if FG_HAVE_NEON
#define NEON_ROW(t) [FG_ISA_NEON] = {NULL, NULL, vec_dot_##t##_f32_neon, gemv_##t##_f32_neon},
#else
#define NEON_ROW(t)
#endif

const fg_type_kernels fg_f32_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_f32_scalar, dequantize_row_f32_scalar, vec_dot_f32_f32_scalar, NULL},
    X86_ROWS(f32, NULL) NEON_ROW(f32)
};
const fg_type_kernels fg_f16_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_f16_scalar, dequantize_row_f16_scalar, vec_dot_f16_f32_scalar, NULL},
    X86_ROWS(f16, dequantize_row_f16_avx2) NEON_ROW(f16)
};
const fg_type_kernels fg_bf16_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_bf16_scalar, dequantize_row_bf16_scalar, vec_dot_bf16_f32_scalar, NULL},
    X86_ROWS(bf16, dequantize_row_bf16_avx2) NEON_ROW(bf16)
};
/* No extension-specific float kernels. */
const fg_type_kernels fg_f32_kernels_ext[FG_ISA_COUNT], fg_f16_kernels_ext[FG_ISA_COUNT],
    fg_bf16_kernels_ext[FG_ISA_COUNT];
