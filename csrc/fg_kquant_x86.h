/* AVX2 kernels of the K-quant dots against Q8_K (fg_quant_q4_k.c, q5_k.c, q6_k.c): the tiles of few activations and
 * the rows-in-lanes gemm of many. Included by fg_kquant.h where FG_HAVE_X86 (after fg_simd.h and fg_kquant_ref.h). */
#ifndef FG_KQUANT_X86_H
#define FG_KQUANT_X86_H

/* ---- AVX2 tiles of the K-quant dots against Q8_K.
 * A tile is R weight rows x A activation rows, R * A <= 8: lane l = r * A + a of one float vector holds the dot
 * of row r with activation a. Per super-block each pair's integer sums are exact int32 vectors, reduced to its
 * lane; the lane then takes the scalar reference's float step, in its order:
 *   sum += (d * dx) * (float)sumi - (dmin * dx) * (float)summ      (Q6_K: no second term)
 * so vec_dot (1 x 1), gemv (R x 1) and gemm (R x A) all equal the scalar vec_dot bit for bit. Rows go one at a
 * time inside a tile (the activation bytes are memory operands from L1): each weight super-block is unpacked
 * once per tile and the live registers are the A int32 sums. ---- */

/* fg_unpack_scales_k4 in one xmm: scales 0..7 then mins 0..7 as bytes. Reads 16 bytes at q (the 12 scale bytes
 * and 4 bytes of what follows them in the block). As 32-bit words u0..u2: scales 0..3 = u0 & m6, scales 4..7 =
 * (u2 & m4) | ((u0 >> 6) & m2) << 4, mins 0..3 = u1 & m6, mins 4..7 = ((u2 >> 4) & m4) | ((u1 >> 6) & m2) << 4. */
FG_INLINE_AVX2 __m128i fg_unpack_scales_k4_avx2(const uint8_t *q) {
    const __m128i v = _mm_loadu_si128((const __m128i *)q);
    const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)); /* u0 u2 u1 u2 */
    const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)); /* u0 u0 u1 u1 */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

/* The lanes of a tile: row (l / A) and activation (l % A) of lane l, 0 beyond R * A. */
FG_INLINE_AVX2 void fg_kq_lanes(int R, int A, __m256i *row, __m256i *act) {
    int32_t r[8], a[8];
    for (int l = 0; l < 8; l++) r[l] = l < R * A ? l / A : 0, a[l] = l < R * A ? l % A : 0;
    *row = _mm256_loadu_si256((const __m256i *)r);
    *act = _mm256_loadu_si256((const __m256i *)a);
}

/* Per-row fp16 values (one per row, up to 8) spread over the tile's lanes. */
FG_INLINE_AVX2 __m256 fg_kq_spread_f16(const uint16_t h[8], __m256i row) {
    return _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)), row);
}

/* The tile's results: y[a * ldy + r] = lane r * A + a. */
FG_INLINE_AVX2 void fg_kq_store(int R, int A, __m256 acc, float *y, int64_t ldy) {
    float t[8];
    _mm256_storeu_ps(t, acc);
    for (int r = 0; r < R; r++)
        for (int a = 0; a < A; a++) y[a * ldy + r] = t[r * A + a];
}

/* Dx of the A activations' super-block i, spread over the lanes. */
FG_INLINE_AVX2 __m256 fg_kq_spread_dx(const int A, const char *x, size_t xstride, int64_t i, __m256i act) {
    float dx[8] = {0};
    for (int a = 0; a < A; a++) dx[a] = ((const block_q8_K *)(x + a * xstride))[i].d;
    return _mm256_permutevar8x32_ps(_mm256_loadu_ps(dx), act);
}

/* Q4_K (five = 0) and Q5_K (five = 1) tile. Per row and 64 elements: 32 bytes of nibbles (sub-block 2k low,
 * 2k+1 high; Q5_K ors bit 4 from qh), each maddubs'd with the activation's 32 bytes, the int16 pair sums
 * weighted by the 6-bit scale in the widening madd. The mins term is bsums (16 x int16) . mins (each twice). */
FG_INLINE_AVX2 void fg_k4_tile_avx2(const int five, int R, const int A, int64_t nb, const char *w, size_t stride,
                                    size_t ahead, const char *x, size_t xstride, float *y, int64_t ldy) {
    const size_t bs = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const size_t qs_off = five ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    const __m256i m4 = _mm256_set1_epi8(0x0f), m10 = _mm256_set1_epi8(0x10);
    __m256i row, act;
    fg_kq_lanes(R, A, &row, &act);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i isum[8], msum[8]; /* per lane: 8 int32 partial sums of the scaled dot and of the mins term */
        uint16_t dh[8] = {0}, mh[8] = {0};
        for (int l = R * A; l < 8; l++) isum[l] = msum[l] = _mm256_setzero_si256();
        for (int r = 0; r < R; r++) {
            const uint8_t *b = (const uint8_t *)w + r * stride + i * bs; /* d, dmin, scales[12], (qh[32]), qs[128] */
            if (A == 1) {
                _mm_prefetch((const char *)b + ahead, _MM_HINT_T0);
                _mm_prefetch((const char *)b + ahead + 64, _MM_HINT_T0);
                _mm_prefetch((const char *)b + ahead + bs - 1, _MM_HINT_T0);
            }
            memcpy(&dh[r], b, 2);
            memcpy(&mh[r], b + 2, 2);
            const __m128i sm8 = fg_unpack_scales_k4_avx2(b + 4);
            const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm8)); /* 8 scales x int16, twice */
            const __m128i m8 = _mm_srli_si128(sm8, 8);
            const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));  /* m_j at 2j, 2j+1 */
            __m256i s[8]; /* the A int32 sums of this row */
            for (int a = 0; a < A; a++) {
                const block_q8_K *xb = (const block_q8_K *)(x + a * xstride) + i;
                msum[r * A + a] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), mins);
                s[a] = _mm256_setzero_si256();
            }
            __m256i hb = five ? _mm256_loadu_si256((const __m256i *)(b + offsetof(block_q5_K, qh))) : m4;
            for (int k = 0; k < QK_K / 64; k++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(b + qs_off + 32 * k));
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (five) { /* bits 2k, 2k+1 of qh -> bit 4 (16-bit shifts; the mask drops what crossed a byte) */
                    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), m10));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), m10));
                    hb = _mm256_srli_epi16(hb, 2);
                }
                /* scale 2k (and 2k+1) in every int16 lane: bytes 4k, 4k+1 (4k+2, 4k+3) of sc */
                const __m256i slo = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((int16_t)(0x0100 + 0x0404 * k)));
                const __m256i shi = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((int16_t)(0x0302 + 0x0404 * k)));
                for (int a = 0; a < A; a++) {
                    const int8_t *xq = ((const block_q8_K *)(x + a * xstride) + i)->qs + 64 * k;
                    const __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq));
                    const __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 32)));
                    const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(p0, slo), _mm256_madd_epi16(p1, shi));
                    s[a] = _mm256_add_epi32(s[a], p);
                }
            }
            for (int a = 0; a < A; a++) isum[r * A + a] = s[a];
        }
        const __m256 dx = fg_kq_spread_dx(A, x, xstride, i, act);
        const __m256 sumi = _mm256_cvtepi32_ps(fg_hsum8_epi32(isum)), summ = _mm256_cvtepi32_ps(fg_hsum8_epi32(msum));
        const __m256 t0 = _mm256_mul_ps(_mm256_mul_ps(fg_kq_spread_f16(dh, row), dx), sumi);
        const __m256 t1 = _mm256_mul_ps(_mm256_mul_ps(fg_kq_spread_f16(mh, row), dx), summ);
        acc = _mm256_add_ps(acc, _mm256_sub_ps(t0, t1)); /* sum += (d dx) sumi - (dmin dx) summ */
    }
    fg_kq_store(R, A, acc, y, ldy);
}

/* ---- AVX2 gemm of the K-quants for many activations: rows in lanes. Per super-block, 8 weight rows are unpacked
 * once into fg_kq_rows8 (lane r of every vector = row r, zero past the last row) and every activation passes over
 * them: 4 activation bytes broadcast, one maddubs per 8 (row, 4 elements) pairs, gpm maddubs summed in int16 (in
 * range: gpm * 2 * qmax * 128 < 32768) before one madd by the rows' scales. The integer sums are exactly the
 * scalar reference's (sumi, and summ or Q6_K's bsums term) and each lane takes its float step, so the results
 * equal the tile's (vec_dot, gemv) bit for bit. ---- */
typedef struct {
    __m256i q[64];       /* group g (elements 4g..4g+3): lane r = row r's 4 unsigned weights */
    int16_t sc[32][16];  /* madd chunk c (groups gpm c .. gpm c + gpm - 1): lane r = (s, s), s the rows' scale */
    int16_t corr[8][16]; /* lane r = the pair that multiplies (bsums[2t], bsums[2t+1]) (Q6_K), or (Q4_K, Q5_K;
                          * t < 4) (pb[2t], pb[2t+1]), pb the bsums summed in pairs (fg_kq_bsum_pairs) */
    float d[8], dmin[8]; /* per row (0 past the last row) */
} fg_kq_rows8;

/* u->q[8 j .. 8 j + 7] <- the 32 weights 32 j .. 32 j + 31 of each row (v[r], rows in element order). */
FG_INLINE_AVX2 void fg_kq_rows8_put(fg_kq_rows8 *u, int j, __m256i v[8]) {
    fg_transpose8_epi32(v);
    for (int g = 0; g < 8; g++) _mm256_store_si256(&u->q[8 * j + g], v[g]);
}

/* v[r] = row r's 16 int16 values -> out[k] (k < 16), lane r = (v[r][k], v[r][k]). Clobbers v. */
FG_INLINE_AVX2 void fg_kq_dup_transpose16(__m256i v[8], __m256i out[16]) {
    __m256i lo[8], hi[8];
    for (int r = 0; r < 8; r++) {
        lo[r] = _mm256_unpacklo_epi16(v[r], v[r]); /* (k, k) for k = 0..3 | 8..11 */
        hi[r] = _mm256_unpackhi_epi16(v[r], v[r]); /* 4..7 | 12..15 */
    }
    fg_transpose8_epi32(lo);
    fg_transpose8_epi32(hi);
    for (int g = 0; g < 4; g++) out[g] = lo[g], out[4 + g] = hi[g], out[8 + g] = lo[4 + g], out[12 + g] = hi[4 + g];
}

/* Q4_K (five = 0) / Q5_K rows [0, R) of super-block i into u; gpm groups per madd chunk. */
FG_INLINE_AVX2 void fg_k4_rows8_avx2(const int five, const int gpm, int R, const char *w, size_t stride, int64_t i,
                                     fg_kq_rows8 *u) {
    const size_t bs = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const size_t qs_off = five ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    const __m256i m4 = _mm256_set1_epi8(0x0f), m10 = _mm256_set1_epi8(0x10);
    uint16_t dh[8] = {0}, mh[8] = {0};
    __m256i lo[8], hi[8], hb[8], sm[16];
    for (int r = 0; r < 8; r++) lo[r] = hb[r] = _mm256_setzero_si256();
    for (int r = 0; r < R; r++) {
        const uint8_t *b = (const uint8_t *)w + r * stride + i * bs;
        memcpy(&dh[r], b, 2);
        memcpy(&mh[r], b + 2, 2);
        lo[r] = _mm256_cvtepu8_epi16(fg_unpack_scales_k4_avx2(b + 4)); /* scales 0..7, mins 0..7 */
        if (five) hb[r] = _mm256_loadu_si256((const __m256i *)(b + offsetof(block_q5_K, qh)));
    }
    memcpy(hi, lo, sizeof(hi));
    fg_transpose8_epi32(hi); /* hi[4 + t] lane r = (min 2t, min 2t + 1) */
    for (int t = 0; t < 4; t++) _mm256_store_si256((__m256i *)u->corr[t], hi[4 + t]);
    fg_kq_dup_transpose16(lo, sm);
    for (int c = 0; c < 64 / gpm; c++) _mm256_store_si256((__m256i *)u->sc[c], sm[c * gpm / 8]);
    for (int k = 0; k < QK_K / 64; k++) {
        for (int r = 0; r < 8; r++) {
            const uint8_t *b = (const uint8_t *)w + r * stride + i * bs;
            const __m256i q = r < R ? _mm256_loadu_si256((const __m256i *)(b + qs_off + 32 * k)) : _mm256_setzero_si256();
            lo[r] = _mm256_and_si256(q, m4), hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) { /* bits 2k, 2k+1 of qh -> bit 4 */
                lo[r] = _mm256_or_si256(lo[r], _mm256_and_si256(_mm256_slli_epi16(hb[r], 4), m10));
                hi[r] = _mm256_or_si256(hi[r], _mm256_and_si256(_mm256_slli_epi16(hb[r], 3), m10));
                hb[r] = _mm256_srli_epi16(hb[r], 2);
            }
        }
        fg_kq_rows8_put(u, 2 * k, lo);
        fg_kq_rows8_put(u, 2 * k + 1, hi);
    }
    _mm256_store_ps(u->d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh)));
    _mm256_store_ps(u->dmin, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)mh)));
}

/* acc[a] (lane r: row r) <- the scaled integer sums of super-block i of activations a < na (xstride apart). */
FG_INLINE_AVX2 void fg_kq_rows8_isum(const fg_kq_rows8 *u, const int gpm, const char *x, size_t xstride, int64_t i,
                                     int na, __m256i *acc) {
    for (int a = 0; a < na; a++) acc[a] = _mm256_setzero_si256();
    for (int p = 0; p < QK_K / 32; p++) { /* 32 elements a pass: their 8 groups stay in registers */
        __m256i wq[8];
        for (int g = 0; g < 8; g++) wq[g] = _mm256_load_si256(&u->q[8 * p + g]);
        for (int a = 0; a < na; a++) {
            const int8_t *xq = ((const block_q8_K *)(x + a * xstride) + i)->qs + 32 * p;
            __m256i s = acc[a];
            for (int c = 0; c < 8 / gpm; c++) {
                __m256i t = _mm256_setzero_si256();
                for (int g = gpm * c; g < gpm * c + gpm; g++) {
                    int32_t x4;
                    memcpy(&x4, xq + 4 * g, 4);
                    t = _mm256_add_epi16(t, _mm256_maddubs_epi16(wq[g], _mm256_set1_epi32(x4)));
                }
                s = _mm256_add_epi32(s, _mm256_madd_epi16(t, _mm256_load_si256((const __m256i *)u->sc[p * (8 / gpm) + c])));
            }
            acc[a] = s;
        }
    }
}

/* pb[j] = bsums[2 j] + bsums[2 j + 1] of xb: sub-block j's activation sum (|pb| <= 32 * 128, an int16). */
FG_INLINE_AVX2 void fg_kq_bsum_pairs(const block_q8_K *xb, int16_t pb[8]) {
    const __m256i s = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), _mm256_set1_epi16(1));
    _mm_storeu_si128((__m128i *)pb, _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
}

/* The float step of one activation block xb for the 8 rows: (d dx) sumi - (dmin dx) summ (has_min: Q4_K, Q5_K,
 * summ = corr . pb, pb = xb's bsums in pairs (fg_kq_bsum_pairs): 4 madd) or (d dx) (sumi - 32 corr . bsums)
 * (Q6_K, pb unused: 8 madd). */
FG_INLINE_AVX2 __m256 fg_kq_rows8_step(const fg_kq_rows8 *u, const int has_min, const block_q8_K *xb,
                                       const int16_t *pb, __m256i isum) {
    const int16_t *b = has_min ? pb : xb->bsums;
    __m256i corr = _mm256_setzero_si256();
    for (int t = 0; t < (has_min ? 4 : 8); t++) {
        int32_t b2;
        memcpy(&b2, b + 2 * t, 4);
        corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)u->corr[t]), _mm256_set1_epi32(b2)));
    }
    const __m256 dx = _mm256_set1_ps(xb->d), d = _mm256_load_ps(u->d);
    if (!has_min) return _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(_mm256_sub_epi32(isum, _mm256_slli_epi32(corr, 5))));
    const __m256 t0 = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum));
    const __m256 t1 = _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(u->dmin), dx), _mm256_cvtepi32_ps(corr));
    return _mm256_sub_ps(t0, t1);
}

/* FG_NO_UNROLL_JAM (fg_simd.h): gcc's unroll-and-jam would fuse two passes of fg_kq_rows8_isum, 16 weight vectors, spilled. */

#ifndef FG_KQ_G
#define FG_KQ_G 2 /* row groups of 8 per row block */
#endif
/* The panel: the float sums of np activations x the G row groups of a row block (yb[a][g], lane r = row 8 g + r),
 * loaded from y (zero for the first column: 0 + f is the reference's first step) and stored back, the rows past
 * `left` masked. The sums of a column then accumulate in yb, 64 bytes an activation, where y's rows are
 * ldy floats apart (ldy = 2048: every activation's line in one L1 set). Dropping y's load and store from the step
 * made Q4_K 2048 x 2048 x 256 12-24% faster (a timing hack); the panel got 3-13% of it back (busy figures,
 * benchmarks/results/gemm-2026-12-05-kavx2-busy.txt). */
FG_INLINE_AVX2 __m256i fg_kq_rows_mask(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left < 8 ? (int)left : 8), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
FG_INLINE_AVX2 void fg_kq_panel_load(__m256 (*yb)[FG_KQ_G], int np, int G, int64_t left, int first, const float *y,
                                     int64_t ldy) {
    for (int a = 0; a < np; a++)
        for (int g = 0; g < G; g++) {
            const float *ya = y + a * ldy + 8 * g;
            yb[a][g] = first ? _mm256_setzero_ps()
                     : left >= 8 * g + 8 ? _mm256_loadu_ps(ya) : _mm256_maskload_ps(ya, fg_kq_rows_mask(left - 8 * g));
        }
}
FG_INLINE_AVX2 void fg_kq_panel_store(__m256 (*yb)[FG_KQ_G], int np, int G, int64_t left, float *y, int64_t ldy) {
    for (int a = 0; a < np; a++)
        for (int g = 0; g < G; g++) {
            float *ya = y + a * ldy + 8 * g;
            if (left >= 8 * g + 8) _mm256_storeu_ps(ya, yb[a][g]);
            else _mm256_maskstore_ps(ya, fg_kq_rows_mask(left - 8 * g), yb[a][g]);
        }
}

/* The gemm: columns of FG_KQ_KC super-blocks, in each blocks of 8 FG_KQ_G rows, in each panels of up to FG_KQ_PANEL
 * activations (fg_kq_panel_load); per super-block the G 8-row groups are unpacked, then activations in groups of 64
 * (their blocks stay in L1 over the 8 passes) accumulate into the panel, super-block by super-block as the
 * reference. The column keeps the activations' blocks that every row block reads in L2: 256 activations x 8
 * super-blocks of Q8_K are 600 KB, where whole rows of 8192 (ffn_down) are 2.4 MB, read from L3 once per 16 rows
 * (Q4_K 2048 x 8192 x 256, one thread, busy: 56-67 GMAC/s -> 69-74). */
#ifndef FG_KQ_KC
#define FG_KQ_KC 8
#endif
#ifndef FG_KQ_PANEL
#define FG_KQ_PANEL 256 /* activations: 8 KB of float sums per row group */
#endif
#define FG_KQ_GEMM_AVX2(NAME, ROWS8, GPM, HAS_MIN)                                                               \
    FG_TARGET_AVX2 FG_NO_UNROLL_JAM static void NAME(int64_t n, const void *w, size_t stride, const void *xq,    \
                                                     size_t xq_stride, int64_t m, float *y, int64_t ldy,         \
                                                     int64_t nrows) {                                            \
        fg_kq_rows8 u[FG_KQ_G];                                                                                 \
        __m256i acc[64];                                                                                        \
        __m256 yb[FG_KQ_PANEL][FG_KQ_G]; /* [activation][row group] */                                         \
        int16_t pb[64][8];         /* [activation][sub-block]: fg_kq_bsum_pairs (HAS_MIN) */                   \
        for (int64_t k0 = 0; k0 < n / QK_K; k0 += FG_KQ_KC) {                                                   \
          const int64_t k1 = n / QK_K - k0 < FG_KQ_KC ? n / QK_K : k0 + FG_KQ_KC;                              \
          for (int64_t rb = 0; rb < nrows; rb += 8 * FG_KQ_G) {                                                 \
            const int64_t left = nrows - rb; /* rows left from rb */                                           \
            const int G = left > 8 * FG_KQ_G ? FG_KQ_G : (int)((left + 7) / 8);                                 \
            for (int64_t p0 = 0; p0 < m; p0 += FG_KQ_PANEL) {                                                   \
              const int np = m - p0 < FG_KQ_PANEL ? (int)(m - p0) : FG_KQ_PANEL;                                \
              fg_kq_panel_load(yb, np, G, left, k0 == 0, y + p0 * ldy + rb, ldy);                               \
              for (int64_t i = k0; i < k1; i++) {                                                               \
                for (int g = 0; g < G; g++)                                                                     \
                    ROWS8(GPM, left - 8 * g < 8 ? (int)(left - 8 * g) : 8, (const char *)w + (rb + 8 * g) * stride, \
                          stride, i, &u[g]);                                                                    \
                for (int a0 = 0; a0 < np; a0 += 64) {                                                           \
                    const int na = np - a0 < 64 ? np - a0 : 64;                                                 \
                    const char *xa = (const char *)xq + (p0 + a0) * xq_stride;                                  \
                    for (int a = 0; HAS_MIN && a < na; a++)                                                     \
                        fg_kq_bsum_pairs((const block_q8_K *)(xa + a * xq_stride) + i, pb[a]);                  \
                    for (int g = 0; g < G; g++) {                                                               \
                        fg_kq_rows8_isum(&u[g], GPM, xa, xq_stride, i, na, acc);                                \
                        for (int a = 0; a < na; a++) {                                                          \
                            const __m256 f = fg_kq_rows8_step(&u[g], HAS_MIN,                                   \
                                                              (const block_q8_K *)(xa + a * xq_stride) + i,     \
                                                              pb[a], acc[a]);                                   \
                            yb[a0 + a][g] = _mm256_add_ps(yb[a0 + a][g], f);                                    \
                        }                                                                                       \
                    }                                                                                           \
                }                                                                                               \
              }                                                                                                 \
              fg_kq_panel_store(yb, np, G, left, y + p0 * ldy + rb, ldy);                                       \
            }                                                                                                   \
          }                                                                                                     \
        }                                                                                                       \
    }

/* vec_dot, gemv (8 rows per tile) and gemm (8 activations x 1 row per tile; the 1..7 activations left as
 * 8 / A rows x A) of one K-quant format from its tile TILE(R, A, nb, w, stride, ahead, x, xstride, y, ldy) (one
 * activation: each row's block asks for the bytes `ahead` of it). Tiles run over activations outside and the rows
 * inside, so a group of activations stays in L1 while the rows (a block of 16 from fg_gemm_rows) pass over it. The
 * gemv's tiles take their 8 rows from 8 runs of the matrix, as the VNNI gemv (fg_kquant_vnni.h: 8 ascending
 * streams, each asking for the bytes fg_stream_ahead on). */
#define FG_KQ_TAIL_COLS(TILE, A)                                                                              \
    for (int64_t r = 0; r < nrows; r += 8 / (A))                                                             \
        TILE(nrows - r < 8 / (A) ? (int)(nrows - r) : 8 / (A), A, nb, wr + r * stride, stride, 8 * stride,      \
             xr + a * xq_stride, xq_stride, y + a * ldy + r, ldy)
#ifndef FG_KQ_ROWS8_MIN_M
#define FG_KQ_ROWS8_MIN_M 8 /* from this many activations the rows-in-lanes gemm (MANY) beats the tiles */
#endif
#define FG_KQ_KERNELS_AVX2(DOT, GEMV, GEMM, TILE, MANY)                                                       \
    FG_TARGET_AVX2 static float DOT(int64_t n, const void *w, const void *x) {                                \
        float y;                                                                                              \
        TILE(1, 1, n / QK_K, (const char *)w, 0, 0, (const char *)x, 0, &y, 0);                               \
        return y;                                                                                             \
    }                                                                                                         \
    FG_TARGET_AVX2 static void GEMV(int64_t n, const void *w, size_t stride, const void *x, float *y, int64_t nrows) { \
        const int64_t q = nrows / 8; /* 8 streams, as FG_KQ_GEMV_VNNI: tile t takes row t of 8 runs of q rows */ \
        float t8[8];                                                                                          \
        const size_t ahead = fg_stream_ahead(stride);                                                         \
        for (int64_t t = 0; t < q; t++) {                                                                     \
            TILE(8, 1, n / QK_K, (const char *)w + t * stride, q * stride, ahead, (const char *)x, 0, t8, 0);  \
            for (int r = 0; r < 8; r++) y[t + r * q] = t8[r];                                                 \
        }                                                                                                     \
        if (nrows > 8 * q)                                                                                    \
            TILE((int)(nrows - 8 * q), 1, n / QK_K, (const char *)w + 8 * q * stride, stride, 8 * stride,     \
                 (const char *)x, 0, y + 8 * q, 0);                                                           \
    }                                                                                                         \
    FG_TARGET_AVX2 static void GEMM(int64_t n, const void *w, size_t stride, const void *xq, size_t xq_stride, \
                                    int64_t m, float *y, int64_t ldy, int64_t nrows) {                        \
        if (m >= FG_KQ_ROWS8_MIN_M) {                                                                         \
            MANY(n, w, stride, xq, xq_stride, m, y, ldy, nrows);                                              \
            return;                                                                                           \
        }                                                                                                     \
        const char *wr = (const char *)w, *xr = (const char *)xq;                                            \
        const int64_t nb = n / QK_K;                                                                          \
        int64_t a = 0;                                                                                        \
        for (; a + 8 <= m; a += 8) FG_KQ_TAIL_COLS(TILE, 8);                                                  \
        switch (m - a) {                                                                                      \
        case 7: FG_KQ_TAIL_COLS(TILE, 7); break;                                                              \
        case 6: FG_KQ_TAIL_COLS(TILE, 6); break;                                                              \
        case 5: FG_KQ_TAIL_COLS(TILE, 5); break;                                                              \
        case 4: FG_KQ_TAIL_COLS(TILE, 4); break;                                                              \
        case 3: FG_KQ_TAIL_COLS(TILE, 3); break;                                                              \
        case 2: FG_KQ_TAIL_COLS(TILE, 2); break;                                                              \
        case 1: FG_KQ_TAIL_COLS(TILE, 1); break;                                                              \
        default: break;                                                                                       \
        }                                                                                                     \
    }

#endif
