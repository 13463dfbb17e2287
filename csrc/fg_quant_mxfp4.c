/* MXFP4 weights (OCP microscaling, gpt-oss's experts): 32 elements per block, x = 2^(e - 128) * kvalues[q] with e
 * an E8M0 byte and q a 4-bit index into the fp4 e2m1 values doubled (fg_kvalues_mxfp4), nibbles as q4_0. The same
 * shape as IQ4_NL with another table and scale: the kernels are the 16-level table kernels of fg_simd_x86.h (VNNI) and
 * fg_simd_neon.h, and on AVX2 its own (the small levels made unsigned for maddubs). Dot against Q8_0 activations:
 * e_half dx sum kvalues[q] x, as ggml_vec_dot_mxfp4_q8_0. */
#include "fg_simd.h"
#include "fg_panel_vnni.h"

/* e2m1 values doubled (ggml's kvalues_mxfp4): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (index 8 is -0). */
static const int8_t fg_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---- scalar reference ---- */

/* ggml's best_index_mxfp4: the first index of least |kvalues[i] d - x| (so 0, not 8, for a value nearest zero). */
static int best_index_mxfp4(float x, float d) {
    int best = 0;
    float best_err = fabsf(fg_kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(fg_kvalues_mxfp4[i] * d - x);
        if (err < best_err) best = i, best_err = err;
    }
    return best;
}

/* ggml's quantize_row_mxfp4_ref, byte for byte (llama-quantize writes these rows too: MXFP4 takes no importance
 * matrix). e = floor(log2(amax)) - 2 + 127 through log2f as ggml computes it (frexp would differ just below a
 * power of two, where log2f rounds up). Through int first: ggml's float -> uint8_t cast is what x86 does, the low
 * byte of the int, for amax below 2^-125; done so here it is defined behaviour. */
static void quantize_row_mxfp4_scalar(const float *x, void *vy, int64_t n) {
    block_mxfp4 *y = vy;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        const uint8_t e = amax > 0.0f ? (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = fg_e8m0_to_fp32_half(e);
        y[i].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; j++)
            y[i].qs[j] = (uint8_t)(best_index_mxfp4(x[j], d) | best_index_mxfp4(x[j + QK_MXFP4 / 2], d) << 4);
    }
}

static void dequantize_row_mxfp4_scalar(const void *vx, float *y, int64_t n) {
    const block_mxfp4 *x = vx;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4) {
        const float d = fg_e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = d * fg_kvalues_mxfp4[x[i].qs[j] & 0xf];
            y[j + 16] = d * fg_kvalues_mxfp4[x[i].qs[j] >> 4];
        }
    }
}

/* ggml_vec_dot_mxfp4_q8_0_generic's float steps: sum += (dx * dw) * (float)sumi (a product of two floats commutes
 * exactly, so this is IQ4_NL's step with the E8M0 scale). */
static float vec_dot_mxfp4_q8_0_scalar(int64_t n, const void *vw, const void *vx) {
    const block_mxfp4 *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += fg_kvalues_mxfp4[w[i].qs[j] & 0xf] * x[i].qs[j];
            sumi += fg_kvalues_mxfp4[w[i].qs[j] >> 4] * x[i].qs[j + 16];
        }
        sum += (float)sumi * (fg_e8m0_to_fp32_half(w[i].e) * fg_fp16_to_fp32(x[i].d));
    }
    return sum;
}

#if FG_HAVE_X86
/* ---- AVX2: bit-exact with the scalar reference ---- */
FG_TARGET_AVX2 static void dequantize_row_mxfp4_avx2(const void *vx, float *y, int64_t n) {
    fg_lut4_dequantize_avx2(vx, y, n, fg_kvalues_mxfp4, sizeof(block_mxfp4), offsetof(block_mxfp4, qs),
                            FG_SCALE_E8M0_HALF);
}

/* The dot kernels: rows in lanes with the levels made unsigned, u = level + 12 in 0..24 (a byte shuffle of the rows'
 * transposed nibbles, fg_rows8_lut4), maddubs against the signed activation, dot(level, x) = dot(u, x) - 12 * sum(x)
 * (aux.c): no sign trick, no per-row horizontal sum. A pair of products reaches 2 * 24 * 128 = 6144, so 4 groups sum
 * in int16 (< 32767) before each widening madd: exact. Then the scalar reference's float step (fg_lut4_step8). */

/* Per q8_0 activation block: its scale and 12 * sum(q). */
FG_INLINE_AVX2 void mxfp4_aux12(const char *x, int kc, fg_xaux *aux) {
    const block_q8_0 *xb = (const block_q8_0 *)x;
    for (int i = 0; i < kc; i++) {
        aux[i].d = fg_f16(xb[i].d);
        aux[i].c = 12 * fg_hsum_256i(fg_dot_u8s8_256(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)xb[i].qs)));
    }
}

/* k[j]: u of elements 4j..4j+3 of 8 row lanes (k[4 + j]: 16 + 4j..) . the activation block at xq -> every row's
 * exact dot(u, x), int32 lanes. */
FG_INLINE_AVX2 __m256i mxfp4_dot8_avx2(const __m256i k[8], const int8_t *xq) {
    __m256i s[2]; /* [h]: elements 16h..16h + 15, int16 pair sums */
    for (int h = 0; h < 2; h++) {
        s[h] = _mm256_maddubs_epi16(k[4 * h], fg_bcast32(xq + 16 * h));
        for (int j = 1; j < 4; j++)
            s[h] = _mm256_add_epi16(s[h], _mm256_maddubs_epi16(k[4 * h + j], fg_bcast32(xq + 16 * h + 4 * j)));
    }
    const __m256i one = _mm256_set1_epi16(1);
    return _mm256_add_epi32(_mm256_madd_epi16(s[0], one), _mm256_madd_epi16(s[1], one));
}

/* R <= 8 rows x M <= 8 activations (FG_KERNELS_FROM_TILE8), row r in lane r; each row's block asks for the block
 * `ahead` bytes on (fg_prefetch_rows8); FG_TILE8_ENTRIES gives mxfp4_tile8_avx2 (the gemm's tiles: 8 rows on) and
 * mxfp4_tile8_avx2_gemv (the one-activation tile of the streams gemv, FG_GEMV_STREAMS: fg_stream_ahead on). */
FG_INLINE_AVX2 void mxfp4_tile8_avx2_at(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                        size_t ahead, const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y,
                                        int64_t ldy) {
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_add_epi8(_mm_loadu_si128((const __m128i *)fg_kvalues_mxfp4), _mm_set1_epi8(12)));
    __m256 acc[8]; /* [a]: 8 rows */
    fg_load_rows8(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * sizeof(block_mxfp4);
        fg_prefetch_rows8(w, stride, ahead, R, i, kc, sizeof(block_mxfp4));
        __m256i k[8]; /* u of the 8 rows, as fg_rows8_lut4 */
        fg_rows8_lut4(wb + offsetof(block_mxfp4, qs), stride, R, table, k);
        const __m256 dw = fg_rows8_scale(wb, stride, R, FG_SCALE_E8M0_HALF);
        for (int a = 0; a < M; a++)
            acc[a] = fg_lut4_step8(acc[a], mxfp4_dot8_avx2(k, ((const block_q8_0 *)(x + a * xs) + i)->qs), dw,
                                   &aux[a][i]);
    }
    fg_store_rows8(R, M, acc, y, ldy);
}
FG_TILE8_ENTRIES(mxfp4_tile8_avx2, FG_INLINE_AVX2)

FG_KERNELS_FROM_TILE8_STREAMS(vec_dot_mxfp4_q8_0_avx2, gemv_mxfp4_q8_0_avx2, gemm_mxfp4_q8_0_avx2,
                              FG_TARGET_AVX2, mxfp4_tile8_avx2, mxfp4_aux12,
                              sizeof(block_mxfp4), sizeof(block_q8_0), QK_MXFP4)

/* ---- AVX-512 VNNI (fg_panel_vnni.h's FG_LUT4_KERNELS_VNNI) ---- */
FG_LUT4_KERNELS_VNNI(mxfp4, block_mxfp4, QK_MXFP4, fg_kvalues_mxfp4, FG_SCALE_E8M0_HALF)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: levels by table lookup, signed dot ---- */
#define MXFP4_SCALE(b) fg_e8m0_to_fp32_half((b)->e)
FG_LUT4_ROWS_NEON(mxfp4_rows_neon, FG_NO_TARGET, fg_dot_s8_emul, block_mxfp4, fg_kvalues_mxfp4, MXFP4_SCALE)
FG_DOT_FROM_ROWS(vec_dot_mxfp4_q8_0_neon, FG_NO_TARGET, mxfp4_rows_neon, QK_MXFP4)
FG_GEMV_FROM_ROWS(gemv_mxfp4_q8_0_neon, FG_NO_TARGET, mxfp4_rows_neon, QK_MXFP4)
FG_INLINE_NEON FG_TARGET_DOTPROD void mxfp4_tile8_neondp(const int R, const int M, int first, int kc, const char *w,
                                                    size_t stride, const char *x, size_t xs,
                                                    const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    fg_b32_tile8_neondp(R, M, first, kc, w, stride, x, xs, aux, y, ldy, FG_B32_MXFP4, fg_kvalues_mxfp4);
}
FG_KERNELS_FROM_TILE8(vec_dot_mxfp4_q8_0_neondp, gemv_mxfp4_q8_0_neondp, gemm_mxfp4_q8_0_neondp, FG_TARGET_DOTPROD,
                      mxfp4_tile8_neondp, fg_q8_0_aux_neon, sizeof(block_mxfp4), sizeof(block_q8_0), QK_MXFP4, 8)
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_mxfp4_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_mxfp4_scalar, dequantize_row_mxfp4_scalar, vec_dot_mxfp4_q8_0_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_mxfp4_avx2, vec_dot_mxfp4_q8_0_avx2, gemv_mxfp4_q8_0_avx2,
                     gemm_mxfp4_q8_0_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, vec_dot_mxfp4_q8_0_vnni, gemv_mxfp4_q8_0_vnni, gemm_mxfp4_q8_0_vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_mxfp4_q8_0_neon, gemv_mxfp4_q8_0_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_mxfp4_q8_0_neondp, gemv_mxfp4_q8_0_neondp, gemm_mxfp4_q8_0_neondp},
#endif
};
