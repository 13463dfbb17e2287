/* Float weights: F32, F16, BF16, each dotted against F32 activations. */
#include "fg_blocks.h"
#include "fg_kernels.h"

/* ---- scalar reference ---- */

static void quantize_row_f32_scalar(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
static void dequantize_row_f32_scalar(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

static float vec_dot_f32_f32_scalar(int64_t n, const void *vw, const void *vx) {
    const float *w = vw, *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += w[i] * x[i];
    return sum;
}

static void quantize_row_f16_scalar(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = fg_fp32_to_fp16(x[i]);
}

static void dequantize_row_f16_scalar(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = fg_fp16_to_fp32(x[i]);
}

static float vec_dot_f16_f32_scalar(int64_t n, const void *vw, const void *vx) {
    const uint16_t *w = vw;
    const float *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += fg_fp16_to_fp32(w[i]) * x[i];
    return sum;
}

static void quantize_row_bf16_scalar(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = fg_fp32_to_bf16(x[i]);
}

static void dequantize_row_bf16_scalar(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = fg_bf16_to_fp32(x[i]);
}

static float vec_dot_bf16_f32_scalar(int64_t n, const void *vw, const void *vx) {
    const uint16_t *w = vw;
    const float *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += fg_bf16_to_fp32(w[i]) * x[i];
    return sum;
}

const fg_type_kernels fg_f32_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_f32_scalar, dequantize_row_f32_scalar, vec_dot_f32_f32_scalar, NULL},
};
const fg_type_kernels fg_f16_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_f16_scalar, dequantize_row_f16_scalar, vec_dot_f16_f32_scalar, NULL},
};
const fg_type_kernels fg_bf16_kernels[FG_ISA_COUNT] = {
    [FG_ISA_SCALAR] = {quantize_row_bf16_scalar, dequantize_row_bf16_scalar, vec_dot_bf16_f32_scalar, NULL},
};
