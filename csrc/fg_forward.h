/* The llama-family forward pass: weights (pointers into the mapped file), per-context state (KV cache and
 * scratch), and fg_forward, which runs a batch of tokens inside ONE OpenMP parallel region.
 *
 * Threading: every thread owns the same output rows of every matrix on every call (fg_split_rows), works on
 * them, and meets the others at a barrier only where the next op needs the whole vector: about 5 barriers per
 * layer for one token (10 for a batch). Built without OpenMP it runs on one thread. */
#ifndef FG_FORWARD_H
#define FG_FORWARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const void *data; /* (rows, cols) of ggml `type`, rows `stride` bytes apart */
    int type;
    size_t stride;
    int64_t rows, cols;
} fg_mat;

typedef struct {
    const float *attn_norm;       /* (n_embd,) */
    fg_mat wq, wk, wv;            /* (q_dim, n_embd), (kv_dim, n_embd), (kv_dim, n_embd) */
    const float *bq, *bk, *bv;    /* optional biases (q_dim,), (kv_dim,), (kv_dim,) or NULL (qwen2) */
    const float *q_norm, *k_norm; /* optional per-head RMS norm weights (head_dim,) or NULL (qwen3) */
    fg_mat wo;                    /* (n_embd, q_dim) */
    const float *ffn_norm;        /* (n_embd,) */
    fg_mat w_gate, w_up;          /* (n_ff, n_embd) */
    fg_mat w_down;                /* (n_embd, n_ff) */
} fg_layer;

typedef struct {
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int n_rot, rope_neox;         /* rotated dims per head (<= head_dim); 0: pairs (2i, 2i+1), 1: (i, i+n_rot/2) */
    float norm_eps, rope_base, rope_freq_scale, attn_scale;
    const float *rope_freqs;      /* optional (n_rot/2,) frequency divisors (rope_freqs.weight) or NULL */
    fg_mat tok_embd;              /* (n_vocab, n_embd) */
    const float *output_norm;     /* (n_embd,) */
    fg_mat output;                /* (n_vocab, n_embd); may be tok_embd (tied) */
    const fg_layer *layers;       /* (n_layer,) */
} fg_model;

#define FG_MAX_SLOTS 3 /* distinct activation types for one input (q, k, v may differ) */

typedef struct {
    int n_ctx, n_batch, max_threads;
    int64_t q_dim, kv_dim, n_in;  /* n_in = max(n_embd, q_dim, n_ff) */
    uint16_t *k_cache, *v_cache;  /* (n_layer, n_ctx, kv_dim) each, F16 (half the memory and bandwidth of F32) */
    float *kcur, *vcur;           /* (n_batch, kv_dim) this step's K and V before RoPE / conversion to F16 */
    float *x;                     /* (n_batch, n_embd) residual stream */
    float *xn;                    /* (n_batch, n_in) normed input, batch path */
    float *q, *att;               /* (n_batch, q_dim) */
    float *tmp;                   /* (n_batch, n_embd) */
    float *gate, *up;             /* (n_batch, n_ff) */
    float *rope;                  /* (n_batch, n_rot) cos/sin pairs */
    char *xq;                     /* (FG_MAX_SLOTS, n_batch, xq_row) quantized inputs, batch path */
    size_t xq_row;
    char *priv;                   /* (max_threads, priv_size): per-thread xn (n_in), slots, scores */
    size_t priv_size;
} fg_state;

/* 0 ok, -1 allocation failure (state left freed). n_batch: tokens per internal chunk of a prompt. */
int fg_state_init(fg_state *s, const fg_model *m, int n_ctx, int n_batch, int max_threads);
void fg_state_free(fg_state *s);
/* Grow the per-thread scratch for up to max_threads threads. 0 ok, -1 allocation failure (state unchanged). */
int fg_state_set_max_threads(fg_state *s, const fg_model *m, int max_threads);

/* Run tokens (n_tokens,) at positions pos..pos+n_tokens-1, writing K/V into the cache. logits: (n_vocab,) for the
 * last token, or (n_tokens, n_vocab) when all_logits. Returns 0; -1 if pos + n_tokens > n_ctx, n_tokens < 1 or
 * a token is out of range (nothing done); n_threads is clamped to [1, max_threads]. */
int fg_forward(const fg_model *m, fg_state *s, const int32_t *tokens, int n_tokens, int pos, float *logits,
               int all_logits, int n_threads);

#endif
