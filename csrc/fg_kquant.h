/* Scalar helpers of the K-quant reference quantizers (fg_quant_q*_k.c), following ggml's quantize_row_*_ref
 * operation for operation (same float expressions in the same order, no contraction: the build uses
 * -ffp-contract=off) so the bytes are identical to llama.cpp's. Without an importance matrix. */
#ifndef FG_KQUANT_H
#define FG_KQUANT_H

#include <stddef.h>

#include "fg_blocks.h"

#define FG_GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even, through the float adder (valid for |v| <= 4194303). */
static inline int fg_nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int fg_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Scale and min (x ~ scale * L - the_min, L in 0..nmax) of n values fitted by weighted least squares over
 * nstep + 1 trial scales (ggml's make_qkx2_quants). Laux: scratch of n. */
static inline float fg_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                                        float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = fg_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)fg_clampi(l, 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = fg_clampi(fg_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Signed scale of n values, L in 0..2*nmax-1 (x ~ scale * (L - nmax)), weights x^2, refined over 18 trial scales
 * (ggml's make_qx_quants with rmse_type 1 and no importance weights). */
static inline float fg_make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < FG_GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = fg_clampi(fg_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = fg_clampi(fg_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = (int8_t)(nmax + fg_clampi(fg_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Signed scale of n values, L in 0..2*nmax-1, refined by up to 5 passes of coordinate descent with weights x^2
 * (ggml's make_q3_quants with do_rmse). */
static inline float fg_make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < FG_GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = fg_clampi(fg_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = fg_clampi(fg_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] += nmax;
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* The 16 non-uniform levels of IQ4_NL / IQ4_XS. */
static const int8_t fg_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Index of the level nearest to x in the sorted table val[n] (ties to the upper one, as ggml). */
static inline int fg_best_index_int8(int n, const int8_t *val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[n - 1]) return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav; else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* ggml's quantize_row_iq4_nl_impl without importance weights, for one super-block of sbs elements in sub-blocks
 * of 32: sbs = 32 (IQ4_NL, one fp16 scale; ntry = -1: no trial scales) or 256 (IQ4_XS, 6-bit sub-block scales
 * under an fp16 super-scale; ntry = 7). L: scratch of sbs, scales: of sbs / 32. A sub-block below
 * FG_GROUP_MAX_EPS keeps the L it came with: the caller zeroes L (ggml leaves it stale, which only matters where
 * the scale is 0 anyway). */
static inline void fg_quantize_iq4(int sbs, const float *x, uint16_t *dh, uint8_t *q4, uint16_t *scales_h,
                                   uint8_t *scales_l, float *scales, uint8_t *L, int ntry) {
    const int8_t *values = fg_kvalues_iq4nl;
    float weight[32];
    memset(q4, 0, (size_t)sbs / 2);
    *dh = fg_fp32_to_fp16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < sbs / 32; ++ib) {
        const float *xb = x + ib * 32;
        uint8_t *Lb = L + ib * 32;
        for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
            float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        if (amax < FG_GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float d = ntry > 0 ? -max / values[0] : max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            int l = fg_best_index_int8(16, values, id * xb[j]);
            Lb[j] = (uint8_t)l;
            float q = values[l], w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; ++j) {
                int l = fg_best_index_int8(16, values, id * xb[j]);
                float q = values[l], w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if (fabsf(d) > amax_scale) amax_scale = fabsf(d), max_scale = d;
    }
    if (sbs / 32 > 1) {
        *scales_h = 0;
        float d = -max_scale / 32;
        *dh = fg_fp32_to_fp16(d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < sbs / 32; ++ib) {
            int l = fg_clampi(fg_nearest_int(id * scales[ib]), -32, 31);
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; ++j) L[32 * ib + j] = (uint8_t)fg_best_index_int8(16, values, idl * x[32 * ib + j]);
            l += 32;
            if (ib % 2 == 0) scales_l[ib / 2] = (uint8_t)(l & 0xf);
            else scales_l[ib / 2] |= (uint8_t)((l & 0xf) << 4);
            *scales_h |= (uint16_t)((l >> 4) << 2 * ib);
        }
    } else {
        *dh = fg_fp32_to_fp16(scales[0]);
        if (ntry > 0) {
            float id = scales[0] ? 1 / scales[0] : 0;
            for (int j = 0; j < sbs; ++j) L[j] = (uint8_t)fg_best_index_int8(16, values, id * x[j]);
        }
    }
    for (int i = 0; i < sbs / 32; ++i)
        for (int j = 0; j < 16; ++j) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

/* q3_K scales[12] -> 16 signed scales (6 bits, minus 32): low nibbles in bytes 0..7 (scales 0..7) and their
 * high nibbles (8..15), the top 2 bits of scale j in byte 8 + j % 4 at bit 2 * (j / 4). */
static inline void fg_unpack_scales_q3k(const uint8_t *s, int8_t out[16]) {
    uint32_t a[4];
    memcpy(a, s, 12);
    const uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303, hi = a[2];
    a[3] = ((a[1] >> 4) & m4) | (((hi >> 6) & m2) << 4); /* scales 12..15 */
    a[2] = ((a[0] >> 4) & m4) | (((hi >> 4) & m2) << 4); /* 8..11 */
    a[1] = (a[1] & m4) | (((hi >> 2) & m2) << 4);        /* 4..7 */
    a[0] = (a[0] & m4) | ((hi & m2) << 4);               /* 0..3 */
    uint8_t u[16];
    memcpy(u, a, 16);
    for (int j = 0; j < 16; j++) out[j] = (int8_t)(u[j] - 32);
}

/* q4_K / q5_K scales[12]: scale j and min j (6 bits each, j < 8). Bytes 0..3: scales 0..3 (+ top 2 bits of
 * scales 4..7); 4..7: mins 0..3 (+ top bits of mins 4..7); 8..11: low nibble scale 4+k, high nibble min 4+k. */
static inline void fg_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

/* The shared first half of ggml's quantize_row_q4_K_ref / q5_K_ref for one super-block x (QK_K,): each 32-value
 * sub-block gets a scale and a min (make_qkx2_quants with levels 0..nmax, rmin, nstep), both quantized to 6 bits
 * against the super-block's largest and packed into scales12[12]; *d and *dmin the fp16 super-scales; L (QK_K,)
 * the final levels 0..nmax under the quantized scales. The caller packs L (q4_K: nibbles; q5_K: nibbles + qh). */
static inline void fg_quantize_k4_scales(const float *x, int nmax, float rmin, int nstep, uint8_t scales12[12],
                                         uint16_t *d_out, uint16_t *dmin_out, uint8_t L[QK_K]) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = fg_make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)fg_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)fg_nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            scales12[j] = ls;
            scales12[j + 4] = lm;
        } else {
            scales12[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            scales12[j - 4] |= ((ls >> 4) << 6);
            scales12[j - 0] |= ((lm >> 4) << 6);
        }
    }
    *d_out = fg_fp32_to_fp16(max_scale / 63.f);
    *dmin_out = fg_fp32_to_fp16(max_min / 63.f);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        fg_scale_min_k4(j, scales12, &sc, &m);
        const float d = fg_fp16_to_fp32(*d_out) * sc;
        if (!d) continue;
        const float dm = fg_fp16_to_fp32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ++ii) L[32 * j + ii] = (uint8_t)fg_clampi(fg_nearest_int((x[32 * j + ii] + dm) / d), 0, nmax);
    }
}

/* All 8 scales then all 8 mins as 16 bytes (for the dot kernels). */
static inline void fg_unpack_scales_k4(const uint8_t *q, uint8_t out[16]) {
    uint32_t u[4];
    memcpy(u, q, 12);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4); /* mins 4..7 */
    const uint32_t mins03 = u[1] & m6;
    u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);        /* scales 4..7 */
    u[2] = mins03;
    u[0] &= m6;                                            /* scales 0..3 */
    memcpy(out, u, 16);
}


#if FG_HAVE_X86
/* ---- AVX2 tiles of the K-quant dots against Q8_K (fg_quant_q4_k.c, q5_k.c, q6_k.c; include fg_simd.h first).
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
                                    const char *x, size_t xstride, float *y, int64_t ldy) {
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
                _mm_prefetch((const char *)b + 8 * stride, _MM_HINT_T0);
                _mm_prefetch((const char *)b + 8 * stride + 64, _MM_HINT_T0);
                _mm_prefetch((const char *)b + 8 * stride + bs - 1, _MM_HINT_T0);
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
    int16_t corr[8][16]; /* lane r = the pair that multiplies (bsums[2t], bsums[2t+1]) */
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
    fg_kq_dup_transpose16(lo, sm);
    for (int c = 0; c < 64 / gpm; c++) _mm256_store_si256((__m256i *)u->sc[c], sm[c * gpm / 8]);
    for (int t = 0; t < 8; t++) _mm256_store_si256((__m256i *)u->corr[t], sm[8 + t]);
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

/* The float step of one activation block xb for the 8 rows: (d dx) sumi - (dmin dx) summ (has_min: Q4_K, Q5_K,
 * summ = corr . bsums) or (d dx) (sumi - 32 corr . bsums) (Q6_K). */
FG_INLINE_AVX2 __m256 fg_kq_rows8_step(const fg_kq_rows8 *u, const int has_min, const block_q8_K *xb, __m256i isum) {
    __m256i corr = _mm256_setzero_si256();
    for (int t = 0; t < 8; t++) {
        int32_t b2;
        memcpy(&b2, xb->bsums + 2 * t, 4);
        corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)u->corr[t]), _mm256_set1_epi32(b2)));
    }
    const __m256 dx = _mm256_set1_ps(xb->d), d = _mm256_load_ps(u->d);
    if (!has_min) return _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(_mm256_sub_epi32(isum, _mm256_slli_epi32(corr, 5))));
    const __m256 t0 = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum));
    const __m256 t1 = _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(u->dmin), dx), _mm256_cvtepi32_ps(corr));
    return _mm256_sub_ps(t0, t1);
}

/* GCC's unroll-and-jam fuses two passes of fg_kq_rows8_isum: 16 weight vectors, spilled (1.1-1.4x slower). */
#if defined(__GNUC__) && !defined(__clang__)
#define FG_NO_UNROLL_JAM __attribute__((optimize("no-loop-unroll-and-jam")))
#else
#define FG_NO_UNROLL_JAM
#endif

/* The gemm: blocks of 16 rows; per super-block both 8-row halves are unpacked, then activations in groups of 64
 * (their blocks stay in L1 over the 8 passes) accumulate into y, super-block by super-block as the reference. */
#define FG_KQ_GEMM_AVX2(NAME, ROWS8, GPM, HAS_MIN)                                                               \
    FG_TARGET_AVX2 FG_NO_UNROLL_JAM static void NAME(int64_t n, const void *w, size_t stride, const void *xq, size_t xq_stride,  \
                                    int64_t m, float *y, int64_t ldy, int64_t nrows) {                          \
        fg_kq_rows8 u[2];                                                                                       \
        __m256i acc[64];                                                                                        \
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);                                          \
        for (int64_t rb = 0; rb < nrows; rb += 16) {                                                            \
            const int G = nrows - rb > 8 ? 2 : 1;                                                               \
            for (int64_t i = 0; i < n / QK_K; i++) {                                                            \
                for (int g = 0; g < G; g++) {                                                                   \
                    const int64_t left = nrows - rb - 8 * g;                                                    \
                    ROWS8(GPM, left < 8 ? (int)left : 8, (const char *)w + (rb + 8 * g) * stride, stride, i, &u[g]); \
                }                                                                                               \
                for (int64_t a0 = 0; a0 < m; a0 += 64) {                                                        \
                    const int na = m - a0 < 64 ? (int)(m - a0) : 64;                                            \
                    const char *xa = (const char *)xq + a0 * xq_stride;                                         \
                    for (int g = 0; g < G; g++) {                                                               \
                        const int64_t left = nrows - rb - 8 * g;                                                \
                        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(left < 8 ? (int)left : 8), lane); \
                        fg_kq_rows8_isum(&u[g], GPM, xa, xq_stride, i, na, acc);                                \
                        for (int a = 0; a < na; a++) {                                                          \
                            const __m256 f = fg_kq_rows8_step(&u[g], HAS_MIN,                                   \
                                                              (const block_q8_K *)(xa + a * xq_stride) + i, acc[a]); \
                            float *ya = y + (a0 + a) * ldy + rb + 8 * g;                                        \
                            const __m256 prev = i ? _mm256_maskload_ps(ya, mask) : _mm256_setzero_ps();         \
                            _mm256_maskstore_ps(ya, mask, _mm256_add_ps(prev, f));                              \
                        }                                                                                       \
                    }                                                                                           \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }

/* vec_dot, gemv (8 rows per tile) and gemm (8 activations x 1 row per tile; the 1..7 activations left as
 * 8 / A rows x A) of one K-quant format from its tile TILE(R, A, nb, w, stride, x, xstride, y, ldy). Tiles run
 * over activations outside and the rows inside, so a group of activations stays in L1 while the rows (a block
 * of 16 from fg_gemm_rows) pass over it. */
#define FG_KQ_TAIL_COLS(TILE, A)                                                                              \
    for (int64_t r = 0; r < nrows; r += 8 / (A))                                                             \
        TILE(nrows - r < 8 / (A) ? (int)(nrows - r) : 8 / (A), A, nb, wr + r * stride, stride, xr + a * xq_stride, \
             xq_stride, y + a * ldy + r, ldy)
#ifndef FG_KQ_ROWS8_MIN_M
#define FG_KQ_ROWS8_MIN_M 8 /* from this many activations the rows-in-lanes gemm (MANY) beats the tiles */
#endif
#define FG_KQ_KERNELS_AVX2(DOT, GEMV, GEMM, TILE, MANY)                                                       \
    FG_TARGET_AVX2 static float DOT(int64_t n, const void *w, const void *x) {                                \
        float y;                                                                                              \
        TILE(1, 1, n / QK_K, (const char *)w, 0, (const char *)x, 0, &y, 0);                                  \
        return y;                                                                                             \
    }                                                                                                         \
    FG_TARGET_AVX2 static void GEMV(int64_t n, const void *w, size_t stride, const void *x, float *y, int64_t nrows) { \
        for (int64_t r = 0; r < nrows; r += 8)                                                                \
            TILE(nrows - r < 8 ? (int)(nrows - r) : 8, 1, n / QK_K, (const char *)w + r * stride, stride,    \
                 (const char *)x, 0, y + r, 0);                                                               \
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
#endif /* FG_HAVE_X86 */

#if FG_HAVE_NEON
/* ---- NEON+dotprod row-lane tiles of the K-quants (FG_KERNELS_FROM_TILE8 with aux = the Q8_K scale): the design of
 * fg_b32_tile8_neondp (fg_simd.h), a super-block at a time. Each pair's integer sums are the scalar reference's (sumi,
 * and summ = mins . bsums for Q4_K, Q5_K), exact int32, and its lane takes the reference's float step in its order:
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

/* R <= 8 rows x M <= 8 activations of a K-quant (FG_KQ_*) . q8_K, row r in lane r % 4 of half r / 4. */
FG_INLINE_NEON FG_TARGET_DOTPROD void fg_kq_tile8_neondp(const int R, const int M, int first, int kc, const char *w,
                                                        size_t stride, const char *x, size_t xs,
                                                        const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy,
                                                        const int fmt) {
    const size_t bs = fmt == FG_KQ_Q6_K   ? sizeof(block_q6_K)
                    : fmt == FG_KQ_Q5_K ? sizeof(block_q5_K)
                                        : sizeof(block_q4_K);
    const size_t d_off = fmt == FG_KQ_Q6_K ? offsetof(block_q6_K, d) : offsetof(block_q4_K, d);
    const int H = R > 4 ? 2 : 1;
    float32x4_t acc[8][2];
    fg_load_rows8_neon(R, M, first, acc, y, ldy);
    for (int i = 0; i < kc; i++) {
        const char *wb = w + i * bs;
#ifndef FG_NO_PREFETCH
        for (int r = 0; r < R; r++) /* the same super-block 8 rows on */
            for (size_t c = 0; c < bs; c += 64) fg_prefetch_line(wb + (size_t)(r + 8) * stride + c);
#endif
        for (int h = 0; h < H; h++) {
            const char *wh = wb + 4 * h * stride;
            const int Rh = R - 4 * h > 4 ? 4 : R - 4 * h;
            int32x4_t is[8], ms[8];
            if (M == 1) {
                int32x4_t vi[4], vm[4];
                for (int r = 0; r < 4; r++) {
                    vi[r] = vm[r] = vdupq_n_s32(0);
                    if (r < Rh)
                        fg_kq_row_neondp(fmt, (const uint8_t *)wh + r * stride, (const block_q8_K *)x + i, &vi[r],
                                         &vm[r]);
                }
                is[0] = fg_hsum4_s32_neon(vi), ms[0] = fg_hsum4_s32_neon(vm);
            } else {
                fg_kq_rows4_neondp(fmt, M, wh, stride, Rh, x, xs, i, is, ms);
            }
            const float32x4_t d = fg_rows4_f16_neon(wh + d_off, stride, Rh);
            const float32x4_t dmin =
                fmt == FG_KQ_Q6_K ? d : fg_rows4_f16_neon(wh + offsetof(block_q4_K, dmin), stride, Rh);
            for (int a = 0; a < M; a++) {
                const float32x4_t t0 = vmulq_f32(vmulq_n_f32(d, aux[a][i].d), vcvtq_f32_s32(is[a]));
                if (fmt == FG_KQ_Q6_K) {
                    acc[a][h] = vaddq_f32(acc[a][h], t0);
                } else {
                    const float32x4_t t1 = vmulq_f32(vmulq_n_f32(dmin, aux[a][i].d), vcvtq_f32_s32(ms[a]));
                    acc[a][h] = vaddq_f32(acc[a][h], vsubq_f32(t0, t1));
                }
            }
        }
    }
    fg_store_rows8_neon(R, M, acc, y, ldy);
}

/* Per Q8_K activation block: its float scale. */
FG_INLINE_NEON void fg_q8_k_aux_neon(const char *x, int kc, fg_xaux *aux) {
    const block_q8_K *xb = (const block_q8_K *)x;
    for (int i = 0; i < kc; i++) aux[i].d = xb[i].d, aux[i].c = 0;
}
#endif /* FG_HAVE_NEON */

#endif
