/* Q4_0 weights: 32 elements per block, x = d * (q - 8), q in 0..15. Dot against Q8_0 activations. */
#include "fg_blocks.h"
#include "fg_kernels.h"

/* ---- scalar reference (also the tail loop of the SIMD versions) ---- */

/* llama.cpp's reference rounding (quantize_row_q4_0_ref), which gguf-py follows. */
static void quantize_row_q4_0_scalar(const float *x, void *vy, int64_t n) {
    block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float *xb = x + i * QK4_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            if (amax < fabsf(xb[j])) { amax = fabsf(xb[j]); max = xb[j]; }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fg_fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const float x0 = xb[j] * id, x1 = xb[j + QK4_0 / 2] * id;
            int q0 = (int)(x0 + 8.5f), q1 = (int)(x1 + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void dequantize_row_q4_0_scalar(const void *vx, float *y, int64_t n) {
    const block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float d = fg_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[i * QK4_0 + j] = (float)((x[i].qs[j] & 0x0f) - 8) * d;
            y[i * QK4_0 + j + QK4_0 / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static float vec_dot_q4_0_q8_0_scalar(int64_t n, const void *vw, const void *vx) {
    const block_q4_0 *w = vw;
    const block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            sumi += ((w[i].qs[j] & 0x0f) - 8) * x[i].qs[j];
            sumi += ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + QK4_0 / 2];
        }
        sum += (float)sumi * (fg_fp16_to_fp32(w[i].d) * fg_fp16_to_fp32(x[i].d));
    }
    return sum;
}

const fg_type_kernels fg_q4_0_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_q4_0_scalar, dequantize_row_q4_0_scalar, vec_dot_q4_0_q8_0_scalar, NULL},
};
