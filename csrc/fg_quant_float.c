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

#if FG_HAVE_X86 || FG_HAVE_NEON
/* Scalar tails of the SIMD loops below, one per weight format. */
static inline float load_f32(const void *w, int64_t j) { return ((const float *)w)[j]; }
static inline float load_f16(const void *w, int64_t j) { return fg_fp16_to_fp32(((const uint16_t *)w)[j]); }
static inline float load_bf16(const void *w, int64_t j) { return fg_bf16_to_fp32(((const uint16_t *)w)[j]); }
#endif

#if FG_HAVE_X86
/* ---- AVX2: 8 weights per step, converted to f32 by LOAD8(row, j) ---- */
#define LOAD8_F32(p, j) _mm256_loadu_ps((const float *)(p) + (j))
#define LOAD8_F16(p, j) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)(p) + (j))))
#define LOAD8_BF16(p, j) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)(p) + (j)))), 16))

/* Tiles of R <= 4 weight rows x M <= MT activation rows (R, M constants after inlining): each (r, a) pair has its
 * own accumulator and takes the same float ops in the same order whatever R and M, so the gemm (tiles) equals the
 * gemv (M = 1) and vec_dot (R = M = 1) bit for bit; a tile loads each weight vector once for its M activations,
 * where a gemv per activation row would load it M times. */
#define FLOAT_TILE_AVX2(NAME, TYPE, LOAD8, LOAD1)                                                                 \
    FG_INLINE_AVX2 void NAME(const int R, const int M, int64_t n, const char *w, size_t stride, const void *vx,  \
                             size_t xs, float *y, int64_t ldy) {                                                \
        __m256 acc[4][4]; /* [R][M], M <= MT (the dead branches of FG_TILE_M stay in bounds) */             \
        for (int r = 0; r < R; r++)                                                                         \
            for (int a = 0; a < M; a++) acc[r][a] = _mm256_setzero_ps();                                    \
        int64_t j = 0;                                                                                      \
        for (; j + 8 <= n; j += 8) {                                                                        \
            __m256 xv[4];                                                                                   \
            for (int a = 0; a < M; a++) xv[a] = _mm256_loadu_ps((const float *)((const char *)vx + a * xs) + j); \
            for (int r = 0; r < R; r++) {                                                                   \
                fg_prefetch(w + r * stride + j * (int64_t)sizeof(*(TYPE *)0), stride);                      \
                const __m256 wv = LOAD8(w + r * stride, j);                                                 \
                for (int a = 0; a < M; a++) acc[r][a] = _mm256_fmadd_ps(wv, xv[a], acc[r][a]);             \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++)                                                                         \
            for (int a = 0; a < M; a++) {                                                                   \
                const float *x = (const float *)((const char *)vx + a * xs);                                \
                float s = fg_hsum_256(acc[r][a]);                                                           \
                for (int64_t k = j; k < n; k++) s += LOAD1(w + r * stride, k) * x[k];                       \
                y[a * ldy + r] = s;                                                                         \
            }                                                                                               \
    }
#define FLOAT_MT_AVX2 2 /* 8 accumulators + 2 activations + 1 weight of the 16 ymm registers */
#define FLOAT_KERNELS_AVX2(T, TYPE, LOAD8, LOAD1)                                                                 \
    FLOAT_TILE_AVX2(T##_tile_avx2, TYPE, LOAD8, LOAD1)                                                      \
    FG_INLINE_AVX2 void T##_rows_avx2(const int R, int64_t n, const char *w, size_t stride, const void *x, float *y) { \
        T##_tile_avx2(R, 1, n, w, stride, x, 0, y, 0);                                                      \
    }                                                                                                       \
    FG_DOT_FROM_ROWS(vec_dot_##T##_f32_avx2, FG_TARGET_AVX2, T##_rows_avx2, 1)                              \
    FG_GEMV_FROM_ROWS(gemv_##T##_f32_avx2, FG_TARGET_AVX2, T##_rows_avx2, 1)                                \
    FG_GEMM_FROM_TILE(gemm_##T##_f32_avx2, FG_TARGET_AVX2, T##_tile_avx2, 1, 4, FLOAT_MT_AVX2)
FLOAT_KERNELS_AVX2(f32, float, LOAD8_F32, load_f32)
FLOAT_KERNELS_AVX2(f16, uint16_t, LOAD8_F16, load_f16)
FLOAT_KERNELS_AVX2(bf16, uint16_t, LOAD8_BF16, load_bf16)

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

#define FLOAT_TILE_AVX512(NAME, TYPE, LOAD16)                                                                    \
    FG_INLINE_AVX512 void NAME(const int R, const int M, int64_t n, const char *w, size_t stride, const void *vx, \
                               size_t xs, float *y, int64_t ldy) {                                              \
        __m512 acc[4][4];                                                                                   \
        for (int r = 0; r < R; r++)                                                                         \
            for (int a = 0; a < M; a++) acc[r][a] = _mm512_setzero_ps();                                    \
        for (int64_t j = 0; j < n; j += 16) {                                                               \
            const __mmask16 m = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);                    \
            __m512 xv[4];                                                                                   \
            for (int a = 0; a < M; a++) xv[a] = _mm512_maskz_loadu_ps(m, (const float *)((const char *)vx + a * xs) + j); \
            for (int r = 0; r < R; r++) {                                                                   \
                fg_prefetch(w + r * stride + j * (int64_t)sizeof(*(TYPE *)0), stride);                      \
                const __m512 wv = LOAD16(w + r * stride, j, m);                                             \
                for (int a = 0; a < M; a++) acc[r][a] = _mm512_fmadd_ps(wv, xv[a], acc[r][a]);              \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++)                                                                         \
            for (int a = 0; a < M; a++) y[a * ldy + r] = fg_hsum_512(acc[r][a]);                            \
    }
#define FLOAT_KERNELS_AVX512(T, TYPE, LOAD16)                                                                     \
    FLOAT_TILE_AVX512(T##_tile_avx512, TYPE, LOAD16)                                                        \
    FG_INLINE_AVX512 void T##_rows_avx512(const int R, int64_t n, const char *w, size_t stride, const void *x, float *y) { \
        T##_tile_avx512(R, 1, n, w, stride, x, 0, y, 0);                                                    \
    }                                                                                                       \
    FG_DOT_FROM_ROWS(vec_dot_##T##_f32_avx512, FG_TARGET_AVX512, T##_rows_avx512, 1)                        \
    FG_GEMV_FROM_ROWS(gemv_##T##_f32_avx512, FG_TARGET_AVX512, T##_rows_avx512, 1)                          \
    FG_GEMM_FROM_TILE(gemm_##T##_f32_avx512, FG_TARGET_AVX512, T##_tile_avx512, 1, 4, 4)
FLOAT_KERNELS_AVX512(f32, float, LOAD16_F32)   /* 16 accumulators + 4 activations + 1 weight of 32 zmm */
FLOAT_KERNELS_AVX512(f16, uint16_t, LOAD16_F16)
FLOAT_KERNELS_AVX512(bf16, uint16_t, LOAD16_BF16)

/* F16 gemm with a converted panel: f16_tile_avx512 converts each weight vector (vcvtph2ps, 2 uops on the FMA ports)
 * once per 4 activations, a third of the tile's FMA-port work. Here a panel of weight rows is converted to F32 once
 * (exact) into a 64-byte-aligned stack buffer, zero-padded to a multiple of 16 (what the masked load gives), and
 * every activation runs over it with the F32 tile: each (row, activation) pair takes the same float ops in the same
 * order as f16_tile_avx512, so this gemm equals the F16 gemv and vec_dot bit for bit. Few activations (m < 4) or
 * rows too long for the buffer: the F16 tiles. */
#define F16_PANEL_FLOATS 16384   /* 64 KB: up to 40 rows of 384, 8 of 1536, 4 of 4096 */
#define F16_PANEL_X_BYTES 1048576 /* the activations run over a panel at a time: 682 rows of 384, 170 of 1536 */
FG_INLINE_AVX512 void f32p_tile_avx512(const int R, const int M, int64_t n, const char *w, size_t stride,
                                       const void *vx, size_t xs, float *y, int64_t ldy) {
    __m512 acc[4][4]; /* [R][M] */
    for (int r = 0; r < R; r++)
        for (int a = 0; a < M; a++) acc[r][a] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 xv[4];
        for (int a = 0; a < M; a++) xv[a] = _mm512_maskz_loadu_ps(m, (const float *)((const char *)vx + a * xs) + j);
        for (int r = 0; r < R; r++) {
            const __m512 wv = _mm512_load_ps((const float *)(w + r * stride) + j); /* zero past n */
            for (int a = 0; a < M; a++) acc[r][a] = _mm512_fmadd_ps(wv, xv[a], acc[r][a]);
        }
    }
    if (R == 4 && M == 4) { /* the 16 sums at once: acc[r][a] (v[4 r + a]) to lane 4 a + r, one store per activation */
        const __m512 v[16] = {acc[0][0], acc[0][1], acc[0][2], acc[0][3], acc[1][0], acc[1][1], acc[1][2], acc[1][3],
                              acc[2][0], acc[2][1], acc[2][2], acc[2][3], acc[3][0], acc[3][1], acc[3][2], acc[3][3]};
        const __m512 sums = fg_hsum16_512(v);
        _mm_storeu_ps(y, _mm512_castps512_ps128(sums));
        _mm_storeu_ps(y + ldy, _mm512_extractf32x4_ps(sums, 1));
        _mm_storeu_ps(y + 2 * ldy, _mm512_extractf32x4_ps(sums, 2));
        _mm_storeu_ps(y + 3 * ldy, _mm512_extractf32x4_ps(sums, 3));
        return;
    }
    for (int r = 0; r < R; r++)
        for (int a = 0; a < M; a++) y[a * ldy + r] = fg_hsum_512(acc[r][a]);
}
FG_GEMM_FROM_TILE(gemm_f32p_avx512, FG_TARGET_AVX512, f32p_tile_avx512, 1, 4, 4)

FG_TARGET_AVX512 static void gemm_f16_panel_avx512(int64_t n, const void *w, size_t stride, const void *xq, size_t xs,
                                                   int64_t m, float *y, int64_t ldy, int64_t nrows) {
    /* Under 128 activations half the buffer: a 32 KB panel stays in L1 beside them (single thread, rows of 384 and
     * 1536: +10-20% at 14-64 activations); past that the activations, streamed once per panel, weigh more and the
     * bigger panel wins (896 activations: +9%, 256: even). */
    const int64_t n16 = (n + 15) & ~(int64_t)15;
    const int64_t floats = m < 128 && F16_PANEL_FLOATS / 2 / n16 >= 4 ? F16_PANEL_FLOATS / 2 : F16_PANEL_FLOATS;
    const int64_t per = (floats / n16) & ~(int64_t)3;
    if (m < 4 || per < 4) {
        gemm_f16_f32_avx512(n, w, stride, xq, xs, m, y, ldy, nrows);
        return;
    }
    /* Activations in chunks of about F16_PANEL_X_BYTES, each chunk over every panel: the activations run over each
     * panel stay in L2 (896 rows of 1536 floats, 5.5 MB, streamed from L3 once per 8-row panel ran the FFN down
     * projection 1.2x slower than the F16 tiles). */
    const int64_t mc = (F16_PANEL_X_BYTES / (n16 * (int64_t)sizeof(float)) + 3) & ~(int64_t)3;
    float buf[F16_PANEL_FLOATS + 16]; /* (rows of the panel, n16), from the first 64-byte boundary */
    float *panel = (float *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    for (int64_t a0 = 0; a0 < m; a0 += mc) {
        const int64_t ma = m - a0 < mc ? m - a0 : mc;
        for (int64_t r0 = 0; r0 < nrows; r0 += per) {
            const int64_t pr = nrows - r0 < per ? nrows - r0 : per;
            for (int64_t r = 0; r < pr; r++) {
                const char *wr = (const char *)w + (size_t)(r0 + r) * stride;
                for (int64_t j = 0; j < n16; j += 16) {
                    const __mmask16 k = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
                    _mm512_store_ps(panel + r * n16 + j, LOAD16_F16(wr, j, k));
                }
            }
            gemm_f32p_avx512(n, panel, (size_t)n16 * sizeof(float), (const char *)xq + (size_t)a0 * xs, xs, ma,
                             y + a0 * ldy + r0, ldy, pr);
        }
    }
}
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: 4 weights per step ---- */
#define LOAD4_F32(p, j) vld1q_f32((const float *)(p) + (j))
#define LOAD4_F16(p, j) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(p) + (j))))
#define LOAD4_BF16(p, j) vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)(p) + (j)), 16))

#define FLOAT_TILE_NEON(NAME, LOAD4, LOAD1)                                                                 \
    static inline void NAME(const int R, const int M, int64_t n, const char *w, size_t stride, const void *vx, \
                            size_t xs, float *y, int64_t ldy) {                                             \
        float32x4_t acc[4][4];                                                                              \
        for (int r = 0; r < R; r++)                                                                         \
            for (int a = 0; a < M; a++) acc[r][a] = vdupq_n_f32(0.0f);                                      \
        int64_t j = 0;                                                                                      \
        for (; j + 4 <= n; j += 4) {                                                                        \
            float32x4_t xv[4];                                                                              \
            for (int a = 0; a < M; a++) xv[a] = vld1q_f32((const float *)((const char *)vx + a * xs) + j);  \
            for (int r = 0; r < R; r++) {                                                                   \
                const float32x4_t wv = LOAD4(w + r * stride, j);                                            \
                for (int a = 0; a < M; a++) acc[r][a] = vfmaq_f32(acc[r][a], wv, xv[a]);                    \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++)                                                                         \
            for (int a = 0; a < M; a++) {                                                                   \
                const float *x = (const float *)((const char *)vx + a * xs);                                \
                float s = vaddvq_f32(acc[r][a]);                                                            \
                for (int64_t k = j; k < n; k++) s += LOAD1(w + r * stride, k) * x[k];                       \
                y[a * ldy + r] = s;                                                                         \
            }                                                                                               \
    }
#define FLOAT_KERNELS_NEON(T, LOAD4, LOAD1)                                                                       \
    FLOAT_TILE_NEON(T##_tile_neon, LOAD4, LOAD1)                                                            \
    static inline void T##_rows_neon(const int R, int64_t n, const char *w, size_t stride, const void *x, float *y) { \
        T##_tile_neon(R, 1, n, w, stride, x, 0, y, 0);                                                      \
    }                                                                                                       \
    FG_DOT_FROM_ROWS(vec_dot_##T##_f32_neon, FG_NO_TARGET, T##_rows_neon, 1)                                \
    FG_GEMV_FROM_ROWS(gemv_##T##_f32_neon, FG_NO_TARGET, T##_rows_neon, 1)                                  \
    FG_GEMM_FROM_TILE(gemm_##T##_f32_neon, FG_NO_TARGET, T##_tile_neon, 1, 4, 4)
FLOAT_KERNELS_NEON(f32, LOAD4_F32, load_f32)   /* 16 accumulators + 4 activations + 1 weight of 32 q registers */
FLOAT_KERNELS_NEON(f16, LOAD4_F16, load_f16)
FLOAT_KERNELS_NEON(bf16, LOAD4_BF16, load_bf16)
#endif /* FG_HAVE_NEON */

#if FG_HAVE_X86
#define X86_ROWS_G(t, a, g)                                                                              \
    [FG_ISA_AVX2] = {NULL, a, vec_dot_##t##_f32_avx2, gemv_##t##_f32_avx2, gemm_##t##_f32_avx2},                    \
    [FG_ISA_AVX512] = {NULL, a, vec_dot_##t##_f32_avx512, gemv_##t##_f32_avx512, g},
#define X86_ROWS(t, a) X86_ROWS_G(t, a, gemm_##t##_f32_avx512)
#else
#define X86_ROWS_G(t, a, g)
#define X86_ROWS(t, a)
#endif
#if FG_HAVE_NEON
#define NEON_ROW(t) [FG_ISA_NEON] = {NULL, NULL, vec_dot_##t##_f32_neon, gemv_##t##_f32_neon, gemm_##t##_f32_neon},
#else
#define NEON_ROW(t)
#endif

const fg_type_kernels fg_f32_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_f32_scalar, dequantize_row_f32_scalar, vec_dot_f32_f32_scalar, NULL},
    X86_ROWS(f32, NULL) NEON_ROW(f32)
};
const fg_type_kernels fg_f16_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_f16_scalar, dequantize_row_f16_scalar, vec_dot_f16_f32_scalar, NULL},
    X86_ROWS_G(f16, dequantize_row_f16_avx2, gemm_f16_panel_avx512) NEON_ROW(f16)
};
const fg_type_kernels fg_bf16_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_bf16_scalar, dequantize_row_bf16_scalar, vec_dot_bf16_f32_scalar, NULL},
    X86_ROWS(bf16, dequantize_row_bf16_avx2) NEON_ROW(bf16)
};
