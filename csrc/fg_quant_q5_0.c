/* Q5_0 weights: 32 elements per block, x = d * (q - 16), q in 0..31: low 4 bits as q4_0's nibbles (element j
 * in the low nibble of qs[j], j + 16 in the high nibble), bit 4 of element j in bit j of qh (little-endian u32).
 * Dot against Q8_0 activations: d dx (sum q x - 16 sum x). */
#include "fg_simd.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_q5_0_ref: d = max / -16 with max the first element of largest magnitude. */
static void quantize_row_q5_0_scalar(const float *x, void *vy, int64_t n) {
    block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const float *xb = x + i * QK5_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK5_0; j++)
            if (amax < fabsf(xb[j])) amax = fabsf(xb[j]), max = xb[j];
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fg_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            int q0 = (int8_t)(xb[j] * id + 16.5f), q1 = (int8_t)(xb[j + QK5_0 / 2] * id + 16.5f);
            q0 = q0 < 31 ? q0 : 31;
            q1 = q1 < 31 ? q1 : 31;
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((uint32_t)(q0 & 0x10) >> 4) << j;
            qh |= ((uint32_t)(q1 & 0x10) >> 4) << (j + QK5_0 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* q (0..31) of the 32 elements of a block. */
static inline void q5_unpack(const uint8_t *qs, const uint8_t *qh4, int q[32]) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    }
}

static void dequantize_row_q5_0_scalar(const void *vx, float *y, int64_t n) {
    const block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const float d = fg_fp16_to_fp32(x[i].d);
        int q[32];
        q5_unpack(x[i].qs, x[i].qh, q);
        for (int j = 0; j < QK5_0; j++) y[i * QK5_0 + j] = (float)(q[j] - 16) * d;
    }
}

static float vec_dot_q5_0_q8_0_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q5_0 *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        int q[32], sumi = 0;
        q5_unpack(w[i].qs, w[i].qh, q);
        for (int j = 0; j < QK5_0; j++) sumi += (q[j] - 16) * x[i].qs[j];
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d));
    }
    return sum;
}

#if FG_HAVE_X86
/* ---- AVX2 ---- */

/* One block's q (0..31) as 32 unsigned bytes in element order. */
FG_INLINE_AVX2 __m256i q5_bytes_avx2(const uint8_t *qs, const uint8_t *qh4) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const __m256i hi = _mm256_and_si256(fg_bits_to_bytes_256(qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(fg_nibbles_256(qs), hi);
}

/* Bit-exact with the scalar reference: (q - 16) * d. */
FG_TARGET_AVX2 static void dequantize_row_q5_0_avx2(const void *vx, float *y, int64_t n) {
    const block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const __m256 d = _mm256_set1_ps(fg_f16(x[i].d));
        const __m256i q = _mm256_sub_epi8(q5_bytes_avx2(x[i].qs, x[i].qh), _mm256_set1_epi8(16));
        for (int k = 0; k < 4; k++) {
            const __m128i b = k & 2 ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(k & 1 ? _mm_srli_si128(b, 8) : b));
            _mm256_storeu_ps(y + i * QK5_0 + 8 * k, _mm256_mul_ps(v, d));
        }
    }
}

/* Rows in lanes (as the K-quant gemm, fg_kquant_x86.h): per block, 8 rows' weights s = q - 16 are transposed so that
 * lane r of u->s[g] holds row r's 4 weights of group g (elements 4g..4g+3), and each activation's bytes, offset to
 * x + 128 (unsigned), are broadcast 4 at a time: one maddubs per 8 (row, 4 elements), 4 groups summed in int16
 * (4 * 2 * 255 * 16 < 32768), and sum s x = sum s (x + 128) - 128 sum s exactly. Each lane then takes the scalar
 * reference's float step, sum += (float)sumi * (dw * dx), so vec_dot, gemv and gemm all equal it bit for bit. */
typedef struct {
    __m256i s[8];  /* group g: lane r = row r's 4 signed weights */
    __m256i bias;  /* lane r = 128 * sum s of row r */
    __m256 d;      /* lane r = row r's scale (0 past the last row) */
} q5_0_rows8;

FG_INLINE_AVX2 void q5_0_rows8_avx2(int R, const char *w, size_t stride, int64_t i, q5_0_rows8 *u) {
    uint16_t dh[8] = {0};
    __m256i qsum = _mm256_setzero_si256();
    for (int r = 0; r < 8; r++) {
        const block_q5_0 *b = (const block_q5_0 *)(w + r * stride) + i;
        u->s[r] = _mm256_setzero_si256();
        if (r >= R) continue;
        u->s[r] = q5_bytes_avx2(b->qs, b->qh);
        dh[r] = b->d;
    }
    fg_transpose8_epi32(u->s);
    for (int g = 0; g < 8; g++) { /* q 0..31: 8 groups add up to at most 248 per byte */
        qsum = _mm256_add_epi8(qsum, u->s[g]);
        u->s[g] = _mm256_sub_epi8(u->s[g], _mm256_set1_epi8(16));
    }
    const __m256i q32 = _mm256_madd_epi16(_mm256_maddubs_epi16(qsum, _mm256_set1_epi8(1)), _mm256_set1_epi16(1));
    u->bias = _mm256_slli_epi32(_mm256_sub_epi32(q32, _mm256_set1_epi32(16 * QK5_0)), 7);
    u->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh));
}

FG_INLINE_AVX2 __m256i q5_0_lane_mask(int R) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(R), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The exact int32 sums of the twins. AVX2: the step's maddubs of x + 128 (unsigned) with s, 4 groups summed in int16
 * (4 * 2 * 255 * 16 < 32768), minus 128 sum s; the few path's maddubs(q, x) - 16 sum x per pair, widened by madd.
 * VNNI: one dpbusd per group into an accumulator that starts at the correction (-bias, -16 sum x). */
FG_INLINE_AVX2 __m256i q5_0_stepsum_avx2(const q5_0_rows8 *u, const block_q8_0 *xb) {
    __m256i t[2];
    for (int h = 0; h < 2; h++) {
        t[h] = _mm256_setzero_si256();
        for (int g = 4 * h; g < 4 * h + 4; g++) {
            int32_t x4;
            memcpy(&x4, xb->qs + 4 * g, 4);
            const __m256i xu = _mm256_xor_si256(_mm256_set1_epi32(x4), _mm256_set1_epi8((char)0x80)); /* x + 128 */
            t[h] = _mm256_add_epi16(t[h], _mm256_maddubs_epi16(xu, u->s[g]));
        }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    return _mm256_sub_epi32(_mm256_add_epi32(_mm256_madd_epi16(t[0], ones), _mm256_madd_epi16(t[1], ones)), u->bias);
}
#define Q5_0_XPRE_AVX2(xq) _mm256_maddubs_epi16(_mm256_set1_epi8(16), (xq))
#define Q5_0_DOT_AVX2(q, xq, pre) \
    _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16((q), (xq)), (pre)), _mm256_set1_epi16(1))
#define Q5_0_XPRE_VNNI(xq) \
    _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(16), (xq)))
#define Q5_0_DOT_VNNI(q, xq, pre) _mm256_dpbusd_epi32((pre), (q), (xq))

/* The kernels of a twin (STEPSUM, XPRE, DOT: its exact sums above). q5_0_rows8_step_*: the float step of one
 * activation block for the 8 rows of u, (float)sumi * (dw * dx). q5_0_rows8_few_*: few activations (A <= 4): each
 * row's exact block sums sumi = q . x - 16 sum x as usual (elements in lanes, each weight block unpacked once for the
 * A), 8 rows' sums gathered into lanes, then the same float step as the gemm's; no transposes where little shares
 * them; y[a * ldy + r]. q5_0_rows8_at_*: the same over nb blocks from y's sums (unless first), each row's block asking
 * for the block `ahead` bytes on; q5_0_tile8_gemv_*: its one-activation case, the tile of the gemv, which reads the
 * rows as 8 ascending streams (FG_GEMV_STREAMS). q5_0_few_*: rows 8 at a time (the tail masked) for A activations.
 * gemm_*: many activations: per block, 16 rows unpacked once, then every activation; the sums accumulate in y block
 * by block (the same float steps, in the same order, as the gemv's register), from FEW activations on. */
#define Q5_0_KERNELS(SFX, INLINE, TARGET, STEPSUM, XPRE, DOT, FEW)                                                        \
    INLINE __m256 q5_0_rows8_step_##SFX(const q5_0_rows8 *u, const block_q8_0 *xb) {                                 \
        const __m256i sumi = STEPSUM(u, xb);                                                                         \
        return _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), _mm256_mul_ps(u->d, _mm256_set1_ps(fg_f16(xb->d))));          \
    }                                                                                                                \
    INLINE void q5_0_rows8_at_##SFX(const int R, const int A, int first, int64_t nb, const char *w, size_t stride,   \
                                    size_t ahead, const char *x, size_t xs, float *y, int64_t ldy) {                 \
        __m256 acc[4];                                                                                               \
        for (int a = 0; a < A; a++)                                                                                  \
            acc[a] = first ? _mm256_setzero_ps() : _mm256_maskload_ps(y + a * ldy, q5_0_lane_mask(R));               \
        for (int64_t i = 0; i < nb; i++) {                                                                           \
            __m256i xq[4], x16[4], s[4][8];                                                                          \
            for (int a = 0; a < A; a++) {                                                                            \
                xq[a] = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)(x + a * xs) + i)->qs);             \
                x16[a] = XPRE(xq[a]);                                                                                \
            }                                                                                                        \
            fg_prefetch_rows8(w, stride, ahead, R, i, nb, sizeof(block_q5_0));                                       \
            __m128i dh = _mm_setzero_si128(); /* the rows' fp16 scales, shifted in from the top: row k ends in k */  \
            for (int k = 0; k < 8; k++) {                                                                            \
                uint16_t d = 0;                                                                                      \
                for (int a = 0; a < A; a++) s[a][k] = _mm256_setzero_si256();                                        \
                if (k < R) {                                                                                         \
                    const block_q5_0 *b = (const block_q5_0 *)(w + k * stride) + i;                                  \
                    const __m256i q = q5_bytes_avx2(b->qs, b->qh);                                                   \
                    for (int a = 0; a < A; a++)                                                                      \
                        s[a][k] = DOT(q, xq[a], x16[a]);                                                             \
                    d = b->d;                                                                                        \
                }                                                                                                    \
                dh = _mm_alignr_epi8(_mm_cvtsi32_si128(d), dh, 2);                                                   \
            }                                                                                                        \
            const __m256 dw = _mm256_cvtph_ps(dh);                                                                   \
            for (int a = 0; a < A; a++) {                                                                            \
                const __m256 dx = _mm256_set1_ps(fg_f16(((const block_q8_0 *)(x + a * xs))[i].d));                   \
                acc[a] = _mm256_add_ps(acc[a], _mm256_mul_ps(_mm256_cvtepi32_ps(fg_hsum8_epi32(s[a])), _mm256_mul_ps(dw, dx))); \
            }                                                                                                        \
        }                                                                                                            \
        for (int a = 0; a < A; a++) _mm256_maskstore_ps(y + a * ldy, q5_0_lane_mask(R), acc[a]);                     \
    }                                                                                                                \
    INLINE void q5_0_rows8_few_##SFX(const int R, const int A, int64_t nb, const char *w, size_t stride,             \
                                     const char *x, size_t xs, float *y, int64_t ldy) {                              \
        q5_0_rows8_at_##SFX(R, A, 1, nb, w, stride, 8 * stride, x, xs, y, ldy); /* asks for the next 8 rows */       \
    }                                                                                                                \
    INLINE void q5_0_tile8_gemv_##SFX(const int R, int first, int kc, const char *w, size_t stride, size_t ahead,    \
                                      const char *x, const fg_xaux (*aux)[FG_KC], float *y) {                        \
        (void)aux; /* the tile reads the activation's scales itself */                                               \
        q5_0_rows8_at_##SFX(R, 1, first, kc, w, stride, ahead, x, 0, y, 0);                                          \
    }                                                                                                                \
    INLINE void q5_0_few_##SFX(const int A, int64_t n, const char *w, size_t stride, const char *x, size_t xs,       \
                                      float *y, int64_t ldy, int64_t nrows) {                                        \
        int64_t r = 0;                                                                                               \
        for (; r + 8 <= nrows; r += 8) q5_0_rows8_few_##SFX(8, A, n / QK5_0, w + r * stride, stride, x, xs, y + r, ldy); \
        if (r < nrows) q5_0_rows8_few_##SFX((int)(nrows - r), A, n / QK5_0, w + r * stride, stride, x, xs, y + r, ldy); \
    }                                                                                                                \
    TARGET static float vec_dot_q5_0_q8_0_##SFX(int64_t n, const void *w, const void *x) {                           \
        float y;                                                                                                     \
        q5_0_few_##SFX(1, n, w, 0, x, 0, &y, 0, 1);                                                                  \
        return y;                                                                                                    \
    }                                                                                                                \
    TARGET static void gemm_q5_0_q8_0_##SFX(int64_t n, const void *w, size_t stride, const void *xq, size_t xs,      \
                                                   int64_t m, float *y, int64_t ldy, int64_t nrows) {                \
        if (m < (FEW)) { /* below this the transposes cost more than they save */                                       \
            const char *x = xq;                                                                                      \
            int64_t a = 0;                                                                                           \
            for (; a + 4 <= m; a += 4) q5_0_few_##SFX(4, n, w, stride, x + a * xs, xs, y + a * ldy, ldy, nrows);     \
            switch (m - a) {                                                                                         \
            case 3: q5_0_few_##SFX(3, n, w, stride, x + a * xs, xs, y + a * ldy, ldy, nrows); break;                 \
            case 2: q5_0_few_##SFX(2, n, w, stride, x + a * xs, xs, y + a * ldy, ldy, nrows); break;                 \
            case 1: q5_0_few_##SFX(1, n, w, stride, x + a * xs, xs, y + a * ldy, ldy, nrows); break;                 \
            default: break;                                                                                          \
            }                                                                                                        \
            return;                                                                                                  \
        }                                                                                                            \
        q5_0_rows8 u[2];                                                                                             \
        for (int64_t rb = 0; rb < nrows; rb += 16) {                                                                 \
            const int G = nrows - rb > 8 ? 2 : 1;                                                                    \
            int R[2];                                                                                                \
            for (int g = 0; g < G; g++) R[g] = nrows - rb - 8 * g < 8 ? (int)(nrows - rb - 8 * g) : 8;               \
            for (int64_t i = 0; i < n / QK5_0; i++) {                                                                \
                for (int g = 0; g < G; g++) q5_0_rows8_avx2(R[g], (const char *)w + (rb + 8 * g) * stride, stride, i, &u[g]); \
                for (int g = 0; g < G; g++) {                                                                        \
                    const __m256i mask = q5_0_lane_mask(R[g]);                                                       \
                    for (int64_t a = 0; a < m; a++) {                                                                \
                        const block_q8_0 *xb = (const block_q8_0 *)((const char *)xq + a * xs) + i;                  \
                        float *ya = y + a * ldy + rb + 8 * g;                                                        \
                        const __m256 prev = i ? _mm256_maskload_ps(ya, mask) : _mm256_setzero_ps();                  \
                        _mm256_maskstore_ps(ya, mask, _mm256_add_ps(prev, q5_0_rows8_step_##SFX(&u[g], xb)));        \
                    }                                                                                                \
                }                                                                                                    \
            }                                                                                                        \
        }                                                                                                            \
    }
Q5_0_KERNELS(avx2, FG_INLINE_AVX2, FG_TARGET_AVX2, q5_0_stepsum_avx2, Q5_0_XPRE_AVX2, Q5_0_DOT_AVX2, 16)
FG_GEMV_STREAMS(gemv_q5_0_q8_0_avx2, FG_TARGET_AVX2, q5_0_tile8_gemv_avx2, gemm_q5_0_q8_0_avx2, fg_q8_0_aux,
                sizeof(block_q5_0), sizeof(block_q8_0), QK5_0)
/* AVX-512 + VNNI: the same kernels with dpbusd (256-bit, AVX512VL); same sums, same float steps: bit-identical. The
 * transposed gemm from 16 activations as on AVX2: from 4, a kernel A/B on in-cache matrices gained at m = 8, but the
 * model's batched step of 8 (weights streaming from memory) lost a quarter. Its block sums stay AVX2's: a dpbusd
 * version (each activation's 4-byte groups broadcast and flipped to unsigned) made Gemma 3's pp512 1.5x slower. */
Q5_0_KERNELS(vnni, FG_INLINE_AVX512_VNNI, FG_TARGET_AVX512_VNNI, q5_0_stepsum_avx2, Q5_0_XPRE_VNNI, Q5_0_DOT_VNNI, 16)
FG_GEMV_STREAMS(gemv_q5_0_q8_0_vnni, FG_TARGET_AVX512_VNNI, q5_0_tile8_gemv_vnni, gemm_q5_0_q8_0_vnni, fg_q8_0_aux,
                sizeof(block_q5_0), sizeof(block_q8_0), QK5_0)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: q - 16 fits int8, so the signed dot applies directly ---- */
#define Q5_0_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_0 *x = vx;                                                                           \
        float32x4_t acc[4];                                                                                 \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);                                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const int8x16_t x0 = vld1q_s8(x[i].qs), x1 = vld1q_s8(x[i].qs + 16);                            \
            const float dx = fg_fp16_to_fp32(x[i].d);                                                       \
            for (int r = 0; r < R; r++) {                                                                   \
                const block_q5_0 *b = (const block_q5_0 *)(w + r * stride) + i;                             \
                fg_prefetch(b, stride);                                                                     \
                uint32_t qh;                                                                                \
                memcpy(&qh, b->qh, 4);                                                                      \
                const uint8x16_t q = vld1q_u8(b->qs), m = vdupq_n_u8(0x10);                                 \
                const uint8x16_t lo = vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), vandq_u8(fg_bits_to_bytes_neon(qh), m)); \
                const uint8x16_t hi = vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(fg_bits_to_bytes_neon(qh >> 16), m)); \
                int32x4_t s = DOT(vdupq_n_s32(0), vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(16)), x0);   \
                s = DOT(s, vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(16)), x1);                          \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(s), fg_fp16_to_fp32(b->d) * dx);                 \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]);                                              \
    }
Q5_0_ROWS_NEON(q5_0_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
FG_DOT_FROM_ROWS(vec_dot_q5_0_q8_0_neon, FG_NO_TARGET, q5_0_rows_neon, QK5_0)
FG_GEMV_FROM_ROWS(gemv_q5_0_q8_0_neon, FG_NO_TARGET, q5_0_rows_neon, QK5_0)
FG_INLINE_NEON FG_TARGET_DOTPROD void q5_0_tile8_neondp(const int R, const int M, int first, int kc, const char *w,
                                                    size_t stride, const char *x, size_t xs,
                                                    const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    fg_b32_tile8_neondp(R, M, first, kc, w, stride, x, xs, aux, y, ldy, FG_B32_Q5_0, NULL);
}
FG_KERNELS_FROM_TILE8(vec_dot_q5_0_q8_0_neondp, gemv_q5_0_q8_0_neondp, gemm_q5_0_q8_0_neondp, FG_TARGET_DOTPROD,
                      q5_0_tile8_neondp, fg_q8_0_aux_neon, sizeof(block_q5_0), sizeof(block_q8_0), QK5_0, 8)
#if FG_HAVE_I8MM
FG_B32_KERNELS_NEONI8MM(q5_0_q8_0, FG_B32_Q5_0, NULL, fg_q8_0_aux_neon, sizeof(block_q5_0), sizeof(block_q8_0), QK5_0)
#endif
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q5_0_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q5_0_scalar, dequantize_row_q5_0_scalar, vec_dot_q5_0_q8_0_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q5_0_avx2, vec_dot_q5_0_q8_0_avx2, gemv_q5_0_q8_0_avx2, gemm_q5_0_q8_0_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, vec_dot_q5_0_q8_0_vnni, gemv_q5_0_q8_0_vnni, gemm_q5_0_q8_0_vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q5_0_q8_0_neon, gemv_q5_0_q8_0_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q5_0_q8_0_neondp, gemv_q5_0_q8_0_neondp, gemm_q5_0_q8_0_neondp},
#if FG_HAVE_I8MM
    [FG_ROW_I8MM] = {NULL, NULL, vec_dot_q5_0_q8_0_neoni8mm, gemv_q5_0_q8_0_neoni8mm, gemm_q5_0_q8_0_neoni8mm},
#endif
#endif
};
