/* Q8_0 (weights and activations) and Q8_1 (activations for Q4_1 weights): 32 int8 per block. */
#include <stddef.h>
#include "fg_simd.h"
#include "fg_panel_vnni.h"

/* ---- scalar reference ---- */

static void quantize_row_q8_0_scalar(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *xb = x + i * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fg_absmax(amax, xb[j]);
        if (!FG_FINITE(amax)) {
            y[i].d = fg_fp32_to_fp16(NAN);
            memset(y[i].qs, 0, QK8_0);
            continue;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fg_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

static void dequantize_row_q8_0_scalar(const void *vx, float *y, int64_t n) {
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float d = fg_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[i * QK8_0 + j] = (float)x[i].qs[j] * d;
    }
}

static float vec_dot_q8_0_q8_0_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q8_0 *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += w[i].qs[j] * x[i].qs[j];
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d));
    }
    return sum;
}

static void quantize_row_q8_1_scalar(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const float *xb = x + i * QK8_1;
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) amax = fg_absmax(amax, xb[j]);
        if (!FG_FINITE(amax)) {
            y[i].d = y[i].s = fg_fp32_to_fp16(NAN);
            memset(y[i].qs, 0, QK8_1);
            continue;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(xb[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = fg_fp32_to_fp16(d);
        y[i].s = fg_fp32_to_fp16((float)sum * d);
    }
}

static void dequantize_row_q8_1_scalar(const void *vx, float *y, int64_t n) {
    const block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const float d = fg_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_1; j++) y[i * QK8_1 + j] = (float)x[i].qs[j] * d;
    }
}


#if FG_HAVE_X86
/* ---- AVX2 ---- */

/* One block of 32 floats -> 32 int8 exactly as the scalar reference (same d, same roundf); returns d and
 * the 8 lane sums of the quantized values (for q8_1's s). A non-finite block: d NaN, zero quants (fg_absmax). */
FG_INLINE_AVX2 float q8_block_avx2(const float *x, int8_t *qs, __m256i *isum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256i amax = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_epi32(amax, _mm256_castps_si256(_mm256_andnot_ps(sign, v[k])));
    }
    const float m = fg_hmax_abs_256i(amax);
    if (!FG_FINITE(m)) {
        memset(qs, 0, QK8_0);
        *isum = _mm256_setzero_si256();
        return NAN;
    }
    const float d = m / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(fg_roundf_256(_mm256_mul_ps(v[k], id)));
    *isum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    /* (32 x int32) -> 32 x int8 in element order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, p);
    return d;
}

FG_TARGET_AVX2 static void quantize_row_q8_0_avx2(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    __m256i isum;
    for (int64_t i = 0; i < n / QK8_0; i++) y[i].d = fg_fp32_to_fp16(q8_block_avx2(x + i * QK8_0, y[i].qs, &isum));
}

FG_TARGET_AVX2 static void quantize_row_q8_1_avx2(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    __m256i isum;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const float d = q8_block_avx2(x + i * QK8_1, y[i].qs, &isum);
        y[i].d = fg_fp32_to_fp16(d);
        y[i].s = fg_fp32_to_fp16((float)fg_hsum_256i(isum) * d);
    }
}

/* q8_0 and q8_1 share the qs layout; only the block stride differs. */
FG_INLINE_AVX2 void dequantize_q8_avx2(const uint8_t *blk, size_t bsize, size_t qoff, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, blk += bsize) {
        uint16_t h;
        memcpy(&h, blk, 2);
        const __m256 d = _mm256_set1_ps(fg_f16(h));
        for (int k = 0; k < 4; k++) {
            __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + qoff + 8 * k)));
            _mm256_storeu_ps(y + i * 32 + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

FG_TARGET_AVX2 static void dequantize_row_q8_0_avx2(const void *x, float *y, int64_t n) {
    dequantize_q8_avx2(x, sizeof(block_q8_0), offsetof(block_q8_0, qs), y, n / QK8_0);
}

FG_TARGET_AVX2 static void dequantize_row_q8_1_avx2(const void *x, float *y, int64_t n) {
    dequantize_q8_avx2(x, sizeof(block_q8_1), offsetof(block_q8_1, qs), y, n / QK8_1);
}

/* R <= 8 rows x M <= 8 activations of q8_0 . q8_0, row r in lane r (see FG_KERNELS_FROM_TILE8). Per block the rows'
 * bytes are transposed once for all M activations (t[j] holds elements 4j..4j+3 of every row); each activation's
 * 4-byte groups are broadcast and multiplied by the sign trick (|w| as u8, x with w's sign: right for w = -128, and
 * q8_0 activations stay within +-127; a pair reaches 32512, so each group is widened by its own madd), in two chains. */
/* One activation's step over one block of 8 transposed rows (t, aw = |t|): the exact dot by the sign trick, in two
 * chains, and the float step; shared by the lanes tile and the panel tile, so the two agree by construction. */
FG_INLINE_AVX2 __m256 q8_0_step8(__m256 acc, const __m256i t[8], const __m256i aw[8], __m256 dw, const int8_t *xq,
                                 const fg_xaux *ax) {
    const __m256i zero = _mm256_setzero_si256();
    __m256i d0 = zero, d1 = zero;
    for (int j = 0; j < 8; j += 2) {
        d0 = _mm256_add_epi32(d0, fg_dot_u8s8_256(aw[j], _mm256_sign_epi8(fg_bcast32(xq + 4 * j), t[j])));
        d1 = _mm256_add_epi32(d1, fg_dot_u8s8_256(aw[j + 1], _mm256_sign_epi8(fg_bcast32(xq + 4 * j + 4), t[j + 1])));
    }
    const __m256i dot = _mm256_add_epi32(d0, d1);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(ax->d)), acc);
}
/* One activation (the gemv; nothing to share a transpose with): each row's sums by the same sign trick (w = -128 too),
 * the 8 rows' reduced into lanes; each row's block asks for the bytes `ahead` of it (fg_prefetch_rows8). */
FG_INLINE_AVX2 void q8_0_gemv8_avx2(const int R, int first, int kc, const char *w, size_t stride, size_t ahead,
                                    const char *x, const fg_xaux (*aux)[FG_KC], float *y) {
    const __m256i zero = _mm256_setzero_si256();
    __m256 acc;
    fg_load_rows8(R, 1, first, &acc, y, 0);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q8_0);
        fg_prefetch_rows8(w, stride, ahead, R, i, kc, sizeof(block_q8_0));
        const __m256 dw = fg_rows8_f16(wb + offsetof(block_q8_0, d), stride, R);
        const __m256i xq = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)x + i)->qs);
        __m256i v[8]; /* [r]: 8 int32 partial sums of row r */
        for (int r = 0; r < 8; r++) {
            const __m256i wq =
                r < R ? _mm256_loadu_si256((const __m256i *)(wb + r * stride + offsetof(block_q8_0, qs))) : zero;
            v[r] = fg_dot_u8s8_256(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xq, wq));
        }
        const __m256i dot = fg_hsum8_epi32(v);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(aux[0][i].d)), acc);
    }
    fg_store_rows8(R, 1, &acc, y, 0);
}
FG_INLINE_AVX2 void q8_0_tile8_avx2(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                    const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    if (M == 1) {
        q8_0_gemv8_avx2(R, first, kc, w, stride, 8 * stride, x, aux, y);
        return;
    }
    __m256 acc[8]; /* [a]: 8 rows */
    fg_load_rows8(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q8_0);
        fg_prefetch_tile8(w, stride, R, i, kc, sizeof(block_q8_0));
        const __m256 dw = fg_rows8_f16(wb + offsetof(block_q8_0, d), stride, R);
        __m256i t[8], aw[8];
        fg_rows8_dwords(wb + offsetof(block_q8_0, qs), stride, R, t);
        fg_rows8_dwords(wb + offsetof(block_q8_0, qs) + 16, stride, R, t + 4);
        for (int j = 0; j < 8; j++) aw[j] = _mm256_sign_epi8(t[j], t[j]);
        for (int a = 0; a < M; a++)
            acc[a] = q8_0_step8(acc[a], t, aw, dw, ((const block_q8_0 *)(x + a * xs) + i)->qs, &aux[a][i]);
    }
    fg_store_rows8(R, M, acc, y, ldy);
}
FG_GEMM_DOT_FROM_TILE(vec_dot_q8_0_q8_0_avx2, gemm_q8_0_q8_0_avx2_tiles, FG_TARGET_AVX2, q8_0_tile8_avx2, fg_q8_0_aux,
                      sizeof(block_q8_0), sizeof(block_q8_0), QK8_0, 8, 8)
FG_GEMV_STREAMS(gemv_q8_0_q8_0_avx2, FG_TARGET_AVX2, q8_0_gemv8_avx2, gemm_q8_0_q8_0_avx2_tiles, fg_q8_0_aux,
                sizeof(block_q8_0), sizeof(block_q8_0), QK8_0)

/* Panels for many activations (FG_GEMM_FROM_PANEL): a block of 8 rows as q8_0_tile8_avx2 unpacks it, and its float
 * step over them. */
typedef struct {
    __m256i t[8], aw[8]; /* elements 4j..4j+3 of every row (fg_rows8_dwords), and their absolute values */
    __m256 d;            /* the rows' scales */
} q8_0_panel8;
FG_INLINE_AVX2 void q8_0_fill8(const int R, int kc, const char *w, size_t stride, q8_0_panel8 *p) {
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q8_0);
        fg_prefetch_tile8(w, stride, R, i, kc, sizeof(block_q8_0));
        fg_rows8_dwords(wb + offsetof(block_q8_0, qs), stride, R, p[i].t);
        fg_rows8_dwords(wb + offsetof(block_q8_0, qs) + 16, stride, R, p[i].t + 4);
        for (int j = 0; j < 8; j++) p[i].aw[j] = _mm256_sign_epi8(p[i].t[j], p[i].t[j]);
        p[i].d = fg_rows8_f16(wb + offsetof(block_q8_0, d), stride, R);
    }
}
FG_INLINE_AVX2 void q8_0_panel_tile8(const int R, const int M, int first, int kc, const q8_0_panel8 *p, const char *x,
                                     size_t xs, const fg_xaux (*aux)[FG_PANEL_KC], float *y, int64_t ldy) {
    __m256 acc[8]; /* [a]: 8 rows */
    fg_load_rows8(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
#pragma GCC unroll 8 /* the accumulators stay in registers */
        for (int a = 0; a < M; a++)
            acc[a] = q8_0_step8(acc[a], p[i].t, p[i].aw, p[i].d, ((const block_q8_0 *)(x + a * xs) + i)->qs, &aux[a][i]);
    }
    fg_store_rows8(R, M, acc, y, ldy);
}
FG_GEMM_FROM_PANEL(gemm_q8_0_q8_0_avx2, FG_TARGET_AVX2, q8_0_panel8, q8_0_fill8, q8_0_panel_tile8, fg_q8_0_aux,
                   gemm_q8_0_q8_0_avx2_tiles, sizeof(block_q8_0), sizeof(block_q8_0), QK8_0, 8, 8)
/* AVX-512 + VNNI: twins of that tile, 8 rows for the gemv and 16-row zmm tiles for more activations (as in
 * fg_quant_q4_1.c), with dpbusd and no sign trick: u = w + 128 (w ^ 0x80) is unsigned, so one dpbusd
 * per group gives dot(u, x) = dot(w, x) + 128 * sum(x) exactly (|sum| < 2^23), and aux.c = 128 * sum(x) takes the
 * offset back. Same exact sums, same float step: bit-identical to the AVX2 tile. Without VNNI, AVX-512 runs
 * the AVX2 kernels. */

/* The 16-row tile's one-activation case (the gemv), 8 rows at a time by the 8-row tiles' row reduction, with
 * u = w ^ 0x80 (w + 128) as below: one xor and one dpbusd per row and block, where the sign trick takes three ops.
 * The same exact sums and float step as the 8-row tiles. */
FG_INLINE_AVX512_VNNI void q8_0_gemv8_vnni(const int R, int first, int kc, const char *w, size_t stride, size_t ahead,
                                           const char *x, const fg_xaux (*aux)[FG_KC], float *y) {
    const __m256i flip = _mm256_set1_epi8((char)0x80), zero = _mm256_setzero_si256();
    __m256 acc;
    fg_load_rows8(R, 1, first, &acc, y, 0);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q8_0);
        fg_prefetch_rows8(w, stride, ahead, R, i, kc, sizeof(block_q8_0));
        const __m256 dw = fg_rows8_f16(wb + offsetof(block_q8_0, d), stride, R);
        const __m256i xq = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)x + i)->qs);
        __m256i v[8]; /* [r]: 8 int32 partial sums of row r (rows >= R: 128 * sum(x), in lanes left unused) */
        for (int r = 0; r < 8; r++) {
            const __m256i wq =
                r < R ? _mm256_loadu_si256((const __m256i *)(wb + r * stride + offsetof(block_q8_0, qs))) : zero;
            v[r] = _mm256_dpbusd_epi32(zero, _mm256_xor_si256(wq, flip), xq);
        }
        const __m256i dot = _mm256_sub_epi32(fg_hsum8_epi32(v), _mm256_set1_epi32(aux[0][i].c));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(aux[0][i].d)), acc);
    }
    fg_store_rows8(R, 1, &acc, y, 0);
}

/* One activation's step over one block of 16 transposed rows (u = w + 128): the exact dot in one dpbusd chain (the
 * activations' chains overlap) and the float step; shared by the lanes tile and the panel tile. */
FG_INLINE_AVX512_VNNI __m512 q8_0_step16(__m512 acc, const __m512i u[8], __m512 dw, const int8_t *xq,
                                         const fg_xaux *ax) {
    __m512i dot = _mm512_set1_epi32(-ax->c);
    for (int j = 0; j < 8; j++) dot = _mm512_dpbusd_epi32(dot, u[j], fg_bcast32_512(xq + 4 * j));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_set1_ps(ax->d)), acc);
}
FG_INLINE_AVX512_VNNI void q8_0_tile16_vnni(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                            const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    if (M == 1) {
        q8_0_gemv8_vnni(R < 8 ? R : 8, first, kc, w, stride, 8 * stride, x, aux, y);
        if (R > 8) q8_0_gemv8_vnni(R - 8, first, kc, w + 8 * stride, stride, 8 * stride, x, aux, y + 8);
        return;
    }
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[8]; /* [a]: 16 rows */
    fg_load_rows16(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q8_0);
        fg_prefetch_tile16(w, stride, R, i, kc, sizeof(block_q8_0));
        __m512i u[8]; /* [j]: elements 4j..4j+3 of every row, + 128 */
        fg_rows16_dwords(wb + offsetof(block_q8_0, qs), stride, R, u);
        fg_rows16_dwords(wb + offsetof(block_q8_0, qs) + 16, stride, R, u + 4);
        for (int j = 0; j < 8; j++) u[j] = _mm512_xor_si512(u[j], flip);
        const __m512 dw = fg_rows16_f16(wb + offsetof(block_q8_0, d), stride, R);
        for (int a = 0; a < M; a++)
            acc[a] = q8_0_step16(acc[a], u, dw, ((const block_q8_0 *)(x + a * xs) + i)->qs, &aux[a][i]);
    }
    fg_store_rows16(R, M, acc, y, ldy);
}
FG_GEMM_DOT_FROM_TILE(vec_dot_q8_0_q8_0_vnni, gemm_q8_0_q8_0_vnni_tiles, FG_TARGET_AVX512_VNNI, q8_0_tile16_vnni,
                      fg_q8_0_aux128, sizeof(block_q8_0), sizeof(block_q8_0), QK8_0, 8, 16)
FG_GEMV_STREAMS(gemv_q8_0_q8_0_vnni, FG_TARGET_AVX512_VNNI, q8_0_gemv8_vnni, gemm_q8_0_q8_0_vnni_tiles, fg_q8_0_aux128,
                sizeof(block_q8_0), sizeof(block_q8_0), QK8_0)

/* The 16-row panel (fg_panel_vnni.h): u[8] and the scales of q8_0_tile16_vnni. */
FG_INLINE_AVX512_VNNI void q8_0_fill16(const int R, int kc, const char *w, size_t stride, fg_panel16 *p) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_q8_0);
        fg_prefetch_tile16(w, stride, R, i, kc, sizeof(block_q8_0));
        fg_rows16_dwords(wb + offsetof(block_q8_0, qs), stride, R, p[i].q);
        fg_rows16_dwords(wb + offsetof(block_q8_0, qs) + 16, stride, R, p[i].q + 4);
        for (int j = 0; j < 8; j++) p[i].q[j] = _mm512_xor_si512(p[i].q[j], flip);
        p[i].d = fg_rows16_f16(wb + offsetof(block_q8_0, d), stride, R);
    }
}
FG_GEMM_PANEL_VNNI(gemm_q8_0_q8_0_vnni, q8_0_fill16, fg_q8_0_aux128, gemm_q8_0_q8_0_vnni_tiles, sizeof(block_q8_0))
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: vrndaq_f32 rounds half away from zero, exactly roundf ---- */

static inline float q8_block_neon(const float *x, int8_t *qs, int *sum) {
    float32x4_t v[8], amax = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        amax = vmaxq_f32(amax, vabsq_f32(v[k]));
    }
    const float m = vmaxvq_f32(amax); /* FMAX and FMAXV keep NaN, as fg_absmax does */
    if (!FG_FINITE(m)) {
        memset(qs, 0, QK8_0);
        *sum = 0;
        return NAN;
    }
    const float d = m / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32x4_t acc = vdupq_n_s32(0);
    for (int k = 0; k < 8; k += 2) {
        int32x4_t a = vcvtq_s32_f32(vrndaq_f32(vmulq_n_f32(v[k], id)));
        int32x4_t b = vcvtq_s32_f32(vrndaq_f32(vmulq_n_f32(v[k + 1], id)));
        acc = vaddq_s32(acc, vaddq_s32(a, b));
        int16x8_t h = vcombine_s16(vmovn_s32(a), vmovn_s32(b));
        vst1_s8(qs + 4 * k, vmovn_s16(h));
    }
    *sum = vaddvq_s32(acc);
    return d;
}

static void quantize_row_q8_0_neon(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    int sum;
    for (int64_t i = 0; i < n / QK8_0; i++) y[i].d = fg_fp32_to_fp16(q8_block_neon(x + i * QK8_0, y[i].qs, &sum));
}

static void quantize_row_q8_1_neon(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    int sum;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const float d = q8_block_neon(x + i * QK8_1, y[i].qs, &sum);
        y[i].d = fg_fp32_to_fp16(d);
        y[i].s = fg_fp32_to_fp16((float)sum * d);
    }
}

/* R rows . q8_0: DOT(acc, a, b) is vdotq_s32 (dotprod) or the widening-multiply emulation. */
#define Q8_0_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_0 *x = vx;                                                                           \
        float32x4_t acc[4];                                                                                 \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);                                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const int8x16_t x0 = vld1q_s8(x[i].qs), x1 = vld1q_s8(x[i].qs + 16);                            \
            const float dx = fg_fp16_to_fp32(x[i].d);                                                       \
            for (int r = 0; r < R; r++) {                                                                   \
                const block_q8_0 *b = (const block_q8_0 *)(w + r * stride) + i;                             \
                fg_prefetch(b, stride);                                                                     \
                int32x4_t s = DOT(vdupq_n_s32(0), vld1q_s8(b->qs), x0);                                      \
                s = DOT(s, vld1q_s8(b->qs + 16), x1);                                                       \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(s), fg_fp16_to_fp32(b->d) * dx);                 \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]);                                              \
    }
Q8_0_ROWS_NEON(q8_0_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
FG_DOT_FROM_ROWS(vec_dot_q8_0_q8_0_neon, FG_NO_TARGET, q8_0_rows_neon, QK8_0)
FG_GEMV_FROM_ROWS(gemv_q8_0_q8_0_neon, FG_NO_TARGET, q8_0_rows_neon, QK8_0)
FG_INLINE_NEON FG_TARGET_DOTPROD void q8_0_tile8_neondp(const int R, const int M, int first, int kc, const char *w,
                                                    size_t stride, const char *x, size_t xs,
                                                    const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    fg_b32_tile8_neondp(R, M, first, kc, w, stride, x, xs, aux, y, ldy, FG_B32_Q8_0, NULL);
}
FG_KERNELS_FROM_TILE8(vec_dot_q8_0_q8_0_neondp, gemv_q8_0_q8_0_neondp, gemm_q8_0_q8_0_neondp, FG_TARGET_DOTPROD,
                      q8_0_tile8_neondp, fg_q8_0_aux_neon, sizeof(block_q8_0), sizeof(block_q8_0), QK8_0, 8)
#if FG_HAVE_I8MM
FG_B32_KERNELS_NEONI8MM(q8_0_q8_0, FG_B32_Q8_0, NULL, fg_q8_0_aux_neon, sizeof(block_q8_0), sizeof(block_q8_0), QK8_0)
#endif
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q8_0_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q8_0_scalar, dequantize_row_q8_0_scalar, vec_dot_q8_0_q8_0_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {quantize_row_q8_0_avx2, dequantize_row_q8_0_avx2, vec_dot_q8_0_q8_0_avx2, gemv_q8_0_q8_0_avx2,
                     gemm_q8_0_q8_0_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, vec_dot_q8_0_q8_0_vnni, gemv_q8_0_q8_0_vnni, gemm_q8_0_q8_0_vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {quantize_row_q8_0_neon, NULL, vec_dot_q8_0_q8_0_neon, gemv_q8_0_q8_0_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q8_0_q8_0_neondp, gemv_q8_0_q8_0_neondp, gemm_q8_0_q8_0_neondp},
#if FG_HAVE_I8MM
    [FG_ROW_I8MM] = {NULL, NULL, vec_dot_q8_0_q8_0_neoni8mm, gemv_q8_0_q8_0_neoni8mm, gemm_q8_0_q8_0_neoni8mm},
#endif
#endif
};

/* The same ISAs with their run-time extension (avx512: VNNI, neon: dotprod); NULL: as the base table. */

const fg_type_kernels fg_q8_1_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q8_1_scalar, dequantize_row_q8_1_scalar, NULL, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {quantize_row_q8_1_avx2, dequantize_row_q8_1_avx2, NULL, NULL},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {quantize_row_q8_1_neon, NULL, NULL, NULL},
#endif
};
