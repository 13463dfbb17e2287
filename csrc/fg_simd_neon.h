/* NEON helpers of the SIMD kernels (base NEON and the dotprod extension): the dotprod target, prefetch, the rows
 * helper of the 16-level table formats, and the row-lane tiles (8 rows in two float32x4) of the 32-element formats.
 * Included by fg_simd.h where FG_HAVE_NEON (the common part, fg_xaux and the kernel makers, comes first). */
#ifndef FG_SIMD_NEON_H
#define FG_SIMD_NEON_H

#include <arm_neon.h>
#include <stddef.h>

#if defined(__ARM_FEATURE_DOTPROD)
#define FG_TARGET_DOTPROD /* the whole build has it (e.g. -march=armv8.2-a+dotprod, Apple arm64) */
#elif defined(__clang__)
#define FG_TARGET_DOTPROD __attribute__((target("dotprod")))
#else
#define FG_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif

/* i8mm (SMMLA, vmmlaq_s32) on top of dotprod: gcc 10 and clang 16 on take it as a target attribute (older clangs'
 * arm_neon.h declares vmmlaq_s32 only under -march with i8mm); elsewhere no i8mm kernels are compiled. */
#if defined(__ARM_FEATURE_MATMUL_INT8) && defined(__ARM_FEATURE_DOTPROD)
#define FG_HAVE_I8MM 1
#define FG_TARGET_I8MM /* the whole build has it (e.g. -march=armv8.6-a, Apple M2 on with -mcpu) */
#elif defined(__clang__) && __clang_major__ >= 16
#define FG_HAVE_I8MM 1
#define FG_TARGET_I8MM __attribute__((target("dotprod,i8mm")))
#elif !defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10
#define FG_HAVE_I8MM 1
#define FG_TARGET_I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#else
#define FG_HAVE_I8MM 0
#endif

/* As on x86: ask for the next group of 4 rows. */
#ifdef FG_NO_PREFETCH
#define fg_prefetch(p, stride) ((void)(p), (void)(stride))
#else
#define fg_prefetch(p, stride) fg_prefetch_line((const char *)(p) + 4 * (stride))
#endif

/* 16 bits -> 16 bytes, 0xff where the bit is set: byte j <- bit j. */
static inline uint8x16_t fg_bits_to_bytes_neon(uint32_t bits) {
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)(bits & 0xff)), vdup_n_u8((uint8_t)((bits >> 8) & 0xff)));
    return vtstq_u8(v, vld1q_u8(bit));
}

/* 16 x int8 . 16 x int8 -> 4 int32 partial sums, without the dotprod extension. */
static inline int32x4_t fg_dot_s8_emul(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}

/* Rows helper (FG_DOT_FROM_ROWS) of a 16-level table format (IQ4_NL, MXFP4: see fg_simd_x86.h) . q8_0: BLOCK its
 * block type with nibbles qs, LEVELS its table, SCALE(b) the float scale of block b. */
#define FG_LUT4_ROWS_NEON(NAME, TARGET, DOT, BLOCK, LEVELS, SCALE)                                          \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_0 *x = vx;                                                                           \
        const int8x16_t table = vld1q_s8(LEVELS);                                                           \
        float32x4_t acc[4];                                                                                 \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);                                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const int8x16_t x0 = vld1q_s8(x[i].qs), x1 = vld1q_s8(x[i].qs + 16);                            \
            const float dx = fg_fp16_to_fp32(x[i].d);                                                       \
            for (int r = 0; r < R; r++) {                                                                   \
                const BLOCK *b = (const BLOCK *)(w + r * stride) + i;                                       \
                fg_prefetch(b, stride);                                                                     \
                const uint8x16_t q = vld1q_u8(b->qs);                                                       \
                int32x4_t s = DOT(vdupq_n_s32(0), vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0f))), x0);    \
                s = DOT(s, vqtbl1q_s8(table, vshrq_n_u8(q, 4)), x1);                                        \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(s), SCALE(b) * dx);                              \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]);                                              \
    }

/* ---- row-lane tiles (FG_KERNELS_FROM_TILE8) on NEON: the AVX2 design with 8 rows in two float32x4 (rows 0..3 and
 * 4..7, row r in lane r % 4 of half r / 4). Built on the dotprod extension only: vdotq_laneq_s32 dots 4 rows x 4
 * consecutive bytes (one int8x16 of transposed weights) with one broadcast 4-byte group of an activation, the AVX2
 * tile's broadcast + maddubs in one instruction. Base NEON keeps its rows kernels (and no gemm): emulated, the lane dot
 * costs several instructions per group, and no aarch64 machine was at hand to measure which way wins. ---- */

#define FG_INLINE_NEON static inline __attribute__((always_inline))

/* As fg_prefetch_tile8 on x86 (the same policy, see there). */
#ifdef FG_NO_PREFETCH
#define fg_prefetch_tile8_neon(w, stride, R, i, kc, bs) ((void)(w), (void)(stride), (void)(R), (void)(i), (void)(kc))
#else
#define fg_prefetch_tile8_neon(w, stride, R, i, kc, bs)                                                     \
    do {                                                                                                     \
        if ((stride) == (size_t)(kc) * (bs) && (stride) <= 1024) {                                          \
            const char *p_ = (const char *)(w) + 8 * (stride) + 4096 + (size_t)(i) * 8 * (bs);               \
            for (size_t l_ = 0; l_ < 8 * (bs); l_ += 64) fg_prefetch_line(p_ + l_);                         \
        } else {                                                                                             \
            for (int r_ = 0; r_ < (R); r_++)                                                                \
                fg_prefetch_line((const char *)(w) + (size_t)(i) * (bs) + (size_t)(r_ + 8) * (stride));      \
        }                                                                                                    \
    } while (0)
#endif

/* 16 bytes at p of rows 0..R-1 (R <= 4, `stride` apart; rows >= R read as zero) -> t[j] = bytes 4j..4j+3 of row i in
 * lane i: a 4x4 transpose of 32-bit lanes. */
FG_INLINE_NEON void fg_rows4_dwords_neon(const char *p, size_t stride, int R, int8x16_t t[4]) {
    uint32x4_t v[4];
    for (int k = 0; k < 4; k++)
        v[k] = k < R ? vreinterpretq_u32_u8(vld1q_u8((const uint8_t *)p + k * stride)) : vdupq_n_u32(0);
    const uint64x2_t a = vreinterpretq_u64_u32(vtrn1q_u32(v[0], v[1])); /* r0 r1 bytes 0..3 | 8..11 */
    const uint64x2_t b = vreinterpretq_u64_u32(vtrn2q_u32(v[0], v[1])); /* 4..7 | 12..15 */
    const uint64x2_t c = vreinterpretq_u64_u32(vtrn1q_u32(v[2], v[3]));
    const uint64x2_t d = vreinterpretq_u64_u32(vtrn2q_u32(v[2], v[3]));
    t[0] = vreinterpretq_s8_u64(vtrn1q_u64(a, c));
    t[1] = vreinterpretq_s8_u64(vtrn1q_u64(b, d));
    t[2] = vreinterpretq_s8_u64(vtrn2q_u64(a, c));
    t[3] = vreinterpretq_s8_u64(vtrn2q_u64(b, d));
}

/* The fp16 at p of rows 0..R-1 (R <= 4, `stride` apart) -> 4 floats, row i in lane i (lanes >= R zero). */
FG_INLINE_NEON float32x4_t fg_rows4_f16_neon(const char *p, size_t stride, int R) {
    uint16x4_t v = vdup_n_u16(0);
    uint16_t h;
#define FG_ROW_F16_NEON(i) if ((i) < R) { memcpy(&h, p + (i) * stride, 2); v = vset_lane_u16(h, v, i); }
    FG_ROW_F16_NEON(0) FG_ROW_F16_NEON(1) FG_ROW_F16_NEON(2) FG_ROW_F16_NEON(3)
#undef FG_ROW_F16_NEON
    return vcvt_f32_f16(vreinterpret_f16_u16(v));
}

/* lane i <- horizontal sum of v[i] (4 x 4 int32). */
FG_INLINE_NEON int32x4_t fg_hsum4_s32_neon(const int32x4_t v[4]) {
    return vpaddq_s32(vpaddq_s32(v[0], v[1]), vpaddq_s32(v[2], v[3]));
}

/* Row-lane accumulators in and out: acc[a][h] lane i <-> y[a * ldy + 4h + i] for 4h + i < R (0 in when first). */
FG_INLINE_NEON void fg_load_rows8_neon(const int R, const int M, int first, float32x4_t acc[][2], const float *y,
                                       int64_t ldy) {
    for (int a = 0; a < M; a++)
        for (int h = 0; h < 2; h++) {
            if (first || 4 * h >= R) {
                acc[a][h] = vdupq_n_f32(0.0f);
            } else if (4 * h + 4 <= R) {
                acc[a][h] = vld1q_f32(y + a * ldy + 4 * h);
            } else {
                float t[4] = {0};
                for (int r = 4 * h; r < R; r++) t[r - 4 * h] = y[a * ldy + r];
                acc[a][h] = vld1q_f32(t);
            }
        }
}
FG_INLINE_NEON void fg_store_rows8_neon(const int R, const int M, float32x4_t acc[][2], float *y, int64_t ldy) {
    for (int a = 0; a < M; a++)
        for (int h = 0; h < 2 && 4 * h < R; h++) {
            if (4 * h + 4 <= R) {
                vst1q_f32(y + a * ldy + 4 * h, acc[a][h]);
            } else {
                float t[4];
                vst1q_f32(t, acc[a][h]);
                for (int r = 4 * h; r < R; r++) y[a * ldy + r] = t[r - 4 * h];
            }
        }
}

/* Per activation block, as fg_q8_0_aux / fg_q8_1_aux on x86: the scale d (and q8_1's s = d * sum(q)). */
FG_INLINE_NEON void fg_q8_0_aux_neon(const char *x, int kc, fg_xaux *aux) {
    const block_q8_0 *xb = (const block_q8_0 *)x;
    for (int i = 0; i < kc; i++) {
        aux[i].d = fg_fp16_to_fp32(xb[i].d);
        aux[i].c = 0;
    }
}
FG_INLINE_NEON void fg_q8_1_aux_neon(const char *x, int kc, fg_xaux *aux) {
    const block_q8_1 *xb = (const block_q8_1 *)x;
    for (int i = 0; i < kc; i++) {
        aux[i].d = fg_fp16_to_fp32(xb[i].d);
        aux[i].s = fg_fp16_to_fp32(xb[i].s);
    }
}

/* The formats of 32-element blocks with 32 int8 weights per block after unpacking, against q8_0 (q8_1: Q4_1, Q5_1). */
enum { FG_B32_Q4_0, FG_B32_Q4_1, FG_B32_Q8_0, FG_B32_IQ4_NL, FG_B32_MXFP4, FG_B32_Q5_0, FG_B32_Q5_1 };

/* Bytes per block, and the offsets of the quants and (Q5_0, Q5_1) of the 32 fifth bits. */
FG_INLINE_NEON size_t fg_b32_size(const int fmt) {
    return fmt == FG_B32_Q4_1 ? sizeof(block_q4_1) : fmt == FG_B32_Q8_0 ? sizeof(block_q8_0)
         : fmt == FG_B32_MXFP4 ? sizeof(block_mxfp4) : fmt == FG_B32_Q5_0 ? sizeof(block_q5_0)
         : fmt == FG_B32_Q5_1 ? sizeof(block_q5_1) : sizeof(block_q4_0);
}
FG_INLINE_NEON size_t fg_b32_qs(const int fmt) {
    return fmt == FG_B32_Q4_1 ? offsetof(block_q4_1, qs) : fmt == FG_B32_MXFP4 ? offsetof(block_mxfp4, qs)
         : fmt == FG_B32_Q5_0 ? offsetof(block_q5_0, qs) : fmt == FG_B32_Q5_1 ? offsetof(block_q5_1, qs)
         : offsetof(block_q4_0, qs);
}
FG_INLINE_NEON size_t fg_b32_qh(const int fmt) {
    return fmt == FG_B32_Q5_1 ? offsetof(block_q5_1, qh) : offsetof(block_q5_0, qh);
}

/* Nibbles l (elements e), u (e + 16) and, for Q5_*, their fifth bits as 0x10 bytes (hl, hu) -> int8 weights. */
FG_INLINE_NEON void fg_b32_levels_neon(const int fmt, const int8x16_t levels, uint8x16_t l, uint8x16_t u, uint8x16_t hl,
                                       uint8x16_t hu, int8x16_t *lo, int8x16_t *hi) {
    if (fmt == FG_B32_Q5_0 || fmt == FG_B32_Q5_1) l = vorrq_u8(l, hl), u = vorrq_u8(u, hu);
    if (fmt == FG_B32_IQ4_NL || fmt == FG_B32_MXFP4) {
        *lo = vqtbl1q_s8(levels, l), *hi = vqtbl1q_s8(levels, u);
    } else if (fmt == FG_B32_Q4_0 || fmt == FG_B32_Q5_0) {
        const int8x16_t off = vdupq_n_s8(fmt == FG_B32_Q4_0 ? 8 : 16);
        *lo = vsubq_s8(vreinterpretq_s8_u8(l), off), *hi = vsubq_s8(vreinterpretq_s8_u8(u), off);
    } else {
        *lo = vreinterpretq_s8_u8(l), *hi = vreinterpretq_s8_u8(u);
    }
}

/* One row's block at b -> its 32 weights as int8: lo = elements 0..15, hi = 16..31. */
FG_INLINE_NEON void fg_b32_row_neon(const char *b, const int fmt, const int8x16_t levels, int8x16_t *lo,
                                    int8x16_t *hi) {
    if (fmt == FG_B32_Q8_0) {
        *lo = vld1q_s8((const int8_t *)b + offsetof(block_q8_0, qs));
        *hi = vld1q_s8((const int8_t *)b + offsetof(block_q8_0, qs) + 16);
        return;
    }
    const uint8x16_t q = vld1q_u8((const uint8_t *)b + fg_b32_qs(fmt)), m4 = vdupq_n_u8(0x0f), m10 = vdupq_n_u8(0x10);
    uint8x16_t hl = m10, hu = m10;
    if (fmt == FG_B32_Q5_0 || fmt == FG_B32_Q5_1) {
        uint32_t h;
        memcpy(&h, b + fg_b32_qh(fmt), 4);
        hl = vandq_u8(fg_bits_to_bytes_neon(h & 0xffff), m10), hu = vandq_u8(fg_bits_to_bytes_neon(h >> 16), m10);
    }
    fg_b32_levels_neon(fmt, levels, vandq_u8(q, m4), vshrq_n_u8(q, 4), hl, hu, lo, hi);
}

/* Rows 0..R-1 (R <= 4) of the block at b -> k[g] = elements 4g..4g+3 of row i in lane i (g < 8), transposed once.
 * Q5_*: the fifth bits of elements 4g..4g+3 are bits 4g..4g+3 of each row's 32-bit qh, in byte g / 2: that byte of
 * every lane is copied to the lane's 4 bytes and each byte tests its own bit. */
FG_INLINE_NEON void fg_b32_rows4_neon(const char *b, size_t stride, int R, const int fmt, const int8x16_t levels,
                                      int8x16_t k[8]) {
    if (fmt == FG_B32_Q8_0) {
        fg_rows4_dwords_neon(b + offsetof(block_q8_0, qs), stride, R, k);
        fg_rows4_dwords_neon(b + offsetof(block_q8_0, qs) + 16, stride, R, k + 4);
        return;
    }
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m10 = vdupq_n_u8(0x10);
    int8x16_t t[4];
    fg_rows4_dwords_neon(b + fg_b32_qs(fmt), stride, R, t);
    uint8x16_t qh = vdupq_n_u8(0);
    if (fmt == FG_B32_Q5_0 || fmt == FG_B32_Q5_1) {
        uint32_t h[4] = {0, 0, 0, 0};
        for (int r = 0; r < R; r++) memcpy(&h[r], b + r * stride + fg_b32_qh(fmt), 4);
        qh = vreinterpretq_u8_u32(vld1q_u32(h));
    }
    static const uint8_t bit_lo[16] = {1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8};
    static const uint8_t bit_hi[16] = {16, 32, 64, 128, 16, 32, 64, 128, 16, 32, 64, 128, 16, 32, 64, 128};
    static const uint8_t lane_base[16] = {0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12}; /* lane i's byte 0 */
    for (int j = 0; j < 4; j++) {
        const uint8x16_t q = vreinterpretq_u8_s8(t[j]);
        uint8x16_t hl = m10, hu = m10;
        if (fmt == FG_B32_Q5_0 || fmt == FG_B32_Q5_1) { /* elements 4j.. in byte j / 2, 16 + 4j.. in byte 2 + j / 2 */
            const uint8x16_t bits = vld1q_u8(j % 2 ? bit_hi : bit_lo);
            const uint8x16_t il = vaddq_u8(vld1q_u8(lane_base), vdupq_n_u8((uint8_t)(j / 2)));
            hl = vandq_u8(vtstq_u8(vqtbl1q_u8(qh, il), bits), m10);
            hu = vandq_u8(vtstq_u8(vqtbl1q_u8(qh, vaddq_u8(il, vdupq_n_u8(2))), bits), m10);
        }
        fg_b32_levels_neon(fmt, levels, vandq_u8(q, m4), vshrq_n_u8(q, 4), hl, hu, &k[j], &k[4 + j]);
    }
}

/* The block scales of rows 0..R-1 (R <= 4): d, and Q4_1's m. */
FG_INLINE_NEON float32x4_t fg_b32_scale4_neon(const char *b, size_t stride, int R, const int fmt) {
    if (fmt != FG_B32_MXFP4) return fg_rows4_f16_neon(b, stride, R);
    float32x4_t v = vdupq_n_f32(0.0f);
#define FG_ROW_E8_NEON(i) \
    if ((i) < R) v = vsetq_lane_f32(fg_e8m0_to_fp32_half(*(const uint8_t *)(b + (i) * stride)), v, i);
    FG_ROW_E8_NEON(0) FG_ROW_E8_NEON(1) FG_ROW_E8_NEON(2) FG_ROW_E8_NEON(3)
#undef FG_ROW_E8_NEON
    return v;
}

/* R <= 8 rows x M <= 8 activations of a 32-element format (FG_B32_*) . q8_0 / q8_1, row r in lane r % 4 of half r / 4
 * (see FG_KERNELS_FROM_TILE8). M > 1: each half's weights are transposed once per block (k[g]: elements 4g..4g+3 of 4
 * rows) and dotted by vdotq_laneq_s32 with each activation's 4-byte groups. M = 1 (the gemv) dots each row in element
 * order and reduces the rows' partial sums into lanes instead: nothing would share a transpose. The integer block sums
 * are exact either way, so the float step decides the result: Q4_0 and Q8_0 take the AVX2 tile's
 * acc = fma((float)sumi, dw * dx, acc); Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 the scalar reference's
 * acc += (float)sumi * (dw * dx) (+ mw * sx for Q4_1, Q5_1), no FMA, so every path equals the scalar vec_dot bit for
 * bit. The tile is FG_B32_TILE8_NEON below, stamped with the M > 1 sums of dotprod (the transposes above) and of
 * i8mm (SMMLA on row pairs x activation pairs: the same exact sums, so the same bits). */

/* M > 1, dotprod: per activation 8 vdotq_laneq_s32 against the 4 rows' transposed block k (fg_b32_rows4_neon). */
FG_INLINE_NEON FG_TARGET_DOTPROD void fg_b32_dots_neondp(const int fmt, const int M, const char *wh, size_t stride,
                                                         int Rh, const int8x16_t table, const int8_t *x, size_t xs,
                                                         int32x4_t *dot) {
    int8x16_t k[8];
    fg_b32_rows4_neon(wh, stride, Rh, fmt, table, k);
    for (int a = 0; a < M; a++) {
        const int8x16_t x0 = vld1q_s8(x + a * xs), x1 = vld1q_s8(x + a * xs + 16);
        int32x4_t s = vdotq_laneq_s32(vdupq_n_s32(0), k[0], x0, 0);
        s = vdotq_laneq_s32(s, k[1], x0, 1);
        s = vdotq_laneq_s32(s, k[2], x0, 2);
        s = vdotq_laneq_s32(s, k[3], x0, 3);
        s = vdotq_laneq_s32(s, k[4], x1, 0);
        s = vdotq_laneq_s32(s, k[5], x1, 1);
        s = vdotq_laneq_s32(s, k[6], x1, 2);
        dot[a] = vdotq_laneq_s32(s, k[7], x1, 3);
    }
}

/* The tile's M = 1 block sums (the gemv): each row dotted in element order, the rows' partial sums reduced into
 * lanes. */
FG_INLINE_NEON FG_TARGET_DOTPROD int32x4_t fg_b32_dot1_neondp(const int fmt, const char *wh, size_t stride, int Rh,
                                                              const int8x16_t table, const int8_t *xq) {
    const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
    int32x4_t v[4];
    for (int r = 0; r < 4; r++) {
        v[r] = vdupq_n_s32(0);
        if (r >= Rh) continue;
        int8x16_t lo, hi;
        fg_b32_row_neon(wh + r * stride, fmt, table, &lo, &hi);
        v[r] = vdotq_s32(vdotq_s32(v[r], lo, x0), hi, x1);
    }
    return fg_hsum4_s32_neon(v);
}

/* The tile (stamped per extension with DOTS, its M > 1 block sums). */
#define FG_B32_TILE8_NEON(NAME, TARGET, DOTS)                                                                          \
    FG_INLINE_NEON TARGET void NAME(const int R, const int M, int first, int kc, const char *w, size_t stride,         \
                                    const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy,     \
                                    const int fmt, const int8_t *levels) {                                            \
        const int offset = fmt == FG_B32_Q4_1 || fmt == FG_B32_Q5_1; /* x = d q + m, against q8_1 */                  \
        const size_t bs = fg_b32_size(fmt);                                                                           \
        const size_t xbs = offset ? sizeof(block_q8_1) : sizeof(block_q8_0);                                          \
        const size_t xqs = offset ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs);                              \
        const int8x16_t table = levels ? vld1q_s8(levels) : vdupq_n_s8(0);                                            \
        const int H = R > 4 ? 2 : 1; /* halves holding rows */                                                        \
        float32x4_t acc[8][2];      /* [a][h]: rows 4h..4h+3 */                                                       \
        fg_load_rows8_neon(R, M, first, acc, y, ldy);                                                                 \
        for (int i = 0; i < kc; i++) {                                                                                \
            const char *wb = w + i * bs;                                                                              \
            fg_prefetch_tile8_neon(w, stride, R, i, kc, bs);                                                          \
            for (int h = 0; h < H; h++) {                                                                             \
                const char *wh = wb + 4 * h * stride;                                                                 \
                const int Rh = R - 4 * h > 4 ? 4 : R - 4 * h;                                                         \
                const float32x4_t dw = fg_b32_scale4_neon(wh, stride, Rh, fmt);                                       \
                const float32x4_t mw = offset ? fg_rows4_f16_neon(wh + 2, stride, Rh) : dw; /* m: the fp16 after d */ \
                const int8_t *xq = (const int8_t *)x + i * xbs + xqs;                                                 \
                int32x4_t dot[8];                                                                                     \
                if (M == 1) dot[0] = fg_b32_dot1_neondp(fmt, wh, stride, Rh, table, xq);                              \
                else DOTS(fmt, M, wh, stride, Rh, table, xq, xs, dot);                                                \
                for (int a = 0; a < M; a++) {                                                                         \
                    const float32x4_t sf = vcvtq_f32_s32(dot[a]), d = vmulq_n_f32(dw, aux[a][i].d);                   \
                    if (fmt == FG_B32_Q4_0 || fmt == FG_B32_Q8_0) {                                                   \
                        acc[a][h] = vfmaq_f32(acc[a][h], sf, d);                                                      \
                    } else if (offset) {                                                                              \
                        acc[a][h] =                                                                                   \
                            vaddq_f32(acc[a][h], vaddq_f32(vmulq_f32(sf, d), vmulq_n_f32(mw, aux[a][i].s)));          \
                    } else {                                                                                          \
                        acc[a][h] = vaddq_f32(acc[a][h], vmulq_f32(sf, d));                                           \
                    }                                                                                                 \
                }                                                                                                     \
            }                                                                                                         \
        }                                                                                                             \
        fg_store_rows8_neon(R, M, acc, y, ldy);                                                                       \
    }
FG_B32_TILE8_NEON(fg_b32_tile8_neondp, FG_TARGET_DOTPROD, fg_b32_dots_neondp)

#if FG_HAVE_I8MM
/* Two rows' 32 weights (lo: elements 0..15, hi: 16..31) -> the 4 SMMLA operands of the row pair: c[j] = elements
 * 8j..8j+7 of row a (bytes 0..7), then of row b (8..15). The same for two activations. */
FG_INLINE_NEON void fg_pair8_neon(int8x16_t alo, int8x16_t ahi, int8x16_t blo, int8x16_t bhi, int8x16_t c[4]) {
    c[0] = vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(alo), vreinterpretq_s64_s8(blo)));
    c[1] = vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(alo), vreinterpretq_s64_s8(blo)));
    c[2] = vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(ahi), vreinterpretq_s64_s8(bhi)));
    c[3] = vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(ahi), vreinterpretq_s64_s8(bhi)));
}

/* 32 elements of a row pair (w: fg_pair8_neon) . 32 of an activation pair (x): SMMLA's 2x2 int32 products, lanes
 * (row 0, act 0), (row 0, act 1), (row 1, act 0), (row 1, act 1), accumulated on acc. */
FG_INLINE_NEON FG_TARGET_I8MM int32x4_t fg_mm32_neoni8mm(int32x4_t acc, const int8x16_t w[4], const int8x16_t x[4]) {
    acc = vmmlaq_s32(acc, w[0], x[0]);
    acc = vmmlaq_s32(acc, w[1], x[1]);
    acc = vmmlaq_s32(acc, w[2], x[2]);
    return vmmlaq_s32(acc, w[3], x[3]);
}

/* M > 1, i8mm: the 4 rows as 2 pairs, each activation pair (the last one of an odd M paired with itself) 8 SMMLA;
 * the pairs' 2x2 sums, rows 0-1 in p[0] and 2-3 in p[1], unzip to each activation's 4 row lanes. Exact int32 as the
 * dotprod sums, so the tile's float step gives the dotprod tile's bits. */
FG_INLINE_NEON FG_TARGET_I8MM void fg_b32_dots_neoni8mm(const int fmt, const int M, const char *wh, size_t stride,
                                                        int Rh, const int8x16_t table, const int8_t *x, size_t xs,
                                                        int32x4_t *dot) {
    int8x16_t lo[4], hi[4], wp[2][4];
    for (int r = 0; r < 4; r++) {
        lo[r] = hi[r] = vdupq_n_s8(0);
        if (r < Rh) fg_b32_row_neon(wh + r * stride, fmt, table, &lo[r], &hi[r]);
    }
    fg_pair8_neon(lo[0], hi[0], lo[1], hi[1], wp[0]);
    fg_pair8_neon(lo[2], hi[2], lo[3], hi[3], wp[1]);
    for (int a = 0; a < M; a += 2) {
        const int8_t *xa = x + a * xs, *xb = a + 1 < M ? xa + xs : xa;
        int8x16_t xp[4];
        fg_pair8_neon(vld1q_s8(xa), vld1q_s8(xa + 16), vld1q_s8(xb), vld1q_s8(xb + 16), xp);
        const int32x4_t p0 = fg_mm32_neoni8mm(vdupq_n_s32(0), wp[0], xp);
        const int32x4_t p1 = Rh > 2 ? fg_mm32_neoni8mm(vdupq_n_s32(0), wp[1], xp) : vdupq_n_s32(0);
        dot[a] = vuzp1q_s32(p0, p1);
        if (a + 1 < M) dot[a + 1] = vuzp2q_s32(p0, p1);
    }
}
FG_B32_TILE8_NEON(fg_b32_tile8_neoni8mm, FG_TARGET_I8MM, fg_b32_dots_neoni8mm)

/* A 32-element format's i8mm kernels vec_dot_<SFX>_neoni8mm, gemv_..., gemm_... (its FG_ROW_I8MM row): FMT its
 * FG_B32_*, LEVELS its 16-level table or NULL, AUX the activation's fg_q8_*_aux_neon, WB / XB the weight and
 * activation block sizes, BLK elements per block. */
#define FG_B32_KERNELS_NEONI8MM(SFX, FMT, LEVELS, AUX, WB, XB, BLK)                                                  \
    FG_INLINE_NEON FG_TARGET_I8MM void SFX##_tile8_neoni8mm(const int R, const int M, int first, int kc,            \
                                                            const char *w, size_t stride, const char *x, size_t xs, \
                                                            const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {   \
        fg_b32_tile8_neoni8mm(R, M, first, kc, w, stride, x, xs, aux, y, ldy, FMT, LEVELS);                         \
    }                                                                                                               \
    FG_KERNELS_FROM_TILE8(vec_dot_##SFX##_neoni8mm, gemv_##SFX##_neoni8mm, gemm_##SFX##_neoni8mm, FG_TARGET_I8MM,    \
                          SFX##_tile8_neoni8mm, AUX, WB, XB, BLK, 8)
#endif /* FG_HAVE_I8MM */

#endif
