/* Scalar helpers of the K-quant and IQ4 reference quantizers (fg_quant_q*_k.c, fg_quant_iq4_*.c), following ggml's
 * quantize_row_*_ref operation for operation (same float expressions in the same order, no contraction: the build
 * uses -ffp-contract=off) so the bytes are identical to llama.cpp's. Without an importance matrix. Also the unpacking
 * of the K-quant scales that every ISA's dot kernels share. */
#ifndef FG_KQUANT_REF_H
#define FG_KQUANT_REF_H

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

#endif
