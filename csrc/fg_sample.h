/* fastgguf samplers: logits (n_vocab,) float32 -> one token id.
 *
 * Pipeline (llama.cpp order): logit bias -> repetition / frequency / presence penalties -> greedy (temperature <= 0)
 * or top-k -> top-p -> min-p -> temperature -> draw from the softmax of the survivors.
 *   - repetition penalty (llama.cpp): over the last `repeat_last_n` accepted tokens (-1: all), each distinct token's
 *     logit is divided by the penalty when positive, multiplied when negative.
 *   - frequency / presence penalties (OpenAI): over all accepted tokens marked `generated`,
 *     logit -= count * frequency_penalty + (count > 0) * presence_penalty.
 *   - top-p and min-p look at probabilities at temperature 1 over the current candidates; temperature only shapes
 *     the final draw (as llama.cpp does).
 * The logits buffer is left as it was on return (changes for bias and penalties are undone), so a caller may look
 * at the raw logits afterwards.
 *
 * Allowed-token mask (constrained output, fg_sampler_sample_masked): bit i of allow[i / 32] set = token i may be
 * chosen. A masked-out token counts as -inf at EVERY stage after bias and penalties: greedy, top-k, the top-p mass
 * and its normalizer, the min-p threshold and the draw all see the allowed tokens only, so the result is exactly
 * the unmasked sampler run on logits whose masked entries are -inf (not llama.cpp's sample-then-resample shortcut,
 * which draws from another distribution). The mask never reaches the logits the caller sees afterwards: logprobs
 * read from that buffer are the model's own. Cost: one pass over the mask's words, then either (dense mask, few
 * tokens banned) those few entries set to -inf in place and restored, or (otherwise) the allowed entries gathered
 * into a scratch vector the pipeline then runs on; zero words are skipped.
 *
 * All state is per sampler (random generator: xoshiro256** seeded through splitmix64); no globals. Functions
 * never read outside the buffers they are given; allocation failures are reported by return values. */
#ifndef FG_SAMPLE_H
#define FG_SAMPLE_H

#include <stdint.h>

#define FG_SAMPLE_NO_CANDIDATE (-1) /* every logit is -inf or NaN */
#define FG_SAMPLE_NO_MEMORY (-2)
#define FG_SAMPLE_NO_ALLOWED (-3) /* with a mask: no allowed token has a finite logit after bias and penalties */

typedef struct {
    uint64_t s[4];
} fg_rng;

void fg_rng_seed(fg_rng *r, uint64_t seed);
uint64_t fg_rng_next(fg_rng *r);
double fg_rng_uniform(fg_rng *r); /* [0, 1), 53 random bits */

typedef struct {
    float logit;
    int32_t id;
} fg_cand;

typedef struct {
    /* parameters (validated by the Python layer) */
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* 0: off */
    float top_p;             /* (0, 1]; 1: off */
    float min_p;             /* [0, 1]; 0: off */
    float repeat_penalty;    /* 1: off */
    int32_t repeat_last_n;   /* 0: off, -1: whole history */
    float frequency_penalty; /* 0: off */
    float presence_penalty;  /* 0: off */

    /* logit bias: n_bias (id, value) pairs, ids distinct */
    int32_t n_bias;
    int32_t *bias_ids;  /* (n_bias,) */
    float *bias_vals;   /* (n_bias,) */

    /* history */
    int32_t *hist;      /* (cap_hist,) every accepted token, oldest first */
    int64_t n_hist, cap_hist;
    int32_t *counts;    /* (cap_tok,) how many times each id was accepted as generated */
    int32_t cap_tok;
    uint8_t *mark;      /* (cap_mark,) scratch: 1 while an id is being penalized (all 0 between calls) */
    int32_t cap_mark;
    int32_t *seen;      /* (cap_seen,) distinct generated ids, in order of first appearance */
    int32_t n_seen, cap_seen;

    /* scratch */
    fg_cand *cand;      /* (cap_cand,) candidates */
    int32_t cap_cand;
    fg_cand *undo;      /* (cap_undo,) original logits of the entries changed by bias/penalties */
    int32_t cap_undo;
    float *w;           /* (cap_w,) softmax weights over the whole vocabulary (top_k = 0) */
    int32_t cap_w;
    float *kept;        /* (cap_kept,) logits of the allowed tokens, gathered (sparse masks) */
    int32_t cap_kept;
    int32_t *kept_ids;  /* (cap_kept_ids,) their token ids, ascending */
    int32_t cap_kept_ids;

    fg_rng rng;
} fg_sampler;

/* Life cycle. init zeroes everything and seeds; free releases the buffers (the struct itself is the caller's). */
void fg_sampler_init(fg_sampler *s, uint64_t seed);
void fg_sampler_free(fg_sampler *s);
int fg_sampler_set_bias(fg_sampler *s, const int32_t *ids, const float *vals, int32_t n); /* 0, or NO_MEMORY */
void fg_sampler_reset(fg_sampler *s); /* forget the history (parameters, bias and rng state kept) */

/* Record an accepted token (id >= 0). generated != 0: also counts for frequency/presence penalties.
 * Returns 0, or FG_SAMPLE_NO_MEMORY. */
int fg_sampler_accept(fg_sampler *s, int32_t id, int generated);

/* Choose a token from logits (n_vocab,). Returns the id, FG_SAMPLE_NO_CANDIDATE or FG_SAMPLE_NO_MEMORY.
 * Does not record the token (call fg_sampler_accept). */
int32_t fg_sampler_sample(fg_sampler *s, float *logits, int32_t n_vocab);

/* fg_sampler_sample among the tokens allow (ceil(n_vocab / 32) words; bits past n_vocab ignored) permits; allow
 * NULL: every token (exactly fg_sampler_sample). Returns the id, FG_SAMPLE_NO_ALLOWED (the mask is empty, or every
 * allowed logit is -inf/NaN after bias and penalties) or FG_SAMPLE_NO_MEMORY. logits is unchanged on return. */
int32_t fg_sampler_sample_masked(fg_sampler *s, float *logits, int32_t n_vocab, const uint32_t *allow);

/* Apply bias and penalties to logits in place, as fg_sampler_sample sees them (for inspection and tests; nothing is
 * undone). Returns 0, or FG_SAMPLE_NO_MEMORY. */
int fg_sampler_apply(fg_sampler *s, float *logits, int32_t n_vocab);

/* Building blocks (exposed for tests). */
int32_t fg_argmax(const float *x, int32_t n); /* first maximum above -inf (NaN ignored); -1 if there is none */
/* Top-k by partial selection (min-heap of k), result sorted by logit descending, ties by id ascending.
 * -inf/NaN entries are skipped. out has room for k. Returns the number found (<= k). */
int32_t fg_top_k(const float *x, int32_t n, int32_t k, fg_cand *out);
void fg_sort_cands(fg_cand *c, int32_t n); /* logit descending, id ascending */

#endif
