/* The AVX-512 VNNI panel gemm of Q4_0 and Q8_0 (many activations; FG_GEMM_FROM_PANEL_KM): 16 weight rows in the
 * lanes of a zmm x up to 8 activations, over a panel of FG_PV_KC blocks unpacked once (fg_panel16: per block 8 zmm of
 * unsigned row-lane bytes u, q[j] holding elements 4j..4j+3 of every row, and the rows' scales) by the format's FILL,
 * and up to FG_PV_MG activations run over each panel.
 *
 * Shape, per block of the panel: for j = 0..7, q[j] is read once and every activation's 4 bytes at 4j are broadcast
 * into its own dpbusd chain: M independent chains. (The 16-activation tile it replaces ran one chain of 8 dependent
 * dpbusd per activation and held 16 accumulators plus the 8 weight vectors, reloading the weights per activation.)
 * Registers: M float accumulators, M int32 sums, one weight vector, the broadcasts. Sizes: the panel is 16 rows x 32
 * blocks (18 KB) so that it and 8 activations' blocks (8.7 KB) stay in L1 (64 blocks, 37 KB, did not: 1.1x slower on
 * 2048x2048 x 256, busy); 256 activations per panel pay its unpack (transposes) once per 256; the aux (each block's
 * scale and correction per activation) is 64 KB.
 *
 * Exactness: each chain is the block's exact dot with u (Q4_0: u = q + 8 in 0..15; Q8_0: u = w + 128), minus aux.c
 * at the end (Q4_0: 8 * sum(x); Q8_0: 128 * sum(x)), as the format's lanes tile and gemv compute it in another order
 * (integer sums are order-free and nothing overflows: |dot| < 32 * 255 * 128 < 2^31). Then the same float step per
 * (row, activation): acc = fma((float)dot, dw * dx, acc), block by block in order, so the gemm equals the gemv bit
 * for bit. The 16-level table formats (IQ4_NL, MXFP4) fill it with u = level + 128 by table lookup (fg_lut4_fill16,
 * fg_simd_x86.h) and take the unfused step (fg_panel_tile16_vnni_mul). */
#ifndef FG_PANEL_VNNI_H
#define FG_PANEL_VNNI_H

#include "fg_simd.h"

#define FG_PV_KC 32
#define FG_PV_MG 256

#if FG_HAVE_X86
/* R <= 16 rows (lanes; masked at y) x M <= 8 activations (x, xs apart; M a constant after inlining) over kc <=
 * FG_PV_KC blocks of the panel p; aux[a][i]: activation a's block i scale and offset correction (aux.c). */
FG_INLINE_AVX512_VNNI void fg_panel_tile16_vnni_ops(const int R, const int M, int first, int kc, const fg_panel16 *p,
                                                    const char *x, size_t xs, const fg_xaux (*aux)[FG_PV_KC], float *y,
                                                    int64_t ldy, const int fused) {
    __m512 acc[8]; /* [a]: 16 rows */
    fg_load_rows16(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        __m512i t[8]; /* [a]: 16 rows' block dot with u */
        for (int a = 0; a < M; a++) t[a] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            const __m512i u = p[i].q[j];
            for (int a = 0; a < M; a++) {
                const int8_t *xq = ((const block_q8_0 *)(x + a * xs) + i)->qs;
                t[a] = _mm512_dpbusd_epi32(t[a], u, fg_bcast32_512(xq + 4 * j));
            }
        }
        /* the correction last: a vector sub from memory, where a chain started at -c took a scalar negation and a
         * broadcast from a general register per activation (~5% on 2048x2048 x 256, busy) */
        for (int a = 0; a < M; a++) {
            const __m512i dot = _mm512_sub_epi32(t[a], _mm512_set1_epi32(aux[a][i].c));
            const __m512 s = _mm512_mul_ps(p[i].d, _mm512_set1_ps(aux[a][i].d));
            acc[a] = fused ? _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc[a])
                           : _mm512_add_ps(acc[a], _mm512_mul_ps(_mm512_cvtepi32_ps(dot), s));
        }
    }
    fg_store_rows16(R, M, acc, y, ldy);
}
/* The panel tiles: Q4_0 and Q8_0 take the fused step of their lanes tiles; the 16-level table formats (IQ4_NL, MXFP4)
 * the scalar references' acc + (float)dot * (dw * dx), unfused, so they equal the scalar vec_dot bit for bit. */
FG_INLINE_AVX512_VNNI void fg_panel_tile16_vnni(const int R, const int M, int first, int kc, const fg_panel16 *p,
                                                const char *x, size_t xs, const fg_xaux (*aux)[FG_PV_KC], float *y,
                                                int64_t ldy) {
    fg_panel_tile16_vnni_ops(R, M, first, kc, p, x, xs, aux, y, ldy, 1);
}
FG_INLINE_AVX512_VNNI void fg_panel_tile16_vnni_mul(const int R, const int M, int first, int kc, const fg_panel16 *p,
                                                    const char *x, size_t xs, const fg_xaux (*aux)[FG_PV_KC], float *y,
                                                    int64_t ldy) {
    fg_panel_tile16_vnni_ops(R, M, first, kc, p, x, xs, aux, y, ldy, 0);
}

/* The gemm NAME from the format's FILL (one block of 16 rows into a fg_panel16) and AUX (its activation's scale and
 * correction), below FG_PANEL_MIN_M activations the format's lanes gemm FEW. */
#define FG_GEMM_PANEL_VNNI(NAME, FILL, AUX, FEW, WBLK) \
    FG_GEMM_PANEL_VNNI_PT(NAME, fg_panel_tile16_vnni, FILL, AUX, FEW, WBLK)
/* The same with the panel tile PTILE given (fg_panel_tile16_vnni_mul: the unfused float step). */
#define FG_GEMM_PANEL_VNNI_PT(NAME, PTILE, FILL, AUX, FEW, WBLK)                                                   \
    FG_GEMM_FROM_PANEL_KM(NAME, FG_TARGET_AVX512_VNNI FG_NO_UNROLL_JAM, fg_panel16, FILL, PTILE, AUX, FEW, WBLK,   \
                          sizeof(block_q8_0), 32, 8, 16, FG_PV_KC, FG_PV_MG)

/* A 16-level table format's AVX-512 VNNI kernels (IQ4_NL, MXFP4: blocks of 32 with one scale, u = level + 128 by
 * table lookup, dpbusd, rows in lanes; fg_simd_x86.h's fg_lut4_*_vnni): vec_dot and the gemm's few-activation
 * 16-row zmm tiles (P##_q8_0_vnni_tiles), the gemv 8 rows at a time read as 8 ascending streams (FG_GEMV_STREAMS) and
 * the panel gemm for many activations; every path bit-exact with the scalar reference. BLOCK: the block type,
 * QK: its weights, TABLE: the levels, SCALE: FG_SCALE_* of its scale. Defines vec_dot_##P##_q8_0_vnni,
 * gemv_##P##_q8_0_vnni and gemm_##P##_q8_0_vnni. */
#define FG_LUT4_KERNELS_VNNI(P, BLOCK, QK, TABLE, SCALE)                                                            \
    FG_INLINE_AVX512_VNNI void P##_tile16_vnni(const int R, const int M, int first, int kc, const char *w,         \
                                               size_t stride, const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], \
                                               float *y, int64_t ldy) {                                          \
        fg_lut4_tile16_vnni(R, M, first, kc, w, stride, x, xs, aux, y, ldy, TABLE, sizeof(BLOCK),                \
                            offsetof(BLOCK, qs), SCALE);                                                         \
    }                                                                                                            \
    /* the streams gemv's one-activation tile: 8 rows in ymm lanes, fg_stream_ahead on asked for */              \
    FG_INLINE_AVX512_VNNI void P##_tile8_vnni_gemv(const int R, int first, int kc, const char *w, size_t stride,   \
                                                   size_t ahead, const char *x, const fg_xaux (*aux)[FG_KC],     \
                                                   float *y) {                                                   \
        fg_lut4_tile8_vnni_at(R, 1, first, kc, w, stride, ahead, x, 0, aux, y, 0, TABLE, sizeof(BLOCK),          \
                              offsetof(BLOCK, qs), SCALE);                                                       \
    }                                                                                                            \
    FG_GEMM_DOT_FROM_TILE(vec_dot_##P##_q8_0_vnni, gemm_##P##_q8_0_vnni_tiles, FG_TARGET_AVX512_VNNI,             \
                          P##_tile16_vnni, fg_q8_0_aux128, sizeof(BLOCK), sizeof(block_q8_0), QK, 8, 16)         \
    FG_GEMV_STREAMS(gemv_##P##_q8_0_vnni, FG_TARGET_AVX512_VNNI, P##_tile8_vnni_gemv, gemm_##P##_q8_0_vnni_tiles,  \
                    fg_q8_0_aux128, sizeof(BLOCK), sizeof(block_q8_0), QK)                                       \
    FG_INLINE_AVX512_VNNI void P##_fill16(const int R, int kc, const char *w, size_t stride, fg_panel16 *p) {     \
        fg_lut4_fill16(R, kc, w, stride, p, TABLE, sizeof(BLOCK), offsetof(BLOCK, qs), SCALE);                   \
    }                                                                                                            \
    FG_GEMM_PANEL_VNNI_PT(gemm_##P##_q8_0_vnni, fg_panel_tile16_vnni_mul, P##_fill16, fg_q8_0_aux128,              \
                          gemm_##P##_q8_0_vnni_tiles, sizeof(BLOCK))
#endif /* FG_HAVE_X86 */

#endif
