/* The llama-family forward pass: weights (pointers into the mapped file), KV caches (one per sequence), scratch,
 * and fg_forward_multi, which runs rows of one or several sequences inside ONE parallel call of the work's team
 * (fg_threads.h).
 *
 * Threading: the big matmuls (q|k|v, the output projections, gate|up, the logits) hand their output rows out in
 * dynamic chunks (each thread its own first chunk, then whatever chunk is free: fg_forward.c's chunks_of), the
 * rest of the work is split evenly (fg_split_rows); threads meet at a barrier only where the next op needs the
 * whole vector: about 5 barriers per layer for one token (10 for a batch). Which thread computes a row never
 * changes its value: any thread count gives 1 thread's outputs bit for bit. Built with -DFG_NO_THREADS it runs on
 * one thread. */
#ifndef FG_FORWARD_H
#define FG_FORWARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const void *data; /* (rows, cols) of ggml `type`, rows `stride` bytes apart */
    int type;
    size_t stride;
    int64_t rows, cols;
    const void *packed; /* NULL, or its row-interleaved copy (fg_pack_rows) that decode reads (Model(repack=True)) */
} fg_mat;

/* A stack of n_expert matrices of one type (a 3-D GGUF tensor ffn_*_exps): expert e is `m` with data moved by
 * e * expert_stride bytes. m.data NULL: absent. */
typedef struct {
    fg_mat m;
    size_t expert_stride;
    int64_t n_expert;
} fg_mat3;

typedef struct {
    const float *attn_norm;       /* (n_embd,) */
    fg_mat wq, wk, wv;            /* (q_dim, n_embd), (kv_dim, n_embd), (kv_dim, n_embd) */
    const float *bq, *bk, *bv;    /* optional biases (q_dim,), (kv_dim,), (kv_dim,) or NULL (qwen2) */
    const float *q_norm, *k_norm; /* optional per-head RMS norm weights (head_dim,) or NULL (qwen3) */
    fg_mat wo;                    /* (n_embd, q_dim) */
    const float *ffn_norm;        /* (n_embd,) */
    fg_mat w_gate, w_up;          /* (n_ff, n_embd) */
    fg_mat w_down;                /* (n_embd, n_ff) */
    const float *attn_post_norm;  /* optional (n_embd,) RMS norm of the attention output before the residual add */
    const float *ffn_post_norm;   /* optional (n_embd,) RMS norm of the FFN output before the residual add (gemma) */
    int swa;                      /* 1: a sliding-window layer: attends to its last m->hp.n_swa positions only, with
                                   * RoPE base/scale rope_base_swa/rope_freq_scale_swa and a ring of K/V rows */
    int nope;                     /* 1: a NoPE layer: q and k are not rotated (smollm3's every 4th layer) */
    /* a gated short-convolution layer instead of attention (lfm2; m->hp.n_conv taps; wq ... wo absent there):
     * B | C | xx = conv_in . attn_norm(x), bx = B * xx, y[c] = sum_{i < n_conv} conv_w[c][i] bx[pos - n_conv + 1 +
     * i][c] (bx of positions before 0: zero), out = conv_out . (C * y); bx is kept in a ring (fg_kv) */
    int conv;                     /* 1: such a layer */
    fg_mat conv_in;               /* (3 n_embd, n_embd): the B, C and xx rows, in that order */
    const float *conv_w;          /* (n_embd, n_conv) F32 */
    fg_mat conv_out;              /* (n_embd, n_embd) */
    /* the BERT family (post-norm encoders; all optional, NULL / data NULL when absent): attn_norm and ffn_norm
     * are NULL there (no pre-norm), and w_gate.data NULL means a plain FFN act(x . Wup + b_up) . Wdown */
    const float *bo, *b_up, *b_down;  /* biases of wo (n_embd,), w_up (n_ff,), w_down (n_embd,) */
    const float *attn_out_norm, *attn_out_norm_b;   /* x = LayerNorm(x + attention output) (n_embd,) */
    const float *layer_out_norm, *layer_out_norm_b; /* x = LayerNorm(x + FFN output) (n_embd,) */
    /* mixture of experts (m->hp.n_expert > 0; llama.cpp's build_moe_ffn): router gate_inp (n_expert, n_embd), the
     * experts' gate/up (n_ff_exp, n_embd) and down (n_embd, n_ff_exp) stacks. w_gate/w_up/w_down then hold the
     * optional shared expert (n_ff_shexp wide; data NULL: none), scaled per row by sigmoid(gate_inp_shexp . x)
     * when gate_inp_shexp (n_embd,) is not NULL (qwen2moe) */
    fg_mat gate_inp;
    fg_mat3 gate_exps, up_exps, down_exps;
    const float *gate_inp_shexp;
    /* gpt-oss (all optional, NULL when absent): attention sinks (n_head,), one more logit per head in the attention
     * softmax with no value; router bias (n_expert,) added to the router logits; expert biases added to each
     * expert's gate/up (n_expert, n_ff_exp) and down (n_expert, n_embd) outputs */
    const float *attn_sinks, *b_gate_inp, *b_gate_exps, *b_up_exps, *b_down_exps;
    /* gated attention (qwen35; m->hp.attn_gate): the output of attention is multiplied by sigmoid(wg . attn_norm(x))
     * before wo (the q projection's gate rows, split out of attn_q at load) */
    fg_mat wg;                    /* (q_dim, n_embd) */
    /* a gated DeltaNet layer instead of attention (qwen35; fg_hparams dn_*; S = dn_state, HK = dn_k_heads, HV =
     * dn_v_heads, conv_dim = 2 HK S + HV S): qkv = conv silu(causal conv (dn_conv taps) of dn_qkv . h), q and k
     * L2-normalised per head, the gated delta rule per v head h (its q/k head h mod HK) on an (S, S) state with
     * decay exp(softplus(alpha + dn_dt) * dn_a) and rate sigmoid(beta); out = dn_out . (rmsnorm(o) * dn_norm *
     * silu(z)), z = dn_z . h. State: the conv ring (dn_conv rows of qkv) and the (HV, S, S) matrices (fg_kv) */
    int deltanet;                 /* 1: such a layer */
    fg_mat dn_qkv, dn_z;          /* (conv_dim, n_embd), (HV S, n_embd) */
    fg_mat dn_beta, dn_alpha;     /* (HV, n_embd) each */
    fg_mat dn_out;                /* (n_embd, HV S) */
    const float *dn_conv_w;       /* (conv_dim, dn_conv) F32 */
    const float *dn_dt, *dn_a;    /* (HV,) each: the time-step bias and -exp(A_log) */
    const float *dn_norm;         /* (S,) */
    /* optional (n_expert,) expert selection bias (lfm2moe's exp_probs_b, DeepSeek-V3's): added to the
     * probabilities to choose the top experts only; the weights stay the unbiased probabilities */
    const float *exp_probs_b;
    /* a Mamba-2 layer instead of attention (granitehybrid; llama.cpp's build_mamba2_layer; m->hp.ssm_*; wq ... wo
     * absent there). With D = d_inner, S = d_state, G = n_group, H = ssm_n_head heads of P = D / H channels:
     * z | xBC | dt = ssm_in . attn_norm(x) (D, D + 2 G S, H values); xBC = silu(causal conv of xBC with the
     * (D + 2 G S, d_conv) kernel ssm_conv1d + ssm_conv1d_b) = x (D) | B (G S) | C (G S); per head h (group
     * g = h / (H / G)): dt' = softplus(dt[h] + ssm_dt_b[h]), state[h][p][s] = state * exp(dt' ssm_a[h]) +
     * B[g][s] x[h][p] dt', y[h][p] = sum_s state[h][p][s] C[g][s] + ssm_d[h] x[h][p]; y *= silu(z); y RMS-normed
     * per group of D / G channels, times ssm_norm; out = ssm_out . y. Its state (fg_kv dn_cache at dn_off): the conv's last
     * d_conv - 1 inputs and the (H, P, S) scan state; a row at position 0 starts from zeros */
    int ssm;                      /* 1: such a layer */
    fg_mat ssm_in;                /* (2 D + 2 G S + H, n_embd) */
    fg_mat ssm_out;               /* (n_embd, D) */
    const float *ssm_conv1d;      /* (D + 2 G S, d_conv) F32 */
    const float *ssm_conv1d_b;    /* optional (D + 2 G S,) or NULL */
    const float *ssm_dt_b, *ssm_a, *ssm_d; /* (H,) each; ssm_a is -exp(A_log) */
    const float *ssm_norm;        /* (D,) */
    /* gemma4 (all optional: 0 / NULL / data NULL when absent) */
    int n_ff;                     /* this layer's FFN width (its w_gate/w_up rows); 0: hp.n_ff */
    int kv_reuse;                 /* > 0: this layer computes no K/V and attends over layer kv_reuse - 1's cache (an
                                   * earlier layer of its kind: same window, head size and KV heads); 0: its own */
    fg_mat ple_gate;              /* (P, n_embd), P = hp.n_embd_per_layer: after the FFN, x += rmsnorm(ple_out .
                                   * (gelu(ple_gate . x) * this layer's per-layer input)) * ple_post_norm */
    fg_mat ple_out;               /* (n_embd, P) */
    const float *ple_post_norm;   /* (n_embd,) */
    const float *out_scale;       /* (1,): then x *= out_scale[0] (the layer's output scale) */
    /* gemma4's mixture of experts (moe_post_norm not NULL; hp.moe_dense): with r = x after attention, x = r +
     * rmsnorm(ffn_post_norm_1-normed dense FFN of ffn_norm(r) + moe_post_norm-normed experts) * ffn_post_norm; the
     * router reads rmsnorm(r) * router_norm, the experts rmsnorm(r) * exp_norm; expert e's output times
     * down_exps_s[e] (optional) */
    const float *ffn_post_norm_1, *moe_post_norm, *router_norm, *exp_norm, *down_exps_s;
} fg_layer;

#define FG_ACT_SILU 0             /* ffn = silu(gate) * up (llama) */
#define FG_ACT_GELU_TANH 1        /* ffn = gelu_tanh(gate) * up (gemma) */
#define FG_ACT_SWIGLU_OAI 2       /* ffn = swiglu_oai(gate, up), alpha 1.702, limit 7 (gpt-oss experts; fg_ops.h) */
#define FG_GATING_SOFTMAX 0       /* expert probabilities = softmax(router logits) */
#define FG_GATING_SIGMOID 1       /* = sigmoid(router logits) */
#define FG_GATING_SOFTMAX_WEIGHT 2 /* the raw logits choose; weights = softmax of the chosen logits (gpt-oss) */
#define FG_MAX_BATCH 256          /* rows per chunk of a forward call at most (the K/V ring's slack, see fg_kv) */
#define FG_MAX_BATCH_NC 8192      /* the same for a non-causal model (non_causal): a chunk holds whole sequences,
                                   * so it must take the longest input (no sliding-window layers there) */

/* The model's numbers (all ints and floats), filled whole from fastgguf.arch.Hparams.as_c() (one field per key;
 * tests/test_structure.py checks this struct against _native.pxd and Hparams). Zero means "off" wherever that
 * makes sense, so a zeroed fg_hparams with the dimensions set is a llama one. */
typedef struct {
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int n_rot, rope_neox;         /* rotated dims per head (<= head_dim); 0: pairs (2i, 2i+1), 1: (i, i+n_rot/2) */
    float norm_eps, rope_base, rope_freq_scale, attn_scale;
    float embd_scale;             /* embeddings are multiplied by this (gemma: sqrt(n_embd); else 1) */
    int ffn_act;                  /* FG_ACT_SILU or FG_ACT_GELU_TANH */
    float attn_softcap;           /* > 0: attention scores s -> c tanh(s / c) (gemma2); 0: none */
    float final_softcap;          /* > 0: logits soft-capped likewise (gemma2); 0: none */
    int n_swa;                    /* window of the sliding-window layers (positions, >= 1 if a layer has swa) */
    float rope_base_swa, rope_freq_scale_swa; /* RoPE of the sliding-window layers */
    /* RoPE scaling beyond linear (fg_rope_cfg): YaRN (ext_factor 1) and the magnitude factor of YaRN / LongRoPE */
    float rope_ext_factor, rope_attn_factor, rope_beta_fast, rope_beta_slow;
    int rope_n_ctx_orig;          /* the training context YaRN's ramp and LongRoPE's long/short choice refer to */
    int non_causal;               /* 0: a row attends to its sequence's positions up to its own; 1 (encoders, the
                                   * BERT family): to every row of its sequence in the call (see fg_forward_multi) */
    /* granite: the attention and FFN outputs are multiplied by residual_scale before their residual add, the
     * logits by logit_scale (0 or 1: none, as llama.cpp's 0 = unset) */
    float residual_scale, logit_scale;
    /* mixture of experts (0 experts: every layer is a dense FFN). Each row's FFN: probabilities p = gating(router
     * logits); the n_expert_used largest of p + exp_probs_b (fg_layer; ties: the lower expert first); weights w =
     * their p (unbiased), divided by their
     * sum when moe_norm_w, times moe_w_scale; out = sum_j w_j down_j(act(gate_j x) * up_j x) in that order, plus
     * the shared expert (fg_layer; n_ff is then its width). FG_GATING_SOFTMAX_WEIGHT: p = the logits, w = softmax
     * of the chosen ones. moe_act: an FG_ACT_* */
    int n_expert, n_expert_used, n_ff_exp, moe_gating, moe_norm_w, moe_act;
    float moe_w_scale;
    int qk_norm_full;             /* 1: q_norm/k_norm are (q_dim,)/(kv_dim,) and RMS-normalise the whole q and k
                                   * vectors, not each head (olmoe); such a model runs every row through the
                                   * batch attention path, which holds whole rows per thread */
    int n_conv;                   /* taps of the short-convolution layers (fg_layer conv; >= 2), 0: none (lfm2's
                                   * shortconv.l_cache); their state is the last n_conv - 1 rows of bx */
    int attn_gate;                /* 1: gated attention (fg_layer wg; qwen35) */
    int dn_conv, dn_state, dn_k_heads, dn_v_heads; /* the DeltaNet layers' (fg_layer deltanet) conv taps (>= 2), head
                                   * size S, q/k heads and v heads (a multiple of them); dn_conv 0: no such layers */
    int dn_kv_grouped;            /* 1: v head h reads q/k head h / (HV / HK) (qwen3next's repeat-interleave); 0: h mod HK
                                   * (qwen35's broadcast) */
    /* Mamba-2 layers (fg_layer ssm; all 0: none): conv taps (>= 2), inner width D, state size S, heads H, groups G
     * (H % G == 0, D % H == 0) */
    int ssm_d_conv, ssm_d_inner, ssm_d_state, ssm_n_head, ssm_n_group;
    /* gemma4: the sliding-window layers' own head size, KV heads and rotated dims (0: as the others'); their RoPE
     * without rope_freqs (swa_no_freqs 1: the factors are the full-attention layers' alone); V RMS-normalised per
     * head (no weight) before it is cached (v_norm 1); per-layer inputs of P = n_embd_per_layer values per layer
     * (fg_model ple_*, fg_layer ple_*; 0: none) */
    int head_dim_swa, n_head_kv_swa, n_rot_swa, swa_no_freqs, v_norm, n_embd_per_layer;
    int moe_dense;                /* 1: gemma4's experts beside a dense FFN of n_ff (fg_layer moe_post_norm) */
} fg_hparams;

/* The model: its numbers and its tensors (pointers into the mapped file). */
typedef struct {
    fg_hparams hp;
    const float *rope_freqs;      /* optional (n_rot/2,) frequency divisors (rope_freqs.weight) or NULL */
    const float *rope_freqs_long; /* optional (n_rot/2,) LongRoPE factors used instead of rope_freqs by a sequence
                                   * whose cache holds more than rope_n_ctx_orig positions (phi3 128k), or NULL */
    fg_mat tok_embd;              /* (n_vocab, n_embd) */
    const float *output_norm;     /* (n_embd,), or NULL: the hidden state is the last layer's output (encoders) */
    fg_mat output;                /* (n_vocab, n_embd); may be tok_embd (tied); data NULL: no lm_head (an
                                   * encoder): logits are refused */
    const fg_layer *layers;       /* (n_layer,) */
    /* the BERT family (encoders) */
    fg_mat pos_embd;              /* optional (n_pos, n_embd) learned position embeddings added to the input
                                   * (bert; data NULL: none); positions >= n_pos are refused */
    const float *type_embd0;      /* optional (n_embd,) token type 0's embedding added to the input, or NULL */
    const float *tok_norm, *tok_norm_b; /* optional (n_embd,): input = LayerNorm(embeddings), or NULL */
    /* gemma4's per-layer inputs (hp.n_embd_per_layer = P > 0; data NULL: none): for each row, (n_layer, P) values
     * (rmsnorm(ple_proj . x / sqrt(n_embd)) * ple_norm per layer + ple_embd[token] * sqrt(P)) / sqrt(2), x the
     * scaled embedding; layer il uses its P (fg_layer ple_gate) */
    fg_mat ple_embd;              /* (n_vocab, n_layer P) */
    fg_mat ple_proj;              /* (n_layer P, n_embd) */
    const float *ple_norm;        /* (P,) */
} fg_model;

#define FG_MAX_SLOTS 3 /* distinct activation types for one input (q, k, v may differ) */

/* One sequence's KV cache: what a conversation keeps between calls. F16 (half the memory and bandwidth of F32).
 * Layer il holds layer_rows[il] rows: n_ctx for a full-attention layer (row = position), and a ring of
 * n_swa_rows = min(n_ctx, n_swa + FG_MAX_BATCH) for a sliding-window layer (row = position mod n_swa_rows): the
 * n_swa positions a query sees plus the rows a chunk writes before its first row reads. Group-major: a layer is
 * n_head_kv blocks (layer_rows, head_dim), so attention over one KV group reads one contiguous stream.
 * A short-convolution layer (fg_layer conv) holds no K/V rows but a ring of n_conv_rows = min(n_ctx, n_conv - 1 +
 * FG_MAX_BATCH) rows of its bx (F32, row = position mod n_conv_rows): its state is a window of inputs, so the ring
 * serves rewinds and prefix copies as a sliding-window layer's does. */
typedef struct {
    int n_ctx, n_swa_rows, n_conv_rows;
    uint16_t *k_cache, *v_cache;  /* the layers one after another, each (n_head_kv, layer_rows, head_dim) */
    float *conv_cache;            /* the conv layers' rings one after another, each (n_conv_rows, n_embd) */
    int64_t *layer_row0;          /* (n_layer + 1,) first K/V row of each layer; the last entry is the total */
    int64_t *layer_off;           /* (n_layer + 1,) first value of each layer's K (and V) block: layers may differ
                                   * in head size and KV heads (gemma4; same allocation) */
    int64_t *conv_row0;           /* (n_layer + 1,) the same for the conv rings' rows (same allocation) */
    float *dn_cache;              /* the recurrent layers' states one after another: a DeltaNet layer's conv ring
                                   * (dn_conv, conv_dim) (row = position mod dn_conv) then (dn_v_heads, S, S) matrices
                                   * M[h][j][i] = S_h[i][j] (ggml's transposed layout); a Mamba-2 layer's
                                   * (fg_ssm_state_floats) conv inputs (d_conv - 1, D + 2 G S) then the scan state
                                   * (H, D / H, S); a row at position 0 starts from zeros */
    int64_t *dn_off;              /* (n_layer + 1,) first float of each layer's state (same allocation) */
    size_t bytes;                 /* of K, V, the conv rings, the DeltaNet and the Mamba-2 states together */
} fg_kv;

/* Scratch of a forward call: the rows of one chunk (up to n_batch rows, of any sequences), per-thread private
 * buffers and the team (its worker threads persist between calls and are joined by fg_work_free). Holds no data
 * between calls; one call at a time. */
typedef struct {
    int n_batch, max_ctx, max_threads; /* rows per chunk; longest cache attention may read; threads */
    int64_t q_dim, kv_dim, n_in;  /* n_in = max(n_embd, q_dim, n_ff) */
    float *kcur, *vcur;           /* (n_batch, kv_dim) this chunk's K and V before RoPE / conversion to F16 */
    float *x;                     /* (n_batch, n_embd) residual stream */
    float *xn;                    /* (n_batch, n_in) normed input, batch path */
    float *q, *att;               /* (n_batch, q_dim) */
    float *tmp;                   /* (n_batch, n_embd) */
    float *gate, *up;             /* (n_batch, n_ff) */
    float *conv;                  /* (n_batch, 3 n_embd) a conv layer's B | C | xx, then C * y in the B third; NULL
                                   * without conv layers */
    float *ag;                    /* (n_batch, q_dim) the attention gate's logits (attn_gate), else NULL */
    float *dn;                    /* (n_batch, conv_dim + HV S + 2 HV) a DeltaNet layer's qkv | z | beta | alpha rows;
                                   * qkv becomes the conv's silu output, z the gated normed output; NULL without */
    float *ssm, *ssm_y;           /* (n_batch, 2 D + 2 G S + H) a Mamba-2 layer's z | xBC | dt, (n_batch, D) its y;
                                   * NULL without such layers */
    /* mixture of experts (NULL without): a chunk's n_batch * n_expert_used (row, expert) pairs are "slots",
     * grouped by expert (expert ascending, then row) */
    float *rlogits;               /* (n_batch, n_expert) router logits */
    char *xe;                     /* (2, slots, xq_row) the quantized FFN inputs gathered into slot order */
    float *hg, *hu;               /* (slots, n_ff_exp) gate and up outputs, then act(gate) * up in hg */
    char *hq;                     /* (slots + n_batch, xq_row) hg quantized for down, then the shared expert's */
    float *ye;                    /* (slots, n_embd) down outputs */
    float *rope;                  /* (n_batch, rope_stride) cos/sin pairs; then (n_batch, rope_stride) of the
                                   * sliding-window layers when the model has any */
    int64_t rope_stride;          /* max(n_rot, n_rot_swa) */
    float *ple;                   /* (n_batch, n_layer P) the per-layer inputs (fg_model ple_*), else NULL */
    float *res;                   /* (n_batch, n_embd) gemma4's MoE layer input r (hp.moe_dense), else NULL */
    char *xq;                     /* (FG_MAX_SLOTS, n_batch, xq_row) quantized inputs, batch path */
    size_t xq_row;
    char *priv;                   /* (max_threads, priv_size): per-thread xn (n_in), slots, scores (n_head, max_ctx),
                                   * and with experts the routing of a chunk (each thread computes it whole) */
    size_t priv_size;
    struct fg_pool *pool;         /* the team (fg_threads.h): created by the first call with more than one thread */
    int last_threads;             /* threads that ran the last call (fewer than asked if threads could not start) */
} fg_work;

/* One conversation run alone: its cache and its own scratch. */
typedef struct {
    fg_kv kv;
    fg_work work;
} fg_state;

/* 0 ok, -1 allocation failure (left freed). */
int fg_kv_init(fg_kv *kv, const fg_model *m, int n_ctx);
/* The bytes fg_kv_init(kv, m, n_ctx) allocates for K, V, the conv rings and the recurrent states (kv->bytes); *conv
 * (unless NULL): those of the short-convolution rings alone; *rec (unless NULL): those of the recurrent layers'
 * states, DeltaNet (conv rings and recurrent matrices) and Mamba-2 (conv inputs and scan state); independent of
 * n_ctx. */
size_t fg_kv_bytes(const fg_model *m, int n_ctx, size_t *conv, size_t *rec);
void fg_kv_free(fg_kv *kv);
/* n_batch: rows per internal chunk; max_ctx: the largest n_ctx of the caches it will serve. 0 ok, -1 allocation
 * failure (left freed). */
int fg_work_init(fg_work *w, const fg_model *m, int n_batch, int max_ctx, int max_threads);
void fg_work_free(fg_work *w);
/* Grow w to at least n_batch rows, max_ctx and max_threads (never shrinks). 0 ok, -1 allocation failure (w
 * unchanged). */
int fg_work_reserve(fg_work *w, const fg_model *m, int n_batch, int max_ctx, int max_threads);

/* 0 ok, -1 allocation failure (state left freed). n_batch: tokens per internal chunk of a prompt. */
int fg_state_init(fg_state *s, const fg_model *m, int n_ctx, int n_batch, int max_threads);
void fg_state_free(fg_state *s);
/* Grow the per-thread scratch for up to max_threads threads. 0 ok, -1 allocation failure (state unchanged). */
int fg_state_set_max_threads(fg_state *s, const fg_model *m, int max_threads);

/* Run tokens (n_tokens,) at positions pos..pos+n_tokens-1, writing K/V into the cache. logits: (n_vocab,) for the
 * last token, or (n_tokens, n_vocab) when all_logits. Returns 0; -1 if pos + n_tokens > n_ctx, n_tokens < 1 or
 * a token is out of range (nothing done), or on allocation failure; n_threads is clamped to [1, max_threads].
 * The one-sequence case of fg_forward_multi. */
int fg_forward(const fg_model *m, fg_state *s, const int32_t *tokens, int n_tokens, int pos, float *logits,
               int all_logits, int n_threads);

/* One forward pass over rows of several sequences: each weight matrix is read once per chunk of w->n_batch rows
 * (GEMM over all of them), attention is per row against its own sequence's cache.
 *   seqs (n_seqs,): distinct caches; tokens, seq_of_row, pos_of_row (n_rows,): row r is token tokens[r] of
 *   sequence seqs[seq_of_row[r]] at position pos_of_row[r]. A sequence's rows come in row order at consecutive
 *   positions (a prompt chunk; causal within it); its cache must hold positions 0..pos-1 of its first row.
 *   logit_rows (n_logit_rows,): strictly increasing rows whose logits are written to logits (n_logit_rows,
 *   n_vocab), in that order.
 *   hidden_rows (n_hidden_rows,): likewise, rows whose final hidden state output_norm(x) (the lm_head's input;
 *   an encoder without output_norm: the last layer's output x) is written to hidden (n_hidden_rows, n_embd). A
 *   row in neither list pays no lm_head (embeddings).
 * A row's logits are bit-identical whatever the other rows and the number of threads (every op is row-wise; the
 * GEMM of a row equals its GEMV). Returns 0; -1 (nothing done) on bad input: a count < 1 (n_logit_rows < 0), a
 * NULL or repeated cache, a sequence index, token or position out of range (pos >= that cache's n_ctx or
 * w->max_ctx), non-consecutive positions of one sequence, logit or hidden rows not increasing or out of range.
 * n_threads is clamped to [1, w->max_threads].
 * A non-causal model (m->hp.non_causal, an encoder) takes each sequence whole: its rows come together (contiguous),
 * the first at position 0, and each row attends to all of them. Chunks then hold whole sequences (packed in row
 * order up to w->n_batch rows), so -1 also when a sequence's rows are not contiguous, do not start at 0 or are
 * more than w->n_batch; -1 too for logit rows of a model without lm_head, or a position past pos_embd's rows. */
int fg_forward_multi(const fg_model *m, fg_work *w, fg_kv *const *seqs, int n_seqs, const int32_t *tokens,
                     const int32_t *seq_of_row, const int32_t *pos_of_row, int n_rows, const int32_t *logit_rows,
                     int n_logit_rows, float *logits, const int32_t *hidden_rows, int n_hidden_rows, float *hidden,
                     int n_threads);

/* Copy positions [0, n) of every layer's K and V from src to dst (caches of the same model): rows 0..n-1 of a
 * full-attention layer, and of a sliding-window ring the last m->hp.n_swa of them (all a later query can see), each
 * to its row in dst's ring; of a conv layer's ring the last n_conv - 1 bx rows (its state at n); of a DeltaNet or a
 * Mamba-2 layer its whole state when n > 0 (then n must be src's position count: that state is the one of its newest
 * position). src must hold them (for a ring: src's newest position < n + ring rows - window).
 * Returns 0; -1 (nothing done) if n < 0, n exceeds either cache's n_ctx, or src == dst. */
int fg_kv_copy(const fg_model *m, fg_kv *dst, const fg_kv *src, int n);
/* Floats of one Mamba-2 layer's state (in fg_kv dn_cache), 0 without such layers. Its state is that of src's newest
 * position only: fg_kv_copy copies it whole (n > 0), so the caller copies n == src's position count only. */
int64_t fg_ssm_state_floats(const fg_model *m);

/* A saved state: positions [0, n) in an order that does not depend on n_ctx (fastgguf.engine.state, format 2).
 * K/V (fg_kv_state_size uint16 values): for each attention layer (short-convolution, DeltaNet and Mamba-2 layers
 * hold none), K then V, each n_head_kv groups of rows (head_dim F16 values) for the positions a later query can
 * see: 0..n-1 of a full-attention layer, the last min(n, n_swa) of a sliding-window one (as fg_kv_copy).
 * Recurrent states (fg_rec_state_size floats, F32 as stored), for each layer in order: a short-convolution layer's
 * ring rows of positions n - min(n, n_conv - 1) .. n - 1 (n_embd floats each, oldest first); a DeltaNet or Mamba-2
 * layer's whole state as in dn_cache (rec_state_floats: its conv ring or inputs, then its matrices), that of
 * position n - 1 (zeros or stale at n == 0: a row at position 0 starts from zeros); attention layers nothing.
 * Sizes: -1 if n < 0. fg_kv_save / fg_kv_load copy both out of / into kv; kv must hold them (save: for a ring, its
 * newest position < n + ring rows - window; the recurrent states those after position n - 1). Return 0; -1 (nothing
 * done) if n < 0, n > kv->n_ctx, or n_kv / n_rec (the buffers' lengths) differ from the sizes of n positions. */
int64_t fg_kv_state_size(const fg_model *m, int n);
int64_t fg_rec_state_size(const fg_model *m, int n);
int fg_kv_save(const fg_model *m, const fg_kv *kv, int n, uint16_t *buf, int64_t n_kv, float *rec, int64_t n_rec);
int fg_kv_load(const fg_model *m, fg_kv *kv, int n, const uint16_t *buf, int64_t n_kv, const float *rec,
               int64_t n_rec);

#endif
