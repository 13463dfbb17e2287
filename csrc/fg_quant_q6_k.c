/* Q6_K weights: super-blocks of 256 = 16 sub-blocks of 16, x = d * scale_s * (q - 32), q in 0..63, int8 scales,
 * fp16 d LAST in the 210-byte block. Per half of 128 elements: ql 64 bytes, qh 32 bytes; element 32k + l
 * (k = 0..3, l < 32) has low bits ql[l + 32 (k & 1)] >> 4 (k >> 1) and high bits (qh[l] >> 2k) & 3.
 * Dot against Q8_K: sum_s d dx scale_s ((q . x)_s - 32 bsums_s). */
#include "fg_simd.h"
#include "fg_kquant.h"
#include "fg_kquant_vnni.h"

/* ---- scalar reference ---- */

/* ggml's quantize_row_q6_K_ref. */
static void quantize_row_q6_k_scalar(const float *x, void *vy, int64_t n) {
    block_q6_K *y = vy;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = fg_make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) max_abs_scale = fabsf(scale), max_scale = scale;
        }
        if (max_abs_scale < FG_GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(block_q6_K));
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = fg_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const int l = fg_nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(l < 127 ? l : 127);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fg_fp16_to_fp32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(fg_clampi(fg_nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = q1 | (q3 << 4);
                ql[l + 32] = q2 | (q4 << 4);
                qh[l] = (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                        ((L[j + l + 96] >> 4) << 6);
            }
        }
    }
}

/* q - 32 (-32..31) of the 256 elements of a block, in element order. */
static inline void q6_k_unpack(const block_q6_K *b, int8_t q[QK_K]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        int8_t *o = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

static void dequantize_row_q6_k_scalar(const void *vx, float *y, int64_t n) {
    const block_q6_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fg_fp16_to_fp32(x[i].d);
        int8_t q[QK_K];
        q6_k_unpack(&x[i], q);
        for (int e = 0; e < QK_K; e++) y[e] = d * x[i].scales[e / 16] * (float)q[e];
    }
}

static float vec_dot_q6_k_q8_k_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q6_K *w = vw;
    const block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        q6_k_unpack(&w[i], q);
        int sumi = 0;
        for (int s = 0; s < QK_K / 16; s++) {
            int p = 0;
            for (int k = 0; k < 16; k++) p += q[16 * s + k] * x[i].qs[16 * s + k];
            sumi += w[i].scales[s] * p;
        }
        sum += fg_fp16_to_fp32(w[i].d) * x[i].d * (float)sumi;
    }
    return sum;
}

#if FG_HAVE_X86
/* ---- AVX2 ---- */

/* One half (128 elements) of a block -> 4 x 32 unsigned bytes q (0..63), element order. */
FG_INLINE_AVX2 void q6_k_unpack_avx2(const uint8_t *ql, const uint8_t *qh, __m256i q[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i a = _mm256_loadu_si256((const __m256i *)ql), b = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    /* (qh >> 2k) & 3, moved to bits 4..5: 16-bit shifts, then the mask drops what crossed a byte */
    q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
    q[1] = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(h, m30));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
}

/* Bit-exact with the scalar reference: (d * scale) * (q - 32). */
FG_TARGET_AVX2 static void dequantize_row_q6_k_avx2(const void *vx, float *y, int64_t n) {
    const block_q6_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fg_f16(x[i].d);
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6_k_unpack_avx2(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
            for (int k = 0; k < 4; k++) {
                const __m256i qs = _mm256_sub_epi8(q[k], _mm256_set1_epi8(32));
                for (int e = 0; e < 4; e++) { /* 8 elements at 128h + 32k + 8e */
                    const __m128i b = e & 2 ? _mm256_extracti128_si256(qs, 1) : _mm256_castsi256_si128(qs);
                    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e & 1 ? _mm_srli_si128(b, 8) : b));
                    const int s = (128 * h + 32 * k + 8 * e) / 16;
                    _mm256_storeu_ps(y + 128 * h + 32 * k + 8 * e, _mm256_mul_ps(_mm256_set1_ps(d * x[i].scales[s]), v));
                }
            }
        }
    }
}

/* Q6_K tile. Per row and half (128 elements): 4 x 32 unsigned bytes q (0..63),
 * each maddubs'd with the activation, the int16 pair sums of each 16-element sub-block weighted by its int8
 * scale in the madd; the -32 offset as -32 (bsums . scales). */
FG_INLINE_AVX2 void q6_k_tile_avx2(int R, const int A, int64_t nb, const char *w, size_t stride, size_t ahead,
                                   const char *x, size_t xstride, float *y, int64_t ldy) {
    __m256i row, act;
    fg_kq_lanes(R, A, &row, &act);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i isum[8];
        uint16_t dh[8] = {0};
        for (int l = R * A; l < 8; l++) isum[l] = _mm256_setzero_si256();
        for (int r = 0; r < R; r++) {
            const block_q6_K *b = (const block_q6_K *)(w + r * stride) + i;
            if (A == 1)
                for (int c = 0; c < 256; c += 64) _mm_prefetch((const char *)b + ahead + c, _MM_HINT_T0);
            dh[r] = b->d;
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
            __m256i s[8]; /* the A int32 sums of this row */
            for (int a = 0; a < A; a++) {
                const block_q8_K *xb = (const block_q8_K *)(x + a * xstride) + i;
                const __m256i bm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), sc16);
                s[a] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(bm, 5));
            }
            for (int h = 0; h < 2; h++) {
                __m256i q[4];
                q6_k_unpack_avx2(b->ql + 64 * h, b->qh + 32 * h, q);
                /* scales 8h..8h+7 as int16, in both halves; vector k takes 8h+2k (low half), 8h+2k+1 */
                const __m256i sch = _mm256_broadcastsi128_si256(
                    _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(b->scales + 8 * h))));
                for (int k = 0; k < 4; k++) {
                    const __m256i sk = _mm256_shuffle_epi8(sch, _mm256_set_m128i(
                        _mm_set1_epi16((int16_t)(0x0100 + 0x0202 * (2 * k + 1))),
                        _mm_set1_epi16((int16_t)(0x0100 + 0x0202 * 2 * k))));
                    for (int a = 0; a < A; a++) {
                        const int8_t *xq = ((const block_q8_K *)(x + a * xstride) + i)->qs + 128 * h + 32 * k;
                        const __m256i p = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)xq));
                        s[a] = _mm256_add_epi32(s[a], _mm256_madd_epi16(p, sk));
                    }
                }
            }
            for (int a = 0; a < A; a++) isum[r * A + a] = s[a];
        }
        const __m256 dx = fg_kq_spread_dx(A, x, xstride, i, act);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(fg_kq_spread_f16(dh, row), dx),
                                               _mm256_cvtepi32_ps(fg_hsum8_epi32(isum))));
    }
    fg_kq_store(R, A, acc, y, ldy);
}
/* Rows [0, R) of super-block i into u (fg_kquant_x86.h): q 0..63 unsigned, chunk c of gpm = 2 groups (8 elements)
 * under scale c / 2; corr t = (scale 2t, scale 2t + 1) for the -32 bsums term. */
FG_INLINE_AVX2 void q6_k_rows8_avx2(const int gpm, int R, const char *w, size_t stride, int64_t i, fg_kq_rows8 *u) {
    uint16_t dh[8] = {0};
    __m256i v[8], sc[16];
    for (int r = 0; r < 8; r++) v[r] = _mm256_setzero_si256();
    for (int r = 0; r < R; r++) {
        const block_q6_K *b = (const block_q6_K *)(w + r * stride) + i;
        v[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        dh[r] = b->d;
    }
    __m256i pairs[8]; /* lane r = (scale 2t, scale 2t + 1) */
    memcpy(pairs, v, sizeof(pairs));
    fg_transpose8_epi32(pairs);
    for (int t = 0; t < 8; t++) _mm256_store_si256((__m256i *)u->corr[t], pairs[t]);
    fg_kq_dup_transpose16(v, sc);
    for (int c = 0; c < 64 / gpm; c++) _mm256_store_si256((__m256i *)u->sc[c], sc[c * gpm / 4]);
    for (int h = 0; h < 2; h++) {
        __m256i q[8][4];
        for (int r = 0; r < 8; r++) {
            const block_q6_K *b = (const block_q6_K *)(w + r * stride) + i;
            if (r < R) q6_k_unpack_avx2(b->ql + 64 * h, b->qh + 32 * h, q[r]);
            else q[r][0] = q[r][1] = q[r][2] = q[r][3] = _mm256_setzero_si256();
        }
        for (int k = 0; k < 4; k++) {
            for (int r = 0; r < 8; r++) v[r] = q[r][k];
            fg_kq_rows8_put(u, 4 * h + k, v);
        }
    }
    _mm256_store_ps(u->d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh)));
    _mm256_store_ps(u->dmin, _mm256_setzero_ps());
}
FG_KQ_GEMM_AVX2(gemm_q6_k_q8_k_rows8_avx2, q6_k_rows8_avx2, 2, 0) /* 2 groups: 2 * 2 * 63 * 128 < 32768 */
FG_KQ_KERNELS_AVX2(vec_dot_q6_k_q8_k_avx2, gemv_q6_k_q8_k_avx2, gemm_q6_k_q8_k_avx2, q6_k_tile_avx2,
                   gemm_q6_k_q8_k_rows8_avx2)
/* Rows [0, R) (R <= 16) of super-block i into u (fg_kquant_vnni.h) in zmm: the 16 rows' scales as int32 (no corr:
 * fg_kq_rows16_tile starts each sub-block's chain at -32 bsums) and their weights 0..63, 64 elements per row at a
 * time, each transposed once (q6_k_rows8_avx2 twice and joined: ~2x the ops). Per half h of a row, one zmm of ql
 * (a = bytes 0..31, b = 32..63) and qh in both 256-bit halves give elements 128h + 0..63 (a & 15, b & 15 with qh
 * bits 0-1, 2-3) and 128h + 64..127 (a >> 4, b >> 4; bits 4-5, 6-7). */
FG_INLINE_AVX512_VNNI void q6_k_rows16_vnni(int R, const char *w, size_t stride, int64_t i, fg_kq_rows16 *u) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    uint16_t dh[16] = {0};
    __m512i v[16]; /* [r] -> [g] */
    for (int r = 0; r < 16; r++) {
        const block_q6_K *b = (const block_q6_K *)(w + r * stride) + i;
        v[r] = r < R ? _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales)) : _mm512_setzero_si512();
        if (r < R) dh[r] = b->d;
    }
    fg_transpose16_epi32(v);
    for (int j = 0; j < 16; j++) u->sc[j] = fg_kq_sc_pairs(v[j]);
    u->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh));
    u->dmin = _mm512_setzero_ps();
    for (int c = 0; c < 4; c++) { /* elements 64c..64c+63: half c / 2, low (c even) or high nibbles */
        const int h = c / 2, hi = c & 1;
        for (int r = 0; r < 16; r++) {
            const block_q6_K *b = (const block_q6_K *)(w + r * stride) + i;
            if (r >= R) {
                v[r] = _mm512_setzero_si512();
                continue;
            }
            const __m512i ql = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
            /* qh bits 4 hi + (0, 2) for a, b -> bits 4..5: shifted left 4 - 4 hi (a) or 2 - 4 hi (b) */
            const __m512i hs = hi ? _mm512_mask_blend_epi64(0xf0, qh, _mm512_srli_epi16(qh, 2))
                                  : _mm512_mask_blend_epi64(0xf0, _mm512_slli_epi16(qh, 4), _mm512_slli_epi16(qh, 2));
            const __m512i lo = hi ? _mm512_srli_epi16(ql, 4) : ql;
            v[r] = _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_and_si512(hs, m30));
        }
        fg_transpose16_epi32(v);
        for (int g = 0; g < 16; g++) u->q[16 * c + g] = v[g];
    }
}
FG_KQ_GEMM_VNNI(gemm_q6_k_q8_k_vnni, q6_k_rows16_vnni, 4, 0, gemm_q6_k_q8_k_avx2)

/* The gemv (and vec_dot) on AVX-512 VNNI: the AVX2 tile's loop (8 rows, one activation) with its integer sums made
 * in zmm. Per half h of a row, ql's 64 bytes (a | b) and qh's 32 in both 256-bit halves give two zmm of weights
 * 0..63 in element order: 128h + 0..63 (a & 15 | b & 15, qh bits 0-1 | 2-3) and 128h + 64..127 (a >> 4 | b >> 4,
 * bits 4-5 | 6-7). Each is one dpbusd against 64 activation bytes, whose int32 lanes (|v| <= 4 * 63 * 128 <
 * 32768) the two pack into int16 (packs: exact): 128-bit lane i holds 4 sums of sub-block 8h + i, then 4 of
 * 8h + 4 + i, and one dpwssd takes each pair of them times its int8 scale, put in place as int16 by one in-lane
 * byte shuffle (into the high byte) and a shift (q6_k_sc16). The -32 offset is the tile's -32 bsums . scales.
 * Integer sums and float step are the tile's, so the results equal it (and the scalar reference) bit for bit.
 * The tiles run as 8 streams (FG_KQ_GEMV_VNNI). */
FG_INLINE_AVX512_VNNI __m512i q6_k_sc16(int h) {
    int8_t c[64];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) {
            c[16 * i + 2 * j] = (int8_t)0x80; /* a zero low byte */
            c[16 * i + 2 * j + 1] = (int8_t)(8 * h + i + (j >= 4 ? 4 : 0));
        }
    return _mm512_loadu_si512((const void *)c);
}
FG_INLINE_AVX512_VNNI __m256i q6_k_block_vnni(const block_q6_K *b, const block_q8_K *xb, const __m512i sc16[2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i cnt0 = _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    const __m512i cnt1 = _mm512_mask_blend_epi64(0xf0, _mm512_setzero_si512(), _mm512_set1_epi16(2));
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)b->scales);
    const __m512i sc = _mm512_broadcast_i32x4(sc8); /* the 16 scales in every 128-bit lane */
    const __m256i bm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), _mm256_cvtepi8_epi16(sc8));
    __m512i s = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
        const __m512i ql = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
        const __m512i v0 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, cnt0), m30));
        const __m512i v1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                           _mm512_and_si512(_mm512_srlv_epi16(qh, cnt1), m30));
        const int8_t *xq = xb->qs + 128 * h;
        const __m512i p = _mm512_packs_epi32(
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), v0, _mm512_loadu_si512((const void *)xq)),
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), v1, _mm512_loadu_si512((const void *)(xq + 64))));
        s = _mm512_dpwssd_epi32(s, p, _mm512_srai_epi16(_mm512_shuffle_epi8(sc, sc16[h]), 8));
    }
    return _mm256_sub_epi32(_mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1)),
                            _mm256_slli_epi32(bm, 5));
}
FG_INLINE_AVX512_VNNI void q6_k_tile_vnni(int R, int64_t nb, const char *w, size_t stride, size_t ahead,
                                          const block_q8_K *x, float *y, int64_t ystride) {
    const __m512i sc16[2] = {q6_k_sc16(0), q6_k_sc16(1)};
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i isum[8];
        uint16_t dh[8] = {0};
        for (int l = R; l < 8; l++) isum[l] = _mm256_setzero_si256();
        for (int r = 0; r < R; r++) {
            const block_q6_K *b = (const block_q6_K *)(w + r * stride) + i;
            FG_KQ_GEMV_PREFETCH(b, ahead, sizeof(block_q6_K));
            dh[r] = b->d;
            isum[r] = q6_k_block_vnni(b, x + i, sc16);
        }
        const __m256 dx = _mm256_set1_ps(x[i].d);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh)), dx),
                                               _mm256_cvtepi32_ps(fg_hsum8_epi32(isum))));
    }
    float t[8];
    _mm256_storeu_ps(t, acc);
    for (int r = 0; r < R; r++) y[r * ystride] = t[r];
}
FG_KQ_GEMV_VNNI(vec_dot_q6_k_q8_k_vnni, gemv_q6_k_q8_k_vnni, q6_k_tile_vnni)
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON: q - 32 fits int8; each 16-byte vector is exactly one sub-block, weighted by its scale. ---- */
#define Q6_K_ROWS_NEON(NAME, TARGET, DOT)                                                                   \
    static inline __attribute__((always_inline)) TARGET void NAME(const int R, int64_t nb, const char *w,    \
                                                                  size_t stride, const void *vx, float *y) { \
        const block_q8_K *x = vx;                                                                           \
        float32x4_t acc[4];                                                                                 \
        for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);                                             \
        for (int64_t i = 0; i < nb; i++) {                                                                  \
            const block_q6_K *b[4];                                                                         \
            int32x4_t isum[4];                                                                              \
            for (int r = 0; r < R; r++) {                                                                   \
                b[r] = (const block_q6_K *)(w + r * stride) + i;                                            \
                for (int c = 0; c < 256; c += 64) fg_prefetch((const char *)b[r] + c, stride);              \
                isum[r] = vdupq_n_s32(0);                                                                   \
            }                                                                                               \
            for (int h = 0; h < 2; h++) {                                                                   \
                for (int v = 0; v < 2; v++) { /* elements 128h + 32k + 16v + 0..15, k = 0..3 */            \
                    const int8_t *xq = x[i].qs + 128 * h + 16 * v;                                          \
                    const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 32);                              \
                    const int8x16_t x2 = vld1q_s8(xq + 64), x3 = vld1q_s8(xq + 96);                         \
                    for (int r = 0; r < R; r++) {                                                           \
                        const uint8_t *ql = b[r]->ql + 64 * h + 16 * v, *qhp = b[r]->qh + 32 * h + 16 * v;  \
                        const uint8x16_t la = vld1q_u8(ql), lb = vld1q_u8(ql + 32), qh = vld1q_u8(qhp);     \
                        const uint8x16_t m4 = vdupq_n_u8(0x0f), m30 = vdupq_n_u8(0x30);                     \
                        const int8x16_t off = vdupq_n_s8(32);                                               \
                        const uint8x16_t u0 = vorrq_u8(vandq_u8(la, m4), vandq_u8(vshlq_n_u8(qh, 4), m30)); \
                        const uint8x16_t u1 = vorrq_u8(vandq_u8(lb, m4), vandq_u8(vshlq_n_u8(qh, 2), m30)); \
                        const uint8x16_t u2 = vorrq_u8(vshrq_n_u8(la, 4), vandq_u8(qh, m30));               \
                        const uint8x16_t u3 = vorrq_u8(vshrq_n_u8(lb, 4), vandq_u8(vshrq_n_u8(qh, 2), m30)); \
                        const int8_t *sc = b[r]->scales + 8 * h + v;                                        \
                        const int32x4_t z = vdupq_n_s32(0);                                                 \
                        int32x4_t s = isum[r];                                                              \
                        s = vmlaq_n_s32(s, DOT(z, vsubq_s8(vreinterpretq_s8_u8(u0), off), x0), sc[0]);      \
                        s = vmlaq_n_s32(s, DOT(z, vsubq_s8(vreinterpretq_s8_u8(u1), off), x1), sc[2]);      \
                        s = vmlaq_n_s32(s, DOT(z, vsubq_s8(vreinterpretq_s8_u8(u2), off), x2), sc[4]);      \
                        s = vmlaq_n_s32(s, DOT(z, vsubq_s8(vreinterpretq_s8_u8(u3), off), x3), sc[6]);      \
                        isum[r] = s;                                                                        \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
            for (int r = 0; r < R; r++)                                                                     \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(isum[r]), fg_fp16_to_fp32(b[r]->d) * x[i].d);    \
        }                                                                                                   \
        for (int r = 0; r < R; r++) y[r] = vaddvq_f32(acc[r]);                                              \
    }
Q6_K_ROWS_NEON(q6_k_rows_neon, FG_NO_TARGET, fg_dot_s8_emul)
FG_DOT_FROM_ROWS(vec_dot_q6_k_q8_k_neon, FG_NO_TARGET, q6_k_rows_neon, QK_K)
FG_GEMV_FROM_ROWS(gemv_q6_k_q8_k_neon, FG_NO_TARGET, q6_k_rows_neon, QK_K)
FG_KQ_KERNELS_NEON(q6_k_q8_k_neondp, FG_TARGET_DOTPROD, fg_kq_tile8_neondp, FG_KQ_Q6_K, block_q6_K)
#endif /* FG_HAVE_NEON */

const fg_type_kernels fg_q6_k_kernels[FG_KERNEL_ROWS] = {
    [FG_ISA_SCALAR] = {quantize_row_q6_k_scalar, dequantize_row_q6_k_scalar, vec_dot_q6_k_q8_k_scalar, NULL},
#if FG_HAVE_X86
    [FG_ISA_AVX2] = {NULL, dequantize_row_q6_k_avx2, vec_dot_q6_k_q8_k_avx2, gemv_q6_k_q8_k_avx2, gemm_q6_k_q8_k_avx2},
    [FG_ROW_VNNI] = {NULL, NULL, vec_dot_q6_k_q8_k_vnni, gemv_q6_k_q8_k_vnni, gemm_q6_k_q8_k_vnni},
#endif
#if FG_HAVE_NEON
    [FG_ISA_NEON] = {NULL, NULL, vec_dot_q6_k_q8_k_neon, gemv_q6_k_q8_k_neon},
    [FG_ROW_DOTPROD] = {NULL, NULL, vec_dot_q6_k_q8_k_neondp, gemv_q6_k_q8_k_neondp, gemm_q6_k_q8_k_neondp},
#endif
};
