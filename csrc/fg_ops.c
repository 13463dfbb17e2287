/* Elementwise ops and grouped-query attention (see fg_ops.h). */
#include <math.h>
#include <string.h>
#include "fg_ops.h"
#include "fg_simd.h"

void fg_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0.0; /* double: the sum of 576..8192 squares, exactly enough, at no cost here */
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    if (!w) { /* no weight (gemma4's V norm) */
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * s;
        return;
    }
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * s * w[i];
}

void fg_layernorm(float *out, const float *x, const float *w, const float *b, int64_t n, float eps) {
    double sum = 0.0, ss = 0.0; /* double sums, as ggml_norm (ggml_float) */
    for (int64_t i = 0; i < n; i++) sum += x[i];
    float mean = (float)(sum / (double)n);
    for (int64_t i = 0; i < n; i++) {
        float d = x[i] - mean;
        ss += (double)d * d;
    }
    float s = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) {
        float y = (x[i] - mean) * s * w[i];
        out[i] = b ? y + b[i] : y;
    }
}

void fg_rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float base, float beta_fast, float beta_slow, float dims[2]) {
    const float two_pi = 6.28318530717958647692f;
    float lo = floorf(n_rot * logf(n_ctx_orig / (beta_fast * two_pi)) / (2 * logf(base)));
    float hi = ceilf(n_rot * logf(n_ctx_orig / (beta_slow * two_pi)) / (2 * logf(base)));
    dims[0] = lo > 0 ? lo : 0;
    dims[1] = hi < n_rot - 1 ? hi : n_rot - 1;
}

void fg_rope_table(float *cs, int n_rot, int64_t pos, const fg_rope_cfg *c) {
    float dims[2] = {0, 0}, mscale = c->attn_factor;
    if (c->ext_factor != 0.0f) {
        fg_rope_yarn_corr_dims(n_rot, c->n_ctx_orig, c->base, c->beta_fast, c->beta_slow, dims);
        mscale *= 1.0f + 0.1f * logf(1.0f / c->freq_scale);
    }
    for (int i = 0; i < n_rot / 2; i++) {
        double extrap = (double)pos * pow((double)c->base, -2.0 * i / n_rot);
        if (c->freq_factors) extrap /= c->freq_factors[i];
        double theta = c->freq_scale * extrap;
        if (c->ext_factor != 0.0f) { /* the ramp: 1 below dims[0] (extrapolate), 0 above dims[1] (interpolate) */
            float y = (i - dims[0]) / fmaxf(0.001f, dims[1] - dims[0]);
            double mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * c->ext_factor;
            theta = theta * (1.0 - mix) + extrap * mix;
        }
        cs[2 * i] = (float)cos(theta) * mscale;
        cs[2 * i + 1] = (float)sin(theta) * mscale;
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

/* sink (NULL: none): one more logit in the denominator with no value (gpt-oss's attention sinks), as ggml's
 * soft_max: the max includes it, exp(sink - max) is added to the sum. */
static void softmax_scalar(float *x, int64_t n, const float *sink) {
    float mx = x[0];
    for (int64_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    if (sink && *sink > mx) mx = *sink;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    if (sink) sum += expf(*sink - mx);
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static void swiglu_scalar(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* GELU (tanh form) as x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3): 0.5 (1 + tanh z) = sigmoid(2z). */
#define GELU_2C 1.5957691216057308f /* 2 sqrt(2/pi) */
#define GELU_A 0.044715f
static void geglu_scalar(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-GELU_2C * (g + GELU_A * g * g * g))) * up[i];
    }
}

static void gelu_scalar(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = x[i];
        x[i] = g / (1.0f + expf(-GELU_2C * (g + GELU_A * g * g * g)));
    }
}

#ifdef FG_HAVE_X86
static int use_avx2(int64_t n) {
    int isa = fg_isa_active();
    return (isa == FG_ISA_AVX2 || isa == FG_ISA_AVX512) && n % 8 == 0;
}
#endif

/* ---- scalar reference ---- */

static void f32_to_f16_scalar(uint16_t *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = fg_fp32_to_fp16(x[i]);
}

/* Slot of the t-th key of a window that starts at slot `first` of a ring of `ring` slots. */
static inline int64_t ring_slot(int64_t first, int64_t t, int64_t ring) {
    int64_t s = first + t;
    return s >= ring ? s - ring : s;
}

static void softcap_scalar(float *x, int64_t n, float cap) {
    float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}

static void attention_scalar(float *out, const float *q, int n_rep, int hd, const uint16_t *k, const uint16_t *v,
                             int64_t kv_stride, int64_t n, int64_t first, int64_t ring, float scale, float softcap,
                             const float *sinks, float *scores) {
    /* scores (n_rep, n): one pass over K */
    for (int64_t t = 0; t < n; t++) {
        const uint16_t *kt = k + ring_slot(first, t, ring) * kv_stride;
        for (int r = 0; r < n_rep; r++) {
            const float *qr = q + (int64_t)r * hd;
            float s = 0.0f;
            for (int d = 0; d < hd; d++) s += qr[d] * fg_fp16_to_fp32(kt[d]);
            scores[r * n + t] = s * scale;
        }
    }
    if (softcap > 0.0f) softcap_scalar(scores, (int64_t)n_rep * n, softcap);
    for (int r = 0; r < n_rep; r++) softmax_scalar(scores + r * n, n, sinks ? sinks + r : NULL);
    /* out (n_rep, hd) = P . V, one pass over V */
    memset(out, 0, sizeof(float) * (size_t)n_rep * hd);
    for (int64_t t = 0; t < n; t++) {
        const uint16_t *vt = v + ring_slot(first, t, ring) * kv_stride;
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

/* expf for 8 lanes (Cephes polynomial, ~2 ulp on [-87, 88]; inputs clamped there, so exp(-inf) gives ~1e-38). */
FG_INLINE_AVX2 __m256 exp_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 z = _mm256_mul_ps(x, x), y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_add_ps(_mm256_fmadd_ps(y, z, x), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

FG_TARGET_AVX2 static void softmax_avx2(float *x, int64_t n, const float *sink) { /* sink: as softmax_scalar */
    int64_t i = 0;
    __m256 m8 = _mm256_set1_ps(x[0]);
    for (; i + 8 <= n; i += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(x + i));
    float mx = fg_hmax_256(m8);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    if (sink && *sink > mx) mx = *sink;
    __m256 vm = _mm256_set1_ps(mx), s8 = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        s8 = _mm256_add_ps(s8, e);
    }
    float sum = fg_hsum_256(s8);
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    if (sink) sum += expf(*sink - mx);
    __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++) x[i] *= 1.0f / sum;
}

FG_TARGET_AVX2 static void swiglu_avx2(float *out, const float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = exp_avx2(_mm256_sub_ps(zero, g));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* gelu_scalar's formula with exp_avx2 (geglu_avx2 without the up factor). */
FG_TARGET_AVX2 static void gelu_avx2(float *x, int64_t n) {
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(-GELU_2C), a = _mm256_set1_ps(GELU_A);
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(x + i);
        __m256 z = _mm256_mul_ps(c, _mm256_add_ps(g, _mm256_mul_ps(a, _mm256_mul_ps(g, _mm256_mul_ps(g, g)))));
        _mm256_storeu_ps(x + i, _mm256_div_ps(g, _mm256_add_ps(one, exp_avx2(z))));
    }
    gelu_scalar(x + i, n - i);
}

FG_TARGET_AVX2 static void geglu_avx2(float *out, const float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(-GELU_2C), a = _mm256_set1_ps(GELU_A);
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 z = _mm256_mul_ps(c, _mm256_add_ps(g, _mm256_mul_ps(a, _mm256_mul_ps(g, _mm256_mul_ps(g, g)))));
        __m256 e = exp_avx2(z);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-GELU_2C * (g + GELU_A * g * g * g))) * up[i];
    }
}

/* The attention tile's buffer of K or V rows converted to float (16 KB: stays in L1 while the tile's heads use it):
 * 8 keys' K rows for the scores (so head_dim <= ATT_BUF / 8), ATT_BUF / head_dim keys' V rows for P . V. */
#define ATT_BUF 4096

/* Rows [j, j + kn) (absolute key positions; slot j mod ring) of an F16 cache, converted into buf (kn, hd). */
/* The cache is read a row slice (hd halves of a kv_dim row) at a time, rows apart: a strided stream the hardware
 * prefetcher follows late, so each row's lines are asked for ATT_PF rows (keys) ahead (in the ring; a hint). */
#define ATT_PF 16
FG_INLINE_AVX2 void rows_to_f32_avx2(float *buf, const uint16_t *c, int64_t stride, int64_t j, int kn, int hd,
                                     int64_t ring) {
    int64_t row = j % ring, ahead = (j + ATT_PF) % ring;
    for (int u = 0; u < kn; u++) {
        const uint16_t *src = c + row * stride, *pf = c + ahead * stride;
        for (int d = 0; d < hd; d += 32) _mm_prefetch((const char *)(pf + d), _MM_HINT_T0);
        for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(buf + u * hd + d, load_f16x8(src + d));
        if (++row == ring) row = 0;
        if (++ahead == ring) ahead = 0;
    }
}

/* q . k of one query head and one key as 8 partial sums; fg_hsum_256 of it (then * scale) is the score. Every
 * score is made by exactly these ops, so a query gets the same bits alone or in a tile. */
FG_INLINE_AVX2 __m256 dot_avx2(const float *qr, const float *kt, int hd) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + d), _mm256_loadu_ps(kt + d), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + d + 8), _mm256_loadu_ps(kt + d + 8), a1);
    }
    if (d < hd) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + d), _mm256_loadu_ps(kt + d), a0);
    return _mm256_add_ps(a0, a1);
}

/* dot_avx2 of one query head with 4 keys (rows of kf, hd floats apart) at once, x[c] for key c: the same FMAs
 * into the same two accumulators per key, interleaved over the keys (8 independent chains instead of 2). */
FG_INLINE_AVX2 void dot4_avx2(__m256 *x, const float *qr, const float *kf, int hd) {
    __m256 a0[4], a1[4];
    for (int c = 0; c < 4; c++) a0[c] = a1[c] = _mm256_setzero_ps();
    int d = 0;
    for (; d + 16 <= hd; d += 16) {
        __m256 q0 = _mm256_loadu_ps(qr + d), q1 = _mm256_loadu_ps(qr + d + 8);
        for (int c = 0; c < 4; c++) {
            a0[c] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kf + c * hd + d), a0[c]);
            a1[c] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(kf + c * hd + d + 8), a1[c]);
        }
    }
    if (d < hd) {
        __m256 q0 = _mm256_loadu_ps(qr + d);
        for (int c = 0; c < 4; c++) a0[c] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kf + c * hd + d), a0[c]);
    }
    for (int c = 0; c < 4; c++) x[c] = _mm256_add_ps(a0[c], a1[c]);
}

/* s[0..8) = scores of one query head against 8 consecutive keys (rows of kf, hd floats apart): fg_hsum_256 of each
 * dot_avx2 with the same additions in the same pairs ((x0+x4) + (x2+x6)) + ((x1+x5) + (x3+x7)), done for 8 at once. */
FG_INLINE_AVX2 void score8_avx2(float *s, const float *qr, const float *kf, int hd, float scale) {
    __m256 x[8], y[4];
    dot4_avx2(x, qr, kf, hd);
    dot4_avx2(x + 4, qr, kf + 4 * hd, hd);
    for (int c = 0; c < 4; c++) /* y[c] = [x(2c) lo + hi | x(2c+1) lo + hi] */
        y[c] = _mm256_add_ps(_mm256_permute2f128_ps(x[2 * c], x[2 * c + 1], 0x20),
                             _mm256_permute2f128_ps(x[2 * c], x[2 * c + 1], 0x31));
    __m256 z0 = _mm256_add_ps(_mm256_shuffle_ps(y[0], y[1], 0x44), _mm256_shuffle_ps(y[0], y[1], 0xEE));
    __m256 z1 = _mm256_add_ps(_mm256_shuffle_ps(y[2], y[3], 0x44), _mm256_shuffle_ps(y[2], y[3], 0xEE));
    __m256 h = _mm256_add_ps(_mm256_shuffle_ps(z0, z1, 0x88), _mm256_shuffle_ps(z0, z1, 0xDD)); /* keys 0 2 4 6 1 3 5 7 */
    h = _mm256_permutevar8x32_ps(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_ps(s, _mm256_mul_ps(h, _mm256_set1_ps(scale)));
}

/* A tile of nq queries (see fg_attention_tile), in blocks of keys over the union [j0, j1) of their windows: each
 * block's K (then V) rows converted once into a float buffer for all nq * n_rep heads. Per (query head, key) the
 * ops are the same whatever the tile (a lone query is a tile of one); P . V adds the keys in order into each output
 * element, o = fma(p, v, o) from 0. */
FG_TARGET_AVX2 static void attention_tile_avx2(float *out, int64_t out_stride, const float *q, int64_t q_stride,
                                               int nq, int n_rep, int hd, const uint16_t *k, const uint16_t *v,
                                               int64_t kv_stride, const int64_t *lo, const int64_t *n, int64_t ring,
                                               float scale, float softcap, const float *sinks, float *scores) {
    float buf[ATT_BUF];                                     /* (8, hd) K rows or (vb, hd) V rows */
    int64_t j0 = lo[0], j1 = lo[0] + n[0], sc[FG_ATT_TILE]; /* sc[i]: query i's (n_rep, n[i]) scores */
    for (int i = 0, off = 0; i < nq; off += n_rep * n[i], i++) {
        sc[i] = off;
        j0 = lo[i] < j0 ? lo[i] : j0;
        j1 = lo[i] + n[i] > j1 ? lo[i] + n[i] : j1;
    }
    for (int64_t jb = j0; jb < j1; jb += 8) {
        int kn = j1 - jb < 8 ? (int)(j1 - jb) : 8;
        rows_to_f32_avx2(buf, k, kv_stride, jb, kn, hd, ring);
        for (int i = 0; i < nq; i++) {
            int64_t a = jb > lo[i] ? jb : lo[i], b = jb + kn < lo[i] + n[i] ? jb + kn : lo[i] + n[i];
            for (int r = 0; r < n_rep && a < b; r++) {
                float *s = scores + sc[i] + r * n[i] + (a - lo[i]); /* scores of keys a.. */
                const float *qr = q + i * q_stride + r * hd;
                if (b - a == 8)
                    score8_avx2(s, qr, buf, hd, scale);
                else
                    for (int64_t j = a; j < b; j++) s[j - a] = fg_hsum_256(dot_avx2(qr, buf + (j - jb) * hd, hd)) * scale;
            }
        }
    }
    for (int i = 0; i < nq; i++) {
        if (softcap > 0.0f) softcap_scalar(scores + sc[i], (int64_t)n_rep * n[i], softcap);
        for (int r = 0; r < n_rep; r++) softmax_avx2(scores + sc[i] + r * n[i], n[i], sinks ? sinks + r : NULL);
        memset(out + i * out_stride, 0, sizeof(float) * (size_t)n_rep * hd);
    }
    int vb = ATT_BUF / hd;
    for (int64_t jb = j0; jb < j1; jb += vb) {
        int kn = j1 - jb < vb ? (int)(j1 - jb) : vb;
        rows_to_f32_avx2(buf, v, kv_stride, jb, kn, hd, ring);
        for (int i = 0; i < nq; i++) {
            int64_t a = jb > lo[i] ? jb : lo[i], b = jb + kn < lo[i] + n[i] ? jb + kn : lo[i] + n[i];
            for (int r = 0; r < n_rep && a < b; r++) {
                const float *p = scores + sc[i] + r * n[i] + (a - lo[i]), *vf = buf + (a - jb) * hd; /* keys a.. */
                float *o = out + i * out_stride + r * hd;
                int d = 0;
                for (; d + 64 <= hd; d += 64) { /* 8 independent accumulators: FMA throughput, not latency */
                    __m256 acc[8];
                    for (int c = 0; c < 8; c++) acc[c] = _mm256_loadu_ps(o + d + 8 * c);
                    for (int64_t u = 0; u < b - a; u++) {
                        __m256 pu = _mm256_broadcast_ss(p + u);
                        for (int c = 0; c < 8; c++)
                            acc[c] = _mm256_fmadd_ps(pu, _mm256_loadu_ps(vf + u * hd + d + 8 * c), acc[c]);
                    }
                    for (int c = 0; c < 8; c++) _mm256_storeu_ps(o + d + 8 * c, acc[c]);
                }
                for (; d < hd; d += 8) {
                    __m256 o0 = _mm256_loadu_ps(o + d);
                    for (int64_t u = 0; u < b - a; u++)
                        o0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p + u), _mm256_loadu_ps(vf + u * hd + d), o0);
                    _mm256_storeu_ps(o + d, o0);
                }
            }
        }
    }
}

/* ---- AVX-512 twin of the attention tile (head_dim % 16 == 0, <= ATT_HD512): as the AVX2 tile, each block of keys'
 * K (then V) rows converted once into a float buffer for all the tile's nq * n_rep heads. A score is q . k summed by
 * fma over the head's 16-float slices in order into one vector from 0, then across its lanes by hsum16_512's tree
 * (lanes i and i + 8, then + 4, + 2, + 1), times scale; 16 keys are scored at once (score16_512: the same tree for
 * the 16 vectors together, each output lane the tree of one key's vector), so a score does not depend on where the
 * blocks start (the scores are those of the per-query kernel this replaced, one key at a time by
 * _mm512_reduce_add_ps, whose order under gcc is this tree). softmax_512, then P . V: o = fma(p, v, o) over the keys
 * in order from 0 for each output element. A query's output is thus the same alone, in any tile and in any block
 * alignment. ---- */
#define ATT_KB 16     /* keys per K block: one score16_512 */
#define ATT_HD512 512 /* the widest head the AVX-512 tile takes: its buffer is ATT_KB rows of it (32 KB) */

/* rows_to_f32_avx2 on AVX-512: rows [j, j + kn) (slot j mod ring) into buf (kn, hd), 16 halves at a time, each run
 * of rows adjacent in memory (stride == hd, the engine's caches, up to the ring's end) as one stream, asked for
 * ATT_PF512 bytes ahead (a hint: a prefetch beyond the cache faults on nothing). The distance, measured at depth
 * 4096 from DRAM (benchmarks/attn_decode.c, CPU time on a busy 2-vCPU VM): 1024 B 12.1 ms per token for the 1B
 * shape (hd 64, n_rep 4), 1536 B 12.7, 2048 B 10.6, 2560 B 10.7, 3072 B 12.0; hd 128, n_rep 2: 9.4 -> 8.9 ms from
 * 1024 to 2048 B, the plain read of the same bytes 8.8. */
#define ATT_PF512 2048
FG_INLINE_AVX512 void rows_to_f32_512(float *buf, const uint16_t *c, int64_t stride, int64_t j, int kn, int hd,
                                      int64_t ring) {
    int64_t row = j % ring;
    for (int u = 0; u < kn;) {
        int64_t run = stride == hd ? (kn - u < ring - row ? kn - u : ring - row) : 1, m = run * hd;
        const uint16_t *src = c + row * stride;
        float *dst = buf + (int64_t)u * hd;
        for (int64_t e = 0; e < m; e += 16) {
            if (e % 32 == 0) _mm_prefetch((const char *)(src + e) + ATT_PF512, _MM_HINT_T0);
            _mm512_storeu_ps(dst + e, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + e))));
        }
        u += (int)run;
        row += run;
        if (row >= ring) row -= ring;
    }
}

/* The sum of x's 16 lanes: ((x0 + x8) + (x4 + x12)) + ((x2 + x10) + (x6 + x14)) + the same from x1: the tree
 * score16_512 applies to 16 vectors at once. */
FG_INLINE_AVX512 float hsum16_512(__m512 x) {
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)); /* no AVX512DQ needed */
    __m256 t3 = _mm256_add_ps(_mm512_castps512_ps256(x), hi);
    __m128 t6 = _mm_add_ps(_mm256_castps256_ps128(t3), _mm256_extractf128_ps(t3, 1));
    __m128 t8 = _mm_add_ps(t6, _mm_movehl_ps(t6, t6));
    return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, 1));
}

/* Lane c = hsum16_512(a[c]) for 16 vectors: the same additions in the same pairs, done as a transposing tree. */
FG_INLINE_AVX512 __m512 reduce16_512(const __m512 *a) {
    __m512 b[8], c[4], d[2];
    for (int m = 0; m < 8; m++) /* lanes 0-7: t3 of a[2m], lanes 8-15: of a[2m + 1] */
        b[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
    for (int m = 0; m < 4; m++) /* 128-bit lane L: t6 of a[4m + L] */
        c[m] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0xDD));
    for (int m = 0; m < 2; m++) /* lane L: t8 of a[8m + L], of a[8m + 4 + L] */
        d[m] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * m], c[2 * m + 1], 0x44),
                             _mm512_shuffle_ps(c[2 * m], c[2 * m + 1], 0xEE));
    __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
    /* e[4L + i] = the sum of a[4i + L] */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), e);
}

/* exp_avx2 on 16 lanes: the same ops, lane for lane the same bits. */
FG_INLINE_AVX512 __m512 exp_512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    __m512 z = _mm512_mul_ps(x, x), y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_add_ps(_mm512_fmadd_ps(y, z, x), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

/* softmax_scalar (sink: as there) 16 lanes at a time, the tail under a mask: exp_512 of every score (the tail's
 * too, unlike softmax_avx2's expf), their sum in 16 lanes then hsum16_512, times 1 / sum. */
FG_TARGET_AVX512 static void softmax_512(float *x, int64_t n, const float *sink) {
    int64_t i = 0;
    __m512 m16 = _mm512_set1_ps(x[0]);
    for (; i + 16 <= n; i += 16) m16 = _mm512_max_ps(m16, _mm512_loadu_ps(x + i));
    __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
    m16 = _mm512_mask_max_ps(m16, tail, m16, _mm512_maskz_loadu_ps(tail, x + i));
    float mx = _mm512_reduce_max_ps(m16);
    if (sink && *sink > mx) mx = *sink;
    __m512 vm = _mm512_set1_ps(mx), s16 = _mm512_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 e = exp_512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        _mm512_storeu_ps(x + i, e);
        s16 = _mm512_add_ps(s16, e);
    }
    __m512 e = exp_512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), vm));
    _mm512_mask_storeu_ps(x + i, tail, e);
    float sum = hsum16_512(_mm512_mask_add_ps(s16, tail, s16, e));
    if (sink) sum += expf(*sink - mx);
    __m512 inv = _mm512_set1_ps(1.0f / sum);
    for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
    _mm512_mask_storeu_ps(x + i, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + i), inv));
}

/* The scores (unscaled) of one query head against 16 keys (rows of kf, hd floats apart): lane c, key c. */
FG_INLINE_AVX512 __m512 score16_512(const float *qr, const float *kf, int hd) {
    __m512 a[ATT_KB];
    for (int c = 0; c < ATT_KB; c++) a[c] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
        __m512 qd = _mm512_loadu_ps(qr + d);
        for (int c = 0; c < ATT_KB; c++) a[c] = _mm512_fmadd_ps(qd, _mm512_loadu_ps(kf + c * hd + d), a[c]);
    }
    return reduce16_512(a);
}

/* The scores phase of attention_tile_avx512: sc[i], query i's (n_rep, n[i]) scores in `scores`; keys [j0, j1). */
FG_TARGET_AVX512 static void scores_512(float *buf, const float *q, int64_t q_stride, int nq, int n_rep, int hd,
                                        const uint16_t *k, int64_t kv_stride, const int64_t *lo, const int64_t *n,
                                        int64_t ring, float scale, float *scores, const int64_t *sc, int64_t j0,
                                        int64_t j1) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t jb = j0; jb < j1; jb += ATT_KB) {
        int kn = j1 - jb < ATT_KB ? (int)(j1 - jb) : ATT_KB;
        rows_to_f32_512(buf, k, kv_stride, jb, kn, hd, ring);
        if (kn < ATT_KB) memset(buf + kn * hd, 0, sizeof(float) * (size_t)(ATT_KB - kn) * hd); /* lanes not kept */
        for (int i = 0; i < nq; i++) {
            int64_t a = jb > lo[i] ? jb : lo[i], b = jb + kn < lo[i] + n[i] ? jb + kn : lo[i] + n[i];
            for (int r = 0; r < n_rep && a < b; r++) {
                float *s = scores + sc[i] + r * n[i] + (a - lo[i]), tmp[ATT_KB]; /* scores of keys a.. */
                const float *qr = q + i * q_stride + r * hd; /* the common head sizes as constants: immediate offsets */
                __m512 x = _mm512_mul_ps(hd == 64    ? score16_512(qr, buf, 64)
                                         : hd == 128 ? score16_512(qr, buf, 128)
                                                     : score16_512(qr, buf, hd),
                                         vs);
                if (a == jb && b - a == ATT_KB) {
                    _mm512_storeu_ps(s, x);
                } else {
                    _mm512_storeu_ps(tmp, x);
                    memcpy(s, tmp + (a - jb), sizeof(float) * (size_t)(b - a));
                }
            }
        }
    }
}

/* o[r * ho + c * 16 ..] += sum over keys u < m of p[r * hp + u] * vf[u * hd + c * 16 ..], for NR heads and ND
 * 16-float slices (constants after inlining: the NR * ND accumulators stay in registers), keys in order. */
FG_INLINE_AVX512 void pv_512(const int NR, const int ND, float *o, int64_t ho, const float *p, int64_t hp,
                             const float *vf, int hd, int64_t m) {
    __m512 acc[4][4], vv[4];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < ND; c++) acc[r][c] = _mm512_loadu_ps(o + r * ho + 16 * c);
    for (int64_t u = 0; u < m; u++) {
        for (int c = 0; c < ND; c++) vv[c] = _mm512_loadu_ps(vf + u * hd + 16 * c);
        for (int r = 0; r < NR; r++) {
            __m512 pu = _mm512_set1_ps(p[r * hp + u]);
            for (int c = 0; c < ND; c++) acc[r][c] = _mm512_fmadd_ps(pu, vv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < ND; c++) _mm512_storeu_ps(o + r * ho + 16 * c, acc[r][c]);
}

/* pv_512 over F16 rows (keys j .. j + m - 1, slot j mod ring, rows stride halves apart) converted as they are read:
 * for a lone query (a decode step), whose every V row serves its NR heads once (a buffer would add a store and a
 * load per element). The same fmas in the same order: the same bits. Every 64-byte line of the row is asked for
 * ATT_PF512 bytes ahead (a row of 64 halves is two lines; asking for one left every other line to the hardware). */
FG_INLINE_AVX512 void pv_f16_512(const int NR, const int ND, float *o, int64_t ho, const float *p, int64_t hp,
                                 const uint16_t *v, int64_t stride, int64_t j, int64_t m, int64_t ring) {
    __m512 acc[4][4], vv[4];
    int64_t row = j % ring;
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < ND; c++) acc[r][c] = _mm512_loadu_ps(o + r * ho + 16 * c);
    for (int64_t u = 0; u < m; u++) {
        const uint16_t *vr = v + row * stride;
        for (int c = 0; c < ND; c += 2) _mm_prefetch((const char *)(vr + 16 * c) + ATT_PF512, _MM_HINT_T0);
        for (int c = 0; c < ND; c++) vv[c] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * c)));
        for (int r = 0; r < NR; r++) {
            __m512 pu = _mm512_set1_ps(p[r * hp + u]);
            for (int c = 0; c < ND; c++) acc[r][c] = _mm512_fmadd_ps(pu, vv[c], acc[r][c]);
        }
        if (++row == ring) row = 0;
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < ND; c++) _mm512_storeu_ps(o + r * ho + 16 * c, acc[r][c]);
}

FG_TARGET_AVX512 static void pv_any_512(int nr, int nd, float *o, int64_t ho, const float *p, int64_t hp,
                                        const float *vf, int hd, int64_t m) {
    switch (nr * 4 + nd - 5) { /* nr, nd in 1..4 */
#define PV(NR, ND) case (NR) * 4 + (ND) - 5: pv_512(NR, ND, o, ho, p, hp, vf, hd, m); break;
        PV(1, 1) PV(1, 2) PV(1, 3) PV(1, 4) PV(2, 1) PV(2, 2) PV(2, 3) PV(2, 4)
        PV(3, 1) PV(3, 2) PV(3, 3) PV(3, 4) PV(4, 1) PV(4, 2) PV(4, 3) PV(4, 4)
#undef PV
    default: break;
    }
}

FG_TARGET_AVX512 static void pv_f16_any_512(int nr, int nd, float *o, int64_t ho, const float *p, int64_t hp,
                                            const uint16_t *v, int64_t stride, int64_t j, int64_t m, int64_t ring) {
    switch (nr * 4 + nd - 5) { /* nr, nd in 1..4 */
#define PV(NR, ND) case (NR) * 4 + (ND) - 5: pv_f16_512(NR, ND, o, ho, p, hp, v, stride, j, m, ring); break;
        PV(1, 1) PV(1, 2) PV(1, 3) PV(1, 4) PV(2, 1) PV(2, 2) PV(2, 3) PV(2, 4)
        PV(3, 1) PV(3, 2) PV(3, 3) PV(3, 4) PV(4, 1) PV(4, 2) PV(4, 3) PV(4, 4)
#undef PV
    default: break;
    }
}

/* A tile of nq queries (see fg_attention_tile) on AVX-512: the union [j0, j1) of their windows in blocks. */
FG_TARGET_AVX512 static void attention_tile_avx512(float *out, int64_t out_stride, const float *q, int64_t q_stride,
                                                   int nq, int n_rep, int hd, const uint16_t *k, const uint16_t *v,
                                                   int64_t kv_stride, const int64_t *lo, const int64_t *n,
                                                   int64_t ring, float scale, float softcap, const float *sinks,
                                                   float *scores) {
    float buf[ATT_KB * ATT_HD512];                          /* (16, hd) K rows or (vb, hd) V rows */
    int64_t j0 = lo[0], j1 = lo[0] + n[0], sc[FG_ATT_TILE]; /* sc[i]: query i's (n_rep, n[i]) scores */
    for (int i = 0, off = 0; i < nq; off += n_rep * n[i], i++) {
        sc[i] = off;
        j0 = lo[i] < j0 ? lo[i] : j0;
        j1 = lo[i] + n[i] > j1 ? lo[i] + n[i] : j1;
    }
    scores_512(buf, q, q_stride, nq, n_rep, hd, k, kv_stride, lo, n, ring, scale, scores, sc, j0, j1);
    for (int i = 0; i < nq; i++) {
        if (softcap > 0.0f) softcap_scalar(scores + sc[i], (int64_t)n_rep * n[i], softcap);
        for (int r = 0; r < n_rep; r++) softmax_512(scores + sc[i] + r * n[i], n[i], sinks ? sinks + r : NULL);
        memset(out + i * out_stride, 0, sizeof(float) * (size_t)n_rep * hd);
    }
    if (nq == 1 && n_rep <= 4 && hd <= 64) { /* a lone query: every head's output in registers, V read once */
        pv_f16_any_512(n_rep, hd / 16, out, hd, scores, n[0], v, kv_stride, lo[0], n[0], ring);
        return;
    }
    int vb = ATT_KB * ATT_HD512 / hd;
    for (int64_t jb = j0; jb < j1; jb += vb) {
        int kn = j1 - jb < vb ? (int)(j1 - jb) : vb;
        rows_to_f32_512(buf, v, kv_stride, jb, kn, hd, ring);
        for (int i = 0; i < nq; i++) {
            int64_t a = jb > lo[i] ? jb : lo[i], b = jb + kn < lo[i] + n[i] ? jb + kn : lo[i] + n[i];
            for (int r0 = 0; r0 < n_rep && a < b; r0 += 4) /* 4 heads x 64 floats of output at a time */
                for (int d = 0; d < hd; d += 64)
                    pv_any_512(n_rep - r0 < 4 ? n_rep - r0 : 4, hd - d < 64 ? (hd - d) / 16 : 4,
                               out + i * out_stride + r0 * hd + d, hd, scores + sc[i] + r0 * n[i] + (a - lo[i]),
                               n[i], buf + (a - jb) * hd + d, hd, b - a);
        }
    }
}
#endif

void fg_softmax(float *x, int64_t n) {
#ifdef FG_HAVE_X86
    if (use_avx2(8)) {
        softmax_avx2(x, n, NULL);
        return;
    }
#endif
    softmax_scalar(x, n, NULL);
}

void fg_swiglu(float *out, const float *gate, const float *up, int64_t n) {
#ifdef FG_HAVE_X86
    if (use_avx2(8)) {
        swiglu_avx2(out, gate, up, n);
        return;
    }
#endif
    swiglu_scalar(out, gate, up, n);
}

void fg_swiglu_oai(float *out, const float *gate, const float *up, int64_t n, float alpha, float limit) {
    /* scalar on every ISA: ggml's CPU op is scalar with expf, and the experts' GEMMs dwarf it */
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i] < limit ? gate[i] : limit, y = up[i] < -limit ? -limit : (up[i] > limit ? limit : up[i]);
        out[i] = x / (1.0f + expf(alpha * -x)) * (y + 1.0f);
    }
}

void fg_geglu(float *out, const float *gate, const float *up, int64_t n) {
#ifdef FG_HAVE_X86
    if (use_avx2(8)) {
        geglu_avx2(out, gate, up, n);
        return;
    }
#endif
    geglu_scalar(out, gate, up, n);
}

void fg_f32_to_f16_row(uint16_t *y, const float *x, int64_t n) {
#ifdef FG_HAVE_X86
    if (use_avx2(8)) {
        f32_to_f16_avx2(y, x, n);
        return;
    }
#endif
    f32_to_f16_scalar(y, x, n);
}

void fg_attention_tile(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq, int n_rep,
                       int head_dim, const uint16_t *k, const uint16_t *v, int64_t kv_stride, const int64_t *lo,
                       const int64_t *n, int64_t ring, float scale, float softcap, const float *sinks,
                       float *scores) {
#ifdef FG_HAVE_X86
    if (fg_isa_active() == FG_ISA_AVX512 && head_dim % 16 == 0 && head_dim <= ATT_HD512 && n_rep >= 1 &&
        n_rep <= 8) {
        attention_tile_avx512(out, out_stride, q, q_stride, nq, n_rep, head_dim, k, v, kv_stride, lo, n, ring, scale,
                              softcap, sinks, scores);
        return;
    }
    if (use_avx2(head_dim) && head_dim <= ATT_BUF / 8) {
        attention_tile_avx2(out, out_stride, q, q_stride, nq, n_rep, head_dim, k, v, kv_stride, lo, n, ring, scale,
                            softcap, sinks, scores);
        return;
    }
#endif
    for (int i = 0; i < nq; i++) /* one query at a time */
        attention_scalar(out + i * out_stride, q + i * q_stride, n_rep, head_dim, k, v, kv_stride, n[i],
                         lo[i] % ring, ring, scale, softcap, sinks, scores);
}

void fg_attention_group(float *out, const float *q, int n_rep, int head_dim, const uint16_t *k, const uint16_t *v,
                        int64_t kv_stride, int64_t n, int64_t first, int64_t ring, float scale, float softcap,
                        const float *sinks, float *scores) {
    fg_attention_tile(out, 0, q, 0, 1, n_rep, head_dim, k, v, kv_stride, &first, &n, ring, scale, softcap, sinks,
                      scores);
}

void fg_gelu(float *x, int64_t n) {
#ifdef FG_HAVE_X86
    if (use_avx2(8)) {
        gelu_avx2(x, n);
        return;
    }
#endif
    gelu_scalar(x, n);
}

void fg_softcap(float *x, int64_t n, float cap) {
    if (cap > 0.0f) softcap_scalar(x, n, cap);
}
