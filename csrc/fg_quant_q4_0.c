/* Q4_0 weights: 32 elements per block, x = d * (q - 8), q in 0..15. Dot against Q8_0 activations. */
#include "fg_simd.h"
#include "fg_panel_vnni.h"

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
 * nibbles are transposed once for all M activations (fg_rows8_nibbles: lo[j] holds elements 4j..4j+3 of every row,
 * hi[j] elements 16+4j..); each activation's 4-byte groups are broadcast and NIBDOT (fg_nib8_dot_*: AVX2 maddubs, or
 * VNNI dpbusd) gives every row's exact dot with the unsigned nibbles u = q + 8, and sum (u - 8) x = dot(u, x) -
 * 8 * sum(x) (aux.c). Both twins take the same float step, so they agree bit for bit. */
/* One activation's step over one block of 8 transposed rows: the exact dot minus 8 * sum(x), and the float step;
 * shared by the lanes tiles and the panel tile, so they agree by construction. */
#define Q4_0_STEP8(NIBDOT, acc, lo, hi, dw, xq, ax)                                                             \
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(NIBDOT(lo, hi, xq), _mm256_set1_epi32((ax)->c))),       \
                    _mm256_mul_ps(dw, _mm256_set1_ps((ax)->d)), acc)
/* NAME##_at asks for each row's block `ahead` bytes on (fg_prefetch_rows8); FG_TILE8_ENTRIES gives NAME
 * (the tiles' shape) and NAME##_gemv (the streams gemv's). */
#define Q4_0_TILE8(NAME, INLINE, NIBDOT)                                                                    \
    INLINE void NAME##_at(const int R, const int M, int first, int kc, const char *w, size_t stride, size_t ahead, \
                          const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {    \
        __m256 acc[8]; /* [a]: 8 rows */                                                                    \
        fg_load_rows8(R, M, first, acc, y, ldy);                                                            \
        for (int i = 0; i < kc; i++) {                                                                      \
            const char *wb = w + i * sizeof(block_q4_0);                                                    \
            fg_prefetch_rows8(w, stride, ahead, R, i, kc, sizeof(block_q4_0));                              \
            __m256i lo[4], hi[4];                                                                           \
            fg_rows8_nibbles(wb + offsetof(block_q4_0, qs), stride, R, lo, hi);                             \
            const __m256 dw = fg_rows8_f16(wb + offsetof(block_q4_0, d), stride, R);                        \
            for (int a = 0; a < M; a++)                                                                     \
                acc[a] = Q4_0_STEP8(NIBDOT, acc[a], lo, hi, dw, ((const block_q8_0 *)(x + a * xs) + i)->qs, &aux[a][i]); \
        }                                                                                                   \
        fg_store_rows8(R, M, acc, y, ldy);                                                                  \
    }                                                                                                       \
    FG_TILE8_ENTRIES(NAME, INLINE)
Q4_0_TILE8(q4_0_tile8_avx2, FG_INLINE_AVX2, fg_nib8_dot_avx2)
FG_GEMM_DOT_FROM_TILE(vec_dot_q4_0_q8_0_avx2, gemm_q4_0_q8_0_avx2_tiles, FG_TARGET_AVX2, q4_0_tile8_avx2, q4_0_aux,
                      sizeof(block_q4_0), sizeof(block_q8_0), QK4_0, 8, 8)
FG_GEMV_STREAMS(gemv_q4_0_q8_0_avx2, FG_TARGET_AVX2, q4_0_tile8_avx2_gemv, gemm_q4_0_q8_0_avx2_tiles, q4_0_aux,
                sizeof(block_q4_0), sizeof(block_q8_0), QK4_0)

/* Panels for many activations (FG_GEMM_FROM_PANEL): one block of 8 (AVX2) or 16 (VNNI) rows as the lanes tiles unpack
 * it, and those tiles' float steps over it. */
typedef struct {
    __m256i q[8]; /* lo[4], hi[4] of fg_rows8_nibbles */
    __m256 d;     /* the rows' scales */
} q4_0_panel8;
FG_INLINE_AVX2 void q4_0_fill8(const int R, int kc, const char *w, size_t stride, q4_0_panel8 *p) {
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q4_0);
        fg_prefetch_tile8(w, stride, R, i, kc, sizeof(block_q4_0));
        fg_rows8_nibbles(wb + offsetof(block_q4_0, qs), stride, R, p[i].q, p[i].q + 4);
        p[i].d = fg_rows8_f16(wb + offsetof(block_q4_0, d), stride, R);
    }
}
FG_INLINE_AVX2 void q4_0_panel_tile8(const int R, const int M, int first, int kc, const q4_0_panel8 *p, const char *x,
                                     size_t xs, const fg_xaux (*aux)[FG_PANEL_KC], float *y, int64_t ldy) {
    __m256 acc[8]; /* [a]: 8 rows */
    fg_load_rows8(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
#pragma GCC unroll 8 /* the accumulators stay in registers */
        for (int a = 0; a < M; a++)
            acc[a] = Q4_0_STEP8(fg_nib8_dot_avx2, acc[a], p[i].q, p[i].q + 4, p[i].d,
                                ((const block_q8_0 *)(x + a * xs) + i)->qs, &aux[a][i]);
    }
    fg_store_rows8(R, M, acc, y, ldy);
}
FG_GEMM_FROM_PANEL(gemm_q4_0_q8_0_avx2, FG_TARGET_AVX2, q4_0_panel8, q4_0_fill8, q4_0_panel_tile8, q4_0_aux,
                   gemm_q4_0_q8_0_avx2_tiles, sizeof(block_q4_0), sizeof(block_q8_0), QK4_0, 8, 8)
/* AVX-512 + VNNI: the same tile with dpbusd (256-bit, AVX512VL) for the gemv, and its 16-row zmm twin for more
 * activations (as in fg_quant_q4_1.c), 16 at a time: each block's rows are unpacked once per 16 activations (8: 24%
 * slower on 2048x2048 x 256). Without VNNI, AVX-512 runs the AVX2 kernels. */
Q4_0_TILE8(q4_0_tile8_vnni, FG_INLINE_AVX512_VNNI, fg_nib8_dot_vnni)
/* One activation's block step over 16 row lanes (the panel tile, fg_panel_vnni.h, takes the same float ops). */
FG_INLINE_AVX512_VNNI __m512 q4_0_step16(__m512 acc, const __m512i lo[4], const __m512i hi[4], __m512 dw,
                                         const int8_t *xq, const fg_xaux *aux) {
    const __m512i dot = fg_nib16_dot_vnni(_mm512_set1_epi32(-aux->c), lo, hi, xq);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_set1_ps(aux->d)), acc);
}
FG_INLINE_AVX512_VNNI void q4_0_tile16_vnni(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                            const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    if (M == 1) {
        FG_TILE16_GEMV(q4_0_tile8_vnni, R, first, kc, w, stride, x, xs, aux, y, ldy);
        return;
    }
    __m512 acc[16]; /* [a]: 16 rows */
    fg_load_rows16(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q4_0);
        fg_prefetch_tile16(w, stride, R, i, kc, sizeof(block_q4_0));
        __m512i lo[4], hi[4];
        fg_rows16_nibbles(wb + offsetof(block_q4_0, qs), stride, R, lo, hi);
        const __m512 dw = fg_rows16_f16(wb + offsetof(block_q4_0, d), stride, R);
        for (int a = 0; a < M; a++) {
            const int8_t *xq = ((const block_q8_0 *)(x + a * xs) + i)->qs;
            acc[a] = q4_0_step16(acc[a], lo, hi, dw, xq, &aux[a][i]);
        }
    }
    fg_store_rows16(R, M, acc, y, ldy);
}
FG_GEMM_DOT_FROM_TILE(vec_dot_q4_0_q8_0_vnni, gemm_q4_0_q8_0_vnni_tiles, FG_TARGET_AVX512_VNNI, q4_0_tile16_vnni,
                      q4_0_aux, sizeof(block_q4_0), sizeof(block_q8_0), QK4_0, 16, 16)
FG_GEMV_STREAMS(gemv_q4_0_q8_0_vnni, FG_TARGET_AVX512_VNNI, q4_0_tile8_vnni_gemv, gemm_q4_0_q8_0_vnni_tiles, q4_0_aux,
                sizeof(block_q4_0), sizeof(block_q8_0), QK4_0)
FG_INLINE_AVX512_VNNI void q4_0_fill16(const int R, int kc, const char *w, size_t stride, fg_panel16 *p) {
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q4_0);
        fg_prefetch_tile16(w, stride, R, i, kc, sizeof(block_q4_0));
        fg_rows16_nibbles(wb + offsetof(block_q4_0, qs), stride, R, p[i].q, p[i].q + 4);
        p[i].d = fg_rows16_f16(wb + offsetof(block_q4_0, d), stride, R);
    }
}
/* The panel gemm (fg_panel_vnni.h) over the tile's unpack, 8 activations in 8 dpbusd chains. */
FG_GEMM_PANEL_VNNI(gemm_q4_0_q8_0_vnni, q4_0_fill16, q4_0_aux, gemm_q4_0_q8_0_vnni_tiles, sizeof(block_q4_0))

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
#if FG_HAVE_I8MM
FG_B32_KERNELS_NEONI8MM(q4_0_q8_0, FG_B32_Q4_0, NULL, fg_q8_0_aux_neon, sizeof(block_q4_0), sizeof(block_q8_0), QK4_0)
#endif
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q4_0_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q4_0_scalar, dequantize_row_q4_0_scalar, vec_dot_q4_0_q8_0_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q4_0_avx2, vec_dot_q4_0_q8_0_avx2, gemv_q4_0_q8_0_avx2, gemm_q4_0_q8_0_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, vec_dot_q4_0_q8_0_vnni, gemv_q4_0_q8_0_vnni, gemm_q4_0_q8_0_vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q4_0_q8_0_neon, gemv_q4_0_q8_0_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q4_0_q8_0_neondp, gemv_q4_0_q8_0_neondp, gemm_q4_0_q8_0_neondp},
#if FG_HAVE_I8MM
    [FG_ROW_I8MM] = {NULL, NULL, vec_dot_q4_0_q8_0_neoni8mm, gemv_q4_0_q8_0_neoni8mm, gemm_q4_0_q8_0_neoni8mm},
#endif
#endif
};
