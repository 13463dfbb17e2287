/* Q8_0 (weights and activations) and Q8_1 (activations for Q4_1 weights): 32 int8 per block. */
#include "fg_blocks.h"
#include "fg_kernels.h"

/* ---- scalar reference ---- */

static void quantize_row_q8_0_scalar(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *xb = x + i * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fg_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

static void dequantize_row_q8_0_scalar(const void *vx, float *y, int64_t n) {
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float d = fg_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[i * QK8_0 + j] = (float)x[i].qs[j] * d;
    }
}

static float vec_dot_q8_0_q8_0_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q8_0 *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += w[i].qs[j] * x[i].qs[j];
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d));
    }
    return sum;
}

static void quantize_row_q8_1_scalar(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const float *xb = x + i * QK8_1;
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(xb[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = fg_fp32_to_fp16(d);
        y[i].s = fg_fp32_to_fp16((float)sum * d);
    }
}

static void dequantize_row_q8_1_scalar(const void *vx, float *y, int64_t n) {
    const block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const float d = fg_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_1; j++) y[i * QK8_1 + j] = (float)x[i].qs[j] * d;
    }
}

const fg_type_kernels fg_q8_0_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_q8_0_scalar, dequantize_row_q8_0_scalar, vec_dot_q8_0_q8_0_scalar, NULL},
};

const fg_type_kernels fg_q8_1_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_q8_1_scalar, dequantize_row_q8_1_scalar, NULL, NULL},
};
