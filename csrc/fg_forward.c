/* The llama-family forward pass (see fg_forward.h). */
#if !defined(_WIN32) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1 /* POSIX and BSD declarations (posix_memalign) under -std=c11 too */
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "fg_forward.h"
#include "fg_kernels.h"
#include "fg_ops.h"
#ifdef _WIN32
#include <malloc.h>
#endif
#include "fg_threads.h"

#define BARRIER(t) fg_barrier((t)->w->pool)
#define ROW_ALIGN 16 /* rows handed to a thread in multiples of 16: whole cache lines of float output */
#define CHUNKS_PER_THREAD 8 /* a matmul's dynamic chunks (see chunks_of) per thread of the team, at most */
#define MIN_CHUNK_BYTES (256 << 10) /* ... and each at least this many bytes of weights: smaller chunks (a 135M
                                     * model's 200 KB matrices) cost more in claims and short streams than a
                                     * late thread costs (2-thread SmolLM2 decode: 354-366 -> 292-300 tok/s with 8 a thread) */
#define GEMM_ALIGN 64 /* several rows: chunks of whole fg_gemm_rows blocks (FG_GEMM_ROWS), whose per-block setup
                       * a smaller chunk would pay again */

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static void *alloc64(size_t n) {
#ifdef _WIN32
    return _aligned_malloc(round64(n ? n : 1), 64);
#else
    void *p = NULL;
    if (posix_memalign(&p, 64, round64(n ? n : 1)) != 0) return NULL;
    return p;
#endif
}

static void free64(void *p) {
#ifdef _WIN32
    _aligned_free(p);
#else
    free(p);
#endif
}

static size_t max_row_bytes(int64_t n) {
    /* the largest quantized activation row of n elements, whatever the weights' types (the type table knows), and
     * the line act_stride may add */
    size_t best = (size_t)n * sizeof(float), b = fg_max_act_row_size(n);
    return round64(b > best ? b : best) + 64;
}

/* The distance between a batch's quantized activation rows of `bytes` each: whole cache lines, an odd number of
 * them, so that the gemms' groups of consecutive activations (a block at the same offset in each) fall in distinct
 * L1 sets and few pages. The buffer's own row size (xq_row, sized for the widest input and float) was 32 KB for a
 * 1B llama (8192 floats): every activation's block in one L1 set and its own page, which cost a K-quant AVX2 gemm
 * ~1/3 of its speed inside the model against the same gemm on a packed batch. */
static size_t act_stride(size_t bytes) {
    size_t s = round64(bytes);
    return (s / 64) % 2 ? s : s + 64;
}

/* Layer il's head size and KV heads (the sliding-window layers may have their own: gemma4). */
static int layer_hd(const fg_model *m, int il) {
    return m->layers[il].swa && m->hp.head_dim_swa > 0 ? m->hp.head_dim_swa : m->hp.head_dim;
}

static int layer_g(const fg_model *m, int il) {
    return m->layers[il].swa && m->hp.n_head_kv_swa > 0 ? m->hp.n_head_kv_swa : m->hp.n_head_kv;
}

/* The layer whose K/V cache layer il attends over: its own, or an earlier one's (fg_layer kv_reuse). */
static int kv_layer(const fg_model *m, int il) {
    return m->layers[il].kv_reuse > 0 ? m->layers[il].kv_reuse - 1 : il;
}

/* The largest q and k|v widths of a layer, and RoPE dims of a table row (full and sliding-window layers). */
static int64_t max_q_dim(const fg_model *m) {
    int64_t a = (int64_t)m->hp.head_dim, b = (int64_t)m->hp.head_dim_swa;
    return m->hp.n_head * (a > b ? a : b);
}

static int64_t max_kv_dim(const fg_model *m) {
    int64_t a = (int64_t)m->hp.n_head_kv * m->hp.head_dim;
    int64_t b = (int64_t)(m->hp.n_head_kv_swa > 0 ? m->hp.n_head_kv_swa : m->hp.n_head_kv) *
                (m->hp.head_dim_swa > 0 ? m->hp.head_dim_swa : m->hp.head_dim);
    return a > b ? a : b;
}

static int64_t rope_stride(const fg_model *m) {
    int a = m->hp.n_rot, b = m->hp.n_rot_swa;
    return a > b ? a : (b > 0 ? b : 1);
}

/* The model as layer il's attention and FFN see it (team.m while it runs): its head size, KV heads, rotated dims
 * and FFN width in hp. */
static void layer_view(fg_model *v, const fg_model *m, int il) {
    const fg_layer *L = &m->layers[il];
    *v = *m;
    v->hp.head_dim = layer_hd(m, il);
    v->hp.n_head_kv = layer_g(m, il);
    if (L->swa && m->hp.n_rot_swa > 0) v->hp.n_rot = m->hp.n_rot_swa;
    if (L->n_ff > 0) v->hp.n_ff = L->n_ff;
}

/* Query heads whose scores a thread holds at once: a whole row's, or an attention tile's (fg_attention_tile). */
static int64_t score_heads(const fg_model *m) {
    int g = m->hp.n_head_kv_swa > 0 && m->hp.n_head_kv_swa < m->hp.n_head_kv ? m->hp.n_head_kv_swa : m->hp.n_head_kv;
    int64_t tile = (int64_t)FG_ATT_TILE * (m->hp.n_head / g);
    return tile > m->hp.n_head ? tile : m->hp.n_head;
}

/* A thread's private copy of a chunk's routing (see route): probs (n_expert), sel, wts, slot_of, row_of
 * (n_batch * n_expert_used each), off, fill (n_expert + 1), shg (n_batch). */
static size_t route_bytes(const fg_work *w, const fg_model *m) {
    if (m->hp.n_expert < 1) return 0;
    size_t pairs = (size_t)w->n_batch * m->hp.n_expert_used, ne = (size_t)m->hp.n_expert + 1;
    return round64(ne * 4) + 4 * round64(pairs * 4) + 2 * round64(ne * 4) + round64((size_t)w->n_batch * 4);
}

static size_t priv_bytes(const fg_work *w, const fg_model *m) {
    return round64((size_t)w->n_in * sizeof(float)) + FG_MAX_SLOTS * w->xq_row +
           round64((size_t)score_heads(m) * w->max_ctx * sizeof(float)) + route_bytes(w, m);
}

void fg_kv_free(fg_kv *kv) {
    free64(kv->k_cache);
    free64(kv->v_cache);
    free64(kv->conv_cache);
    free64(kv->dn_cache);
    free(kv->layer_row0);
    kv->k_cache = kv->v_cache = NULL;
    kv->conv_cache = kv->dn_cache = NULL;
    kv->layer_row0 = kv->conv_row0 = kv->dn_off = kv->layer_off = NULL;
}

/* Rows of the rings of a cache of n_ctx positions: sliding-window layers' (*swa) and conv layers' (*conv). */
static void ring_rows(const fg_model *m, int n_ctx, int *swa, int *conv) {
    int64_t s = (int64_t)m->hp.n_swa + FG_MAX_BATCH, c = (int64_t)m->hp.n_conv - 1 + FG_MAX_BATCH; /* < 2^31 */
    *swa = s < n_ctx ? (int)s : n_ctx;
    *conv = c < n_ctx ? (int)c : n_ctx;
}

/* Layer il's K/V rows and conv ring rows in a cache of n_ctx positions. */
static void layer_cache_rows(const fg_model *m, int il, int n_ctx, int64_t *kv_rows, int64_t *conv_rows) {
    int swa, conv;
    ring_rows(m, n_ctx, &swa, &conv);
    const fg_layer *L = &m->layers[il];
    *kv_rows = L->conv || L->deltanet || L->ssm || L->kv_reuse ? 0 : (L->swa ? swa : n_ctx);
    *conv_rows = L->conv ? conv : 0;
}

/* A DeltaNet layer's conv width 2 HK S + HV S, and the floats of its state: the conv ring, then (HV, S, S). */
static int64_t dn_conv_dim(const fg_model *m) {
    return (2 * (int64_t)m->hp.dn_k_heads + m->hp.dn_v_heads) * m->hp.dn_state;
}

static int64_t dn_state_floats(const fg_model *m) {
    int64_t S = m->hp.dn_state;
    return (int64_t)m->hp.dn_conv * dn_conv_dim(m) + (int64_t)m->hp.dn_v_heads * S * S;
}

int64_t fg_ssm_state_floats(const fg_model *m) {
    const fg_hparams *h = &m->hp;
    if (h->ssm_d_state <= 0) return 0;
    int64_t D = h->ssm_d_inner, GS = (int64_t)h->ssm_n_group * h->ssm_d_state;
    return (h->ssm_d_conv - 1) * (D + 2 * GS) + D * h->ssm_d_state;
}

/* The floats of layer il's recurrent state (fg_kv dn_cache): a DeltaNet or a Mamba-2 layer's, else 0. */
static int64_t rec_state_floats(const fg_model *m, int il) {
    const fg_layer *L = &m->layers[il];
    return L->deltanet ? dn_state_floats(m) : (L->ssm ? fg_ssm_state_floats(m) : 0);
}

/* Layer il's recurrent state in sequence kv's cache (DeltaNet: ring, then matrices; Mamba-2: conv inputs
 * (d_conv - 1, D + 2 G S), then (H, D / H, S)). */
static float *rec_state(const fg_kv *kv, int il) { return kv->dn_cache + kv->dn_off[il]; }

size_t fg_kv_bytes(const fg_model *m, int n_ctx, size_t *conv, size_t *rec) {
    size_t kv_vals = 0, conv_rows = 0, dn = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        int64_t k, c;
        layer_cache_rows(m, il, n_ctx, &k, &c);
        kv_vals += (size_t)k * layer_g(m, il) * layer_hd(m, il);
        conv_rows += (size_t)c;
        dn += (size_t)rec_state_floats(m, il) * sizeof(float);
    }
    size_t c = conv_rows * m->hp.n_embd * sizeof(float);
    if (conv) *conv = c;
    if (rec) *rec = dn;
    return 2 * kv_vals * sizeof(uint16_t) + c + dn;
}

int fg_kv_init(fg_kv *kv, const fg_model *m, int n_ctx) {
    memset(kv, 0, sizeof(*kv));
    kv->n_ctx = n_ctx;
    ring_rows(m, n_ctx, &kv->n_swa_rows, &kv->n_conv_rows);
    int NL = m->hp.n_layer;
    kv->layer_row0 = malloc(4 * ((size_t)NL + 1) * sizeof(int64_t));
    if (!kv->layer_row0) return -1;
    kv->conv_row0 = kv->layer_row0 + NL + 1;
    kv->dn_off = kv->conv_row0 + NL + 1;
    kv->layer_off = kv->dn_off + NL + 1;
    kv->layer_row0[0] = kv->conv_row0[0] = kv->dn_off[0] = kv->layer_off[0] = 0;
    for (int il = 0; il < NL; il++) {
        int64_t k, c;
        layer_cache_rows(m, il, n_ctx, &k, &c);
        kv->layer_row0[il + 1] = kv->layer_row0[il] + k;
        kv->layer_off[il + 1] = kv->layer_off[il] + k * layer_g(m, il) * layer_hd(m, il);
        kv->conv_row0[il + 1] = kv->conv_row0[il] + c;
        kv->dn_off[il + 1] = kv->dn_off[il] + rec_state_floats(m, il);
    }
    size_t conv, rec, cache = (size_t)kv->layer_off[NL] * sizeof(uint16_t);
    kv->bytes = fg_kv_bytes(m, n_ctx, &conv, &rec);
    kv->k_cache = alloc64(cache);
    kv->v_cache = alloc64(cache);
    kv->conv_cache = alloc64(conv);
    kv->dn_cache = alloc64(rec);
    if (!kv->k_cache || !kv->v_cache || !kv->conv_cache || !kv->dn_cache) {
        fg_kv_free(kv);
        return -1;
    }
    memset(kv->k_cache, 0, cache);
    memset(kv->v_cache, 0, cache);
    memset(kv->conv_cache, 0, conv);
    memset(kv->dn_cache, 0, rec);
    return 0;
}

void fg_work_free(fg_work *w) {
    float **fs[] = {&w->kcur, &w->vcur, &w->x, &w->xn, &w->q, &w->att, &w->tmp, &w->gate, &w->up, &w->rope,
                    &w->rlogits, &w->hg, &w->hu, &w->ye, &w->conv, &w->ag, &w->dn, &w->ssm, &w->ssm_y, &w->ple, &w->res};
    for (size_t i = 0; i < sizeof(fs) / sizeof(fs[0]); i++) {
        free64(*fs[i]);
        *fs[i] = NULL;
    }
    free64(w->xq);
    free64(w->priv);
    free64(w->xe);
    free64(w->hq);
    w->xq = w->priv = w->xe = w->hq = NULL;
    fg_pool_free(w->pool); /* joins its workers */
    w->pool = NULL;
}

int fg_work_init(fg_work *w, const fg_model *m, int n_batch, int max_ctx, int max_threads) {
    memset(w, 0, sizeof(*w));
    int cap = m->hp.non_causal ? FG_MAX_BATCH_NC : FG_MAX_BATCH;
    w->n_batch = n_batch < 1 ? 1 : (n_batch > cap ? cap : n_batch);
    w->max_ctx = max_ctx < 1 ? 1 : max_ctx;
    w->max_threads = max_threads < 1 ? 1 : max_threads;
    w->q_dim = max_q_dim(m);
    w->kv_dim = max_kv_dim(m);
    w->rope_stride = rope_stride(m);
    int64_t n_ple = (int64_t)m->hp.n_layer * m->hp.n_embd_per_layer, F = m->hp.n_ff; /* gate/up hold P too */
    if (m->hp.n_embd_per_layer > F) F = m->hp.n_embd_per_layer;
    w->n_in = m->hp.n_embd;
    if (n_ple > w->n_in) w->n_in = n_ple; /* a token's ple_embd row, dequantized into pxn */
    if (w->q_dim > w->n_in) w->n_in = w->q_dim;
    if (F > w->n_in) w->n_in = F;
    if (m->hp.n_expert > 0 && m->hp.n_ff_exp > w->n_in) w->n_in = m->hp.n_ff_exp;
    int64_t dn_v = (int64_t)m->hp.dn_v_heads * m->hp.dn_state; /* dn_out's input; the recurrence's private q, k, o */
    if (m->hp.dn_conv > 0 && dn_v > w->n_in) w->n_in = dn_v;
    if (m->hp.dn_conv > 0 && 3 * (int64_t)m->hp.dn_state > w->n_in) w->n_in = 3 * (int64_t)m->hp.dn_state;
    if (m->hp.ssm_d_inner > w->n_in) w->n_in = m->hp.ssm_d_inner; /* ssm_out's input */
    w->xq_row = max_row_bytes(w->n_in);
    size_t B = (size_t)w->n_batch;
    w->kcur = alloc64(B * w->kv_dim * sizeof(float));
    w->vcur = alloc64(B * w->kv_dim * sizeof(float));
    w->x = alloc64(B * m->hp.n_embd * sizeof(float));
    w->xn = alloc64(B * w->n_in * sizeof(float));
    w->q = alloc64(B * w->q_dim * sizeof(float));
    w->att = alloc64(B * w->q_dim * sizeof(float));
    w->tmp = alloc64(B * m->hp.n_embd * sizeof(float));
    w->gate = alloc64(B * F * sizeof(float));
    w->up = alloc64(B * F * sizeof(float));
    w->rope = alloc64(2 * B * w->rope_stride * sizeof(float)); /* full and sliding-window layers */
    w->xq = alloc64(FG_MAX_SLOTS * B * w->xq_row);
    w->priv_size = priv_bytes(w, m);
    w->priv = alloc64(w->priv_size * w->max_threads);
    int more_ok = 1; /* the conv layers' and experts' buffers, when the model has them */
    if (m->hp.n_conv > 0) {
        w->conv = alloc64(B * 3 * m->hp.n_embd * sizeof(float));
        more_ok = w->conv != NULL;
    }
    if (n_ple > 0) {
        w->ple = alloc64(B * n_ple * sizeof(float));
        more_ok = more_ok && w->ple;
    }
    if (m->hp.moe_dense) {
        w->res = alloc64(B * m->hp.n_embd * sizeof(float));
        more_ok = more_ok && w->res;
    }
    if (m->hp.attn_gate) {
        w->ag = alloc64(B * w->q_dim * sizeof(float));
        more_ok = more_ok && w->ag;
    }
    if (m->hp.dn_conv > 0) {
        w->dn = alloc64(B * (dn_conv_dim(m) + dn_v + 2 * (int64_t)m->hp.dn_v_heads) * sizeof(float));
        more_ok = more_ok && w->dn;
    }
    if (m->hp.ssm_d_state > 0) {
        int64_t D = m->hp.ssm_d_inner, proj = 2 * D + 2 * (int64_t)m->hp.ssm_n_group * m->hp.ssm_d_state +
                                              m->hp.ssm_n_head;
        w->ssm = alloc64(B * (size_t)proj * sizeof(float));
        w->ssm_y = alloc64(B * (size_t)D * sizeof(float));
        more_ok = more_ok && w->ssm && w->ssm_y;
    }
    if (m->hp.n_expert > 0) {
        size_t S = B * m->hp.n_expert_used;
        w->rlogits = alloc64(B * m->hp.n_expert * sizeof(float));
        w->xe = alloc64(2 * S * w->xq_row);
        w->hg = alloc64(S * m->hp.n_ff_exp * sizeof(float));
        w->hu = alloc64(S * m->hp.n_ff_exp * sizeof(float));
        w->hq = alloc64((S + B) * w->xq_row);
        w->ye = alloc64(S * m->hp.n_embd * sizeof(float));
        more_ok = more_ok && w->rlogits && w->xe && w->hg && w->hu && w->hq && w->ye;
    }
    if (!w->kcur || !w->vcur || !w->x || !w->xn || !w->q || !w->att || !w->tmp || !w->gate || !w->up || !w->rope ||
        !w->xq || !w->priv || !more_ok) {
        fg_work_free(w);
        return -1;
    }
    return 0; /* the pool comes with the first call that runs more than one thread */
}

int fg_work_reserve(fg_work *w, const fg_model *m, int n_batch, int max_ctx, int max_threads) {
    if (n_batch <= w->n_batch && max_ctx <= w->max_ctx && max_threads <= w->max_threads) return 0;
    fg_work grown;
    if (fg_work_init(&grown, m, n_batch > w->n_batch ? n_batch : w->n_batch, max_ctx > w->max_ctx ? max_ctx : w->max_ctx,
                     max_threads > w->max_threads ? max_threads : w->max_threads) != 0)
        return -1;
    grown.pool = w->pool; /* the team (and its threads) stays */
    grown.last_threads = w->last_threads;
    w->pool = NULL;
    fg_work_free(w);
    *w = grown;
    return 0;
}

void fg_state_free(fg_state *s) {
    fg_kv_free(&s->kv);
    fg_work_free(&s->work);
}

int fg_state_init(fg_state *s, const fg_model *m, int n_ctx, int n_batch, int max_threads) {
    memset(s, 0, sizeof(*s));
    if (fg_kv_init(&s->kv, m, n_ctx) != 0) return -1;
    if (fg_work_init(&s->work, m, n_batch, n_ctx, max_threads) != 0) {
        fg_kv_free(&s->kv);
        return -1;
    }
    return 0;
}

int fg_state_set_max_threads(fg_state *s, const fg_model *m, int max_threads) {
    return fg_work_reserve(&s->work, m, s->work.n_batch, s->work.max_ctx, max_threads);
}

/* ---- pieces run by every thread of the team ---- */

typedef struct {
    const fg_model *m;
    fg_work *w;
    fg_kv *const *seqs;  /* the call's caches */
    const int32_t *seq;  /* (rows,) of the current chunk: index into seqs of each row */
    const int32_t *pos;  /* (rows,) of the current chunk: position of each row */
    int one_tile;        /* every sequence's rows of the chunk make one attention tile (see one_tile_each) */
    int ith, nth;
    float *pxn;          /* private (n_in,) */
    char *pxq;           /* private FG_MAX_SLOTS * xq_row */
    float *scores;       /* private (score_heads * max_ctx) */
    /* private routing of the chunk (route): probabilities of one row; per (row, j-th choice): expert, weight, slot;
     * per slot its row; per expert its first slot (off) and a fill counter; per row the shared expert's gate */
    float *probs, *wts, *shg;
    int32_t *sel, *slot_of, *row_of, *off, *fill;
} team;

static int64_t layer_rows(const fg_kv *kv, int il) { return kv->layer_row0[il + 1] - kv->layer_row0[il]; }

/* Layer il's (layer_rows, head_dim) F16 K or V cache of KV group g (cache: kv->k_cache or kv->v_cache); a layer
 * that reuses an earlier layer's K/V (kv_reuse): that layer's. */
static uint16_t *group_cache(const fg_model *m, const fg_kv *kv, uint16_t *cache, int il, int64_t g) {
    int src = kv_layer(m, il);
    return cache + kv->layer_off[src] + g * layer_rows(kv, src) * layer_hd(m, src);
}

/* The keys a query at position pos of layer il attends to: n of them, the first in row *first of a ring of *ring
 * rows (the whole prefix for a full-attention layer; the last n_swa positions for a sliding-window one). */
static int64_t attn_span(const fg_model *m, const fg_kv *kv, int il, int64_t pos, int64_t *first, int64_t *ring) {
    int64_t n = pos + 1;
    *ring = layer_rows(kv, kv_layer(m, il));
    if (m->layers[il].swa && n > m->hp.n_swa) n = m->hp.n_swa;
    *first = (pos + 1 - n) % *ring;
    return n;
}


/* Inputs of matrices ws[0..nw) from rows src (rows, n) (ld floats apart): RMS-normed with `norm` unless NULL,
 * then quantized once per distinct activation type. xq[j], xq_stride: where matrix j's input rows are.
 * rows == 1: each thread makes its own private copy (no barrier); else rows are split, then a barrier. */
static void prep(const team *t, const float *src, int64_t rows, int64_t n, int64_t ld, const float *norm,
                 const fg_mat *const *ws, int nw, const char **xq, size_t *xq_stride) {
    fg_work *s = t->w;
    int slot_type[FG_MAX_SLOTS], n_slots = 0, slot_of[8]; /* nw <= 8; at most FG_MAX_SLOTS distinct types */
    for (int j = 0; j < nw; j++) {
        int dt = fg_vec_dot_type(ws[j]->type), k = 0;
        while (k < n_slots && slot_type[k] != dt) k++;
        if (k == n_slots) slot_type[n_slots++] = dt;
        slot_of[j] = k;
    }
    if (rows == 1) {
        const float *in = src;
        if (norm) {
            fg_rmsnorm(t->pxn, src, norm, n, t->m->hp.norm_eps);
            in = t->pxn;
        }
        for (int k = 0; k < n_slots; k++) fg_quantize_row(slot_type[k], in, t->pxq + k * s->xq_row, n);
        for (int j = 0; j < nw; j++) xq[j] = t->pxq + slot_of[j] * s->xq_row;
        *xq_stride = s->xq_row;
        return;
    }
    int64_t r0, r1;
    size_t slot_bytes = (size_t)s->n_batch * s->xq_row, row_bytes = 0;
    for (int k = 0; k < n_slots; k++) {
        size_t b = fg_row_size(slot_type[k], n);
        row_bytes = b > row_bytes ? b : row_bytes;
    }
    const size_t xs = row_bytes ? act_stride(row_bytes) : s->xq_row; /* <= xq_row: max_row_bytes(n_in) has the line */
    fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        const float *in = src + i * ld;
        if (norm) {
            fg_rmsnorm(s->xn + i * s->n_in, in, norm, n, t->m->hp.norm_eps);
            in = s->xn + i * s->n_in;
        }
        for (int k = 0; k < n_slots; k++) fg_quantize_row(slot_type[k], in, s->xq + k * slot_bytes + i * xs, n);
    }
    for (int j = 0; j < nw; j++) xq[j] = s->xq + slot_of[j] * slot_bytes;
    *xq_stride = xs;
    BARRIER(t);
}

/* prep, except where every matrix takes F32 rows (F32, F16, BF16 weights) with no norm over several rows: there the
 * quantize would be a copy, so the matrices read src's rows in place (no copy, no barrier). The caller makes sure src
 * was complete before its last barrier and stays unwritten until its next one. */
static void prep_rows(const team *t, const float *src, int64_t rows, int64_t n, int64_t ld, const float *norm,
                      const fg_mat *const *ws, int nw, const char **xq, size_t *xq_stride) {
    int in_place = rows > 1 && !norm;
    for (int j = 0; j < nw && in_place; j++) in_place = fg_vec_dot_type(ws[j]->type) == FG_TYPE_F32;
    if (!in_place) {
        prep(t, src, rows, n, ld, norm, ws, nw, xq, xq_stride);
        return;
    }
    for (int j = 0; j < nw; j++) xq[j] = (const char *)src;
    *xq_stride = (size_t)ld * sizeof(float);
}

/* Dynamic chunks (llama.cpp's PR #6915): a matmul's output rows are cut into about CHUNKS_PER_THREAD chunks per
 * thread; thread ith takes chunk ith first (its static share), then claims the next free chunk from the team's
 * counter (fg_chunk_claim) until none is left, so a thread that lost its core for a while (a noisy VM, another
 * process) or runs on a slower core (hybrid P/E CPUs) does fewer chunks instead of holding the others at the next
 * barrier. Which thread computes a row changes nothing in its arithmetic: chunk starts are multiples of `align` and
 * the kernels compute every row alone, so the outputs equal 1 thread's bit for bit. One thread: one chunk, all rows.
 * A matrix too small for MIN_CHUNK_BYTES chunks gets one chunk a thread, claimed by no one: the static split. At
 * most one chunked phase between two barriers (the counter restarts at each barrier). */
typedef struct {
    int64_t total, size, n; /* rows [0, total) in n chunks of size rows (the last may be shorter) */
} chunks;

static chunks chunks_of(const team *t, int64_t total, int64_t align, size_t unit_bytes) {
    chunks c = {total, total, total > 0};
    if (t->nth > 1 && total > 0) {
        int64_t per = (int64_t)((double)total * (double)unit_bytes / ((double)t->nth * MIN_CHUNK_BYTES));
        per = per < 1 ? 1 : per > CHUNKS_PER_THREAD ? CHUNKS_PER_THREAD : per; /* chunks per thread */
        int64_t units = (total + align - 1) / align, want = (int64_t)t->nth * per;
        c.size = (units + want - 1) / want * align;
        c.n = (total + c.size - 1) / c.size;
    }
    return c;
}

/* The rows [*r0, *r1) of chunk k of c. */
static void next_rows(const chunks *c, int64_t k, int64_t *r0, int64_t *r1) {
    *r0 = k * c->size;
    *r1 = *r0 + c->size < c->total ? *r0 + c->size : c->total;
}

/* This thread's next chunk of c after chunk k (k = -1 at the start): 1 with its rows in [*r0, *r1), else 0. */
static int next_chunk(const team *t, const chunks *c, int64_t *k, int64_t *r0, int64_t *r1) {
    if (*k < 0 && t->ith < c->n)
        *k = t->ith;
    else if (t->nth == 1)
        *k = *k + 1;
    else if (c->n > t->nth)
        *k = t->nth + (int64_t)fg_chunk_claim(t->w->pool);
    else
        return 0; /* one chunk a thread: nothing to claim */
    if (*k >= c->n) return 0;
    next_rows(c, *k, r0, r1);
    return 1;
}

/* Y[i*ldy + r] = W_r . x_i for this thread's rows r in [r0, r1), i < rows. */
static void matmul(const fg_mat *w, const char *xq, size_t xq_stride, int64_t rows, float *y, int64_t ldy,
                   int64_t r0, int64_t r1) {
    if (r0 >= r1) return;
    if (rows == 1 && w->packed)
        fg_gemv_rows_packed(w->type, w->data, w->stride, w->packed, w->cols, xq, y, r0, r1);
    else if (rows == 1)
        fg_gemv_rows(w->type, w->data, w->stride, w->cols, xq, y, r0, r1);
    else
        fg_gemm_rows(w->type, w->data, w->stride, w->cols, xq, xq_stride, rows, y, ldy, r0, r1);
}

static void add_bias(float *y, int64_t ldy, int64_t rows, const float *b, int64_t r0, int64_t r1) {
    if (!b) return;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t r = r0; r < r1; r++) y[i * ldy + r] += b[r];
}

/* x[r] += y[r] (times hp.residual_scale where it is neither 0 nor 1) for r in [r0, r1). */
static void residual_add(const team *t, float *x, const float *y, int64_t r0, int64_t r1) {
    float rs = t->m->hp.residual_scale;
    if (rs != 0.0f && rs != 1.0f)
        for (int64_t r = r0; r < r1; r++) x[r] += y[r] * rs;
    else
        for (int64_t r = r0; r < r1; r++) x[r] += y[r];
}

/* tmp[i, r] = W_r . in_i (+ bias[r]) over the team's dynamic chunks of w's rows: the output projections' product
 * (matmul_residual, matmul_residual_ln); with add, x[i, r] += tmp[i, r] too, chunk by chunk. A barrier must
 * follow. */
static void project(const team *t, const fg_mat *w, const float *in, int64_t rows, int64_t n, int64_t ld,
                    const float *bias, int add) {
    fg_work *s = t->w;
    int64_t E = t->m->hp.n_embd, r0, r1, k = -1;
    const fg_mat *ws[1] = {w};
    const char *xq[1];
    size_t xs;
    prep_rows(t, in, rows, n, ld, NULL, ws, 1, xq, &xs);
    chunks c = chunks_of(t, w->rows, rows > 1 ? GEMM_ALIGN : ROW_ALIGN, w->stride);
    while (next_chunk(t, &c, &k, &r0, &r1)) {
        matmul(w, xq[0], xs, rows, s->tmp, E, r0, r1);
        add_bias(s->tmp, E, rows, bias, r0, r1);
        if (add)
            for (int64_t i = 0; i < rows; i++) residual_add(t, s->x + i * E, s->tmp + i * E, r0, r1);
    }
}

/* x[i, r] += W_r . in_i (+ bias[r]) for own rows: the output projections with the residual add fused. With
 * post_norm (gemma): x_i += rmsnorm(W . in_i) * post_norm, which needs the whole product first (rows split after a
 * barrier). */
static void matmul_residual(const team *t, const fg_mat *w, const float *in, int64_t rows, int64_t n, int64_t ld,
                            const float *bias, const float *post_norm) {
    fg_work *s = t->w;
    int64_t r0, r1, E = t->m->hp.n_embd;
    project(t, w, in, rows, n, ld, bias, !post_norm);
    if (post_norm) {
        BARRIER(t);
        fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
        for (int64_t i = r0; i < r1; i++) {
            fg_rmsnorm(s->tmp + i * E, s->tmp + i * E, post_norm, E, t->m->hp.norm_eps);
            for (int64_t r = 0; r < E; r++) s->x[i * E + r] += s->tmp[i * E + r];
        }
    }
    BARRIER(t);
}

/* x_i = LayerNorm(x_i + W . in_i (+ bias)) * ln + ln_b (BERT's post-norm layers): the product by columns, a barrier,
 * then the residual add and the norm by rows, a barrier; matmul_residual then post_layernorm took two more barriers
 * for the same float ops. */
static void matmul_residual_ln(const team *t, const fg_mat *w, const float *in, int64_t rows, int64_t n, int64_t ld,
                               const float *bias, const float *ln, const float *ln_b) {
    fg_work *s = t->w;
    int64_t r0, r1, E = t->m->hp.n_embd;
    project(t, w, in, rows, n, ld, bias, 0);
    BARRIER(t);
    fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        residual_add(t, s->x + i * E, s->tmp + i * E, 0, E);
        fg_layernorm(s->x + i * E, s->x + i * E, ln, ln_b, E, t->m->hp.norm_eps);
    }
    BARRIER(t);
}

/* Per-head norm (optional) then RoPE of q heads [h0, h1) and k heads [g0, g1) of batch row i (none in a NoPE
 * layer). */
static void rope_row(const team *t, const fg_layer *L, float *q, float *k, const float *cs, int h0, int h1, int g0,
                     int g1) {
    if (L->swa) cs += (int64_t)t->w->n_batch * t->w->rope_stride; /* the sliding-window layers' table */
    const fg_model *m = t->m;
    int hd = m->hp.head_dim, rot = L->nope ? 0 : m->hp.n_rot;
    if (m->hp.qk_norm_full) { /* whole vectors: called with every head of the row (attention_rows) */
        if (L->q_norm && h1 > h0) fg_rmsnorm(q, q, L->q_norm, (int64_t)m->hp.n_head * hd, m->hp.norm_eps);
        if (L->k_norm && g1 > g0) fg_rmsnorm(k, k, L->k_norm, (int64_t)m->hp.n_head_kv * hd, m->hp.norm_eps);
    }
    for (int h = h0; h < h1; h++) {
        float *qh = q + (int64_t)h * hd;
        if (L->q_norm && !m->hp.qk_norm_full) fg_rmsnorm(qh, qh, L->q_norm, hd, m->hp.norm_eps);
        if (rot > 0) fg_rope(qh, 1, hd, rot, cs, m->hp.rope_neox);
    }
    for (int g = g0; g < g1; g++) {
        float *kh = k + (int64_t)g * hd;
        if (L->k_norm && !m->hp.qk_norm_full) fg_rmsnorm(kh, kh, L->k_norm, hd, m->hp.norm_eps);
        if (rot > 0) fg_rope(kh, 1, hd, rot, cs, m->hp.rope_neox);
    }
}

/* K and V heads [g0, g1) (kv_dim,) of the row at `pos` into sequence kv's layer il cache (NULL: that one not). */
static void store_kv(const fg_model *m, const fg_kv *kv, int il, int64_t pos, const float *k, const float *v,
                     int64_t g0, int64_t g1) {
    int64_t hd = m->hp.head_dim, at = (pos % layer_rows(kv, il)) * hd;
    for (int64_t g = g0; g < g1; g++) {
        if (k) fg_f32_to_f16_row(group_cache(m, kv, kv->k_cache, il, g) + at, k + g * hd, hd);
        if (v) fg_f32_to_f16_row(group_cache(m, kv, kv->v_cache, il, g) + at, v + g * hd, hd);
    }
}

/* V heads [g0, g1) of a row RMS-normalised, no weight (hp.v_norm: gemma4), before they are cached. */
static void v_norm_heads(const fg_model *m, float *v, int64_t g0, int64_t g1) {
    for (int64_t g = g0; m->hp.v_norm && g < g1; g++)
        fg_rmsnorm(v + g * m->hp.head_dim, v + g * m->hp.head_dim, NULL, m->hp.head_dim, m->hp.norm_eps);
}

/* One row (a decode step). q, k, v = attn_norm(x) . Wq, Wk, Wv with whole heads per thread: the n_head + 2 n_head_kv
 * heads of q|k|v split evenly, so each thread ropes its own q and k heads and stores its k and v heads in the cache
 * with no barrier in between. Then attention split by query head (balanced even when there are fewer KV groups
 * than threads); a thread reads the K/V rows of a group once for all its heads of it. Output: w->att row 0. */
static void attention_one_row(const team *t, const fg_layer *L, int il, const char *const *xq, size_t xs) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    const fg_kv *kv = t->seqs[t->seq[0]];
    int pos = t->pos[0], H = m->hp.n_head, G = m->hp.n_head_kv, hd = m->hp.head_dim, n_rep = H / G;
    int GK = L->kv_reuse ? 0 : G; /* the K/V heads this layer computes */
    int64_t QD = (int64_t)H * hd, KV = (int64_t)G * hd, u0, u1, h0, h1, first, ring;
    int64_t n_keys = attn_span(m, kv, il, pos, &first, &ring), k = -1;
    chunks c = chunks_of(t, H + 2 * GK, 1, (size_t)hd * L->wq.stride); /* dynamic chunks of whole heads */
    while (next_chunk(t, &c, &k, &u0, &u1)) {
        h0 = u0 < H ? u0 : H, h1 = u1 < H ? u1 : H;                                     /* q heads */
        matmul(&L->wq, xq[0], xs, 1, s->q, QD, h0 * hd, h1 * hd);
        add_bias(s->q, QD, 1, L->bq, h0 * hd, h1 * hd);
        rope_row(t, L, s->q, s->kcur, s->rope, (int)h0, (int)h1, 0, 0);
        h0 = u0 - H < 0 ? 0 : (u0 - H < GK ? u0 - H : GK), h1 = u1 - H < 0 ? 0 : (u1 - H < GK ? u1 - H : GK); /* k */
        matmul(&L->wk, xq[1], xs, 1, s->kcur, KV, h0 * hd, h1 * hd);
        add_bias(s->kcur, KV, 1, L->bk, h0 * hd, h1 * hd);
        rope_row(t, L, s->q, s->kcur, s->rope, 0, 0, (int)h0, (int)h1);
        if (h1 > h0) store_kv(m, kv, il, pos, s->kcur, NULL, h0, h1);
        h0 = u0 - H - GK < 0 ? 0 : u0 - H - GK, h1 = u1 - H - GK < 0 ? 0 : u1 - H - GK;  /* v heads */
        matmul(&L->wv, xq[2], xs, 1, s->vcur, KV, h0 * hd, h1 * hd);
        add_bias(s->vcur, KV, 1, L->bv, h0 * hd, h1 * hd);
        v_norm_heads(m, s->vcur, h0, h1);
        if (h1 > h0) store_kv(m, kv, il, pos, NULL, s->vcur, h0, h1);
    }
    BARRIER(t);
    fg_split_rows(H, t->nth, t->ith, 1, &h0, &h1);
    for (int64_t g = h0 / n_rep; g * n_rep < h1; g++) {
        int64_t a = g * n_rep > h0 ? g * n_rep : h0, b = (g + 1) * n_rep < h1 ? (g + 1) * n_rep : h1;
        fg_attention_group(s->att + a * hd, s->q + a * hd, (int)(b - a), hd, group_cache(m, kv, kv->k_cache, il, g),
                           group_cache(m, kv, kv->v_cache, il, g), hd, n_keys, first, ring, m->hp.attn_scale,
                           m->hp.attn_softcap, L->attn_sinks ? L->attn_sinks + a : NULL, t->scores);
    }
}

/* Several rows, of one or several sequences. q, k, v = attn_norm(x) . Wq, Wk, Wv (GEMM over all rows); then each
 * row's RoPE and store into its own sequence's cache at its own position; then attention per (row, KV group)
 * over that cache up to the row's position (causal within a sequence's chunk: its rows are all stored first).
 * Output: w->att (rows, q_dim). */
static void attention_rows(const team *t, const fg_layer *L, int il, int64_t rows, const char *const *xq,
                           size_t xs) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    int hd = m->hp.head_dim, G = m->hp.n_head_kv, n_rep = m->hp.n_head / G;
    int GK = L->kv_reuse ? 0 : G; /* the K/V heads this layer computes */
    int64_t QD = (int64_t)m->hp.n_head * hd, KV = (int64_t)G * hd, r0, r1, k = -1;
    /* one phase of dynamic chunks: q's rows, then k's and v's (each aligned from its own first row) */
    chunks cq = chunks_of(t, QD, GEMM_ALIGN, L->wq.stride);
    chunks ckv = chunks_of(t, GK * (int64_t)hd, GEMM_ALIGN, L->wk.stride + L->wv.stride);
    chunks c = {cq.n + ckv.n, 1, cq.n + ckv.n};
    while (next_chunk(t, &c, &k, &r0, &r1)) {
        int64_t j = k - cq.n, kv0, kv1;
        if (j < 0) {
            next_rows(&cq, k, &r0, &r1);
            matmul(&L->wq, xq[0], xs, rows, s->q, QD, r0, r1);
            add_bias(s->q, QD, rows, L->bq, r0, r1);
            continue;
        }
        next_rows(&ckv, j, &kv0, &kv1);
        matmul(&L->wk, xq[1], xs, rows, s->kcur, KV, kv0, kv1);
        add_bias(s->kcur, KV, rows, L->bk, kv0, kv1);
        matmul(&L->wv, xq[2], xs, rows, s->vcur, KV, kv0, kv1);
        add_bias(s->vcur, KV, rows, L->bv, kv0, kv1);
    }
    BARRIER(t);
    /* With one tile per sequence (a batched decode step) each (tile, KV group) unit ropes and stores its own rows'
     * heads of its group just before it attends: the only keys of this chunk it reads are its own, so no barrier
     * in between. Else every row is roped and stored first: a sequence's later tiles read its earlier tiles' keys. */
    int fused = t->one_tile && !m->hp.qk_norm_full && !m->hp.non_causal;
    if (!fused) {
        fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
        for (int64_t i = r0; i < r1; i++) {
            const fg_kv *kv = t->seqs[t->seq[i]];
            rope_row(t, L, s->q + i * QD, s->kcur + i * KV, s->rope + i * s->rope_stride, 0, m->hp.n_head, 0, GK);
            v_norm_heads(m, s->vcur + i * KV, 0, GK);
            if (GK) store_kv(m, kv, il, t->pos[i], s->kcur + i * KV, s->vcur + i * KV, 0, GK);
        }
        BARRIER(t);
    }
    /* tiles of up to FG_ATT_TILE consecutive rows of one sequence; units (tile, KV group) dealt round-robin */
    int64_t u = 0;
    for (int64_t i0 = 0, i1; i0 < rows; i0 = i1) {
        for (i1 = i0 + 1; i1 < rows && i1 - i0 < FG_ATT_TILE && t->seq[i1] == t->seq[i0]; i1++) {}
        const fg_kv *kv = t->seqs[t->seq[i0]];
        int64_t lo[FG_ATT_TILE], n[FG_ATT_TILE], first, ring = 1, last = i1 - 1;
        if (m->hp.non_causal) /* every row sees its whole sequence: positions 0 .. its last row's (all stored above) */
            while (last + 1 < rows && t->seq[last + 1] == t->seq[i0]) last++;
        for (int64_t i = i0; i < i1; i++) {
            n[i - i0] = attn_span(m, kv, il, m->hp.non_causal ? t->pos[last] : t->pos[i], &first, &ring);
            lo[i - i0] = (m->hp.non_causal ? t->pos[last] : t->pos[i]) + 1 - n[i - i0];
        }
        for (int g = 0; g < G; g++, u++) {
            if (u % t->nth != t->ith) continue;
            for (int64_t i = i0; fused && i < i1; i++) {
                rope_row(t, L, s->q + i * QD, s->kcur + i * KV, s->rope + i * s->rope_stride, g * n_rep, (g + 1) * n_rep,
                         g, GK ? g + 1 : g);
                if (!GK) continue;
                v_norm_heads(m, s->vcur + i * KV, g, g + 1);
                store_kv(m, kv, il, t->pos[i], s->kcur + i * KV, s->vcur + i * KV, g, g + 1);
            }
            fg_attention_tile(s->att + i0 * QD + g * n_rep * hd, QD, s->q + i0 * QD + g * n_rep * hd, QD, (int)(i1 - i0),
                              n_rep, hd, group_cache(m, kv, kv->k_cache, il, g),
                              group_cache(m, kv, kv->v_cache, il, g), hd, lo, n, ring, m->hp.attn_scale,
                              m->hp.attn_softcap, L->attn_sinks ? L->attn_sinks + g * n_rep : NULL, t->scores);
        }
    }
}

/* Layer il's (n_conv_rows, n_embd) ring of bx rows in sequence kv's cache. */
static float *conv_ring(const fg_model *m, const fg_kv *kv, int il) {
    return kv->conv_cache + kv->conv_row0[il] * m->hp.n_embd;
}

/* Channels [c0, c1) of one row's short convolution (ggml_ssm_conv, causal): y[c] = C[c] * sum_{i < K} w[c][i] *
 * bx_{pos-K+1+i}[c], a float sum in i order; bx of position p is ring row p mod rows (ld floats apart), positions
 * before 0 are zero (skipped: a reset cache keeps stale rows). The scalar reference. */
static void shortconv_row(float *y, const float *C, const float *ring, int64_t rows, int64_t ld, int64_t pos,
                          const float *w, int K, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c++) {
        float acc = 0.0f;
        for (int i = 0; i < K; i++) {
            int64_t p = pos - K + 1 + i;
            if (p >= 0) acc += w[c * K + i] * ring[(p % rows) * ld + c];
        }
        y[c] = C[c] * acc;
    }
}

/* A gated short-convolution layer (lfm2; fg_layer conv): B | C | xx = conv_in . attn_norm(x) into w->conv (rows,
 * 3 n_embd), bx = B * xx into the ring of the row's own sequence at its position, then C * conv into the B third.
 * Each thread owns the same channels throughout (a row reads only its own channels of earlier rows, which the
 * same thread wrote before, rows in order), so no barrier: the caller's precedes out_proj. */
static void shortconv_block(const team *t, const fg_layer *L, int il, int64_t rows) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    int64_t E = m->hp.n_embd, E3 = 3 * E, r0, r1;
    const fg_mat *ws[1] = {&L->conv_in};
    const char *xq[1];
    size_t xs;
    prep(t, s->x, rows, E, E, L->attn_norm, ws, 1, xq, &xs);
    fg_split_rows(E, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
    for (int k = 0; k < 3; k++) matmul(&L->conv_in, xq[0], xs, rows, s->conv, E3, k * E + r0, k * E + r1);
    for (int64_t i = 0; i < rows; i++) {
        const fg_kv *kv = t->seqs[t->seq[i]];
        float *B = s->conv + i * E3, *ring = conv_ring(m, kv, il);
        float *bx = ring + (t->pos[i] % kv->n_conv_rows) * E;
        for (int64_t c = r0; c < r1; c++) bx[c] = B[c] * B[2 * E + c];
        shortconv_row(B, B + E, ring, kv->n_conv_rows, E, t->pos[i], L->conv_w, m->hp.n_conv, r0, r1);
    }
}

/* ---- Mamba-2 layers (granitehybrid; fg_layer ssm says what they compute) ---- */

static float silu1(float v) { return v / (1.0f + expf(-v)); }

/* The causal conv of channels [c0, c1) of row i's xBC (in place: silu(conv + bias)), as ggml_ssm_conv: a float sum
 * over the d_conv - 1 stored inputs (oldest first) then this one; the state then shifts by this row's inputs. A row
 * at position 0 starts from zero inputs. st: the layer's (d_conv - 1, cd) state of the row's sequence. */
static void ssm_conv_row(const fg_layer *L, float *xbc, float *st, int64_t cd, int dc, int pos, int64_t c0,
                         int64_t c1) {
    if (pos == 0)
        for (int k = 0; k < dc - 1; k++) memset(st + k * cd + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    for (int64_t c = c0; c < c1; c++) {
        const float *w = L->ssm_conv1d + c * dc;
        float acc = 0.0f, in = xbc[c];
        for (int k = 0; k < dc - 1; k++) acc += st[k * cd + c] * w[k];
        acc += in * w[dc - 1];
        for (int k = 0; k + 1 < dc - 1; k++) st[k * cd + c] = st[(k + 1) * cd + c];
        st[(int64_t)(dc - 2) * cd + c] = in;
        xbc[c] = silu1(L->ssm_conv1d_b ? acc + L->ssm_conv1d_b[c] : acc);
    }
}

/* Heads [h0, h1) of row i's selective scan (ggml_ssm_scan with a scalar decay per head): zbd = the row's z | xBC |
 * dt (xBC after the conv), st: the layer's (H, P, S) scan state of its sequence (zeroed at position 0); y (D,):
 * the scan's output + D x, times silu(z). The scalar reference. */
static void ssm_scan_row(const fg_hparams *hp, const fg_layer *L, const float *zbd, float *st, float *y, int pos,
                         int64_t h0, int64_t h1) {
    int64_t D = hp->ssm_d_inner, S = hp->ssm_d_state, H = hp->ssm_n_head, P = D / H;
    int64_t hpg = H / hp->ssm_n_group;
    const float *x = zbd + D, *B = x + D, *C = B + hp->ssm_n_group * S, *dt = C + hp->ssm_n_group * S;
    for (int64_t h = h0; h < h1; h++) {
        float *sh = st + h * P * S, d = dt[h] + L->ssm_dt_b[h];
        if (pos == 0) memset(sh, 0, (size_t)(P * S) * sizeof(float));
        float dts = d > 20.0f ? d : logf(1.0f + expf(d)), dA = expf(dts * L->ssm_a[h]);
        const float *Bg = B + (h / hpg) * S, *Cg = C + (h / hpg) * S;
        for (int64_t p = 0; p < P; p++) {
            float xdt = x[h * P + p] * dts, sum = 0.0f, *sp = sh + p * S;
            for (int64_t k = 0; k < S; k++) {
                sp[k] = sp[k] * dA + Bg[k] * xdt;
                sum += sp[k] * Cg[k];
            }
            float v = sum + x[h * P + p] * L->ssm_d[h];
            y[h * P + p] = silu1(zbd[h * P + p]) * v;
        }
    }
}

/* x += residual_scale * ssm_out . (the Mamba-2 mixer of attn_norm(x)), rows in order (a sequence's rows update its
 * state one after another). Barriers: after in_proj, after the conv (channels split), after the scan (heads split),
 * after the group norm, then matmul_residual's. */
static void mamba2_block(const team *t, const fg_layer *L, int il, int64_t rows) {
    const fg_model *m = t->m;
    const fg_hparams *hp = &m->hp;
    fg_work *s = t->w;
    int64_t E = hp->n_embd, D = hp->ssm_d_inner, GS = (int64_t)hp->ssm_n_group * hp->ssm_d_state;
    int64_t cd = D + 2 * GS, proj = 2 * D + 2 * GS + hp->ssm_n_head, r0, r1;
    const fg_mat *ws[1] = {&L->ssm_in};
    const char *xq[1];
    size_t xs;
    prep(t, s->x, rows, E, E, L->attn_norm, ws, 1, xq, &xs);
    fg_split_rows(proj, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
    matmul(&L->ssm_in, xq[0], xs, rows, s->ssm, proj, r0, r1);
    BARRIER(t);
    fg_split_rows(cd, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
    for (int64_t i = 0; i < rows && r0 < r1; i++)
        ssm_conv_row(L, s->ssm + i * proj + D, rec_state(t->seqs[t->seq[i]], il), cd, hp->ssm_d_conv, t->pos[i],
                     r0, r1);
    BARRIER(t);
    fg_split_rows(hp->ssm_n_head, t->nth, t->ith, 1, &r0, &r1);
    for (int64_t i = 0; i < rows && r0 < r1; i++)
        ssm_scan_row(hp, L, s->ssm + i * proj, rec_state(t->seqs[t->seq[i]], il) + (hp->ssm_d_conv - 1) * cd,
                     s->ssm_y + i * D, t->pos[i], r0, r1);
    BARRIER(t);
    int64_t gw = D / hp->ssm_n_group; /* the grouped RMS norm */
    fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++)
        for (int64_t g = 0; g < hp->ssm_n_group; g++)
            fg_rmsnorm(s->ssm_y + i * D + g * gw, s->ssm_y + i * D + g * gw, L->ssm_norm + g * gw, gw, hp->norm_eps);
    BARRIER(t);
    matmul_residual(t, &L->ssm_out, s->ssm_y, rows, D, D, NULL, NULL);
}

/* x = LayerNorm(x) * w + b per row (BERT's post-norms; nothing when w is NULL). Rows split, then a barrier. */
static void post_layernorm(const team *t, int64_t rows, const float *w, const float *b) {
    if (!w) return;
    int64_t E = t->m->hp.n_embd, r0, r1;
    fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) fg_layernorm(t->w->x + i * E, t->w->x + i * E, w, b, E, t->m->hp.norm_eps);
    BARRIER(t);
}

/* Expert e's row of a per-expert (n_expert, n) bias, or NULL without one. */
static const float *expert_bias(const float *b, int64_t e, int64_t n) { return b ? b + e * n : NULL; }

/* Expert e's matrix of a stack. */
static fg_mat expert(const fg_mat3 *x, int64_t e) {
    fg_mat w = x->m;
    w.data = (const char *)w.data + (size_t)e * x->expert_stride;
    return w;
}

/* y (n,) = softmax(x) as ggml_soft_max: exp(x - max), summed in double, times 1/sum. y may be x. */
static void softmax_as_ggml(float *y, const float *x, int64_t n) {
    float mx = x[0];
    for (int64_t e = 1; e < n; e++) mx = x[e] > mx ? x[e] : mx;
    double sum = 0.0;
    for (int64_t e = 0; e < n; e++) sum += (double)(y[e] = expf(x[e] - mx));
    float sc = (float)(1.0 / sum);
    for (int64_t e = 0; e < n; e++) y[e] *= sc;
}

/* The routing of the chunk's rows from w->rlogits (bias added), as llama.cpp's build_moe_ffn: probabilities
 * (softmax or sigmoid of the router logits; softmax-weight: the logits); the n_expert_used largest in descending
 * order (of probability + L->exp_probs_b when the layer has that selection bias; the weights are unbiased), ties to
 * the lower expert (ggml_argsort_top_k: std::sort, an insertion sort for <= 16 experts, so stable
 * there); weights = their probabilities (softmax-weight: their softmax), / their sum (clamped to >= 2^-14) when
 * moe_norm_w, * moe_w_scale unless 0 or 1. Then the slots, grouped by expert: off[e] .. off[e+1] are expert e's, its
 * rows ascending. Every thread computes it whole into its private scratch (a few thousand operations): no
 * barrier, and each row's routing is that row's alone. */
static void route(const team *t, const fg_layer *L, int64_t rows) {
    const fg_model *m = t->m;
    const fg_work *s = t->w;
    int64_t NE = m->hp.n_expert, K = m->hp.n_expert_used;
    float *p = t->probs;
    for (int64_t e = 0; e <= NE; e++) t->off[e] = 0;
    for (int64_t i = 0; i < rows; i++) {
        const float *l = s->rlogits + i * NE;
        if (m->hp.moe_gating == FG_GATING_SIGMOID)
            for (int64_t e = 0; e < NE; e++) p[e] = 1.0f / (1.0f + expf(-l[e]));
        else if (m->hp.moe_gating == FG_GATING_SOFTMAX)
            softmax_as_ggml(p, l, NE);
        else
            memcpy(p, l, (size_t)NE * sizeof(float));
        int32_t *sel = t->sel + i * K;
        float *w = t->wts + i * K;
        const float *b = L->exp_probs_b;
        for (int64_t j = 0; j < K; j++) {
            int64_t best = -1;
            float top = 0.0f;
            for (int64_t e = 0; e < NE; e++) {
                float v = b ? p[e] + b[e] : p[e]; /* the selection score, in float as ggml_add */
                if (best < 0 || v > top) { /* strict: the lower expert wins a tie */
                    best = e;
                    top = v;
                }
            }
            sel[j] = (int32_t)best;
            w[j] = p[best];
            p[best] = -INFINITY; /* taken (scores are finite unless the file's are not: then any expert, in range) */
            t->off[best + 1]++;
        }
        if (m->hp.moe_gating == FG_GATING_SOFTMAX_WEIGHT) softmax_as_ggml(w, w, K);
        if (m->hp.moe_norm_w) { /* the sum of the final weights (softmax-weight: after that softmax) */
            float wsum = 0.0f;
            for (int64_t j = 0; j < K; j++) wsum += w[j];
            wsum = wsum < 6.103515625e-5f ? 6.103515625e-5f : wsum;
            for (int64_t j = 0; j < K; j++) w[j] /= wsum;
        }
        if (m->hp.moe_w_scale != 0.0f && m->hp.moe_w_scale != 1.0f)
            for (int64_t j = 0; j < K; j++) w[j] *= m->hp.moe_w_scale;
        if (L->gate_inp_shexp) { /* the shared expert's gate: sigmoid(gate_inp_shexp . ffn_norm(x)) */
            const float *xn = rows == 1 ? t->pxn : s->xn + i * s->n_in;
            float d = 0.0f;
            for (int64_t c = 0; c < m->hp.n_embd; c++) d += L->gate_inp_shexp[c] * xn[c];
            t->shg[i] = 1.0f / (1.0f + expf(-d));
        }
    }
    for (int64_t e = 0; e < NE; e++) {
        t->off[e + 1] += t->off[e];
        t->fill[e] = t->off[e];
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < K; j++) {
            int32_t slot = t->fill[t->sel[i * K + j]]++;
            t->slot_of[i * K + j] = slot;
            t->row_of[slot] = (int32_t)i;
        }
}

/* act(gate) * up into gate, n values (the gated activations of m->hp.moe_act / m->hp.ffn_act). */
static void gated_act(int act, float *gate, const float *up, int64_t n) {
    if (act == FG_ACT_SWIGLU_OAI) /* llama.cpp's LLM_FFN_SWIGLU_OAI_MOE constants */
        fg_swiglu_oai(gate, gate, up, n, 1.702f, 7.0f);
    else if (act == FG_ACT_GELU_TANH)
        fg_geglu(gate, gate, up, n);
    else
        fg_swiglu(gate, gate, up, n);
}

/* x += the mixture-of-experts FFN of ffn_norm(x) (fg_hparams's comment says what it computes). Every weight is read
 * once per chunk: the rows are grouped by expert (route), each selected expert's gate/up/down slices run as one
 * GEMM over its rows, split by output rows over the team like the dense matmuls. A row's result depends on its own
 * routing only, and its k experts are summed in its own top-k order: batched == solo, whatever the threads.
 * Barriers: after the router, after the gather (rows > 1), after gate/up, after the quantization for down, at the
 * end. */
/* The experts' weighted sum on this thread's columns [c0, c1) (the rows' routing: route): x += residual_scale *
 * (sum_j w_j y_j + g * shared expert (in tmp; sh)); gemma4 (moe_post_norm): x += moe_post_norm(sum_j w_j y_j), the
 * sums into tmp first, then each row normed whole. */
static void moe_sum(const team *t, const fg_layer *L, int64_t rows, int64_t c0, int64_t c1, int sh) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    int64_t E = m->hp.n_embd, K = m->hp.n_expert_used, r0, r1;
    for (int64_t i = 0; i < rows; i++) {
        const int32_t *sl = t->slot_of + i * K;
        const float *w = t->wts + i * K;
        float g = L->gate_inp_shexp ? t->shg[i] : 1.0f, *x = s->x + i * E;
        for (int64_t c = c0; c < c1; c++) {
            float acc = s->ye[sl[0] * E + c] * w[0];
            for (int64_t j = 1; j < K; j++) acc += s->ye[sl[j] * E + c] * w[j];
            if (L->moe_post_norm) {
                s->tmp[i * E + c] = acc;
                continue;
            }
            if (sh) acc += L->gate_inp_shexp ? s->tmp[i * E + c] * g : s->tmp[i * E + c];
            if (m->hp.residual_scale != 0.0f && m->hp.residual_scale != 1.0f) acc *= m->hp.residual_scale;
            x[c] += acc;
        }
    }
    BARRIER(t);
    if (!L->moe_post_norm) return;
    fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        fg_rmsnorm(s->tmp + i * E, s->tmp + i * E, L->moe_post_norm, E, m->hp.norm_eps);
        for (int64_t c = 0; c < E; c++) s->x[i * E + c] += s->tmp[i * E + c];
    }
    BARRIER(t);
}

static void moe_ffn(const team *t, const fg_layer *L, int64_t rows) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    int64_t E = m->hp.n_embd, NE = m->hp.n_expert, K = m->hp.n_expert_used, FE = m->hp.n_ff_exp, F = m->hp.n_ff;
    int64_t S = rows * K;
    int64_t r0, r1;
    int sh = L->w_up.data != NULL && !L->moe_post_norm; /* a shared expert (gemma4's dense FFN runs apart) */
    const char *xq[5];
    size_t xs, xr = s->xq_row;
    const fg_mat *ws[5] = {&L->gate_inp, &L->gate_exps.m, &L->up_exps.m, &L->w_gate, &L->w_up};
    const float *src = L->moe_post_norm ? s->res : s->x; /* gemma4: the router and experts read r (gemma4_moe) */
    prep(t, src, rows, E, E, L->router_norm ? L->router_norm : L->ffn_norm, ws, L->router_norm ? 1 : (sh ? 5 : 3),
         xq, &xs);

    fg_split_rows(NE, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
    matmul(&L->gate_inp, xq[0], xs, rows, s->rlogits, NE, r0, r1);
    add_bias(s->rlogits, NE, rows, L->b_gate_inp, r0, r1);
    BARRIER(t);
    route(t, L, rows);
    if (L->router_norm) /* gemma4: the experts' own input norm (the router's input is no longer read) */
        prep(t, src, rows, E, E, L->exp_norm, ws + 1, 2, xq + 1, &xs);

    /* the experts' inputs in slot order (one row: every expert's input is that row) */
    const char *in_g = xq[1], *in_u = xq[2];
    if (rows > 1) {
        size_t plane = (size_t)s->n_batch * K * xr;
        fg_split_rows(S, t->nth, t->ith, 1, &r0, &r1);
        for (int64_t j = r0; j < r1; j++) { /* rows xs apart, as prep made them */
            memcpy(s->xe + j * xs, xq[1] + t->row_of[j] * xs, xs);
            if (xq[2] != xq[1]) memcpy(s->xe + plane + j * xs, xq[2] + t->row_of[j] * xs, xs);
        }
        in_g = s->xe;
        in_u = xq[2] != xq[1] ? s->xe + plane : s->xe;
        BARRIER(t);
    }

    /* gate and up of each selected expert (and of the shared expert): this thread's rows of each */
    fg_split_rows(FE, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
    for (int64_t e = 0; e < NE; e++) {
        int64_t o = t->off[e], n = t->off[e + 1] - o;
        if (n == 0) continue;
        fg_mat g = expert(&L->gate_exps, e), u = expert(&L->up_exps, e);
        size_t at = rows > 1 ? (size_t)o * xs : 0;
        matmul(&g, in_g + at, xs, n, s->hg + o * FE, FE, r0, r1);
        matmul(&u, in_u + at, xs, n, s->hu + o * FE, FE, r0, r1);
        add_bias(s->hg + o * FE, FE, n, expert_bias(L->b_gate_exps, e, FE), r0, r1);
        add_bias(s->hu + o * FE, FE, n, expert_bias(L->b_up_exps, e, FE), r0, r1);
        if (r0 < r1)
            for (int64_t j = o; j < o + n; j++)
                gated_act(m->hp.moe_act, s->hg + j * FE + r0, s->hu + j * FE + r0, r1 - r0);
    }
    if (sh) {
        fg_split_rows(F, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
        matmul(&L->w_gate, xq[3], xs, rows, s->gate, F, r0, r1);
        matmul(&L->w_up, xq[4], xs, rows, s->up, F, r0, r1);
        if (r0 < r1)
            for (int64_t i = 0; i < rows; i++)
                gated_act(m->hp.ffn_act, s->gate + i * F + r0, s->up + i * F + r0, r1 - r0);
    }
    BARRIER(t);

    /* the down inputs quantized: the S expert slots, then the shared expert's rows */
    int dt = fg_vec_dot_type(L->down_exps.m.type), dts = sh ? fg_vec_dot_type(L->w_down.type) : dt;
    size_t xd = fg_row_size(dt, FE), xd_sh = sh ? fg_row_size(dts, F) : 0; /* the down inputs' row stride */
    xd = xd && (!sh || xd_sh) ? act_stride(xd > xd_sh ? xd : xd_sh) : xr;
    fg_split_rows(S + (sh ? rows : 0), t->nth, t->ith, 1, &r0, &r1);
    for (int64_t j = r0; j < r1; j++) {
        if (j < S)
            fg_quantize_row(dt, s->hg + j * FE, s->hq + j * xd, FE);
        else
            fg_quantize_row(dts, s->gate + (j - S) * F, s->hq + j * xd, F);
    }
    BARRIER(t);

    /* down of each selected expert (times its down_exps_s) and of the shared one (into tmp), this thread's
     * columns; then their weighted sum on the same columns (moe_sum; no barrier between) */
    fg_split_rows(E, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
    for (int64_t e = 0; e < NE; e++) {
        int64_t o = t->off[e], n = t->off[e + 1] - o;
        if (n == 0) continue;
        fg_mat d = expert(&L->down_exps, e);
        matmul(&d, s->hq + o * xd, xd, n, s->ye + o * E, E, r0, r1);
        add_bias(s->ye + o * E, E, n, expert_bias(L->b_down_exps, e, E), r0, r1);
        for (int64_t j = o; L->down_exps_s && j < o + n; j++) /* gemma4: each expert's output scale */
            for (int64_t c = r0; c < r1; c++) s->ye[j * E + c] *= L->down_exps_s[e];
    }
    if (sh) matmul(&L->w_down, s->hq + S * xd, xd, rows, s->tmp, E, r0, r1);
    moe_sum(t, L, rows, r0, r1, sh);
}

/* ---- gated DeltaNet layers (qwen35; fg_layer deltanet) ---- */

/* Layer il's state in sequence kv's cache: the conv ring (dn_conv, conv_dim), then the (HV, S, S) matrices. */

static float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

/* y (n,) = x / sqrt(sum x^2 + eps) as llama.cpp's build_gdn_l2_norm: rms_norm(x, eps / n) * (1 / sqrt(n)). */
static void l2norm_as_ggml(float *y, const float *x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    float sc = 1.0f / sqrtf((float)(sum / (double)n) + eps / (float)n), inv = 1.0f / sqrtf((float)n);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * sc * inv;
}

/* sum of the 8 lanes' partial sums, pairwise */
static float lanes_sum(const float a[8]) { return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])); }

/* One token of the gated delta rule on one head (ggml_gated_delta_net, K = 1; M (S, S) with M[j][i] = S[i][j]):
 * S *= decay; delta_j = (v_j - S[:, j] . k) beta; S[:, j] += k delta_j; o_j = S[:, j] . q * scale. Row j of M
 * depends on nothing else, so each row runs the three steps in one pass; dots over 8 lanes (vectorised). */
static void gated_delta_step(float *M, const float *q, const float *k, const float *v, float decay, float beta,
                             float *o, int64_t S, float scale) {
    int64_t S8 = S & ~(int64_t)7;
    for (int64_t j = 0; j < S; j++) {
        float *mj = M + j * S, ad[8] = {0}, aq[8] = {0};
        for (int64_t i = 0; i < S8; i += 8)
            for (int l = 0; l < 8; l++) {
                float x = mj[i + l] * decay;
                mj[i + l] = x;
                ad[l] += x * k[i + l];
            }
        for (int64_t i = S8; i < S; i++) {
            mj[i] *= decay;
            ad[i - S8] += mj[i] * k[i];
        }
        float delta = (v[j] - lanes_sum(ad)) * beta;
        for (int64_t i = 0; i < S8; i += 8)
            for (int l = 0; l < 8; l++) {
                float x = mj[i + l] + k[i + l] * delta;
                mj[i + l] = x;
                aq[l] += x * q[i + l];
            }
        for (int64_t i = S8; i < S; i++) {
            mj[i] += k[i] * delta;
            aq[i - S8] += mj[i] * q[i];
        }
        o[j] = lanes_sum(aq) * scale;
    }
}

/* The projections of a DeltaNet layer into w->dn (rows, ld): qkv (conv_dim) | z (HV S) | beta (HV) | alpha (HV)
 * of attn_norm(x); two preps (at most FG_MAX_SLOTS activation types each). Ends with a barrier. */
static void deltanet_proj(const team *t, const fg_layer *L, int64_t rows, int64_t ld) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    int64_t E = m->hp.n_embd, CD = dn_conv_dim(m), HV = m->hp.dn_v_heads, VD = HV * m->hp.dn_state, r0, r1;
    const fg_mat *w1[2] = {&L->dn_qkv, &L->dn_z}, *w2[2] = {&L->dn_beta, &L->dn_alpha};
    const char *xq[2];
    size_t xs;
    prep(t, s->x, rows, E, E, L->attn_norm, w1, 2, xq, &xs);
    fg_split_rows(CD, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
    matmul(&L->dn_qkv, xq[0], xs, rows, s->dn, ld, r0, r1);
    fg_split_rows(VD, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
    matmul(&L->dn_z, xq[1], xs, rows, s->dn + CD, ld, r0, r1);
    if (rows > 1) BARRIER(t); /* the shared quantized inputs are read before the next prep rewrites them */
    prep(t, s->x, rows, E, E, L->attn_norm, w2, 2, xq, &xs);
    fg_split_rows(HV, t->nth, t->ith, 1, &r0, &r1);
    matmul(&L->dn_beta, xq[0], xs, rows, s->dn + CD + VD, ld, r0, r1);
    matmul(&L->dn_alpha, xq[1], xs, rows, s->dn + CD + VD + HV, ld, r0, r1);
    BARRIER(t);
}

/* Channels of each row's qkv through the causal conv (ggml_ssm_conv: a float sum over the taps in order; positions
 * before 0 are zero) and silu, in place; the row's raw qkv goes into its sequence's ring first (row pos mod taps).
 * Each thread owns the same channels for every row (rows in order), so no barrier between rows. */
static void deltanet_conv(const team *t, const fg_layer *L, int il, int64_t rows, int64_t ld) {
    const fg_model *m = t->m;
    int64_t CD = dn_conv_dim(m), K = m->hp.dn_conv, c0, c1;
    fg_split_rows(CD, t->nth, t->ith, ROW_ALIGN, &c0, &c1);
    for (int64_t i = 0; i < rows; i++) {
        float *x = t->w->dn + i * ld, *ring = rec_state(t->seqs[t->seq[i]], il);
        int64_t pos = t->pos[i];
        memcpy(ring + (pos % K) * CD + c0, x + c0, (size_t)(c1 - c0) * sizeof(float));
        for (int64_t c = c0; c < c1; c++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < K; j++) {
                int64_t p = pos - K + 1 + j;
                if (p >= 0) acc += ring[(p % K) * CD + c] * L->dn_conv_w[c * K + j];
            }
            x[c] = acc / (1.0f + expf(-acc));
        }
    }
}

/* The gated delta rule of v heads split over the team, rows in order (each row on its own sequence's state; a row
 * at position 0 starts from zeros), then each head's output RMS-normed (dn_norm) times silu(z), written over z. */
static void deltanet_heads(const team *t, const fg_layer *L, int il, int64_t rows, int64_t ld) {
    const fg_model *m = t->m;
    int64_t S = m->hp.dn_state, HK = m->hp.dn_k_heads, HV = m->hp.dn_v_heads, CD = dn_conv_dim(m), VD = HV * S;
    int64_t h0, h1, ring = (int64_t)m->hp.dn_conv * CD;
    float eps = m->hp.norm_eps, scale = 1.0f / sqrtf((float)S);
    float *qn = t->pxn, *kn = qn + S, *o = kn + S; /* private (3 S,) */
    fg_split_rows(HV, t->nth, t->ith, 1, &h0, &h1);
    for (int64_t i = 0; i < rows; i++) {
        float *row = t->w->dn + i * ld, *st = rec_state(t->seqs[t->seq[i]], il) + ring;
        for (int64_t h = h0; h < h1; h++) {
            float *M = st + h * S * S, *z = row + CD + h * S;
            if (t->pos[i] == 0) memset(M, 0, (size_t)(S * S) * sizeof(float));
            int64_t hk = m->hp.dn_kv_grouped ? h / (HV / HK) : h % HK; /* fg_hparams dn_kv_grouped */
            l2norm_as_ggml(qn, row + hk * S, S, eps);
            l2norm_as_ggml(kn, row + (HK + hk) * S, S, eps);
            float a = row[CD + VD + HV + h] + L->dn_dt[h];
            float g = (a > 20.0f ? a : logf(1.0f + expf(a))) * L->dn_a[h]; /* softplus as ggml */
            gated_delta_step(M, qn, kn, row + 2 * HK * S + h * S, expf(g), sigmoid_f(row[CD + VD + h]), o, S, scale);
            fg_rmsnorm(o, o, L->dn_norm, S, eps);
            for (int64_t j = 0; j < S; j++) z[j] = o[j] * (z[j] / (1.0f + expf(-z[j])));
        }
    }
}

/* x += dn_out . (the gated normed output of the delta rule) of a DeltaNet layer. */
static void deltanet_block(const team *t, const fg_layer *L, int il, int64_t rows) {
    const fg_model *m = t->m;
    int64_t CD = dn_conv_dim(m), HV = m->hp.dn_v_heads, VD = HV * m->hp.dn_state, ld = CD + VD + 2 * HV;
    deltanet_proj(t, L, rows, ld);
    deltanet_conv(t, L, il, rows, ld);
    BARRIER(t);
    deltanet_heads(t, L, il, rows, ld);
    BARRIER(t);
    matmul_residual(t, &L->dn_out, t->w->dn + CD, rows, VD, ld, NULL, NULL);
}

/* att *= sigmoid(wg . attn_norm(x)) (gated attention; xq[3] the prepared input), this thread's columns, then a
 * barrier. */
static void attention_gate(const team *t, const fg_layer *L, int64_t rows, const char *xq, size_t xs) {
    fg_work *s = t->w;
    int64_t QD = (int64_t)t->m->hp.n_head * t->m->hp.head_dim, r0, r1;
    fg_split_rows(QD, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
    matmul(&L->wg, xq, xs, rows, s->ag, QD, r0, r1);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t r = r0; r < r1; r++) s->att[i * QD + r] *= sigmoid_f(s->ag[i * QD + r]);
    BARRIER(t);
}

/* gemma4's end of a layer (fg_layer ple_*, out_scale): x += rmsnorm(ple_out . (gelu(ple_gate . x) * its per-layer
 * input)) * ple_post_norm, then x *= out_scale. */
static void layer_tail(const team *t, const fg_layer *L, int il, int64_t rows) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    int64_t E = m->hp.n_embd, P = m->hp.n_embd_per_layer, NP = P * m->hp.n_layer, r0, r1;
    if (L->ple_gate.data) {
        const fg_mat *ws[1] = {&L->ple_gate};
        const char *xq[1];
        size_t xs;
        prep(t, s->x, rows, E, E, NULL, ws, 1, xq, &xs);
        fg_split_rows(P, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
        matmul(&L->ple_gate, xq[0], xs, rows, s->gate, P, r0, r1);
        for (int64_t i = 0; i < rows; i++) {
            float *g = s->gate + i * P;
            const float *in = s->ple + i * NP + (int64_t)il * P;
            fg_gelu(g + r0, r1 - r0);
            for (int64_t r = r0; r < r1; r++) g[r] *= in[r];
        }
        BARRIER(t);
        matmul_residual(t, &L->ple_out, s->gate, rows, P, P, NULL, L->ple_post_norm);
    }
    if (L->out_scale) {
        fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
        for (int64_t i = r0; i < r1; i++)
            for (int64_t j = 0; j < E; j++) s->x[i * E + j] *= L->out_scale[0];
        BARRIER(t);
    }
}

static void dense_ffn(const team *t, const fg_layer *L, const float *src, int64_t rows, const float *post_norm);
static void gemma4_moe(const team *t, const fg_layer *L, int64_t rows);

static void layer_forward(const team *t, int il, int64_t rows) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    const fg_layer *L = &m->layers[il];
    int64_t E = m->hp.n_embd, QD = (int64_t)m->hp.n_head * m->hp.head_dim;
    const char *xq[4] = {NULL, NULL, NULL, NULL}; /* a K/V-reusing layer preps wq alone */
    size_t xs;

    if (L->conv) { /* x += conv_out . (C * conv) */
        shortconv_block(t, L, il, rows);
        BARRIER(t);
        matmul_residual(t, &L->conv_out, s->conv, rows, E, 3 * E, NULL, NULL);
    } else if (L->deltanet) {
        deltanet_block(t, L, il, rows);
    } else if (L->ssm) {
        mamba2_block(t, L, il, rows);
    } else {
        const fg_mat *qkv[4] = {&L->wq, &L->wk, &L->wv, &L->wg};
        prep_rows(t, s->x, rows, E, E, L->attn_norm, qkv, L->kv_reuse ? 1 : (L->wg.data ? 4 : 3), xq, &xs);
        if (rows == 1 && !m->hp.qk_norm_full)
            attention_one_row(t, L, il, xq, xs);
        else
            attention_rows(t, L, il, rows, xq, xs);
        BARRIER(t);
        if (L->wg.data) attention_gate(t, L, rows, xq[3], xs);
        /* x += att . Wo (+ bo); BERT: x = LayerNorm(x) */
        if (L->attn_out_norm && !L->attn_post_norm) {
            matmul_residual_ln(t, &L->wo, s->att, rows, QD, QD, L->bo, L->attn_out_norm, L->attn_out_norm_b);
        } else {
            matmul_residual(t, &L->wo, s->att, rows, QD, QD, L->bo, L->attn_post_norm);
            post_layernorm(t, rows, L->attn_out_norm, L->attn_out_norm_b);
        }
    }

    if (L->moe_post_norm) {
        gemma4_moe(t, L, rows);
    } else if (L->gate_inp.data) {
        moe_ffn(t, L, rows);
    } else {
        dense_ffn(t, L, s->x, rows, L->ffn_post_norm); /* with BERT's x = LayerNorm(x) */
    }
    layer_tail(t, L, il, rows);
}

/* gate[i, r] = act(W_gate_r . x_i) * (W_up_r . x_i (+ b_up[r])) for rows r in [r0, r1) (one chunk of dense_ffn). */
static void gate_up_chunk(const team *t, const fg_layer *L, const char *const *xq, size_t xs, int64_t rows, int64_t r0,
                          int64_t r1) {
    fg_work *s = t->w;
    int64_t F = t->m->hp.n_ff;
    matmul(&L->w_gate, xq[0], xs, rows, s->gate, F, r0, r1);
    matmul(&L->w_up, xq[1], xs, rows, s->up, F, r0, r1);
    add_bias(s->up, F, rows, L->b_up, r0, r1);
    for (int64_t i = 0; i < rows; i++) {
        float *g = s->gate + i * F + r0;
        if (t->m->hp.ffn_act == FG_ACT_GELU_TANH)
            fg_geglu(g, g, s->up + i * F + r0, r1 - r0);
        else
            fg_swiglu(g, g, s->up + i * F + r0, r1 - r0);
    }
}

/* x += post_norm(act(ffn_norm(src) . Wgate) * (ffn_norm(src) . Wup)) . Wdown) (post_norm NULL: none); gate and up
 * rows in dynamic chunks (gate_up_chunk). Without Wgate (BERT): x += act(src . Wup + b_up) . Wdown + b_down, then with
 * layer_out_norm x = LayerNorm(x). */
static void dense_ffn(const team *t, const fg_layer *L, const float *src, int64_t rows, const float *post_norm) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    int64_t E = m->hp.n_embd, F = m->hp.n_ff, r0, r1, k = -1;
    const char *xq[2];
    size_t xs;
    chunks c = chunks_of(t, F, rows > 1 ? GEMM_ALIGN : ROW_ALIGN, L->w_up.stride + L->w_gate.stride);
    if (!L->w_gate.data) {
        const fg_mat *u[1] = {&L->w_up};
        prep_rows(t, src, rows, E, E, L->ffn_norm, u, 1, xq, &xs);
        while (next_chunk(t, &c, &k, &r0, &r1)) {
            matmul(&L->w_up, xq[0], xs, rows, s->gate, F, r0, r1);
            add_bias(s->gate, F, rows, L->b_up, r0, r1);
            for (int64_t i = 0; i < rows; i++) fg_gelu(s->gate + i * F + r0, r1 - r0);
        }
    } else {
        const fg_mat *gu[2] = {&L->w_gate, &L->w_up};
        prep_rows(t, src, rows, E, E, L->ffn_norm, gu, 2, xq, &xs);
        while (next_chunk(t, &c, &k, &r0, &r1)) gate_up_chunk(t, L, xq, xs, rows, r0, r1);
    }
    BARRIER(t);
    if (L->layer_out_norm && !post_norm) {
        matmul_residual_ln(t, &L->w_down, s->gate, rows, F, F, L->b_down, L->layer_out_norm, L->layer_out_norm_b);
    } else {
        matmul_residual(t, &L->w_down, s->gate, rows, F, F, L->b_down, post_norm);
        post_layernorm(t, rows, L->layer_out_norm, L->layer_out_norm_b);
    }
}

/* gemma4's mixture-of-experts FFN (fg_layer moe_post_norm): with r = x, x = r + ffn_post_norm(dense (ffn_norm,
 * ffn_post_norm_1) + experts (exp_norm, router_norm, moe_post_norm)), each RMS norm times its weight. */
static void gemma4_moe(const team *t, const fg_layer *L, int64_t rows) {
    fg_work *s = t->w;
    int64_t E = t->m->hp.n_embd, r0, r1;
    fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
    memcpy(s->res + r0 * E, s->x + r0 * E, (size_t)((r1 - r0) * E) * sizeof(float));
    memset(s->x + r0 * E, 0, (size_t)((r1 - r0) * E) * sizeof(float));
    BARRIER(t);
    dense_ffn(t, L, s->res, rows, L->ffn_post_norm_1);
    moe_ffn(t, L, rows);
    for (int64_t i = r0; i < r1; i++) {
        float *x = s->x + i * E;
        fg_rmsnorm(x, x, L->ffn_post_norm, E, t->m->hp.norm_eps);
        for (int64_t c = 0; c < E; c++) x[c] += s->res[i * E + c];
    }
    BARRIER(t);
}

/* Embeddings and RoPE tables of the chunk's rows (tokens (rows,)) into w->x, w->rope (rows split, no barrier). */
static void embed_rows(const team *t, const int32_t *tokens, int64_t rows) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    const fg_mat *te = &m->tok_embd;
    int64_t E = m->hp.n_embd, r0, r1;
    fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        float *x = s->x + i * E;
        fg_dequantize_row(te->type, (const char *)te->data + (size_t)tokens[i] * te->stride, x, E);
        if (m->hp.embd_scale != 1.0f)
            for (int64_t j = 0; j < E; j++) x[j] *= m->hp.embd_scale;
        if (m->type_embd0)
            for (int64_t j = 0; j < E; j++) x[j] += m->type_embd0[j];
        if (m->pos_embd.data) { /* its row of the position embeddings, added (the pxn scratch holds it) */
            const fg_mat *pe = &m->pos_embd;
            fg_dequantize_row(pe->type, (const char *)pe->data + (size_t)t->pos[i] * pe->stride, t->pxn, E);
            for (int64_t j = 0; j < E; j++) x[j] += t->pxn[j];
        }
        if (m->tok_norm) fg_layernorm(x, x, m->tok_norm, m->tok_norm_b, E, m->hp.norm_eps);
        int long_ctx = m->rope_freqs_long && t->seqs[t->seq[i]]->n_ctx > m->hp.rope_n_ctx_orig;
        fg_rope_cfg c = {m->hp.rope_base, m->hp.rope_freq_scale, long_ctx ? m->rope_freqs_long : m->rope_freqs,
                         m->hp.rope_ext_factor, m->hp.rope_attn_factor, m->hp.rope_n_ctx_orig, m->hp.rope_beta_fast,
                         m->hp.rope_beta_slow};
        int rot_swa = m->hp.n_rot_swa > 0 ? m->hp.n_rot_swa : m->hp.n_rot;
        if (m->hp.n_rot > 0) fg_rope_table(s->rope + i * s->rope_stride, m->hp.n_rot, t->pos[i], &c);
        if (m->hp.n_swa > 0 && rot_swa > 0) {
            c.base = m->hp.rope_base_swa;
            c.freq_scale = m->hp.rope_freq_scale_swa;
            if (m->hp.swa_no_freqs) c.freq_factors = NULL;
            fg_rope_table(s->rope + ((int64_t)s->n_batch + i) * s->rope_stride, rot_swa, t->pos[i], &c);
        }
    }
}

/* gemma4's per-layer inputs of the chunk's rows into w->ple (fg_model ple_*), after embed_rows. */
static void ple_inputs(const team *t, const int32_t *tokens, int64_t rows) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    int64_t E = m->hp.n_embd, P = m->hp.n_embd_per_layer, NP = P * m->hp.n_layer, r0, r1;
    const fg_mat *ws[1] = {&m->ple_proj}, *pe = &m->ple_embd;
    const char *xq[1];
    size_t xs;
    prep(t, s->x, rows, E, E, NULL, ws, 1, xq, &xs);
    fg_split_rows(NP, t->nth, t->ith, ROW_ALIGN, &r0, &r1);
    matmul(&m->ple_proj, xq[0], xs, rows, s->ple, NP, r0, r1);
    BARRIER(t);
    float proj_scale = 1.0f / sqrtf((float)E), tok_scale = sqrtf((float)P), in_scale = 1.0f / sqrtf(2.0f);
    fg_split_rows(rows, t->nth, t->ith, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        fg_dequantize_row(pe->type, (const char *)pe->data + (size_t)tokens[i] * pe->stride, t->pxn, NP);
        for (int64_t l = 0; l < m->hp.n_layer; l++) {
            float *y = s->ple + i * NP + l * P;
            const float *e = t->pxn + l * P;
            for (int64_t j = 0; j < P; j++) y[j] *= proj_scale;
            fg_rmsnorm(y, y, m->ple_norm, P, m->hp.norm_eps);
            for (int64_t j = 0; j < P; j++) y[j] = (y[j] + e[j] * tok_scale) * in_scale;
        }
    }
    BARRIER(t);
}

/* logits (n_out, n_vocab) = output . output_norm(x) of rows want[0..n_out) (increasing, numbered from the call's
 * first row; this chunk starts at row c0). Contiguous rows are read in place; others are gathered into w->tmp. */
static void logits_rows(const team *t, const int32_t *want, int64_t n_out, int c0, float *logits) {
    const fg_model *m = t->m;
    fg_work *s = t->w;
    int64_t E = m->hp.n_embd, r0, r1;
    const float *src = s->x + (int64_t)(want[0] - c0) * E;
    if (want[n_out - 1] - want[0] != n_out - 1) {
        fg_split_rows(n_out, t->nth, t->ith, 1, &r0, &r1);
        for (int64_t i = r0; i < r1; i++) memcpy(s->tmp + i * E, s->x + (int64_t)(want[i] - c0) * E, E * sizeof(float));
        BARRIER(t);
        src = s->tmp;
    }
    const fg_mat *ws[1] = {&m->output};
    const char *xq[1];
    size_t xs;
    prep(t, src, n_out, E, E, m->output_norm, ws, 1, xq, &xs);
    /* the closing barrier: the next chunk's or the call's end */
    chunks c = chunks_of(t, m->hp.n_vocab, n_out > 1 ? GEMM_ALIGN : ROW_ALIGN, m->output.stride);
    for (int64_t k = -1; next_chunk(t, &c, &k, &r0, &r1);) {
        matmul(&m->output, xq[0], xs, n_out, logits, m->hp.n_vocab, r0, r1);
        if (m->hp.final_softcap > 0.0f)
            for (int64_t i = 0; i < n_out; i++)
                fg_softcap(logits + i * m->hp.n_vocab + r0, r1 - r0, m->hp.final_softcap);
        if (m->hp.logit_scale != 0.0f && m->hp.logit_scale != 1.0f)
            for (int64_t i = 0; i < n_out; i++)
                for (int64_t r = r0; r < r1; r++) logits[i * m->hp.n_vocab + r] *= m->hp.logit_scale;
    }
}

/* Output rows rows (n,) strictly increasing in [0, n_rows) (NULL allowed when n == 0): 0, else -1. */
static int check_out_rows(const int32_t *rows, int n, int n_rows) {
    if (n < 0 || (n > 0 && !rows)) return -1;
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= n_rows || (i > 0 && rows[i] <= rows[i - 1])) return -1;
    return 0;
}

/* hidden (n_out, n_embd) = output_norm(x) of rows want[0..n_out), or x itself without output_norm (encoders)
 * (numbered as in logits_rows; rows split, no barrier: it only reads x, like logits_rows, and the next chunk's
 * embed_rows comes after a barrier). */
static void hidden_out(const team *t, const int32_t *want, int64_t n_out, int c0, float *hidden) {
    int64_t E = t->m->hp.n_embd, r0, r1;
    fg_split_rows(n_out, t->nth, t->ith, 1, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        const float *x = t->w->x + (int64_t)(want[i] - c0) * E;
        if (t->m->output_norm)
            fg_rmsnorm(hidden + i * E, x, t->m->output_norm, E, t->m->hp.norm_eps);
        else
            memcpy(hidden + i * E, x, (size_t)E * sizeof(float));
    }
}

/* The checks of fg_forward_multi (see fg_forward.h): 0 when the call is valid, else -1. */
static int check_rows(const fg_model *m, const fg_work *w, fg_kv *const *seqs, int n_seqs, const int32_t *tokens,
                      const int32_t *seq_of_row, const int32_t *pos_of_row, int n_rows, const int32_t *logit_rows,
                      int n_logit_rows, const int32_t *hidden_rows, int n_hidden_rows) {
    if (n_seqs < 1 || n_rows < 1 || !seqs || !tokens || !seq_of_row || !pos_of_row) return -1;
    if (n_logit_rows > 0 && !m->output.data) return -1; /* no lm_head (an encoder) */
    for (int j = 0; j < n_seqs; j++) {
        if (!seqs[j] || !seqs[j]->k_cache || !seqs[j]->v_cache) return -1;
        for (int k = 0; k < j; k++)
            if (seqs[k] == seqs[j]) return -1;
    }
    for (int r = 0; r < n_rows; r++) {
        int j = seq_of_row[r], p = pos_of_row[r];
        if (tokens[r] < 0 || tokens[r] >= m->hp.n_vocab || j < 0 || j >= n_seqs) return -1;
        if (p < 0 || p >= seqs[j]->n_ctx || p >= w->max_ctx) return -1;
        if (m->pos_embd.data && p >= m->pos_embd.rows) return -1;
        int prev = r - 1; /* the sequence's previous row, if any: its position must be p - 1 */
        while (prev >= 0 && seq_of_row[prev] != j) prev--;
        if (prev >= 0 && pos_of_row[prev] != p - 1) return -1;
        /* non-causal: whole sequences, contiguous, from position 0, each fitting one chunk */
        if (m->hp.non_causal && (p >= w->n_batch || (prev < 0 && p != 0) || (prev >= 0 && prev != r - 1))) return -1;
    }
    return check_out_rows(logit_rows, n_logit_rows, n_rows) || check_out_rows(hidden_rows, n_hidden_rows, n_rows);
}

/* 1 when each sequence's rows of the chunk (seq (rows,)) are one run of at most FG_ATT_TILE rows, so that
 * attention_rows makes one tile of them, else 0. */
static int one_tile_each(const int32_t *seq, int64_t rows) {
    for (int64_t i0 = 0, i1; i0 < rows; i0 = i1) {
        for (i1 = i0 + 1; i1 < rows && seq[i1] == seq[i0]; i1++) {}
        if (i1 - i0 > FG_ATT_TILE) return 0;
        for (int64_t j = 0; j < i0; j++)
            if (seq[j] == seq[i0]) return 0;
    }
    return 1;
}

/* One fg_forward_multi call, as every thread of its team sees it. */
typedef struct {
    const fg_model *m;
    fg_work *w;
    fg_kv *const *seqs;
    const int32_t *tokens, *seq_of_row, *pos_of_row, *logit_rows, *hidden_rows;
    int n_rows, n_logit_rows, n_hidden_rows;
    float *logits, *hidden;
} forward_call;

static void forward_task(int ith, int nth, void *arg) {
    const forward_call *a = arg;
    const fg_model *m = a->m;
    fg_work *w = a->w;
    team t;
    t.m = m;
    t.w = w;
    t.seqs = a->seqs;
    t.ith = ith;
    t.nth = nth;
    char *p = w->priv + (size_t)t.ith * w->priv_size;
    t.pxn = (float *)p;
    t.pxq = p + round64((size_t)w->n_in * sizeof(float));
    t.scores = (float *)(t.pxq + FG_MAX_SLOTS * w->xq_row);
    if (m->hp.n_expert > 0) { /* the routing scratch (route_bytes) */
        size_t pairs = round64((size_t)w->n_batch * m->hp.n_expert_used * 4);
        size_t ne = round64(((size_t)m->hp.n_expert + 1) * 4);
        char *r = (char *)t.scores + round64((size_t)score_heads(m) * w->max_ctx * sizeof(float));
        t.probs = (float *)r;
        t.sel = (int32_t *)(r += ne);
        t.wts = (float *)(r += pairs);
        t.slot_of = (int32_t *)(r += pairs);
        t.row_of = (int32_t *)(r += pairs);
        t.off = (int32_t *)(r += pairs);
        t.fill = (int32_t *)(r += ne);
        t.shg = (float *)(r + ne);
    }
    int li = 0, hi = 0; /* next entries of logit_rows and hidden_rows */

    /* chunks of up to n_batch rows, in row order (a sequence's later rows see its earlier chunks' cache); for a
     * non-causal model whole sequences only (check_rows made sure each fits one chunk) */
    for (int c = 0, rows; c < a->n_rows; c += rows) {
        rows = a->n_rows - c < w->n_batch ? a->n_rows - c : w->n_batch;
        if (m->hp.non_causal && c + rows < a->n_rows) /* end the chunk before the sequence it would cut */
            while (a->pos_of_row[c + rows] != 0) rows--;
        t.seq = a->seq_of_row + c;
        t.pos = a->pos_of_row + c;
        t.one_tile = one_tile_each(t.seq, rows);
        embed_rows(&t, a->tokens + c, rows);
        BARRIER(&t);
        if (m->ple_proj.data) ple_inputs(&t, a->tokens + c, rows);

        for (int il = 0; il < m->hp.n_layer; il++) {
            fg_model view;
            layer_view(&view, m, il);
            t.m = &view;
            layer_forward(&t, il, rows);
            t.m = m;
        }

        int h0 = hi, l0 = li;
        while (hi < a->n_hidden_rows && a->hidden_rows[hi] < c + rows) hi++;
        if (hi > h0) hidden_out(&t, a->hidden_rows + h0, hi - h0, c, a->hidden + (int64_t)h0 * m->hp.n_embd);
        while (li < a->n_logit_rows && a->logit_rows[li] < c + rows) li++;
        if (li > l0) logits_rows(&t, a->logit_rows + l0, li - l0, c, a->logits + (int64_t)l0 * m->hp.n_vocab);
        if (c + rows < a->n_rows) {
            BARRIER(&t);
        }
    }
}

int fg_forward_multi(const fg_model *m, fg_work *w, fg_kv *const *seqs, int n_seqs, const int32_t *tokens,
                     const int32_t *seq_of_row, const int32_t *pos_of_row, int n_rows, const int32_t *logit_rows,
                     int n_logit_rows, float *logits, const int32_t *hidden_rows, int n_hidden_rows, float *hidden,
                     int n_threads) {
    if (check_rows(m, w, seqs, n_seqs, tokens, seq_of_row, pos_of_row, n_rows, logit_rows, n_logit_rows, hidden_rows,
                   n_hidden_rows) != 0)
        return -1;
    int nth = n_threads < 1 ? 1 : (n_threads > w->max_threads ? w->max_threads : n_threads);
    if (nth > 1 && !w->pool) w->pool = fg_pool_new(); /* NULL (no memory, or no threads in this build): 1 thread */
    forward_call a = {m, w, seqs, tokens, seq_of_row, pos_of_row, logit_rows, hidden_rows,
                      n_rows, n_logit_rows, n_hidden_rows, logits, hidden};
    w->last_threads = fg_parallel(w->pool, nth, forward_task, &a);
    return 0;
}

int fg_forward(const fg_model *m, fg_state *s, const int32_t *tokens, int n_tokens, int pos, float *logits,
               int all_logits, int n_threads) {
    if (n_tokens < 1 || pos < 0 || (int64_t)pos + n_tokens > s->kv.n_ctx) return -1;
    /* rows: all of sequence 0 at pos, pos+1, ...; logits of every row or of the last one */
    int32_t small[3 * 64], *buf = n_tokens <= 64 ? small : malloc(3 * (size_t)n_tokens * sizeof(int32_t));
    if (!buf) return -1;
    int32_t *seq_of_row = buf, *pos_of_row = buf + n_tokens, *logit_rows = buf + 2 * n_tokens;
    for (int i = 0; i < n_tokens; i++) {
        seq_of_row[i] = 0;
        pos_of_row[i] = pos + i;
        logit_rows[i] = i;
    }
    fg_kv *seqs[1] = {&s->kv};
    int rc = all_logits ? fg_forward_multi(m, &s->work, seqs, 1, tokens, seq_of_row, pos_of_row, n_tokens, logit_rows,
                                           n_tokens, logits, NULL, 0, NULL, n_threads)
                        : fg_forward_multi(m, &s->work, seqs, 1, tokens, seq_of_row, pos_of_row, n_tokens,
                                           logit_rows + n_tokens - 1, 1, logits, NULL, 0, NULL, n_threads);
    if (buf != small) free(buf);
    return rc;
}

/* Positions [p0, n) of a ring (position p in row p mod its rows, each row `row` bytes) from src's (sr rows) to
 * dst's (dr rows). */
static void copy_ring(char *dst, int64_t dr, const char *src, int64_t sr, size_t row, int64_t p0, int64_t n) {
    for (int64_t p = p0; p < n; p++) memcpy(dst + (p % dr) * row, src + (p % sr) * row, row);
}

int fg_kv_copy(const fg_model *m, fg_kv *dst, const fg_kv *src, int n) {
    if (n < 0 || n > dst->n_ctx || n > src->n_ctx || dst == src) return -1;
    int64_t d_conv = m->hp.n_conv - 1;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const fg_layer *L = &m->layers[il];
        int64_t hd = layer_hd(m, il);
        size_t row = (size_t)hd * sizeof(uint16_t);
        if (L->kv_reuse) continue; /* no cache of its own */
        if (L->deltanet || L->ssm) { /* the state after src's last position (the caller's n is src's count) */
            if (n > 0)
                memcpy(rec_state(dst, il), rec_state(src, il), (size_t)rec_state_floats(m, il) * sizeof(float));
            continue;
        }
        if (L->conv) { /* the state: bx of the last d_conv positions */
            copy_ring((char *)conv_ring(m, dst, il), dst->n_conv_rows, (const char *)conv_ring(m, src, il),
                      src->n_conv_rows, (size_t)m->hp.n_embd * sizeof(float), n > d_conv ? n - d_conv : 0, n);
            continue;
        }
        int64_t sr = layer_rows(src, il), dr = layer_rows(dst, il), p0 = 0;
        if (L->swa && n > m->hp.n_swa) p0 = n - m->hp.n_swa;
        for (int64_t g = 0; g < layer_g(m, il); g++) {
            uint16_t *dk = group_cache(m, dst, dst->k_cache, il, g), *dv = group_cache(m, dst, dst->v_cache, il, g);
            const uint16_t *sk = group_cache(m, src, src->k_cache, il, g), *sv = group_cache(m, src, src->v_cache, il, g);
            if (!L->swa) {
                memcpy(dk, sk, (size_t)n * row);
                memcpy(dv, sv, (size_t)n * row);
                continue;
            }
            copy_ring((char *)dk, dr, (const char *)sk, sr, row, p0, n);
            copy_ring((char *)dv, dr, (const char *)sv, sr, row, p0, n);
        }
    }
    return 0;
}

/* First position of layer il a state keeps of n (see fg_kv_state_size). */
static int64_t state_first(const fg_model *m, int il, int n) {
    return m->layers[il].swa && n > m->hp.n_swa ? n - m->hp.n_swa : 0;
}

/* Whether layer il keeps K/V rows of its own (an attention layer: not a short-convolution, DeltaNet or Mamba-2
 * one, nor one that attends over an earlier layer's K/V, kv_reuse). */
static int attn_layer(const fg_model *m, int il) {
    const fg_layer *L = &m->layers[il];
    return !(L->conv || L->deltanet || L->ssm || L->kv_reuse);
}

/* The conv inputs a short-convolution layer's state keeps of n positions: the last min(n, n_conv - 1). */
static int64_t conv_kept(const fg_model *m, int n) {
    int64_t d = m->hp.n_conv - 1;
    return n < d ? n : d;
}

int64_t fg_kv_state_size(const fg_model *m, int n) {
    if (n < 0) return -1;
    int64_t vals = 0;
    for (int il = 0; il < m->hp.n_layer; il++)
        if (attn_layer(m, il)) vals += (n - state_first(m, il, n)) * layer_g(m, il) * layer_hd(m, il);
    return 2 * vals;
}

int64_t fg_rec_state_size(const fg_model *m, int n) {
    if (n < 0) return -1;
    int64_t floats = 0;
    for (int il = 0; il < m->hp.n_layer; il++)
        floats += m->layers[il].conv ? conv_kept(m, n) * m->hp.n_embd : rec_state_floats(m, il);
    return floats;
}

/* Copy `bytes` from the cache to buf (save) or back (load). */
static void state_copy(void *cache, void *buf, size_t bytes, int save) {
    memcpy(save ? buf : cache, save ? cache : buf, bytes);
}

/* The attention layers' K/V of positions [0, n) to buf (save) or back (load), fg_kv_state_size's order: per layer
 * with a cache of its own, K then V, layer_g groups of layer_hd-wide rows. */
static void kv_rows_io(const fg_model *m, const fg_kv *kv, int n, uint16_t *buf, int save) {
    for (int il = 0; il < m->hp.n_layer; il++) {
        if (!attn_layer(m, il)) continue;
        int64_t rows = layer_rows(kv, il), p0 = state_first(m, il, n), hd = layer_hd(m, il);
        size_t row = (size_t)hd * sizeof(uint16_t);
        for (int kind = 0; kind < 2; kind++) {
            for (int64_t g = 0; g < layer_g(m, il); g++) {
                uint16_t *c = group_cache(m, kv, kind ? kv->v_cache : kv->k_cache, il, g);
                if (!m->layers[il].swa) {
                    state_copy(c, buf, (size_t)n * row, save);
                } else {
                    for (int64_t p = p0; p < n; p++) state_copy(c + (p % rows) * hd, buf + (p - p0) * hd, row, save);
                }
                buf += (n - p0) * hd;
            }
        }
    }
}

/* The recurrent layers' states at position n to buf (save) or back (load), fg_rec_state_size's order. */
static void rec_io(const fg_model *m, const fg_kv *kv, int n, float *buf, int save) {
    int64_t E = m->hp.n_embd;
    for (int il = 0; il < m->hp.n_layer; il++) {
        if (m->layers[il].conv) { /* the ring's rows of positions [n - kept, n), oldest first */
            float *ring = conv_ring(m, kv, il);
            int64_t kept = conv_kept(m, n);
            for (int64_t p = n - kept; p < n; p++)
                state_copy(ring + (p % kv->n_conv_rows) * E, buf + (p - n + kept) * E, (size_t)E * sizeof(float), save);
            buf += kept * E;
            continue;
        }
        int64_t f = rec_state_floats(m, il);
        if (f) state_copy(rec_state(kv, il), buf, (size_t)f * sizeof(float), save);
        buf += f;
    }
}

/* fg_kv_save (save != 0: cache -> bufs) and fg_kv_load (bufs -> cache), after checking n and the buffers' lengths. */
static int state_io(const fg_model *m, const fg_kv *kv, int n, uint16_t *kvbuf, int64_t n_kv, float *rec,
                    int64_t n_rec, int save) {
    if (n < 0 || n > kv->n_ctx || n_kv != fg_kv_state_size(m, n) || n_rec != fg_rec_state_size(m, n)) return -1;
    if ((n_kv && !kvbuf) || (n_rec && !rec)) return -1;
    kv_rows_io(m, kv, n, kvbuf, save);
    rec_io(m, kv, n, rec, save);
    return 0;
}

int fg_kv_save(const fg_model *m, const fg_kv *kv, int n, uint16_t *buf, int64_t n_kv, float *rec, int64_t n_rec) {
    return state_io(m, kv, n, buf, n_kv, rec, n_rec, 1);
}

int fg_kv_load(const fg_model *m, fg_kv *kv, int n, const uint16_t *buf, int64_t n_kv, const float *rec,
               int64_t n_rec) {
    return state_io(m, kv, n, (uint16_t *)buf, n_kv, (float *)rec, n_rec, 0);
}
