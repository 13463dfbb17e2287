/* IQ4_XS weights: super-blocks of 256 = 8 sub-blocks of 32, x = d * (ls_j - 32) * kvalues[q] with 6-bit ls_j
 * (low 4 bits: nibble j % 2 of scales_l[j / 2]; top 2: bits 2j..2j+1 of scales_h) and q as IQ4_NL (16 bytes
 * of nibbles per sub-block). Dot against Q8_K: sum_j d dx (ls_j - 32) (kvalues[q] . x)_j. */
#include "fg_simd.h"
#include "fg_kquant_ref.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_iq4_xs_ref. */
static void quantize_row_iq4_xs_scalar(const float *x, void *vy, int64_t n) {
    block_iq4_xs *y = vy;
    uint8_t L[QK_K];
    float scales[QK_K / 32];
    for (int64_t i = 0; i < n / QK_K; i++) {
        memset(L, 0, sizeof L);
        fg_quantize_iq4(QK_K, x + i * QK_K, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l, scales, L, 7);
    }
}

/* The 8 sub-block scales ls_j - 32. */
static inline void iq4_xs_scales(const block_iq4_xs *b, int s[8]) {
    for (int j = 0; j < 8; j++)
        s[j] = (((b->scales_l[j / 2] >> 4 * (j % 2)) & 0xf) | (((b->scales_h >> 2 * j) & 3) << 4)) - 32;
}

static void dequantize_row_iq4_xs_scalar(const void *vx, float *y, int64_t n) {
    const block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fg_fp16_to_fp32(x[i].d);
        int s[8];
        iq4_xs_scales(&x[i], s);
        for (int j = 0; j < 8; j++, y += 32) {
            const float dl = d * s[j];
            const uint8_t *qs = x[i].qs + 16 * j;
            for (int l = 0; l < 16; l++) {
                y[l] = dl * fg_kvalues_iq4nl[qs[l] & 0xf];
                y[l + 16] = dl * fg_kvalues_iq4nl[qs[l] >> 4];
            }
        }
    }
}

static float vec_dot_iq4_xs_q8_k_scalar(int64_t n, const void *vw, const void *vx) {
    const block_iq4_xs *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int s[8], sumi = 0;
        iq4_xs_scales(&w[i], s);
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = w[i].qs + 16 * j;
            const int8_t *q8 = x[i].qs + 32 * j;
            int p = 0;
            for (int l = 0; l < 16; l++)
                p += fg_kvalues_iq4nl[qs[l] & 0xf] * q8[l] + fg_kvalues_iq4nl[qs[l] >> 4] * q8[l + 16];
            sumi += s[j] * p;
        }
        sum += fg_fp16_to_fp32(w[i].d) * x[i].d * (float)sumi;
    }
    return sum;
}

#if FG_HAVE_X86
/* Bit-exact with the scalar reference: (d * (ls - 32)) * level. */
FG_TARGET_AVX2 static void dequantize_row_iq4_xs_avx2(const void *vx, float *y, int64_t n) {
    const block_iq4_xs *x = vx;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)fg_kvalues_iq4nl));
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fg_f16(x[i].d);
        int s[8];
        iq4_xs_scales(&x[i], s);
        for (int j = 0; j < 8; j++, y += 32) {
            const __m256i k = _mm256_shuffle_epi8(table, fg_nibbles_256(x[i].qs + 16 * j));
            const __m256 dl = _mm256_set1_ps(d * s[j]);
            fg_store_i8x16_ps(y, _mm256_castsi256_si128(k), dl, _mm256_setzero_ps());
            fg_store_i8x16_ps(y + 16, _mm256_extracti128_si256(k, 1), dl, _mm256_setzero_ps());
        }
    }
}

/* ---- AVX2: IQ4_NL's level shuffle per sub-block, weighted by its scale in the widening madd ---- */
FG_INLINE_AVX2 void iq4_xs_rows_avx2(const int R, int64_t nb, const char *w, size_t stride, const void *vx, float *y) {
    const block_q8_K *x = vx;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)fg_kvalues_iq4nl));
    __m256 acc[4];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_iq4_xs *b[4];
        int s[4][8];
        __m256i isum[4];
        for (int r = 0; r < R; r++) {
            b[r] = (const block_iq4_xs *)(w + r * stride) + i;
            fg_prefetch(b[r], stride);
            fg_prefetch((const char *)b[r] + 64, stride);
            fg_prefetch((const char *)b[r] + 128, stride);
            iq4_xs_scales(b[r], s[r]);
            isum[r] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 8; j++) {
            const __m256i xs = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            for (int r = 0; r < R; r++) {
                const __m256i k = _mm256_shuffle_epi8(table, fg_nibbles_256(b[r]->qs + 16 * j));
                const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(k, k), _mm256_sign_epi8(xs, k));
                isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, _mm256_set1_epi16((short)s[r][j])));
            }
        }
        for (int r = 0; r < R; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(fg_f16(b[r]->d) * x[i].d), acc[r]);
    }
    for (int r = 0; r < R; r++) y[r] = fg_hsum_256(acc[r]);
}
FG_DOT_FROM_ROWS(vec_dot_iq4_xs_q8_k_avx2, FG_TARGET_AVX2, iq4_xs_rows_avx2, QK_K)
FG_GEMV_FROM_ROWS(gemv_iq4_xs_q8_k_avx2, FG_TARGET_AVX2, iq4_xs_rows_avx2, QK_K)
/* ---- AVX-512 VNNI: rows in lanes (8 per ymm for the gemv, 16 per zmm for more activations), per sub-block IQ4_NL's
 * unsigned table u = level + 128 looked up from the transposed nibbles (fg_rows8_lut4) and dotted by dpbusd; the
 * sub-block's sum of x (from the q8_K bsums) takes the offset back, dot(level, x) = dot(u, x) - 128 * sum(x), and the
 * row's scale ls_j - 32 weighs it in int32 (|sumi| <= 8 * 32 * 32 * 127 * 127 < 2^31): every row's exact sumi, then
 * the scalar reference's float step, acc + (dw * dx) * (float)sumi, so gemm, gemv and vec_dot equal the scalar
 * vec_dot bit for bit. No per-row horizontal sum. ---- */

/* Per q8_K activation super-block: its scale (the sub-block sums come from its bsums in the tile). */
FG_INLINE_AVX2 void iq4_xs_aux(const char *x, int kc, fg_xaux *aux) {
    const block_q8_K *xb = (const block_q8_K *)x;
    for (int i = 0; i < kc; i++) {
        aux[i].d = xb[i].d;
        aux[i].c = 0;
    }
}

/* The 8-byte headers (d, scales_h, scales_l) of 8 rows' super-blocks at p (`stride` apart; rows >= R zero) -> dw (8
 * floats), sl (scales_l) and sh (scales_h), row i in lane i. */
FG_INLINE_AVX512_VNNI void iq4_xs_rows8_header(const char *p, size_t stride, int R, __m256 *dw, __m256i *sl,
                                               __m256i *sh) {
    uint64_t h[8] = {0}; /* [r]: row r's header; constant indices after inlining: registers */
    for (int r = 0; r < 8; r++)
        if (r < R) memcpy(&h[r], p + r * stride, 8);
    const __m256i v0 = _mm256_setr_epi64x((long long)h[0], (long long)h[1], (long long)h[2], (long long)h[3]);
    const __m256i v1 = _mm256_setr_epi64x((long long)h[4], (long long)h[5], (long long)h[6], (long long)h[7]);
    /* the low dwords (d | scales_h << 16) and the high ones (scales_l) of rows 0..7, in row order */
    const __m256i lo = _mm256_permute4x64_epi64(
        _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(v0), _mm256_castsi256_ps(v1), 0x88)), 0xD8);
    *sl = _mm256_permute4x64_epi64(
        _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(v0), _mm256_castsi256_ps(v1), 0xDD)), 0xD8);
    *sh = _mm256_srli_epi32(lo, 16);
    *dw = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(lo));
}

/* Sub-block j's scale ls_j - 32 of the row lanes, from their scales_l (sl) and scales_h (sh): 8 and 16 lanes. */
FG_INLINE_AVX2 __m256i iq4_xs_scale8(__m256i sl, __m256i sh, int j) {
    const __m256i l4 = _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(0xf));
    const __m256i h2 = _mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), _mm256_set1_epi32(3));
    return _mm256_sub_epi32(_mm256_or_si256(l4, _mm256_slli_epi32(h2, 4)), _mm256_set1_epi32(32));
}
FG_INLINE_AVX512 __m512i iq4_xs_scale16(__m512i sl, __m512i sh, int j) {
    const __m512i l4 = _mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(0xf));
    const __m512i h2 = _mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3));
    return _mm512_sub_epi32(_mm512_or_si512(l4, _mm512_slli_epi32(h2, 4)), _mm512_set1_epi32(32));
}

/* The correction of activation block xb's sub-block j: 128 * its sum (bsums: sums of 16). */
#define IQ4_XS_C(xb, j) (128 * ((xb)->bsums[2 * (j)] + (xb)->bsums[2 * (j) + 1]))

/* The super-block of R rows 8 rows on (136 bytes: 3 lines each). */
#define IQ4_XS_PREFETCH(wb, stride, R)                                                                        \
    for (int r_ = 0; r_ < (R); r_++)                                                                         \
        for (int l_ = 0; l_ < 3; l_++) _mm_prefetch((wb) + (size_t)(r_ + 8) * (stride) + 64 * l_, _MM_HINT_T0)

/* R <= 8 rows x M <= 8 activations, kc super-blocks: the gemv (M = 1) and the 16-row tile's halves. */
FG_INLINE_AVX512_VNNI void iq4_xs_tile8_vnni(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                             const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y,
                                             int64_t ldy) {
    const __m256i table = fg_lut4_table_u8(fg_kvalues_iq4nl);
    __m256 acc[8]; /* [a]: 8 rows */
    fg_load_rows8(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_iq4_xs);
        IQ4_XS_PREFETCH(wb, stride, R);
        __m256 dw;
        __m256i sl, sh, isum[8]; /* isum[a]: the rows' exact sumi with activation a */
        iq4_xs_rows8_header(wb, stride, R, &dw, &sl, &sh);
        for (int a = 0; a < M; a++) isum[a] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            __m256i k[8]; /* u of the rows' sub-block j, as fg_rows8_lut4 */
            fg_rows8_lut4(wb + offsetof(block_iq4_xs, qs) + 16 * j, stride, R, table, k);
            const __m256i sj = iq4_xs_scale8(sl, sh, j);
            for (int a = 0; a < M; a++) {
                const block_q8_K *xb = (const block_q8_K *)(x + a * xs) + i;
                const __m256i dot = _mm256_sub_epi32(fg_nib8_dot_vnni(k, k + 4, xb->qs + 32 * j),
                                                     _mm256_set1_epi32(IQ4_XS_C(xb, j)));
                isum[a] = _mm256_add_epi32(isum[a], _mm256_mullo_epi32(dot, sj));
            }
        }
        for (int a = 0; a < M; a++)
            acc[a] = _mm256_add_ps(acc[a], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(aux[a][i].d)),
                                                         _mm256_cvtepi32_ps(isum[a])));
    }
    fg_store_rows8(R, M, acc, y, ldy);
}

/* R <= 16 rows x M <= 8 activations in zmm lanes (FG_KERNELS_FROM_TILE16): one activation, the 8-row tile on each half;
 * more, the 16 rows' sub-blocks unpacked once for all of them. The same exact sumi and float step per lane. */
FG_INLINE_AVX512_VNNI void iq4_xs_tile16_vnni(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                              const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y,
                                              int64_t ldy) {
    if (M == 1) {
        FG_TILE16_GEMV(iq4_xs_tile8_vnni, R, first, kc, w, stride, x, xs, aux, y, ldy);
        return;
    }
    const __m512i table = _mm512_broadcast_i32x4(_mm256_castsi256_si128(fg_lut4_table_u8(fg_kvalues_iq4nl)));
    __m512 acc[8]; /* [a]: 16 rows */
    fg_load_rows16(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_iq4_xs);
        IQ4_XS_PREFETCH(wb, stride, R);
        __m256 dw0, dw1;
        __m256i sl0, sl1, sh0, sh1;
        iq4_xs_rows8_header(wb, stride, R < 8 ? R : 8, &dw0, &sl0, &sh0);
        iq4_xs_rows8_header(wb + 8 * stride, stride, R - 8, &dw1, &sl1, &sh1);
        const __m512 dw = fg_join16(dw0, dw1);
        const __m512i sl = _mm512_inserti64x4(_mm512_castsi256_si512(sl0), sl1, 1);
        const __m512i sh = _mm512_inserti64x4(_mm512_castsi256_si512(sh0), sh1, 1);
        __m512i isum[8]; /* [a]: the rows' exact sumi with activation a */
        for (int a = 0; a < M; a++) isum[a] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i k[8]; /* u of the rows' sub-block j, as fg_rows16_lut4 */
            fg_rows16_lut4(wb + offsetof(block_iq4_xs, qs) + 16 * j, stride, R, table, k);
            const __m512i sj = iq4_xs_scale16(sl, sh, j);
            for (int a = 0; a < M; a++) {
                const block_q8_K *xb = (const block_q8_K *)(x + a * xs) + i;
                const __m512i dot = fg_nib16_dot_vnni(_mm512_set1_epi32(-IQ4_XS_C(xb, j)), k, k + 4, xb->qs + 32 * j);
                isum[a] = _mm512_add_epi32(isum[a], _mm512_mullo_epi32(dot, sj));
            }
        }
        for (int a = 0; a < M; a++)
            acc[a] = _mm512_add_ps(acc[a], _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(aux[a][i].d)),
                                                         _mm512_cvtepi32_ps(isum[a])));
    }
    fg_store_rows16(R, M, acc, y, ldy);
}
FG_KERNELS_FROM_TILE16(vec_dot_iq4_xs_q8_k_vnni, gemv_iq4_xs_q8_k_vnni, gemm_iq4_xs_q8_k_vnni, FG_TARGET_AVX512_VNNI,
                       iq4_xs_tile16_vnni, iq4_xs_aux, sizeof(block_iq4_xs), sizeof(block_q8_K), QK_K, 8)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: levels by table lookup, signed dot, one sub-block (2 vectors) per scale ---- */
#define IQ4_XS_ROWS_NEON(NAME, TARGET, DOT)                                                                 \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_K *x = vx;                                                                           \
        const int8x16_t table = vld1q_s8(fg_kvalues_iq4nl);                                                 \
        float32x4_t acc[4];                                                                                 \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);                                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const block_iq4_xs *b[4];                                                                       \
            int s[4][8];                                                                                    \
            int32x4_t isum[4];                                                                              \
            for (int r = 0; r < R; r++) {                                                                   \
                b[r] = (const block_iq4_xs *)(w + r * stride) + i;                                          \
                fg_prefetch(b[r], stride);                                                                  \
                fg_prefetch((const char *)b[r] + 64, stride);                                               \
                fg_prefetch((const char *)b[r] + 128, stride);                                              \
                iq4_xs_scales(b[r], s[r]);                                                                  \
                isum[r] = vdupq_n_s32(0);                                                                   \
            }                                                                                               \
            for (int j = 0; j < 8; j++) {                                                                   \
                const int8x16_t x0 = vld1q_s8(x[i].qs + 32 * j), x1 = vld1q_s8(x[i].qs + 32 * j + 16);      \
                for (int r = 0; r < R; r++) {                                                               \
                    const uint8x16_t q = vld1q_u8(b[r]->qs + 16 * j);                                       \
                    int32x4_t p = DOT(vdupq_n_s32(0), vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0f))), x0); \
                    p = DOT(p, vqtbl1q_s8(table, vshrq_n_u8(q, 4)), x1);                                    \
                    isum[r] = vmlaq_n_s32(isum[r], p, s[r][j]);                                             \
                }                                                                                           \
            }                                                                                               \
            for (int r = 0; r < R; r++)                                                                     \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(isum[r]), fg_fp16_to_fp32(b[r]->d) * x[i].d);    \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]);                                              \
    }
IQ4_XS_ROWS_NEON(iq4_xs_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
IQ4_XS_ROWS_NEON(iq4_xs_rows_neondp, FG_TARGET_DOTPROD, vdotq_s32)
FG_DOT_FROM_ROWS(vec_dot_iq4_xs_q8_k_neon, FG_NO_TARGET, iq4_xs_rows_neon, QK_K)
FG_GEMV_FROM_ROWS(gemv_iq4_xs_q8_k_neon, FG_NO_TARGET, iq4_xs_rows_neon, QK_K)
FG_DOT_FROM_ROWS(vec_dot_iq4_xs_q8_k_neondp, FG_TARGET_DOTPROD, iq4_xs_rows_neondp, QK_K)
FG_GEMV_FROM_ROWS(gemv_iq4_xs_q8_k_neondp, FG_TARGET_DOTPROD, iq4_xs_rows_neondp, QK_K)
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_iq4_xs_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_iq4_xs_scalar, dequantize_row_iq4_xs_scalar, vec_dot_iq4_xs_q8_k_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_iq4_xs_avx2, vec_dot_iq4_xs_q8_k_avx2, gemv_iq4_xs_q8_k_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, vec_dot_iq4_xs_q8_k_vnni, gemv_iq4_xs_q8_k_vnni, gemm_iq4_xs_q8_k_vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_iq4_xs_q8_k_neon, gemv_iq4_xs_q8_k_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_iq4_xs_q8_k_neondp, gemv_iq4_xs_q8_k_neondp},
#endif
};
