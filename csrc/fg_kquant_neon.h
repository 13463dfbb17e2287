/* NEON+dotprod kernels of the K-quant dots against Q8_K (fg_quant_q4_k.c, q5_k.c, q6_k.c): row-lane tiles, and their
 * i8mm twins for Q4_K and Q5_K (SMMLA sums of row pairs x activation pairs, the same exact integers and float step).
 * Included by fg_kquant.h where FG_HAVE_NEON (after fg_simd.h and fg_kquant_ref.h). */
#ifndef FG_KQUANT_NEON_H
#define FG_KQUANT_NEON_H

/* ---- NEON+dotprod row-lane tiles of the K-quants (FG_KERNELS_FROM_TILE8 with aux = the Q8_K scale): the design of
 * fg_b32_tile8_neondp (fg_simd_neon.h), a super-block at a time. Each pair's integer sums are the scalar reference's
 * (sumi, and summ = mins . bsums for Q4_K, Q5_K), exact int32, and its lane takes the reference's float step in its
 * order:
 *   acc += (d * dx) * (float)sumi - (dmin * dx) * (float)summ        (Q6_K: no second term)
 * so vec_dot, gemv and gemm equal the scalar vec_dot bit for bit. M > 1: per super-block and half (4 rows) the
 * weights are transposed once (k[g]: bytes 4g..4g+3 of 4 rows, a byte permutation, so the per-byte unpacking applies
 * unchanged) and each sub-block is 8 (Q6_K: 4) vdotq_laneq_s32 per activation, weighted by the rows' scales in lanes.
 * M = 1: each row in element order (as the rows kernels), its partial sums reduced into lanes. ---- */
enum { FG_KQ_Q4_K, FG_KQ_Q5_K, FG_KQ_Q6_K };

/* Byte b of every 32-bit lane of t: unsigned, or sign-extended (b a run-time value). */
FG_INLINE_NEON int32x4_t fg_lane_byte_u(int8x16_t t, int b) {
    return vreinterpretq_s32_u32(vshrq_n_u32(vshlq_u32(vreinterpretq_u32_s8(t), vdupq_n_s32(24 - 8 * b)), 24));
}
FG_INLINE_NEON int32x4_t fg_lane_byte_s(int8x16_t t, int b) {
    return vshrq_n_s32(vshlq_s32(vreinterpretq_s32_s8(t), vdupq_n_s32(24 - 8 * b)), 24);
}

/* 4 groups k[0..3] (4 rows x 4 consecutive weights) . the 16 activation bytes x: int32 per row. */
FG_INLINE_NEON FG_TARGET_DOTPROD int32x4_t fg_dot4_lanes_neondp(const int8x16_t k[4], int8x16_t x) {
    int32x4_t s = vdotq_laneq_s32(vdupq_n_s32(0), k[0], x, 0);
    s = vdotq_laneq_s32(s, k[1], x, 1);
    s = vdotq_laneq_s32(s, k[2], x, 2);
    return vdotq_laneq_s32(s, k[3], x, 3);
}

/* Q4_K / Q5_K: 64 elements k (sub-blocks 2k, 2k+1) of 32 bytes q (nibbles) and, for Q5_K, 32 bytes h whose bits 2k,
 * 2k+1 are bit 4 of the low and high nibble's element -> lo (sub-block 2k), hi (2k+1) as int8. */
FG_INLINE_NEON void fg_k4_split_neon(const int fmt, uint8x16_t q, uint8x16_t h, int k, int8x16_t *lo, int8x16_t *hi) {
    uint8x16_t l = vandq_u8(q, vdupq_n_u8(0x0f)), u = vshrq_n_u8(q, 4);
    if (fmt == FG_KQ_Q5_K) {
        l = vorrq_u8(l, vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(4 - 2 * k))), vdupq_n_u8(0x10)));
        u = vorrq_u8(u, vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(3 - 2 * k))), vdupq_n_u8(0x10)));
    }
    *lo = vreinterpretq_s8_u8(l), *hi = vreinterpretq_s8_u8(u);
}

/* Q6_K: 4 x 16 bytes (ql run a, run b = a + 32, qh) of one element half -> the 4 quarters' q - 32 (element order
 * 32j + l for the bytes' l). */
FG_INLINE_NEON void fg_k6_split_neon(uint8x16_t la, uint8x16_t lb, uint8x16_t qh, int8x16_t u[4]) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m30 = vdupq_n_u8(0x30);
    const int8x16_t off = vdupq_n_s8(32);
    u[0] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(la, m4), vandq_u8(vshlq_n_u8(qh, 4), m30))), off);
    u[1] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(lb, m4), vandq_u8(vshlq_n_u8(qh, 2), m30))), off);
    u[2] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(la, 4), vandq_u8(qh, m30))), off);
    u[3] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(lb, 4), vandq_u8(vshrq_n_u8(qh, 2), m30))), off);
}

/* One row's super-block b . activation block xb: int32 partial sums of sumi (*is) and of summ (*ms). */
FG_INLINE_NEON FG_TARGET_DOTPROD void fg_kq_row_neondp(const int fmt, const uint8_t *b, const block_q8_K *xb,
                                                      int32x4_t *is, int32x4_t *ms) {
    int32x4_t s = vdupq_n_s32(0);
    if (fmt == FG_KQ_Q6_K) {
        const block_q6_K *w = (const block_q6_K *)b;
        for (int h = 0; h < 2; h++)
            for (int v = 0; v < 2; v++) { /* elements 128h + 32j + 16v + 0..15 */
                int8x16_t u[4];
                fg_k6_split_neon(vld1q_u8(w->ql + 64 * h + 16 * v), vld1q_u8(w->ql + 64 * h + 32 + 16 * v),
                                 vld1q_u8(w->qh + 32 * h + 16 * v), u);
                for (int j = 0; j < 4; j++)
                    s = vmlaq_n_s32(s, vdotq_s32(vdupq_n_s32(0), u[j], vld1q_s8(xb->qs + 128 * h + 32 * j + 16 * v)),
                                    w->scales[8 * h + 2 * j + v]);
            }
        *is = s, *ms = vdupq_n_s32(0);
        return;
    }
    const size_t qs = fmt == FG_KQ_Q5_K ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    uint8_t sm[16]; /* scales 0..7, mins 0..7 */
    fg_unpack_scales_k4(b + 4, sm);
    const uint8x16_t h0 = fmt == FG_KQ_Q5_K ? vld1q_u8(b + offsetof(block_q5_K, qh)) : vdupq_n_u8(0);
    const uint8x16_t h1 = fmt == FG_KQ_Q5_K ? vld1q_u8(b + offsetof(block_q5_K, qh) + 16) : vdupq_n_u8(0);
    for (int k = 0; k < QK_K / 64; k++) {
        const int8_t *xq = xb->qs + 64 * k;
        int8x16_t l0, u0, l1, u1;
        fg_k4_split_neon(fmt, vld1q_u8(b + qs + 32 * k), h0, k, &l0, &u0);
        fg_k4_split_neon(fmt, vld1q_u8(b + qs + 32 * k + 16), h1, k, &l1, &u1);
        const int32x4_t p0 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), l0, vld1q_s8(xq)), l1, vld1q_s8(xq + 16));
        const int32x4_t p1 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), u0, vld1q_s8(xq + 32)), u1, vld1q_s8(xq + 48));
        s = vmlaq_n_s32(vmlaq_n_s32(s, p0, sm[2 * k]), p1, sm[2 * k + 1]);
    }
    const int16x8_t bsp = vpaddq_s16(vld1q_s16(xb->bsums), vld1q_s16(xb->bsums + 8)); /* per 32 elements */
    const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm + 8)));
    *is = s, *ms = vmlal_high_s16(vmull_s16(vget_low_s16(bsp), vget_low_s16(mins)), bsp, mins);
}

/* Q4_K / Q5_K: ms[a] = summ = mins . bsums of every row in its lane (sc: the rows' unpacked scales transposed, [2],
 * [3] the mins). */
FG_INLINE_NEON void fg_kq_mins4_neon(const int8x16_t sc[4], const int M, const block_q8_K *const *xb, int32x4_t *ms) {
    int32x4_t mn[8];
    for (int j = 0; j < 8; j++) mn[j] = fg_lane_byte_u(sc[2 + j / 4], j % 4);
    for (int a = 0; a < M; a++) {
        const int16x8_t bsp = vpaddq_s16(vld1q_s16(xb[a]->bsums), vld1q_s16(xb[a]->bsums + 8));
        const int32x4_t b0 = vmovl_s16(vget_low_s16(bsp)), b1 = vmovl_high_s16(bsp);
        int32x4_t m = vmulq_laneq_s32(mn[0], b0, 0);
        m = vmlaq_laneq_s32(m, mn[1], b0, 1);
        m = vmlaq_laneq_s32(m, mn[2], b0, 2);
        m = vmlaq_laneq_s32(m, mn[3], b0, 3);
        m = vmlaq_laneq_s32(m, mn[4], b1, 0);
        m = vmlaq_laneq_s32(m, mn[5], b1, 1);
        m = vmlaq_laneq_s32(m, mn[6], b1, 2);
        ms[a] = vmlaq_laneq_s32(m, mn[7], b1, 3);
    }
}

/* Rows 0..R-1 (R <= 4, `stride` apart) of super-block b against M activations (`xs` apart, block xi): is[a], ms[a] =
 * sumi, summ of every row in its lane. */
FG_INLINE_NEON FG_TARGET_DOTPROD void fg_kq_rows4_neondp(const int fmt, const int M, const char *b, size_t stride,
                                                        int R, const char *x, size_t xs, int i, int32x4_t *is,
                                                        int32x4_t *ms) {
    const block_q8_K *xb[8];
    for (int a = 0; a < M; a++) xb[a] = (const block_q8_K *)(x + a * xs) + i, is[a] = ms[a] = vdupq_n_s32(0);
    int8x16_t sc[4]; /* [j]: scales 4j..4j+3 of row r in lane r, as bytes (Q4_K, Q5_K: [2], [3] the mins) */
    if (fmt == FG_KQ_Q6_K) {
        fg_rows4_dwords_neon(b + offsetof(block_q6_K, scales), stride, R, sc);
        for (int h = 0; h < 2; h++)
            for (int v = 0; v < 2; v++) { /* bytes l = 16v..16v+15 of the half's runs: elements 128h + 32j + l */
                int8x16_t la[4], lb[4], qh[4], u[4][4]; /* [j][g] */
                fg_rows4_dwords_neon(b + offsetof(block_q6_K, ql) + 64 * h + 16 * v, stride, R, la);
                fg_rows4_dwords_neon(b + offsetof(block_q6_K, ql) + 64 * h + 32 + 16 * v, stride, R, lb);
                fg_rows4_dwords_neon(b + offsetof(block_q6_K, qh) + 32 * h + 16 * v, stride, R, qh);
                for (int g = 0; g < 4; g++) {
                    int8x16_t t[4];
                    fg_k6_split_neon(vreinterpretq_u8_s8(la[g]), vreinterpretq_u8_s8(lb[g]),
                                     vreinterpretq_u8_s8(qh[g]), t);
                    for (int j = 0; j < 4; j++) u[j][g] = t[j];
                }
                for (int j = 0; j < 4; j++) {
                    const int s = 8 * h + 2 * j + v;
                    const int32x4_t scale = fg_lane_byte_s(sc[s / 4], s % 4);
                    for (int a = 0; a < M; a++) {
                        const int8x16_t xq = vld1q_s8(xb[a]->qs + 128 * h + 32 * j + 16 * v);
                        is[a] = vmlaq_s32(is[a], fg_dot4_lanes_neondp(u[j], xq), scale);
                    }
                }
            }
        return;
    }
    const size_t qs = fmt == FG_KQ_Q5_K ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    uint8_t sm[4][16] = {{0}};
    for (int r = 0; r < R; r++) fg_unpack_scales_k4((const uint8_t *)b + r * stride + 4, sm[r]);
    fg_rows4_dwords_neon((const char *)sm, 16, 4, sc);
    int8x16_t hq[8] = {vdupq_n_s8(0), vdupq_n_s8(0), vdupq_n_s8(0), vdupq_n_s8(0),
                       vdupq_n_s8(0), vdupq_n_s8(0), vdupq_n_s8(0), vdupq_n_s8(0)};
    if (fmt == FG_KQ_Q5_K) {
        fg_rows4_dwords_neon(b + offsetof(block_q5_K, qh), stride, R, hq);
        fg_rows4_dwords_neon(b + offsetof(block_q5_K, qh) + 16, stride, R, hq + 4);
    }
    for (int k = 0; k < QK_K / 64; k++) {
        int8x16_t t[8], lo[8], hi[8]; /* [g]: bytes (elements) 4g..4g+3 of the 32 */
        fg_rows4_dwords_neon(b + qs + 32 * k, stride, R, t);
        fg_rows4_dwords_neon(b + qs + 32 * k + 16, stride, R, t + 4);
        for (int g = 0; g < 8; g++)
            fg_k4_split_neon(fmt, vreinterpretq_u8_s8(t[g]), vreinterpretq_u8_s8(hq[g]), k, &lo[g], &hi[g]);
        const int32x4_t s0 = fg_lane_byte_u(sc[(2 * k) / 4], (2 * k) % 4);
        const int32x4_t s1 = fg_lane_byte_u(sc[(2 * k + 1) / 4], (2 * k + 1) % 4);
        for (int a = 0; a < M; a++) {
            const int8_t *xq = xb[a]->qs + 64 * k;
            const int32x4_t p0 = vaddq_s32(fg_dot4_lanes_neondp(lo, vld1q_s8(xq)),
                                           fg_dot4_lanes_neondp(lo + 4, vld1q_s8(xq + 16)));
            const int32x4_t p1 = vaddq_s32(fg_dot4_lanes_neondp(hi, vld1q_s8(xq + 32)),
                                           fg_dot4_lanes_neondp(hi + 4, vld1q_s8(xq + 48)));
            is[a] = vmlaq_s32(vmlaq_s32(is[a], p0, s0), p1, s1);
        }
    }
    fg_kq_mins4_neon(sc, M, xb, ms);
}

#ifdef FG_NO_PREFETCH
#define FG_KQ_PREFETCH_NEON(wb, R, stride, bs)
#else
#define FG_KQ_PREFETCH_NEON(wb, R, stride, bs) /* the same super-block 8 rows on */                                  \
    for (int r_ = 0; r_ < (R); r_++)                                                                                  \
        for (size_t c_ = 0; c_ < (bs); c_ += 64) fg_prefetch_line((wb) + (size_t)(r_ + 8) * (stride) + c_);
#endif

/* R <= 8 rows x M <= 8 activations of a K-quant (FG_KQ_*) . q8_K, row r in lane r % 4 of half r / 4: the tile,
 * stamped per extension with ROWS4, its M > 1 sums of 4 rows (M = 1: the dotprod row sums). */
#define FG_KQ_TILE8_NEON(NAME, TARGET, ROWS4)                                                                          \
    FG_INLINE_NEON TARGET void NAME(const int R, const int M, int first, int kc, const char *w, size_t stride,         \
                                    const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy,     \
                                    const int fmt) {                                                                  \
        const size_t bs = fmt == FG_KQ_Q6_K   ? sizeof(block_q6_K)                                                    \
                        : fmt == FG_KQ_Q5_K ? sizeof(block_q5_K)                                                      \
                                            : sizeof(block_q4_K);                                                     \
        const size_t d_off = fmt == FG_KQ_Q6_K ? offsetof(block_q6_K, d) : offsetof(block_q4_K, d);                   \
        const int H = R > 4 ? 2 : 1;                                                                                  \
        float32x4_t acc[8][2];                                                                                        \
        fg_load_rows8_neon(R, M, first, acc, y, ldy);                                                                 \
        for (int i = 0; i < kc; i++) {                                                                                \
            const char *wb = w + i * bs;                                                                              \
            FG_KQ_PREFETCH_NEON(wb, R, stride, bs)                                                                    \
            for (int h = 0; h < H; h++) {                                                                             \
                const char *wh = wb + 4 * h * stride;                                                                 \
                const int Rh = R - 4 * h > 4 ? 4 : R - 4 * h;                                                         \
                int32x4_t is[8], ms[8];                                                                               \
                if (M == 1) {                                                                                         \
                    int32x4_t vi[4], vm[4];                                                                           \
                    for (int r = 0; r < 4; r++) {                                                                     \
                        vi[r] = vm[r] = vdupq_n_s32(0);                                                               \
                        if (r < Rh)                                                                                   \
                            fg_kq_row_neondp(fmt, (const uint8_t *)wh + r * stride, (const block_q8_K *)x + i,        \
                                             &vi[r], &vm[r]);                                                         \
                    }                                                                                                 \
                    is[0] = fg_hsum4_s32_neon(vi), ms[0] = fg_hsum4_s32_neon(vm);                                     \
                } else {                                                                                              \
                    ROWS4(fmt, M, wh, stride, Rh, x, xs, i, is, ms);                                                  \
                }                                                                                                     \
                const float32x4_t d = fg_rows4_f16_neon(wh + d_off, stride, Rh);                                      \
                const float32x4_t dmin =                                                                              \
                    fmt == FG_KQ_Q6_K ? d : fg_rows4_f16_neon(wh + offsetof(block_q4_K, dmin), stride, Rh);           \
                for (int a = 0; a < M; a++) {                                                                         \
                    const float32x4_t t0 = vmulq_f32(vmulq_n_f32(d, aux[a][i].d), vcvtq_f32_s32(is[a]));              \
                    if (fmt == FG_KQ_Q6_K) {                                                                          \
                        acc[a][h] = vaddq_f32(acc[a][h], t0);                                                         \
                    } else {                                                                                          \
                        const float32x4_t t1 = vmulq_f32(vmulq_n_f32(dmin, aux[a][i].d), vcvtq_f32_s32(ms[a]));       \
                        acc[a][h] = vaddq_f32(acc[a][h], vsubq_f32(t0, t1));                                          \
                    }                                                                                                 \
                }                                                                                                     \
            }                                                                                                         \
        }                                                                                                             \
        fg_store_rows8_neon(R, M, acc, y, ldy);                                                                       \
    }
FG_KQ_TILE8_NEON(fg_kq_tile8_neondp, FG_TARGET_DOTPROD, fg_kq_rows4_neondp)

#if FG_HAVE_I8MM
/* Rows 0..R-1 (R <= 4) of super-block b against M activations as fg_kq_rows4_neondp, Q4_K / Q5_K on SMMLA: per 64
 * elements each row pair's two sub-blocks unpacked once (fg_pair8_neon), each activation pair 8 SMMLA, every 2x2
 * sub-block sum weighted by its row's scale (lanes (row 0, act 0), (0, 1), (1, 0), (1, 1)), then unzipped into the
 * rows' lanes. sumi is the same exact int32, so the tile gives the dotprod (and scalar) bits. Q6_K: the dotprod
 * rows. */
FG_INLINE_NEON FG_TARGET_I8MM void fg_kq_rows4_neoni8mm(const int fmt, const int M, const char *b, size_t stride,
                                                       int R, const char *x, size_t xs, int i, int32x4_t *is,
                                                       int32x4_t *ms) {
    if (fmt == FG_KQ_Q6_K) {
        fg_kq_rows4_neondp(fmt, M, b, stride, R, x, xs, i, is, ms);
        return;
    }
    const block_q8_K *xb[8];
    for (int a = 0; a < M; a++) xb[a] = (const block_q8_K *)(x + a * xs) + i;
    const size_t qs = fmt == FG_KQ_Q5_K ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    const int P = R > 2 ? 2 : 1; /* row pairs holding rows */
    uint8_t sm[4][16] = {{0}};   /* [row]: scales 0..7, mins 0..7 */
    for (int r = 0; r < R; r++) fg_unpack_scales_k4((const uint8_t *)b + r * stride + 4, sm[r]);
    int32x4_t acc[4][2]; /* [activation pair][row pair]: 2x2 sumi */
    for (int a = 0; a < (M + 1) / 2; a++) acc[a][0] = acc[a][1] = vdupq_n_s32(0);
    for (int k = 0; k < QK_K / 64; k++) {
        int8x16_t wl[2][4], wu[2][4]; /* [row pair]: sub-blocks 2k (l) and 2k + 1 (u) as SMMLA operands */
        int32x4_t sl[2], su[2];       /* their scales: row 2p in lanes 0, 1, row 2p + 1 in lanes 2, 3 */
        for (int p = 0; p < P; p++) {
            int8x16_t l[2][2], u[2][2]; /* [row of the pair][elements 0..15, 16..31] */
            for (int e = 0; e < 2; e++) {
                l[e][0] = l[e][1] = u[e][0] = u[e][1] = vdupq_n_s8(0);
                if (2 * p + e >= R) continue;
                const uint8_t *br = (const uint8_t *)b + (2 * p + e) * stride;
                const uint8x16_t h0 = fmt == FG_KQ_Q5_K ? vld1q_u8(br + offsetof(block_q5_K, qh)) : vdupq_n_u8(0);
                const uint8x16_t h1 = fmt == FG_KQ_Q5_K ? vld1q_u8(br + offsetof(block_q5_K, qh) + 16) : vdupq_n_u8(0);
                fg_k4_split_neon(fmt, vld1q_u8(br + qs + 32 * k), h0, k, &l[e][0], &u[e][0]);
                fg_k4_split_neon(fmt, vld1q_u8(br + qs + 32 * k + 16), h1, k, &l[e][1], &u[e][1]);
            }
            fg_pair8_neon(l[0][0], l[0][1], l[1][0], l[1][1], wl[p]);
            fg_pair8_neon(u[0][0], u[0][1], u[1][0], u[1][1], wu[p]);
            sl[p] = vcombine_s32(vdup_n_s32(sm[2 * p][2 * k]), vdup_n_s32(sm[2 * p + 1][2 * k]));
            su[p] = vcombine_s32(vdup_n_s32(sm[2 * p][2 * k + 1]), vdup_n_s32(sm[2 * p + 1][2 * k + 1]));
        }
        for (int a = 0; a < M; a += 2) {
            const int8_t *xa = xb[a]->qs + 64 * k, *xc = (a + 1 < M ? xb[a + 1] : xb[a])->qs + 64 * k;
            int8x16_t xl[4], xu[4];
            fg_pair8_neon(vld1q_s8(xa), vld1q_s8(xa + 16), vld1q_s8(xc), vld1q_s8(xc + 16), xl);
            fg_pair8_neon(vld1q_s8(xa + 32), vld1q_s8(xa + 48), vld1q_s8(xc + 32), vld1q_s8(xc + 48), xu);
            for (int p = 0; p < P; p++) {
                acc[a / 2][p] = vmlaq_s32(acc[a / 2][p], fg_mm32_neoni8mm(vdupq_n_s32(0), wl[p], xl), sl[p]);
                acc[a / 2][p] = vmlaq_s32(acc[a / 2][p], fg_mm32_neoni8mm(vdupq_n_s32(0), wu[p], xu), su[p]);
            }
        }
    }
    for (int a = 0; a < M; a += 2) {
        is[a] = vuzp1q_s32(acc[a / 2][0], acc[a / 2][1]);
        if (a + 1 < M) is[a + 1] = vuzp2q_s32(acc[a / 2][0], acc[a / 2][1]);
    }
    int8x16_t sc[4]; /* [j]: scales 4j..4j+3 of row r in lane r, as bytes ([2], [3] the mins) */
    fg_rows4_dwords_neon((const char *)sm, 16, 4, sc);
    fg_kq_mins4_neon(sc, M, xb, ms);
}
FG_KQ_TILE8_NEON(fg_kq_tile8_neoni8mm, FG_TARGET_I8MM, fg_kq_rows4_neoni8mm)
#endif /* FG_HAVE_I8MM */

/* Per Q8_K activation block: its float scale. */
FG_INLINE_NEON void fg_q8_k_aux_neon(const char *x, int kc, fg_xaux *aux) {
    const block_q8_K *xb = (const block_q8_K *)x;
    for (int i = 0; i < kc; i++) aux[i].d = xb[i].d, aux[i].c = 0;
}

/* A K-quant format's lanes kernels vec_dot_NAME, gemv_NAME, gemm_NAME (FG_KERNELS_FROM_TILE8) on the tile TILE
 * (fg_kq_tile8_neondp or fg_kq_tile8_neoni8mm) for format KIND (FG_KQ_Q4_K, ...) of BLOCK-sized super-blocks. */
#define FG_KQ_KERNELS_NEON(NAME, TARGET, TILE, KIND, BLOCK)                                                       \
    FG_INLINE_NEON TARGET void NAME##_tile8(const int R, const int M, int first, int kc, const char *w,          \
                                            size_t stride, const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], \
                                            float *y, int64_t ldy) {                                              \
        TILE(R, M, first, kc, w, stride, x, xs, aux, y, ldy, KIND);                                               \
    }                                                                                                             \
    FG_KERNELS_FROM_TILE8(vec_dot_##NAME, gemv_##NAME, gemm_##NAME, TARGET, NAME##_tile8, fg_q8_k_aux_neon,        \
                          sizeof(BLOCK), sizeof(block_q8_K), QK_K, 8)

#endif
