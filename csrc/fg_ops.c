/* Elementwise ops and grouped-query attention (see fg_ops.h). */
#include <math.h>
#include <string.h>
#include "fg_ops.h"

void fg_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0.0; /* double: the sum of 576..8192 squares, exactly enough, at no cost here */
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * s * w[i];
}

void fg_rope_table(float *cs, int n_rot, int64_t pos, float base, float freq_scale, const float *freq_factors) {
    for (int i = 0; i < n_rot / 2; i++) {
        double theta = (double)pos * freq_scale * pow((double)base, -2.0 * i / n_rot);
        if (freq_factors) theta /= freq_factors[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

void fg_rope(float *x, int n_heads, int head_dim, int n_rot, const float *cs, int neox) {
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float c = cs[2 * i], s = cs[2 * i + 1], x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * c - x1 * s;
            xh[b] = x0 * s + x1 * c;
        }
    }
}

void fg_softmax(float *x, int64_t n) {
    float mx = x[0];
    for (int64_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void fg_swiglu(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static inline float dot_f32(const float *a, const float *b, int n) {
    /* 8 partial sums: vectorisable without -ffast-math */
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

void fg_attention_group(float *out, const float *q, int n_rep, int head_dim, const float *k, const float *v,
                        int64_t kv_stride, int64_t pos, float scale, float *scores) {
    int64_t n = pos + 1;
    /* scores (n_rep, n): one pass over K, every K row dotted with all query heads of the group */
    for (int64_t t = 0; t < n; t++) {
        const float *kt = k + t * kv_stride;
        for (int r = 0; r < n_rep; r++) scores[r * n + t] = dot_f32(q + (int64_t)r * head_dim, kt, head_dim) * scale;
    }
    for (int r = 0; r < n_rep; r++) fg_softmax(scores + r * n, n);
    /* out (n_rep, head_dim) = P . V, one pass over V */
    memset(out, 0, sizeof(float) * (size_t)n_rep * head_dim);
    for (int64_t t = 0; t < n; t++) {
        const float *vt = v + t * kv_stride;
        for (int r = 0; r < n_rep; r++) {
            float p = scores[r * n + t], *o = out + (int64_t)r * head_dim;
            for (int d = 0; d < head_dim; d++) o[d] += p * vt[d];
        }
    }
}
