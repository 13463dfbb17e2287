/* Q4_1 weights: 32 elements per block, x = d * q + m, q in 0..15. Dot against Q8_1 activations (d, d*sum). */
#include "fg_blocks.h"
#include "fg_kernels.h"

/* ---- scalar reference ---- */

static void quantize_row_q4_1_scalar(const float *x, void *vy, int64_t n) {
    block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        const float *xb = x + i * QK4_1;
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK4_1; j++) {
            if (xb[j] < min) min = xb[j];
            if (xb[j] > max) max = xb[j];
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fg_fp32_to_fp16(d);
        y[i].m = fg_fp32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const float x0 = (xb[j] - min) * id, x1 = (xb[j + QK4_1 / 2] - min) * id;
            int q0 = (int)(x0 + 0.5f), q1 = (int)(x1 + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void dequantize_row_q4_1_scalar(const void *vx, float *y, int64_t n) {
    const block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        const float d = fg_fp16_to_fp32(x[i].d), m = fg_fp16_to_fp32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[i * QK4_1 + j] = (float)(x[i].qs[j] & 0x0f) * d + m;
            y[i * QK4_1 + j + QK4_1 / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

static float vec_dot_q4_1_q8_1_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q4_1 *w = vw;
    const block_q8_1 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        int sumi = 0;
        for (int j = 0; j < QK4_1 / 2; j++) {
            sumi += (w[i].qs[j] & 0x0f) * x[i].qs[j];
            sumi += (w[i].qs[j] >> 4) * x[i].qs[j + QK4_1 / 2];
        }
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d)) +
               fg_fp16_to_fp32(w[i].m) * fg_fp16_to_fp32(x[i].s);
    }
    return sum;
}

const fg_type_kernels fg_q4_1_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_q4_1_scalar, dequantize_row_q4_1_scalar, vec_dot_q4_1_q8_1_scalar, NULL},
};
