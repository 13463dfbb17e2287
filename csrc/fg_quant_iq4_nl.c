/* IQ4_NL weights: 32 elements per block, x = d * kvalues[q] with q a 4-bit index into 16 non-uniform levels
 * (fg_kvalues_iq4nl, -127..113), nibbles as q4_0. Dot against Q8_0 activations: d dx sum kvalues[q] x. */
#include "fg_simd.h"
#include "fg_panel_vnni.h"
#include "fg_kquant_ref.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_iq4_nl_ref (bytes identical except the nibbles of all-zero blocks, see fg_quantize_iq4). */
static void quantize_row_iq4_nl_scalar(const float *x, void *vy, int64_t n) {
    block_iq4_nl *y = vy;
    uint8_t L[QK4_NL];
    float scale;
    uint16_t unused_h;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        memset(L, 0, sizeof L);
        fg_quantize_iq4(QK4_NL, x + i * QK4_NL, &y[i].d, y[i].qs, &unused_h, NULL, &scale, L, -1);
    }
}

/* ggml's quantize_iq4_nl without importance weights (what llama-quantize writes): ntry = 7. The final pass
 * recomputes every index from the chosen scale, so all-zero blocks are deterministic here (zero scale, index 8). */
void fg_quantize_row_iq4_nl_search(const float *x, void *vy, int64_t n) {
    block_iq4_nl *y = vy;
    uint8_t L[QK4_NL];
    float scale;
    uint16_t unused_h;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        memset(L, 0, sizeof L);
        fg_quantize_iq4(QK4_NL, x + i * QK4_NL, &y[i].d, y[i].qs, &unused_h, NULL, &scale, L, 7);
    }
}

static void dequantize_row_iq4_nl_scalar(const void *vx, float *y, int64_t n) {
    const block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const float d = fg_fp16_to_fp32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * fg_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + 16] = d * fg_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

static float vec_dot_iq4_nl_q8_0_scalar(int64_t n, const void *vw, const void *vx) {
    const block_iq4_nl *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += fg_kvalues_iq4nl[w[i].qs[j] & 0xf] * x[i].qs[j];
            sumi += fg_kvalues_iq4nl[w[i].qs[j] >> 4] * x[i].qs[j + 16];
        }
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d));
    }
    return sum;
}

#if FG_HAVE_X86
/* ---- AVX2: fg_simd_x86.h's 16-level table format kernels (levels by byte shuffle, |k| . (x with k's sign)); the gemv
 * reads the rows as 8 ascending streams (FG_GEMV_STREAMS) ---- */
FG_TARGET_AVX2 static void dequantize_row_iq4_nl_avx2(const void *vx, float *y, int64_t n) {
    fg_lut4_dequantize_avx2(vx, y, n, fg_kvalues_iq4nl, sizeof(block_iq4_nl), offsetof(block_iq4_nl, qs), FG_SCALE_F16);
}

/* The tile with the prefetch distance `ahead` (fg_lut4_tile8_avx2_at); FG_TILE8_ENTRIES gives the gemm's tiles
 * (iq4_nl_tile8_avx2) and the streams gemv's (iq4_nl_tile8_avx2_gemv, FG_GEMV_STREAMS). */
FG_INLINE_AVX2 void iq4_nl_tile8_avx2_at(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                         size_t ahead, const char *x, size_t xs, const fg_xaux (*aux)[FG_KC],
                                         float *y, int64_t ldy) {
    fg_lut4_tile8_avx2_at(R, M, first, kc, w, stride, ahead, x, xs, aux, y, ldy, fg_kvalues_iq4nl,
                          sizeof(block_iq4_nl), offsetof(block_iq4_nl, qs), FG_SCALE_F16);
}
FG_TILE8_ENTRIES(iq4_nl_tile8_avx2, FG_INLINE_AVX2)
FG_KERNELS_FROM_TILE8_STREAMS(vec_dot_iq4_nl_q8_0_avx2, gemv_iq4_nl_q8_0_avx2, gemm_iq4_nl_q8_0_avx2,
                              FG_TARGET_AVX2, iq4_nl_tile8_avx2, fg_q8_0_aux,
                              sizeof(block_iq4_nl), sizeof(block_q8_0), QK4_NL)

/* ---- AVX-512 VNNI (fg_panel_vnni.h's FG_LUT4_KERNELS_VNNI) ---- */
FG_LUT4_KERNELS_VNNI(iq4_nl, block_iq4_nl, QK4_NL, fg_kvalues_iq4nl, FG_SCALE_F16)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: levels by table lookup, signed dot ---- */
#define IQ4_NL_SCALE(b) fg_fp16_to_fp32((b)->d)
FG_LUT4_ROWS_NEON(iq4_nl_rows_neon, FG_NO_TARGET, fg_dot_s8_emul, block_iq4_nl, fg_kvalues_iq4nl, IQ4_NL_SCALE)
FG_DOT_FROM_ROWS(vec_dot_iq4_nl_q8_0_neon, FG_NO_TARGET, iq4_nl_rows_neon, QK4_NL)
FG_GEMV_FROM_ROWS(gemv_iq4_nl_q8_0_neon, FG_NO_TARGET, iq4_nl_rows_neon, QK4_NL)
FG_INLINE_NEON FG_TARGET_DOTPROD void iq4_nl_tile8_neondp(const int R, const int M, int first, int kc, const char *w,
                                                    size_t stride, const char *x, size_t xs,
                                                    const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {
    fg_b32_tile8_neondp(R, M, first, kc, w, stride, x, xs, aux, y, ldy, FG_B32_IQ4_NL, fg_kvalues_iq4nl);
}
FG_KERNELS_FROM_TILE8(vec_dot_iq4_nl_q8_0_neondp, gemv_iq4_nl_q8_0_neondp, gemm_iq4_nl_q8_0_neondp, FG_TARGET_DOTPROD,
                      iq4_nl_tile8_neondp, fg_q8_0_aux_neon, sizeof(block_iq4_nl), sizeof(block_q8_0), QK4_NL, 8)
#if FG_HAVE_I8MM
FG_B32_KERNELS_NEONI8MM(iq4_nl_q8_0, FG_B32_IQ4_NL, fg_kvalues_iq4nl,
                        fg_q8_0_aux_neon, sizeof(block_iq4_nl), sizeof(block_q8_0), QK4_NL)
#endif
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_iq4_nl_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_iq4_nl_scalar, dequantize_row_iq4_nl_scalar, vec_dot_iq4_nl_q8_0_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_iq4_nl_avx2, vec_dot_iq4_nl_q8_0_avx2, gemv_iq4_nl_q8_0_avx2,
                     gemm_iq4_nl_q8_0_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, vec_dot_iq4_nl_q8_0_vnni, gemv_iq4_nl_q8_0_vnni, gemm_iq4_nl_q8_0_vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_iq4_nl_q8_0_neon, gemv_iq4_nl_q8_0_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_iq4_nl_q8_0_neondp, gemv_iq4_nl_q8_0_neondp, gemm_iq4_nl_q8_0_neondp},
#if FG_HAVE_I8MM
    [FG_ROW_I8MM] = {NULL, NULL, vec_dot_iq4_nl_q8_0_neoni8mm, gemv_iq4_nl_q8_0_neoni8mm, gemm_iq4_nl_q8_0_neoni8mm},
#endif
#endif
};
