/* Elementwise and attention ops of the forward pass (fg_forward.c). Scalar C the compiler vectorises; each op
 * works on the slice it is given, so the caller decides how work is split among threads. */
#ifndef FG_OPS_H
#define FG_OPS_H

#include <stdint.h>

/* out (n,) = x / rms(x) * w (w NULL: no weight).  out may alias x. */
void fg_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);

/* out (n,) = (x - mean(x)) / sqrt(var(x) + eps) * w + b (LayerNorm; llama.cpp's ggml_norm then the weight and
 * bias; b may be NULL). out may alias x. */
void fg_layernorm(float *out, const float *x, const float *w, const float *b, int64_t n, float eps);

/* How a RoPE angle table is made (llama.cpp's ggml rope with rope_yarn, same parameters). */
typedef struct {
    float base, freq_scale;    /* theta_i = pos * base^(-2i/n_rot) / freq_factors[i] ("extrapolated"); its
                                * "interpolated" twin is freq_scale * theta_i */
    const float *freq_factors; /* (n_rot/2,) divisors or NULL (rope_freqs.weight, LongRoPE factors) */
    float ext_factor;          /* YaRN: > 0 mixes the two, extrapolated where the ramp over the correction dims
                                * (from n_ctx_orig, beta_fast, beta_slow) is 1; 0: interpolated only */
    float attn_factor;         /* cos and sin are multiplied by this (and by 1 + 0.1 ln(1/freq_scale) under YaRN) */
    int n_ctx_orig;
    float beta_fast, beta_slow;
} fg_rope_cfg;

/* YaRN's correction dims (ggml_rope_yarn_corr_dims, in float as there): dims[0] <= i <= dims[1] ramp. */
void fg_rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float base, float beta_fast, float beta_slow, float dims[2]);

/* RoPE angle table of one position: cs[2*i] = mscale cos(theta_i), cs[2*i+1] = mscale sin(theta_i), i < n_rot/2
 * (see fg_rope_cfg). */
void fg_rope_table(float *cs, int n_rot, int64_t pos, const fg_rope_cfg *c);

/* Rotate the first n_rot dims of n_heads heads (head_dim apart) in place. neox = 0: pairs (x[2i], x[2i+1])
 * (llama's "normal" mode); neox = 1: pairs (x[i], x[i + n_rot/2]). */
void fg_rope(float *x, int n_heads, int head_dim, int n_rot, const float *cs, int neox);

/* In-place softmax of x (n,), n >= 1. */
void fg_softmax(float *x, int64_t n);

/* out (n,) = silu(gate) * up.  out may alias gate. */
void fg_swiglu(float *out, const float *gate, const float *up, int64_t n);

/* out (n,) = swiglu_oai(gate, up) as ggml's (gpt-oss experts): x = min(gate, limit), y = clamp(up, -limit, limit),
 * out = x * sigmoid(alpha x) * (y + 1). out may alias gate. */
void fg_swiglu_oai(float *out, const float *gate, const float *up, int64_t n, float alpha, float limit);

/* out (n,) = gelu(gate) * up, GELU in its tanh form (gemma).  out may alias gate. */
void fg_geglu(float *out, const float *gate, const float *up, int64_t n);

/* x (n,) = gelu(x) in place, the tanh form (llama.cpp's ggml_gelu, used by BERT's FFN). */
void fg_gelu(float *x, int64_t n);

/* x (n,) = cap * tanh(x / cap) in place (soft-capping, gemma2); nothing when cap <= 0. */
void fg_softcap(float *x, int64_t n, float cap);

/* y (n,) = fp16(x), round to nearest even (the KV cache is F16). */
void fg_f32_to_f16_row(uint16_t *y, const float *x, int64_t n);

/* Attention of the n_rep query heads of one KV head group for one query over n >= 1 cached keys (the query's
 * own position last). q: (n_rep, head_dim) contiguous floats; k, v: F16 rows of a ring of `ring` slots (a
 * full-length cache: ring = n_ctx, first = 0), key t at slot (first + t) mod ring, rows kv_stride elements apart;
 * out: (n_rep, head_dim). Scores are q.k * scale, then soft-capped (softcap > 0: softcap * tanh(s / softcap)).
 * sinks (n_rep,) or NULL: head r's softmax has one more logit sinks[r] with no value (gpt-oss's attention sinks).
 * Each K and V row is read once for the whole group (converted to float in blocks that stay in L1 while the
 * group's query heads use them). scores: scratch of n_rep * n floats. AVX-512 when active and head_dim % 16 == 0,
 * head_dim <= 512 and n_rep <= 8; else AVX2 (F16C+FMA) on x86 when head_dim % 8 == 0 and head_dim <= 512; else
 * scalar. */
void fg_attention_group(float *out, const float *q, int n_rep, int head_dim, const uint16_t *k, const uint16_t *v,
                        int64_t kv_stride, int64_t n, int64_t first, int64_t ring, float scale, float softcap,
                        const float *sinks, float *scores);


/* The most queries fg_attention_tile takes at once. */
#define FG_ATT_TILE 4

/* fg_attention_group for nq <= FG_ATT_TILE queries of one sequence and one KV head group at once: query i's
 * n_rep heads at q + i * q_stride, its output at out + i * out_stride; its n[i] >= 1 keys are the absolute
 * positions lo[i] .. lo[i] + n[i] - 1, position p at ring slot p mod ring. Each query's output is bit-identical to
 * fg_attention_group's for it alone (on AVX2 and AVX-512 the K and V rows are read once for the tile; scalar runs
 * the queries one by one). scores: scratch of n_rep * (n[0] + ... + n[nq-1]) floats. */
void fg_attention_tile(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq, int n_rep,
                       int head_dim, const uint16_t *k, const uint16_t *v, int64_t kv_stride, const int64_t *lo,
                       const int64_t *n, int64_t ring, float scale, float softcap, const float *sinks,
                       float *scores);

#endif
