/* Elementwise ops and grouped-query attention (see fg_ops.h). */
#include <math.h>
#include <string.h>
#include "fg_ops.h"
#include "fg_simd.h"

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

static int use_avx2(int64_t n) {
#ifdef FG_HAVE_X86
    int isa = fg_isa_active();
    return (isa == FG_ISA_AVX2 || isa == FG_ISA_AVX512) && n % 8 == 0;
#else
    (void)n;
    return 0;
#endif
}

/* ---- scalar reference ---- */

static void f32_to_f16_scalar(uint16_t *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = fg_fp32_to_fp16(x[i]);
}

static void attention_scalar(float *out, const float *q, int n_rep, int hd, const uint16_t *k, const uint16_t *v,
                             int64_t kv_stride, int64_t n, float scale, float *scores) {
    /* scores (n_rep, n): one pass over K */
    for (int64_t t = 0; t < n; t++) {
        const uint16_t *kt = k + t * kv_stride;
        for (int r = 0; r < n_rep; r++) {
            const float *qr = q + (int64_t)r * hd;
            float s = 0.0f;
            for (int d = 0; d < hd; d++) s += qr[d] * fg_fp16_to_fp32(kt[d]);
            scores[r * n + t] = s * scale;
        }
    }
    for (int r = 0; r < n_rep; r++) fg_softmax(scores + r * n, n);
    /* out (n_rep, hd) = P . V, one pass over V */
    memset(out, 0, sizeof(float) * (size_t)n_rep * hd);
    for (int64_t t = 0; t < n; t++) {
        const uint16_t *vt = v + t * kv_stride;
        for (int r = 0; r < n_rep; r++) {
            float p = scores[r * n + t], *o = out + (int64_t)r * hd;
            for (int d = 0; d < hd; d++) o[d] += p * fg_fp16_to_fp32(vt[d]);
        }
    }
}

/* ---- AVX2 + F16C + FMA twin ---- */
#ifdef FG_HAVE_X86
FG_TARGET_AVX2 static void f32_to_f16_avx2(uint16_t *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = fg_fp32_to_fp16(x[i]);
}

FG_INLINE_AVX2 __m256 load_f16x8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

FG_TARGET_AVX2 static void attention_avx2(float *out, const float *q, int n_rep, int hd, const uint16_t *k,
                                          const uint16_t *v, int64_t kv_stride, int64_t n, float scale,
                                          float *scores) {
    for (int64_t t = 0; t < n; t++) {
        const uint16_t *kt = k + t * kv_stride;
        for (int r = 0; r < n_rep; r++) {
            const float *qr = q + (int64_t)r * hd;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            int d = 0;
            for (; d + 16 <= hd; d += 16) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + d), load_f16x8(kt + d), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + d + 8), load_f16x8(kt + d + 8), a1);
            }
            if (d < hd) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + d), load_f16x8(kt + d), a0);
            scores[r * n + t] = fg_hsum_256(_mm256_add_ps(a0, a1)) * scale;
        }
    }
    for (int r = 0; r < n_rep; r++) fg_softmax(scores + r * n, n);
    memset(out, 0, sizeof(float) * (size_t)n_rep * hd);
    for (int64_t t = 0; t < n; t++) {
        const uint16_t *vt = v + t * kv_stride;
        for (int r = 0; r < n_rep; r++) {
            __m256 p = _mm256_set1_ps(scores[r * n + t]);
            float *o = out + (int64_t)r * hd;
            for (int d = 0; d < hd; d += 8)
                _mm256_storeu_ps(o + d, _mm256_fmadd_ps(p, load_f16x8(vt + d), _mm256_loadu_ps(o + d)));
        }
    }
}
#endif

void fg_f32_to_f16_row(uint16_t *y, const float *x, int64_t n) {
#ifdef FG_HAVE_X86
    if (use_avx2(8)) {
        f32_to_f16_avx2(y, x, n);
        return;
    }
#endif
    f32_to_f16_scalar(y, x, n);
}

void fg_attention_group(float *out, const float *q, int n_rep, int head_dim, const uint16_t *k, const uint16_t *v,
                        int64_t kv_stride, int64_t pos, float scale, float *scores) {
#ifdef FG_HAVE_X86
    if (use_avx2(head_dim)) {
        attention_avx2(out, q, n_rep, head_dim, k, v, kv_stride, pos + 1, scale, scores);
        return;
    }
#endif
    attention_scalar(out, q, n_rep, head_dim, k, v, kv_stride, pos + 1, scale, scores);
}
