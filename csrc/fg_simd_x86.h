/* x86 helpers of the SIMD kernels (AVX2, AVX-512, VNNI): target attributes, prefetch, horizontal sums, the
 * rounding of the activation quantizers, the row-lane tiles' loads and stores (8 rows in a ymm, 16 in a zmm) and the
 * 16-level table formats' tile. Included by fg_simd.h where FG_HAVE_X86 (the common part, fg_xaux and the kernel
 * makers, comes first). */
#ifndef FG_SIMD_X86_H
#define FG_SIMD_X86_H

#include <immintrin.h>

#define FG_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FG_TARGET_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define FG_TARGET_AVX512_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define FG_INLINE_AVX2 static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define FG_INLINE_AVX512 static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define FG_INLINE_AVX512_VNNI \
    static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* Weight rows stream from memory. A kernel working on 4 rows asks, at each step, for the same bytes 4 rows
 * further on (the next group of rows, as the rows are usually contiguous): measured on 33-56 MB matrices it
 * lifts q8_0 from 16 to 27 GB/s and q4 by about 10%; in-cache speed is unchanged. A prefetch is a hint: beyond
 * the matrix it faults on nothing. -DFG_NO_PREFETCH turns it off for comparisons. */
#ifdef FG_NO_PREFETCH
#define fg_prefetch(p, stride) ((void)(p), (void)(stride))
#else
#define fg_prefetch(p, stride) _mm_prefetch((const char *)(p) + 4 * (stride), _MM_HINT_T0)
#endif
/* The same for the row-lane tiles (8 rows, FG_KERNELS_FROM_TILE8), called once per block i of the tile's kc blocks
 * of bs bytes at w. Where the tile covers its rows whole and they are contiguous and narrow (stride == kc * bs
 * <= 1 KB, e.g. a 576- or 640-wide lm_head) the bytes still to come are one ascending stream: ask for them in address
 * order, the next tile's and 4 KB more ahead (a Q8_0 GEMV over 640-wide rows streams 10-25% faster so than by asking
 * for each row's block 8 rows on, whose addresses jump by the row stride; wide rows: no difference). Otherwise each
 * row's block `ahead` bytes on (fg_prefetch_rows8; fg_prefetch_tile8: 8 rows on, the next tile's; the streams gemv,
 * FG_GEMV_STREAMS: fg_stream_ahead on in the stream). */
#ifdef FG_NO_PREFETCH
#define fg_prefetch_rows8(w, stride, ahead, R, i, kc, bs) \
    ((void)(w), (void)(stride), (void)(ahead), (void)(R), (void)(i), (void)(kc))
#else
#define fg_prefetch_rows8(w, stride, ahead, R, i, kc, bs)                                                   \
    do {                                                                                                     \
        if ((stride) == (size_t)(kc) * (bs) && (stride) <= 1024) {                                          \
            const char *p_ = (const char *)(w) + 8 * (stride) + 4096 + (size_t)(i) * 8 * (bs);               \
            for (size_t l_ = 0; l_ < 8 * (bs); l_ += 64) _mm_prefetch(p_ + l_, _MM_HINT_T0);                 \
        } else {                                                                                             \
            for (int r_ = 0; r_ < (R); r_++)                                                                 \
                _mm_prefetch((const char *)(w) + (size_t)(i) * (bs) + (size_t)r_ * (stride) + (ahead), _MM_HINT_T0); \
        }                                                                                                    \
    } while (0)
#endif
#define fg_prefetch_tile8(w, stride, R, i, kc, bs) fg_prefetch_rows8(w, stride, 8 * (stride), R, i, kc, bs)

FG_INLINE_AVX2 float fg_hsum_256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

FG_INLINE_AVX2 float fg_hmax_256(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The largest of 8 |x| given as their bit patterns (x with the sign cleared, as int32): for non-negative floats
 * the integer order is the value order, with NaN above inf, so an integer max keeps a NaN that maxps drops. */
FG_INLINE_AVX2 float fg_hmax_abs_256i(__m256i v) {
    __m128i s = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_max_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_max_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtss_f32(_mm_castsi128_ps(s));
}

FG_INLINE_AVX2 int fg_hsum_256i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

FG_INLINE_AVX2 float fg_f16(uint16_t h) { return _cvtsh_ss(h); }

/* roundf() (half away from zero) on 8 floats, exactly: t = trunc(v); t += sign(v) where |v - t| >= 0.5.
 * v - t is exact for |v| < 2^23, so this matches roundf bit for bit (round-to-nearest-even would not). */
FG_INLINE_AVX2 __m256 fg_roundf_256(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(sign, v));
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
}

/* 32 unsigned bytes . 32 signed bytes -> 8 int32 partial sums (pairs of u8*s8 saturate to int16 first;
 * callers keep |u| <= 15 or |s| <= 127 with |u| <= 128 so nothing saturates). */
FG_INLINE_AVX2 __m256i fg_dot_u8s8_256(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* 16 packed nibbles -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31). */
FG_INLINE_AVX2 __m256i fg_nibbles_256(const uint8_t *qs) {
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* 32 bits (little-endian) -> 32 bytes, 0xff where the bit is set: byte j <- bit j. */
FG_INLINE_AVX2 __m256i fg_bits_to_bytes_256(uint32_t bits) {
    const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), idx);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* 16 int8 -> 16 floats s * v - m at y (as the scalar dequantizers compute them: no FMA; m = 0 gives s * v). */
FG_INLINE_AVX2 void fg_store_i8x16_ps(float *y, __m128i v, __m256 s, __m256 m) {
    const __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    const __m256 b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(s, a), m));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(s, b), m));
}

/* 16 packed nibbles -> 32 floats in element order (4 x 8). */
FG_INLINE_AVX2 void fg_nibbles_ps(const uint8_t *qs, __m256 q[4]) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}

/* One or two 16-byte runs `bs` bytes apart -> ymm [run0 | run1]; with nblk = 1 the high half is zero. */
FG_INLINE_AVX2 __m256i fg_load_2x128(const void *p, size_t bs, int nblk) {
    const __m128i a = _mm_loadu_si128((const __m128i *)p);
    const __m128i b = nblk > 1 ? _mm_loadu_si128((const __m128i *)((const char *)p + bs)) : _mm_setzero_si128();
    return _mm256_set_m128i(b, a);
}

/* lo.xlo + hi.xhi per 4-byte group, unsigned . signed; the int16 pair sums are added before widening, which is
 * safe for |lo|, |hi| <= 15 and |x| <= 127. */
#define FG_DOT2_U8S8_256(lo, xlo, hi, xhi) \
    _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16((lo), (xlo)), _mm256_maddubs_epi16((hi), (xhi))), _mm256_set1_epi16(1))

/* u1.s1 + u2.s2 per 4-byte group in one VNNI instruction each (u8 x s8 summed into int32: nothing saturates). */
#define FG_DOT2_U8S8_256_VNNI(u1, s1, u2, s2) \
    _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), (u1), (s1)), (u2), (s2))

/* ---- row-lane tiles (FG_KERNELS_FROM_TILE8): 8 weight rows, row i in 32-bit lane i ---- */

/* 16 bytes at p of rows 0..R-1 (`stride` bytes apart; rows >= R read as zero) -> t[j] = bytes 4j..4j+3 of row i in
 * lane i: rows k and k+4 share a ymm, then a 4x4 dword transpose in each 128-bit half. */
FG_INLINE_AVX2 void fg_rows8_dwords(const char *p, size_t stride, int R, __m256i t[4]) {
    __m256i v[4];
    for (int k = 0; k < 4; k++) {
        const __m128i a = k < R ? _mm_loadu_si128((const __m128i *)(p + k * stride)) : _mm_setzero_si128();
        const __m128i b = k + 4 < R ? _mm_loadu_si128((const __m128i *)(p + (k + 4) * stride)) : _mm_setzero_si128();
        v[k] = _mm256_set_m128i(b, a);
    }
    const __m256i l01 = _mm256_unpacklo_epi32(v[0], v[1]), h01 = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i l23 = _mm256_unpacklo_epi32(v[2], v[3]), h23 = _mm256_unpackhi_epi32(v[2], v[3]);
    t[0] = _mm256_unpacklo_epi64(l01, l23);
    t[1] = _mm256_unpackhi_epi64(l01, l23);
    t[2] = _mm256_unpacklo_epi64(h01, h23);
    t[3] = _mm256_unpackhi_epi64(h01, h23);
}

/* Nibble form of fg_rows8_dwords (q4_0, q4_1: 16 bytes of 32 nibbles at p): lo[j] = elements 4j..4j+3 of every row,
 * hi[j] = elements 16+4j.., row i in lane i. */
FG_INLINE_AVX2 void fg_rows8_nibbles(const char *p, size_t stride, int R, __m256i lo[4], __m256i hi[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i t[4];
    fg_rows8_dwords(p, stride, R, t);
    for (int j = 0; j < 4; j++) {
        lo[j] = _mm256_and_si256(t[j], m4);
        hi[j] = _mm256_and_si256(_mm256_srli_epi16(t[j], 4), m4);
    }
}

/* The fp16 at p of rows 0..R-1 (`stride` apart) -> 8 floats, row i in lane i (lanes >= R zero). Inserted one by
 * one into a register: an array of 8 would go through the stack and stall the store forwarding. */
FG_INLINE_AVX2 __m256 fg_rows8_f16(const char *p, size_t stride, int R) {
    __m128i v = _mm_setzero_si128();
    uint16_t h;
#define FG_ROW_F16(i) if ((i) < R) { memcpy(&h, p + (i) * stride, 2); v = _mm_insert_epi16(v, h, i); }
    FG_ROW_F16(0) FG_ROW_F16(1) FG_ROW_F16(2) FG_ROW_F16(3) FG_ROW_F16(4) FG_ROW_F16(5) FG_ROW_F16(6) FG_ROW_F16(7)
#undef FG_ROW_F16
    return _mm256_cvtph_ps(v);
}

/* The two fp16 at p (p[0..1], p[2..3]) of rows 0..R-1 (`stride` apart) -> a, b: 8 floats each, row i in lane i
 * (lanes >= R zero): a block header (d, m) or (d, s) of 8 rows, one 4-byte insert per row. */
FG_INLINE_AVX2 void fg_rows8_f16x2(const char *p, size_t stride, int R, __m256 *a, __m256 *b) {
    __m128i v[2] = {_mm_setzero_si128(), _mm_setzero_si128()}; /* rows 0..3, 4..7: [a0 b0 a1 b1 ...] fp16 */
    int32_t h;
#define FG_ROW_F16X2(i) if ((i) < R) { memcpy(&h, p + (i) * stride, 4); v[(i) / 4] = _mm_insert_epi32(v[(i) / 4], h, (i) % 4); }
    FG_ROW_F16X2(0) FG_ROW_F16X2(1) FG_ROW_F16X2(2) FG_ROW_F16X2(3)
    FG_ROW_F16X2(4) FG_ROW_F16X2(5) FG_ROW_F16X2(6) FG_ROW_F16X2(7)
#undef FG_ROW_F16X2
    const __m128i split = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15); /* [a0..a3 b0..b3] */
    const __m128i lo = _mm_shuffle_epi8(v[0], split), hi = _mm_shuffle_epi8(v[1], split);
    *a = _mm256_cvtph_ps(_mm_unpacklo_epi64(lo, hi));
    *b = _mm256_cvtph_ps(_mm_unpackhi_epi64(lo, hi));
}

/* The 4 bytes at p in every 32-bit lane. */
FG_INLINE_AVX2 __m256i fg_bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* One block of 32 nibbles of 8 row lanes (lo[j]: elements 4j..4j+3 of every row, hi[j]: 16 + 4j.., as from
 * fg_rows8_nibbles) . the 32 int8 of one activation block at xq, broadcast 4 bytes at a time -> every row's exact
 * int32 block dot. AVX2: 8 maddubs summed in int16 (|pair| <= 2 * 15 * 127, 8 of them < 32767), one madd widens;
 * VNNI: 8 dpbusd in two chains (lo, hi) so they overlap. Both exact, so the float step after sees the same value. */
FG_INLINE_AVX2 __m256i fg_nib8_dot_avx2(const __m256i lo[4], const __m256i hi[4], const int8_t *xq) {
    __m256i s = _mm256_maddubs_epi16(lo[0], fg_bcast32(xq));
    for (int j = 1; j < 4; j++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo[j], fg_bcast32(xq + 4 * j)));
    for (int j = 0; j < 4; j++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi[j], fg_bcast32(xq + 16 + 4 * j)));
    return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}
FG_INLINE_AVX512_VNNI __m256i fg_nib8_dot_vnni(const __m256i lo[4], const __m256i hi[4], const int8_t *xq) {
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        a = _mm256_dpbusd_epi32(a, lo[j], fg_bcast32(xq + 4 * j));
        b = _mm256_dpbusd_epi32(b, hi[j], fg_bcast32(xq + 16 + 4 * j));
    }
    return _mm256_add_epi32(a, b);
}

/* Row-lane accumulators in: acc[a] lane r <- 0 (first) or y[a * ldy + r] for r < R. */
FG_INLINE_AVX2 void fg_load_rows8(const int R, const int M, int first, __m256 *acc, const float *y, int64_t ldy) {
    for (int a = 0; a < M; a++) {
        if (first) {
            acc[a] = _mm256_setzero_ps();
        } else if (R == 8) {
            acc[a] = _mm256_loadu_ps(y + a * ldy);
        } else {
            float t[8] = {0};
            for (int r = 0; r < R; r++) t[r] = y[a * ldy + r];
            acc[a] = _mm256_loadu_ps(t);
        }
    }
}

/* Row-lane accumulators out: acc[a] lane r -> y[a * ldy + r] for r < R. */
FG_INLINE_AVX2 void fg_store_rows8(const int R, const int M, const __m256 *acc, float *y, int64_t ldy) {
    for (int a = 0; a < M; a++) {
        if (R == 8) {
            _mm256_storeu_ps(y + a * ldy, acc[a]);
        } else {
            float t[8];
            _mm256_storeu_ps(t, acc[a]);
            for (int r = 0; r < R; r++) y[a * ldy + r] = t[r];
        }
    }
}

/* Per q8_0 activation block, for tiles that need no correction (q8_0, iq4_nl): its scale. */
FG_INLINE_AVX2 void fg_q8_0_aux(const char *x, int kc, fg_xaux *aux) {
    const block_q8_0 *xb = (const block_q8_0 *)x;
    for (int i = 0; i < kc; i++) {
        aux[i].d = fg_f16(xb[i].d);
        aux[i].c = 0;
    }
}

/* Per q8_0 activation block, for the VNNI tiles whose weights are unsigned bytes u = w + 128 (Q8_0, the 16-level
 * table formats): its scale and 128 * sum(q), so that dot(w, x) = dot(u, x) - aux.c. */
FG_INLINE_AVX2 void fg_q8_0_aux128(const char *x, int kc, fg_xaux *aux) {
    const block_q8_0 *xb = (const block_q8_0 *)x;
    for (int i = 0; i < kc; i++) {
        aux[i].d = fg_f16(xb[i].d);
        aux[i].c = 128 * fg_hsum_256i(fg_dot_u8s8_256(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)xb[i].qs)));
    }
}

/* Per q8_1 activation block (q4_1, q5_1 tiles): its scale d and s = d * sum(q), for the weights' offset term. */
FG_INLINE_AVX2 void fg_q8_1_aux(const char *x, int kc, fg_xaux *aux) {
    const block_q8_1 *xb = (const block_q8_1 *)x;
    for (int i = 0; i < kc; i++) {
        aux[i].d = fg_f16(xb[i].d);
        aux[i].s = fg_f16(xb[i].s);
    }
}

/* One block's float step for 8 rows of weights with an offset (x = d q + m) against a q8_1 activation block:
 * acc += (float)sumi * (dw * dx) + mw * sx, the scalar references' operations in their order (no FMA), so every
 * path equals the scalar vec_dot bit for bit. */
FG_INLINE_AVX2 __m256 fg_q8_1_step8(__m256 acc, __m256i sumi, __m256 dw, __m256 mw, const fg_xaux *aux) {
    const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), _mm256_mul_ps(dw, _mm256_set1_ps(aux->d)));
    return _mm256_add_ps(acc, _mm256_add_ps(p, _mm256_mul_ps(mw, _mm256_set1_ps(aux->s))));
}

/* The sum of 16 floats by halves: lanes (i, i + 8), then (i, i + 4), (i, i + 2), (0, 1), the tree GCC's and clang's
 * _mm512_reduce_add_ps take, spelled out so that fg_hsum16_512 (the same tree for 16 vectors at once) equals it on
 * every compiler. */
FG_INLINE_AVX512 float fg_hsum_512(__m512 v) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

/* fg_hsum_512 of v[0..16) at once, transposed (15 adds and 30 shuffles where 16 sums take 112 ops): lane
 * 4 j + k of the result is the sum of v[4 k + j]. */
FG_INLINE_AVX512 __m512 fg_hsum16_512(const __m512 v[16]) {
    __m512 a[8], b[4], c[2];
    for (int p = 0; p < 8; p++) /* (i, i + 8): v[2p] in 128-bit lanes 0-1, v[2p + 1] in 2-3 */
        a[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
    for (int p = 0; p < 4; p++) /* (i, i + 4): lane j holds v[4p + j] */
        b[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xDD));
    for (int p = 0; p < 2; p++) /* (i, i + 2): lane j holds v[8p + j] (elements 0-1) and v[8p + 4 + j] (2-3) */
        c[p] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * p], b[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(b[2 * p], b[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)), /* (0, 1) */
                         _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* ---- 16-row zmm tiles (FG_KERNELS_FROM_TILE16, AVX-512 + VNNI): the row-lane design of the ymm tiles with row i in
 * 32-bit lane i of a zmm, so one broadcast + dpbusd serves 16 rows and the float step covers 16 pairs per op. Each
 * lane takes exactly the ymm tile's float ops, so a 16-row gemm equals an 8-row gemv bit for bit. ---- */

/* fg_rows8_dwords for 16 rows: rows k, k+4, k+8, k+12 share a zmm, then the 4x4 dword transpose per 128-bit lane. */
FG_INLINE_AVX512 void fg_rows16_dwords(const char *p, size_t stride, int R, __m512i t[4]) {
    __m512i v[4];
    for (int k = 0; k < 4; k++) {
        __m128i q[4]; /* rows k + 4l */
        for (int l = 0; l < 4; l++)
            q[l] = k + 4 * l < R ? _mm_loadu_si128((const __m128i *)(p + (k + 4 * l) * stride)) : _mm_setzero_si128();
        v[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(q[1], q[0])), _mm256_set_m128i(q[3], q[2]), 1);
    }
    const __m512i l01 = _mm512_unpacklo_epi32(v[0], v[1]), h01 = _mm512_unpackhi_epi32(v[0], v[1]);
    const __m512i l23 = _mm512_unpacklo_epi32(v[2], v[3]), h23 = _mm512_unpackhi_epi32(v[2], v[3]);
    t[0] = _mm512_unpacklo_epi64(l01, l23);
    t[1] = _mm512_unpackhi_epi64(l01, l23);
    t[2] = _mm512_unpacklo_epi64(h01, h23);
    t[3] = _mm512_unpackhi_epi64(h01, h23);
}

/* fg_rows8_nibbles for 16 rows. */
FG_INLINE_AVX512 void fg_rows16_nibbles(const char *p, size_t stride, int R, __m512i lo[4], __m512i hi[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i t[4];
    fg_rows16_dwords(p, stride, R, t);
    for (int j = 0; j < 4; j++) {
        lo[j] = _mm512_and_si512(t[j], m4);
        hi[j] = _mm512_and_si512(_mm512_srli_epi16(t[j], 4), m4);
    }
}

/* Two 8-row halves -> one zmm (rows 0..7 low, 8..15 high). */
FG_INLINE_AVX512 __m512 fg_join16(__m256 lo, __m256 hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

/* fg_rows8_f16 / fg_rows8_f16x2 for 16 rows (lanes >= R zero). */
FG_INLINE_AVX512 __m512 fg_rows16_f16(const char *p, size_t stride, int R) {
    return fg_join16(fg_rows8_f16(p, stride, R < 8 ? R : 8), fg_rows8_f16(p + 8 * stride, stride, R - 8));
}
FG_INLINE_AVX512 void fg_rows16_f16x2(const char *p, size_t stride, int R, __m512 *a, __m512 *b) {
    __m256 a0, b0, a1, b1;
    fg_rows8_f16x2(p, stride, R < 8 ? R : 8, &a0, &b0);
    fg_rows8_f16x2(p + 8 * stride, stride, R - 8, &a1, &b1);
    *a = fg_join16(a0, a1);
    *b = fg_join16(b0, b1);
}

/* Row-lane accumulators in and out (fg_load_rows8, fg_store_rows8): lanes r < R, by mask. */
FG_INLINE_AVX512 void fg_load_rows16(const int R, const int M, int first, __m512 *acc, const float *y, int64_t ldy) {
    const __mmask16 k = (__mmask16)((1u << R) - 1);
    for (int a = 0; a < M; a++) acc[a] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(k, y + a * ldy);
}
FG_INLINE_AVX512 void fg_store_rows16(const int R, const int M, const __m512 *acc, float *y, int64_t ldy) {
    const __mmask16 k = (__mmask16)((1u << R) - 1);
    for (int a = 0; a < M; a++) _mm512_mask_storeu_ps(y + a * ldy, k, acc[a]);
}

/* One block of a 16-row panel (FG_GEMM_FROM_PANEL): 8 zmm of row-lane weights, as the format's 16-row tile unpacks
 * them (Q4_0: lo[4], hi[4]; Q8_0: u[8]), and the rows' scales. */
typedef struct {
    __m512i q[8];
    __m512 d;
} fg_panel16;

/* fg_prefetch_tile8 for the 16 rows at w: both halves. */
#define fg_prefetch_tile16(w, stride, R, i, kc, bs)                                                         \
    do {                                                                                                     \
        fg_prefetch_tile8(w, stride, (R) < 8 ? (R) : 8, i, kc, bs);                                          \
        fg_prefetch_tile8((const char *)(w) + 8 * (stride), stride, (R) - 8, i, kc, bs);                     \
    } while (0)

/* The 4 bytes at p in every 32-bit lane of a zmm. */
FG_INLINE_AVX512 __m512i fg_bcast32_512(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* t + q . x (dpbusd), x's 4 bytes broadcast from memory as the instruction's own operand ({1to16}). gcc (12) does not
 * fold fg_bcast32_512 of a load into vpdpbusd: it emits a vpbroadcastd per dpbusd (in the K-quant gemm tile, 40 of
 * ~110 uops per sub-block and 8 activations); clang folds it itself, and other compilers take the intrinsics. The
 * folded form: Q6_K's tile alone 210 -> 230 GMAC/s, its gemm +2-5%, Q4_K's gemm +5-15% (one thread, busy;
 * benchmarks/results/gemm-2026-12-05-vnq6-*). The Q4_0 / Q8_0 panel gemm (fg_panel_vnni.h) gained nothing from it
 * (2048x2048 and 2048x8192, m = 256, quiet, 2 alternating rounds: within +-4%), so it keeps fg_bcast32_512. */
FG_INLINE_AVX512_VNNI __m512i fg_dpbusd_bcst(__m512i t, __m512i q, const void *x) {
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(t) : "v"(q), "m"(*(const int32_t *)x));
    return t;
#else
    return _mm512_dpbusd_epi32(t, q, fg_bcast32_512(x));
#endif
}

/* fg_nib8_dot_vnni for 16 row lanes, added to acc (a tile's integer correction, or zero): one chain, as the gemm
 * tiles run it for several activations whose chains overlap. */
FG_INLINE_AVX512_VNNI __m512i fg_nib16_dot_vnni(__m512i acc, const __m512i lo[4], const __m512i hi[4], const int8_t *xq) {
    for (int j = 0; j < 4; j++) acc = _mm512_dpbusd_epi32(acc, lo[j], fg_bcast32_512(xq + 4 * j));
    for (int j = 0; j < 4; j++) acc = _mm512_dpbusd_epi32(acc, hi[j], fg_bcast32_512(xq + 16 + 4 * j));
    return acc;
}

/* fg_q8_1_step8 for 16 rows: the same ops in the same order. */
FG_INLINE_AVX512 __m512 fg_q8_1_step16(__m512 acc, __m512i sumi, __m512 dw, __m512 mw, const fg_xaux *aux) {
    const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dw, _mm512_set1_ps(aux->d)));
    return _mm512_add_ps(acc, _mm512_add_ps(p, _mm512_mul_ps(mw, _mm512_set1_ps(aux->s))));
}

/* A 16-row tile's one-activation case (the gemv): the 8-row tile TILE8 on each half (its row reduction needs no
 * transpose; per lane the same float ops, so the gemm's 16-row tiles still equal it bit for bit). */
#define FG_TILE16_GEMV(TILE8, R, first, kc, w, stride, x, xs, aux, y, ldy)                                  \
    do {                                                                                                     \
        TILE8((R) < 8 ? (R) : 8, 1, first, kc, w, stride, x, xs, aux, y, ldy);                               \
        if ((R) > 8) TILE8((R) - 8, 1, first, kc, (w) + 8 * (stride), stride, x, xs, aux, (y) + 8, ldy);     \
    } while (0)

/* lane i <- horizontal sum of each 128-bit half of v[i] (8 x 8 int32): *lo gets the low halves' sums, *hi the high
 * halves' (two blocks side by side give each block's sums). Interleave-and-add (rows 2k, 2k+1 share a vector, then
 * 4k..4k+3); single-uop shuffles where hadd costs several. */
FG_INLINE_AVX2 void fg_hsum8x2_epi32(const __m256i v[8], __m256i *lo, __m256i *hi) {
    __m256i p[4], q[2];
    for (int k = 0; k < 4; k++) /* [v2k v2k+1 v2k v2k+1 | ...] partial sums */
        p[k] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]), _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 2; k++) /* [v4k .. v4k+3 | v4k .. v4k+3] */
        q[k] = _mm256_add_epi32(_mm256_unpacklo_epi64(p[2 * k], p[2 * k + 1]), _mm256_unpackhi_epi64(p[2 * k], p[2 * k + 1]));
    *lo = _mm256_permute2x128_si256(q[0], q[1], 0x20);
    *hi = _mm256_permute2x128_si256(q[0], q[1], 0x31);
}

/* lane i <- horizontal sum of v[i] (8 x 8 int32). */
FG_INLINE_AVX2 __m256i fg_hsum8_epi32(const __m256i v[8]) {
    __m256i lo, hi;
    fg_hsum8x2_epi32(v, &lo, &hi);
    return _mm256_add_epi32(lo, hi);
}

/* v[r] (row r's 8 groups of 4 bytes) -> v[g] (group g of the 8 rows): the rows-in-lanes layout of the gemms
 * (fg_kquant_x86.h, fg_quant_q5_0.c). */
FG_INLINE_AVX2 void fg_transpose8_epi32(__m256i v[8]) {
    __m256i t[8], s[8];
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]);     /* r0 r1 groups 0, 1 | 4, 5 */
        t[2 * k + 1] = _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]); /* groups 2, 3 | 6, 7 */
    }
    for (int k = 0; k < 2; k++) {
        s[4 * k] = _mm256_unpacklo_epi64(t[4 * k], t[4 * k + 2]);     /* r0..r3 group 0 | 4 */
        s[4 * k + 1] = _mm256_unpackhi_epi64(t[4 * k], t[4 * k + 2]); /* group 1 | 5 */
        s[4 * k + 2] = _mm256_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        s[4 * k + 3] = _mm256_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    for (int g = 0; g < 4; g++) {
        v[g] = _mm256_permute2x128_si256(s[g], s[4 + g], 0x20);
        v[g + 4] = _mm256_permute2x128_si256(s[g], s[4 + g], 0x31);
    }
}

/* fg_transpose8_epi32 for 16 rows in zmm: v[r] (row r's 16 groups of 4 bytes) -> v[g] (group g of the 16 rows). */
FG_INLINE_AVX512 void fg_transpose16_epi32(__m512i v[16]) {
    __m512i t[16], s[16];
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]);     /* per 128-bit lane L: r0 r1 groups 4L, 4L+1 */
        t[2 * k + 1] = _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]); /* groups 4L+2, 4L+3 */
    }
    for (int k = 0; k < 4; k++) { /* s[4k + c], lane L: rows 4k..4k+3 of group 4L + c */
        s[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
        s[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
        s[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        s[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    for (int c = 0; c < 4; c++) { /* the 128-bit lanes L of rows 0-3, 4-7, 8-11, 12-15 -> group 4L + c */
        const __m512i u0 = _mm512_shuffle_i32x4(s[c], s[4 + c], 0x88), u1 = _mm512_shuffle_i32x4(s[c], s[4 + c], 0xdd);
        const __m512i u2 = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0x88);
        const __m512i u3 = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0xdd);
        v[c] = _mm512_shuffle_i32x4(u0, u2, 0x88), v[8 + c] = _mm512_shuffle_i32x4(u0, u2, 0xdd);
        v[4 + c] = _mm512_shuffle_i32x4(u1, u3, 0x88), v[12 + c] = _mm512_shuffle_i32x4(u1, u3, 0xdd);
    }
}

/* ---- 16-level table formats (IQ4_NL, MXFP4): blocks of 32, one scale, 16 bytes of nibbles as q4_0 indexing 16 int8
 * levels; dot against Q8_0 as sum += (float)sumi * (dw * dx). The formats differ only in table and scale. ---- */
enum { FG_SCALE_F16, FG_SCALE_E8M0_HALF }; /* the block scale: fp16 (IQ4_NL), E8M0 halved (MXFP4) */

/* 8 E8M0 bytes (int32 lanes) -> 2^(e - 128), fg_e8m0_to_fp32_half per lane. */
FG_INLINE_AVX2 __m256 fg_e8m0_half_256(__m256i e) {
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e); /* e < 2 */
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}

/* The scale at p of rows 0..R-1 (`stride` apart) -> 8 floats, row i in lane i (lanes >= R: e = 0, any value). */
FG_INLINE_AVX2 __m256 fg_rows8_scale(const char *p, size_t stride, int R, const int scale) {
    if (scale == FG_SCALE_F16) return fg_rows8_f16(p, stride, R);
    __m128i v = _mm_setzero_si128();
#define FG_ROW_E8(i) if ((i) < R) v = _mm_insert_epi8(v, *(const uint8_t *)(p + (i) * stride), i);
    FG_ROW_E8(0) FG_ROW_E8(1) FG_ROW_E8(2) FG_ROW_E8(3) FG_ROW_E8(4) FG_ROW_E8(5) FG_ROW_E8(6) FG_ROW_E8(7)
#undef FG_ROW_E8
    return fg_e8m0_half_256(_mm256_cvtepu8_epi32(v));
}

/* One block's scale as a float (the scalar references' value). */
FG_INLINE_AVX2 float fg_block_scale(const char *p, const int scale) {
    uint16_t h;
    if (scale == FG_SCALE_E8M0_HALF) return fg_e8m0_to_fp32_half(*(const uint8_t *)p);
    memcpy(&h, p, 2);
    return fg_f16(h);
}

/* Dequantize n elements of blocks of bs bytes (scale at 0, nibbles at qs_off): d * level, bit-exact with the scalar
 * reference. */
FG_INLINE_AVX2 void fg_lut4_dequantize_avx2(const char *x, float *y, int64_t n, const int8_t *levels, const size_t bs,
                                            const size_t qs_off, const int scale) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)levels));
    for (int64_t i = 0; i < n / 32; i++, y += 32, x += bs) {
        const __m256i k = _mm256_shuffle_epi8(table, fg_nibbles_256((const uint8_t *)x + qs_off));
        const __m256 d = _mm256_set1_ps(fg_block_scale(x, scale));
        fg_store_i8x16_ps(y, _mm256_castsi256_si128(k), d, _mm256_setzero_ps());
        fg_store_i8x16_ps(y + 16, _mm256_extracti128_si256(k, 1), d, _mm256_setzero_ps());
    }
}

/* R <= 8 rows x M <= 8 activations of a table format . q8_0, row r in lane r (see FG_KERNELS_FROM_TILE8); blocks of
 * bs bytes, scale at 0, nibbles at qs_off. One activation (the gemv) dots each row's levels in element order and
 * reduces the 8 rows' partial sums into lanes; more share the rows' nibbles transposed once per block
 * (fg_rows8_dwords) and looked up in the table (k[j]: elements 4j..4j+3 of every row, k[4 + j]: 16 + 4j..), against
 * their broadcast 4-byte groups. The signed . signed dot is |k| . (x with k's sign); a pair reaches 2 * 127 * 127, so
 * each group is widened by its own madd. Every lane takes the scalar reference's float step,
 * sum += (float)sumi * (dw * dx) (no FMA), so all paths equal it bit for bit. Each row's block asks for the block
 * `ahead` bytes on (fg_prefetch_rows8: 8 rows on for the gemm's tiles, fg_stream_ahead on for FG_GEMV_STREAMS). */
FG_INLINE_AVX2 void fg_lut4_tile8_avx2_at(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                          size_t ahead, const char *x, size_t xs, const fg_xaux (*aux)[FG_KC],
                                          float *y, int64_t ldy, const int8_t *levels, const size_t bs,
                                          const size_t qs_off, const int scale) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)levels));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[8]; /* [a]: 8 rows */
    fg_load_rows8(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * bs;
        fg_prefetch_rows8(w, stride, ahead, R, i, kc, bs);
        const __m256 dw = fg_rows8_scale(wb, stride, R, scale);
        __m256i dot[8]; /* [a]: the 8 rows' block sums */
        if (M == 1) { /* nothing to share a transpose with */
            const __m256i xq = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)x + i)->qs);
            __m256i v[8]; /* [r]: row r's 8 partial sums */
            for (int r = 0; r < 8; r++) {
                v[r] = _mm256_setzero_si256();
                if (r >= R) continue;
                const __m256i k = _mm256_shuffle_epi8(table, fg_nibbles_256((const uint8_t *)wb + r * stride + qs_off));
                v[r] = fg_dot_u8s8_256(_mm256_sign_epi8(k, k), _mm256_sign_epi8(xq, k));
            }
            dot[0] = fg_hsum8_epi32(v);
        } else {
            __m256i t[4], k[8], ak[8];
            fg_rows8_dwords(wb + qs_off, stride, R, t);
            for (int j = 0; j < 4; j++) {
                k[j] = _mm256_shuffle_epi8(table, _mm256_and_si256(t[j], m4));
                k[4 + j] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(t[j], 4), m4));
            }
            for (int g = 0; g < 8; g++) ak[g] = _mm256_sign_epi8(k[g], k[g]);
            for (int a = 0; a < M; a++) {
                const int8_t *xq = ((const block_q8_0 *)(x + a * xs) + i)->qs;
                dot[a] = fg_dot_u8s8_256(ak[0], _mm256_sign_epi8(fg_bcast32(xq), k[0]));
                for (int g = 1; g < 8; g++)
                    dot[a] = _mm256_add_epi32(dot[a], fg_dot_u8s8_256(ak[g], _mm256_sign_epi8(fg_bcast32(xq + 4 * g), k[g])));
            }
        }
        for (int a = 0; a < M; a++) {
            const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(dot[a]), _mm256_mul_ps(dw, _mm256_set1_ps(aux[a][i].d)));
            acc[a] = _mm256_add_ps(acc[a], p);
        }
    }
    fg_store_rows8(R, M, acc, y, ldy);
}


/* ---- 16-level table formats with VNNI (AVX-512 VNNI): the levels made unsigned, u = level + 128 (level ^ 0x80, in
 * 0..255), looked up by byte shuffle from the rows' transposed nibbles (as Q4_0's tiles unpack them) and dotted by
 * dpbusd against the signed activation: dot(level, x) = dot(u, x) - 128 * sum(x) (aux.c, fg_q8_0_aux128), exact in
 * int32 (|dot(u, x)| <= 32 * 255 * 128 < 2^31). No per-row horizontal sum: rows in lanes. Each (row, activation) pair
 * takes the scalar references' float step, acc + (float)sumi * (dw * dx), unfused, so every path equals the scalar
 * vec_dot bit for bit. (fg_rows8_lut4 and fg_lut4_step8 serve MXFP4's AVX2 tile too, with u = level + 12.) ---- */

/* The table of u = level + 128, in each 128-bit lane. */
FG_INLINE_AVX2 __m256i fg_lut4_table_u8(const int8_t *levels) {
    return _mm256_broadcastsi128_si256(_mm_xor_si128(_mm_loadu_si128((const __m128i *)levels), _mm_set1_epi8((char)0x80)));
}

/* One block of 8 rows (nibbles at p, `stride` apart; rows >= R read as nibble 0) -> k[j]: u of elements 4j..4j+3 of
 * every row, k[4 + j]: elements 16 + 4j.., row i in lane i. */
FG_INLINE_AVX2 void fg_rows8_lut4(const char *p, size_t stride, int R, __m256i table, __m256i k[8]) {
    fg_rows8_nibbles(p, stride, R, k, k + 4);
    for (int j = 0; j < 8; j++) k[j] = _mm256_shuffle_epi8(table, k[j]);
}

/* fg_rows8_lut4 for 16 rows in zmm lanes. */
FG_INLINE_AVX512 void fg_rows16_lut4(const char *p, size_t stride, int R, __m512i table, __m512i k[8]) {
    fg_rows16_nibbles(p, stride, R, k, k + 4);
    for (int j = 0; j < 8; j++) k[j] = _mm512_shuffle_epi8(table, k[j]);
}

/* fg_rows8_scale for 16 rows (lanes >= R: any value). */
FG_INLINE_AVX512 __m512 fg_rows16_scale(const char *p, size_t stride, int R, const int scale) {
    return fg_join16(fg_rows8_scale(p, stride, R < 8 ? R : 8, scale), fg_rows8_scale(p + 8 * stride, stride, R - 8, scale));
}

/* The table formats' float step, 8 and 16 row lanes: acc + (float)(dot - aux.c) * (dw * dx). */
FG_INLINE_AVX2 __m256 fg_lut4_step8(__m256 acc, __m256i dot, __m256 dw, const fg_xaux *ax) {
    const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(dot, _mm256_set1_epi32(ax->c))),
                                   _mm256_mul_ps(dw, _mm256_set1_ps(ax->d)));
    return _mm256_add_ps(acc, p);
}
FG_INLINE_AVX512 __m512 fg_lut4_step16(__m512 acc, __m512i dot, __m512 dw, const fg_xaux *ax) {
    const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot, _mm512_set1_epi32(ax->c))),
                                   _mm512_mul_ps(dw, _mm512_set1_ps(ax->d)));
    return _mm512_add_ps(acc, p);
}

/* R <= 8 rows x M <= 8 activations (the gemv's tile, M = 1, and the 16-row tile's halves), ymm lanes, dpbusd; blocks
 * of bs bytes, scale at 0, nibbles at qs_off; aux from fg_q8_0_aux128. Each row's block asks for the block `ahead`
 * bytes on (fg_prefetch_rows8): 8 rows on (fg_lut4_tile8_vnni), or fg_stream_ahead on in the stream
 * (FG_GEMV_STREAMS). */
FG_INLINE_AVX512_VNNI void fg_lut4_tile8_vnni_at(const int R, const int M, int first, int kc, const char *w,
                                                 size_t stride, size_t ahead, const char *x, size_t xs,
                                                 const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy,
                                                 const int8_t *levels, const size_t bs, const size_t qs_off,
                                                 const int scale) {
    const __m256i table = fg_lut4_table_u8(levels);
    __m256 acc[8]; /* [a]: 8 rows */
    fg_load_rows8(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * bs;
        fg_prefetch_rows8(w, stride, ahead, R, i, kc, bs);
        __m256i k[8]; /* [j]: u of elements 4j..4j+3 (j < 4), 16 + 4(j - 4).. (j >= 4) of the 8 rows */
        fg_rows8_lut4(wb + qs_off, stride, R, table, k);
        const __m256 dw = fg_rows8_scale(wb, stride, R, scale);
        for (int a = 0; a < M; a++) {
            const int8_t *xq = ((const block_q8_0 *)(x + a * xs) + i)->qs;
            acc[a] = fg_lut4_step8(acc[a], fg_nib8_dot_vnni(k, k + 4, xq), dw, &aux[a][i]);
        }
    }
    fg_store_rows8(R, M, acc, y, ldy);
}
FG_INLINE_AVX512_VNNI void fg_lut4_tile8_vnni(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                              const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y,
                                              int64_t ldy, const int8_t *levels, const size_t bs, const size_t qs_off,
                                              const int scale) {
    fg_lut4_tile8_vnni_at(R, M, first, kc, w, stride, 8 * stride, x, xs, aux, y, ldy, levels, bs, qs_off, scale);
}

/* R <= 16 rows x M <= 8 activations in zmm lanes (FG_KERNELS_FROM_TILE16); one activation: the 8-row tile on each
 * half (the same float ops per lane). */
FG_INLINE_AVX512_VNNI void fg_lut4_tile16_vnni(const int R, const int M, int first, int kc, const char *w, size_t stride,
                                               const char *x, size_t xs, const fg_xaux (*aux)[FG_KC], float *y,
                                               int64_t ldy, const int8_t *levels, const size_t bs, const size_t qs_off,
                                               const int scale) {
    if (M == 1) {
        fg_lut4_tile8_vnni(R < 8 ? R : 8, 1, first, kc, w, stride, x, xs, aux, y, ldy, levels, bs, qs_off, scale);
        if (R > 8)
            fg_lut4_tile8_vnni(R - 8, 1, first, kc, w + 8 * stride, stride, x, xs, aux, y + 8, ldy, levels, bs, qs_off,
                               scale);
        return;
    }
    const __m512i table = _mm512_broadcast_i32x4(_mm256_castsi256_si128(fg_lut4_table_u8(levels)));
    __m512 acc[8]; /* [a]: 16 rows */
    fg_load_rows16(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * bs;
        fg_prefetch_tile16(w, stride, R, i, kc, bs);
        __m512i k[8]; /* as fg_lut4_tile8_vnni's, 16 rows */
        fg_rows16_lut4(wb + qs_off, stride, R, table, k);
        const __m512 dw = fg_rows16_scale(wb, stride, R, scale);
        for (int a = 0; a < M; a++) {
            const int8_t *xq = ((const block_q8_0 *)(x + a * xs) + i)->qs;
            acc[a] = fg_lut4_step16(acc[a], fg_nib16_dot_vnni(_mm512_setzero_si512(), k, k + 4, xq), dw, &aux[a][i]);
        }
    }
    fg_store_rows16(R, M, acc, y, ldy);
}

/* The panel fill (fg_panel_vnni.h) of a table format: fg_rows16_lut4 and the scales of kc blocks of 16 rows. */
FG_INLINE_AVX512_VNNI void fg_lut4_fill16(const int R, int kc, const char *w, size_t stride, fg_panel16 *p,
                                          const int8_t *levels, const size_t bs, const size_t qs_off, const int scale) {
    const __m512i table = _mm512_broadcast_i32x4(_mm256_castsi256_si128(fg_lut4_table_u8(levels)));
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * bs;
        fg_prefetch_tile16(w, stride, R, i, kc, bs);
        fg_rows16_lut4(wb + qs_off, stride, R, table, p[i].q);
        p[i].d = fg_rows16_scale(wb, stride, R, scale);
    }
}

#endif
