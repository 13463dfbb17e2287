/* fastgguf samplers; see fg_sample.h for the pipeline and its semantics. */
#include "fg_sample.h"
#include "fg_simd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers: splitmix64 expands the seed, xoshiro256** draws ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void fg_rng_seed(fg_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x); /* never all zero: splitmix64 is a bijection */
}

uint64_t fg_rng_next(fg_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double fg_rng_uniform(fg_rng *r) { return (double)(fg_rng_next(r) >> 11) * 0x1.0p-53; }

/* ---- growable buffers ---- */

/* Make *buf hold at least `need` elements of `size` bytes; new bytes are zeroed. 0 ok, -1 out of memory. */
static int grow(void **buf, int64_t *cap, int64_t need, size_t size) {
    if (need <= *cap) return 0;
    int64_t ncap = *cap > 0 ? *cap : 16;
    while (ncap < need) ncap *= 2;
    void *p = realloc(*buf, (size_t)ncap * size);
    if (!p) return -1;
    memset((char *)p + (size_t)*cap * size, 0, (size_t)(ncap - *cap) * size);
    *buf = p;
    *cap = ncap;
    return 0;
}

static int grow32(void **buf, int32_t *cap, int64_t need, size_t size) {
    int64_t c = *cap;
    if (need > INT32_MAX) return -1;
    int r = grow(buf, &c, need, size);
    if (r == 0) *cap = (int32_t)(c > INT32_MAX ? INT32_MAX : c);
    return r;
}

/* ---- exp and sums that vectorize (no libm: same results on every platform) ---- */

/* exp(x) for x <= 0: x = n*ln2 + r, exp(r) by Cephes' expf polynomial (error < 1 ulp on [-87, 0]), 2^n through the
 * exponent bits. x < -87, -inf, NaN and x > 0 give exactly 0 (so banned tokens get no weight), +0 and -0 give 1.
 * Only integer compares and selects: the loops calling it vectorize without fast-math. */
static inline float exp_nonpos(float x) {
    int32_t b;
    memcpy(&b, &x, 4);
    const int32_t B87 = (int32_t)0xC2AE0000; /* -87.0f; negative floats order like their int bits, reversed */
    int32_t live = -(int32_t)(b <= B87) | -(int32_t)(b == 0); /* x in [-87, -0] or +0: all ones, else 0 */
    b &= live;                                                 /* the others compute exp(0), masked below */
    memcpy(&x, &b, 4);
    float fx = x * 1.44269504088896341f;
    int32_t n = (int32_t)(fx - 0.5f); /* round to nearest (fx <= 0) */
    float fn = (float)n;
    float r = x - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    int32_t bits = (int32_t)((uint32_t)(n + 127) << 23) & live;
    float scale;
    memcpy(&scale, &bits, 4);
    return y * scale;
}

/* out[i] = exp((x[i] - mx) * k) for x (n,), mx >= every finite x[i], k > 0; -inf/NaN entries give 0. */
static void exp_shifted(const float *restrict x, int32_t n, float mx, float k, float *restrict out) {
    for (int32_t i = 0; i < n; i++) out[i] = exp_nonpos((x[i] - mx) * k);
}

/* sum of w (n,) in double, 8 independent lanes */
static double sum_of(const float *w, int32_t n) {
    double a[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) a[j] += w[i + j];
    for (; i < n; i++) a[0] += w[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* index drawn from weights w (n,) summing to `total` (> 0): block sums first, then within the block */
static int32_t draw_weights(fg_rng *rng, const float *w, int32_t n, double total) {
    enum { BLOCK = 256 };
    double u = fg_rng_uniform(rng) * total, acc = 0.0;
    int32_t b = 0;
    for (; b + BLOCK < n; b += BLOCK) {
        double bs = sum_of(w + b, BLOCK);
        if (u < acc + bs) break;
        acc += bs;
    }
    int32_t last = -1;
    for (int32_t i = b; i < n; i++) {
        if (w[i] > 0.0f) last = i;
        acc += w[i];
        if (u < acc && w[i] > 0.0f) return i;
    }
    return last; /* rounding: the last token with weight */
}

/* ---- life cycle ---- */

void fg_sampler_init(fg_sampler *s, uint64_t seed) {
    memset(s, 0, sizeof(*s));
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repeat_penalty = 1.0f;
    fg_rng_seed(&s->rng, seed);
}

void fg_sampler_free(fg_sampler *s) {
    free(s->bias_ids);
    free(s->bias_vals);
    free(s->hist);
    free(s->counts);
    free(s->mark);
    free(s->seen);
    free(s->cand);
    free(s->undo);
    free(s->w);
    free(s->kept);
    free(s->kept_ids);
    memset(s, 0, sizeof(*s));
}

int fg_sampler_set_bias(fg_sampler *s, const int32_t *ids, const float *vals, int32_t n) {
    free(s->bias_ids);
    free(s->bias_vals);
    s->bias_ids = NULL;
    s->bias_vals = NULL;
    s->n_bias = 0;
    if (n <= 0) return 0;
    s->bias_ids = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    s->bias_vals = (float *)malloc((size_t)n * sizeof(float));
    if (!s->bias_ids || !s->bias_vals) {
        free(s->bias_ids);
        free(s->bias_vals);
        s->bias_ids = NULL;
        s->bias_vals = NULL;
        return FG_SAMPLE_NO_MEMORY;
    }
    memcpy(s->bias_ids, ids, (size_t)n * sizeof(int32_t));
    memcpy(s->bias_vals, vals, (size_t)n * sizeof(float));
    s->n_bias = n;
    return 0;
}

void fg_sampler_reset(fg_sampler *s) {
    for (int32_t j = 0; j < s->n_seen; j++) s->counts[s->seen[j]] = 0;
    s->n_seen = 0;
    s->n_hist = 0;
}

int fg_sampler_accept(fg_sampler *s, int32_t id, int generated) {
    if (id < 0) return 0;
    if (grow((void **)&s->hist, &s->cap_hist, s->n_hist + 1, sizeof(int32_t))) return FG_SAMPLE_NO_MEMORY;
    if (grow32((void **)&s->counts, &s->cap_tok, (int64_t)id + 1, sizeof(int32_t))) return FG_SAMPLE_NO_MEMORY;
    if (grow32((void **)&s->mark, &s->cap_mark, (int64_t)id + 1, 1)) return FG_SAMPLE_NO_MEMORY;
    s->hist[s->n_hist++] = id;
    if (generated) {
        if (s->counts[id] == 0) {
            if (grow32((void **)&s->seen, &s->cap_seen, (int64_t)s->n_seen + 1, sizeof(int32_t)))
                return FG_SAMPLE_NO_MEMORY;
            s->seen[s->n_seen++] = id;
        }
        s->counts[id]++;
    }
    return 0;
}

/* ---- building blocks ---- */

/* Largest entry of x[0..n) above -inf (NaN ignored), -inf if none: 16 lanes of m = v > m ? v : m. Written as a
 * plain loop gcc keeps them scalar (maxss, ~2.5 cycles an entry: 120 us over a 49152 vocabulary, paid per sampled
 * token, greedy included), so x86 has them in SSE2 (every x86-64): maxps(v, m) is exactly v > m ? v : m. */
static float max_of(const float *x, int32_t n) {
    int32_t i = 0;
    float r = -INFINITY;
#ifdef FG_HAVE_X86
    __m128 a[4];
    for (int j = 0; j < 4; j++) a[j] = _mm_set1_ps(-INFINITY);
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 4; j++) a[j] = _mm_max_ps(_mm_loadu_ps(x + i + 4 * j), a[j]);
    float m[16];
    for (int j = 0; j < 4; j++) _mm_storeu_ps(m + 4 * j, a[j]);
#else
    float m[16];
    for (int j = 0; j < 16; j++) m[j] = -INFINITY;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
#endif
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    for (int j = 0; j < 16; j++) r = m[j] > r ? m[j] : r;
    return r;
}

int32_t fg_argmax(const float *x, int32_t n) {
    float m = max_of(x, n); /* then the first index holding it */
    if (!(m > -INFINITY)) return -1;
    int32_t i = 0;
#ifdef FG_HAVE_X86
    const __m128 mv = _mm_set1_ps(m);
    for (; i + 16 <= n; i += 16) { /* skip blocks of 16 without it */
        __m128 e = _mm_cmpeq_ps(_mm_loadu_ps(x + i), mv);
        for (int j = 4; j < 16; j += 4) e = _mm_or_ps(e, _mm_cmpeq_ps(_mm_loadu_ps(x + i + j), mv));
        if (_mm_movemask_ps(e)) break;
    }
#endif
    for (; i < n; i++)
        if (x[i] == m) return i;
    return -1;
}

/* a ranks below b: smaller logit, or same logit and larger id */
static inline int cand_below(fg_cand a, fg_cand b) { return a.logit < b.logit || (a.logit == b.logit && a.id > b.id); }

static void heap_sift_down(fg_cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && cand_below(h[l], h[m])) m = l;
        if (r < n && cand_below(h[r], h[m])) m = r;
        if (m == i) return;
        fg_cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void heap_sift_up(fg_cand *h, int32_t i) {
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!cand_below(h[i], h[p])) return;
        fg_cand t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

static int cand_cmp(const void *pa, const void *pb) {
    fg_cand a = *(const fg_cand *)pa, b = *(const fg_cand *)pb;
    return cand_below(b, a) ? -1 : (cand_below(a, b) ? 1 : 0);
}

void fg_sort_cands(fg_cand *c, int32_t n) {
    if (n <= 64) { /* insertion sort: the usual top-k sizes */
        for (int32_t i = 1; i < n; i++) {
            fg_cand x = c[i];
            int32_t j = i - 1;
            while (j >= 0 && cand_below(c[j], x)) {
                c[j + 1] = c[j];
                j--;
            }
            c[j + 1] = x;
        }
    } else {
        qsort(c, (size_t)n, sizeof(fg_cand), cand_cmp);
    }
}

int32_t fg_top_k(const float *x, int32_t n, int32_t k, fg_cand *out) {
    /* out[0..m) is a min-heap of the best m seen so far: out[0] is the weakest, replaced by anything better.
     * Once the heap is full, whole blocks whose maximum does not beat the weakest are skipped (most of them). */
    enum { BLOCK = 64 };
    int32_t m = 0;
    float weakest = -INFINITY; /* out[0].logit once m == k */
    if (k <= 0) return 0;
    for (int32_t b = 0; b < n; b += BLOCK) {
        int32_t e = b + BLOCK < n ? b + BLOCK : n;
        if (m == k && !(max_of(x + b, e - b) > weakest)) continue;
        for (int32_t i = b; i < e; i++) {
            float v = x[i];
            if (!(v > -INFINITY)) continue; /* -inf and NaN never compete */
            if (m < k) {
                out[m].logit = v;
                out[m].id = i;
                heap_sift_up(out, m);
                m++;
                if (m == k) weakest = out[0].logit;
            } else if (v > weakest) { /* ties keep the earlier (smaller) id */
                out[0].logit = v;
                out[0].id = i;
                heap_sift_down(out, m, 0);
                weakest = out[0].logit;
            }
        }
    }
    fg_sort_cands(out, m);
    return m;
}

/* ---- bias and penalties, undone after the draw ---- */

static inline void change(fg_cand *undo, int32_t *nu, float *logits, int32_t id, float v) {
    undo[*nu].id = id;
    undo[*nu].logit = logits[id];
    (*nu)++;
    logits[id] = v;
}

/* Apply bias and penalties in place; the original values go to s->undo[0..*nu). 0, or NO_MEMORY. */
static int adjust(fg_sampler *s, float *logits, int32_t n_vocab, int32_t *nu) {
    *nu = 0;
    int use_rep = s->repeat_penalty != 1.0f && s->repeat_last_n != 0 && s->n_hist > 0;
    int use_fp = (s->frequency_penalty != 0.0f || s->presence_penalty != 0.0f) && s->n_seen > 0;
    int64_t h0 = 0;
    if (use_rep && s->repeat_last_n > 0 && s->n_hist > s->repeat_last_n) h0 = s->n_hist - s->repeat_last_n;
    int64_t need = (int64_t)s->n_bias + (use_rep ? s->n_hist - h0 : 0) + (use_fp ? s->n_seen : 0);
    if (need == 0) return 0;
    if (grow32((void **)&s->undo, &s->cap_undo, need, sizeof(fg_cand))) return FG_SAMPLE_NO_MEMORY;
    fg_cand *undo = s->undo;

    for (int32_t j = 0; j < s->n_bias; j++) {
        int32_t id = s->bias_ids[j];
        if (id < n_vocab) change(undo, nu, logits, id, logits[id] + s->bias_vals[j]);
    }
    if (use_rep) {
        /* every accepted id is < cap_mark, and mark is all zero between calls */
        float rp = s->repeat_penalty;
        for (int64_t i = h0; i < s->n_hist; i++) {
            int32_t id = s->hist[i];
            if (id >= n_vocab || s->mark[id]) continue;
            s->mark[id] = 1;
            float l = logits[id];
            change(undo, nu, logits, id, l > 0 ? l / rp : l * rp);
        }
        for (int64_t i = h0; i < s->n_hist; i++) s->mark[s->hist[i]] = 0;
    }
    if (use_fp) {
        for (int32_t j = 0; j < s->n_seen; j++) {
            int32_t id = s->seen[j];
            if (id >= n_vocab) continue;
            int32_t c = s->counts[id];
            change(undo, nu, logits, id, logits[id] - (float)c * s->frequency_penalty - s->presence_penalty);
        }
    }
    return 0;
}

static void restore(fg_sampler *s, float *logits, int32_t nu) {
    for (int32_t j = nu - 1; j >= 0; j--) logits[s->undo[j].id] = s->undo[j].logit;
}

/* ---- the draw ---- */

/* index into c[0..m) (sorted, c[0] the largest) drawn with weights exp((logit - max) / temp) */
static int32_t draw(fg_sampler *s, const fg_cand *c, int32_t m, float temp) {
    float mx = c[0].logit, k = 1.0f / temp;
    double sum = 0.0;
    for (int32_t i = 0; i < m; i++) sum += exp_nonpos((c[i].logit - mx) * k);
    double u = fg_rng_uniform(&s->rng) * sum, acc = 0.0;
    for (int32_t i = 0; i < m; i++) {
        acc += exp_nonpos((c[i].logit - mx) * k);
        if (u < acc) return i;
    }
    return m - 1;
}

/* Index into logits (n,) of the chosen token. n_vocab >= n is the vocabulary logits stand for (n < n_vocab: the
 * allowed tokens gathered from it): top-k is on or off as it would be over n_vocab, so the draw walks the
 * candidates in the same order (sorted, or id order) and a seed gives the same token as the unmasked sampler run
 * on the vocabulary with the other tokens at -inf. */
static int32_t choose(fg_sampler *s, const float *logits, int32_t n, int32_t n_vocab) {
    /* greedy also when 1/temperature overflows (a tiny temperature is greedy in the limit) */
    if (s->temperature <= 0.0f || !(1.0f / s->temperature < INFINITY) || s->top_k == 1) {
        int32_t a = fg_argmax(logits, n);
        return a < 0 ? FG_SAMPLE_NO_CANDIDATE : a;
    }
    const int use_top_k = s->top_k > 0 && s->top_k < n_vocab;
    const int32_t k = use_top_k && s->top_k < n ? s->top_k : n; /* the best k of n: all of them past n */
    const float temp = s->temperature;
    int32_t m;
    float mx;
    double z; /* softmax normalizer at temperature 1 over the candidates top-p sees */

    if (use_top_k) {
        if (grow32((void **)&s->cand, &s->cap_cand, k, sizeof(fg_cand))) return FG_SAMPLE_NO_MEMORY;
        m = fg_top_k(logits, n, k, s->cand);
        if (m == 0) return FG_SAMPLE_NO_CANDIDATE;
        mx = s->cand[0].logit;
        if (mx == INFINITY) return s->cand[0].id; /* a +inf logit wins outright (exp would give NaN) */
        z = 0.0;
        for (int32_t i = 0; i < m; i++) z += exp_nonpos(s->cand[i].logit - mx);
    } else {
        mx = max_of(logits, n);
        if (!(mx > -INFINITY)) return FG_SAMPLE_NO_CANDIDATE;
        if (mx == INFINITY) return fg_argmax(logits, n);
        if (grow32((void **)&s->w, &s->cap_w, n, sizeof(float))) return FG_SAMPLE_NO_MEMORY;
        float *w = s->w; /* (n,) weights */
        if (s->top_p >= 1.0f && s->min_p <= 0.0f) {
            /* no truncation: draw straight from the whole vocabulary, no sort */
            exp_shifted(logits, n, mx, 1.0f / temp, w);
            return draw_weights(&s->rng, w, n, sum_of(w, n));
        }
        /* top-p's normalizer covers the whole vocabulary. Both top-p and min-p keep a prefix of the sorted
         * tokens, so only tokens above the min-p threshold need sorting, and for top-p only the tokens above a
         * threshold whose mass already reaches top_p: try mx-8, mx-16, ... (usually the first suffices). */
        if (grow32((void **)&s->cand, &s->cap_cand, n, sizeof(fg_cand))) return FG_SAMPLE_NO_MEMORY;
        float floor_ = s->min_p > 0.0f ? mx + logf(s->min_p) : -INFINITY;
        exp_shifted(logits, n, mx, 1.0f, w);
        z = sum_of(w, n);
        for (float d = 8.0f;; d *= 2.0f) {
            float t = d > 100.0f ? floor_ : (mx - d > floor_ ? mx - d : floor_);
            double mass = 0.0;
            m = 0;
            for (int32_t i = 0; i < n; i++) {
                float v = logits[i];
                if (v >= t && v > -INFINITY) {
                    s->cand[m].logit = v;
                    s->cand[m].id = i;
                    m++;
                    mass += w[i];
                }
            }
            if (t <= floor_ || mass >= (double)s->top_p * z) break;
        }
        fg_sort_cands(s->cand, m);
    }
    fg_cand *c = s->cand;

    if (s->top_p < 1.0f) { /* smallest prefix whose probability reaches top_p */
        double cum = 0.0;
        for (int32_t i = 0; i < m; i++) {
            cum += exp_nonpos(c[i].logit - mx) / z;
            if (cum >= s->top_p) {
                m = i + 1;
                break;
            }
        }
    }
    if (s->min_p > 0.0f) { /* p_i >= min_p * p_max */
        float thr = mx + logf(s->min_p);
        int32_t keep = 1;
        while (keep < m && c[keep].logit >= thr) keep++;
        m = keep;
    }
    return c[draw(s, c, m, temp)].id;
}

/* ---- the allowed-token mask ---- */

static inline int32_t popcount32(uint32_t x) {
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0F0F0F0Fu;
    return (int32_t)((x * 0x01010101u) >> 24);
}

/* index of the lowest set bit of x != 0 (de Bruijn: no intrinsics, the same on every compiler) */
static inline int ctz32(uint32_t x) {
    static const uint8_t pos[32] = {0,  1,  28, 2,  29, 14, 24, 3, 30, 22, 20, 15, 25, 17, 4,  8,
                                    31, 27, 13, 23, 21, 19, 16, 7, 26, 12, 18, 6,  11, 5,  10, 9};
    return pos[((x & (0u - x)) * 0x077CB531u) >> 27];
}

/* word wi of allow, without the bits of ids >= n (the last word may be partly past the vocabulary) */
static inline uint32_t allow_word(const uint32_t *allow, int32_t wi, int32_t n) {
    int32_t left = n - wi * 32;
    return left >= 32 ? allow[wi] : allow[wi] & ((1u << left) - 1u);
}

static int32_t count_allowed(const uint32_t *allow, int32_t n) {
    int32_t nw = (int32_t)(((int64_t)n + 31) / 32), c = 0;
    for (int32_t wi = 0; wi + 1 < nw; wi++) c += popcount32(allow[wi]);
    return c + popcount32(allow_word(allow, nw - 1, n));
}

/* Dense mask: set the banned entries (n - n_allowed of them) to -inf in place, recorded in s->undo after the
 * *nu entries already there. 0, or NO_MEMORY. */
static int ban_in_place(fg_sampler *s, float *logits, int32_t n, const uint32_t *allow, int32_t n_allowed,
                        int32_t *nu) {
    if (grow32((void **)&s->undo, &s->cap_undo, (int64_t)*nu + (n - n_allowed), sizeof(fg_cand)))
        return FG_SAMPLE_NO_MEMORY;
    int32_t nw = (int32_t)(((int64_t)n + 31) / 32);
    for (int32_t wi = 0; wi < nw; wi++) {
        uint32_t z = ~allow[wi];
        if (wi == nw - 1 && n % 32) z &= (1u << (n % 32)) - 1u; /* not the ids past the vocabulary */
        for (; z; z &= z - 1) change(s->undo, nu, logits, wi * 32 + ctz32(z), -INFINITY);
    }
    return 0;
}

/* Sparse mask: the allowed entries of logits into s->kept[0..n_allowed), their ids (ascending) into s->kept_ids.
 * Zero words are skipped, full words copied whole. 0, or NO_MEMORY. */
static int gather_allowed(fg_sampler *s, const float *logits, int32_t n, const uint32_t *allow, int32_t n_allowed) {
    if (grow32((void **)&s->kept, &s->cap_kept, n_allowed, sizeof(float)) ||
        grow32((void **)&s->kept_ids, &s->cap_kept_ids, n_allowed, sizeof(int32_t)))
        return FG_SAMPLE_NO_MEMORY;
    float *kept = s->kept;
    int32_t *ids = s->kept_ids, m = 0, nw = (int32_t)(((int64_t)n + 31) / 32);
    for (int32_t wi = 0; wi < nw; wi++) {
        uint32_t w = allow_word(allow, wi, n);
        int32_t base = wi * 32;
        if (w == 0xFFFFFFFFu) {
            for (int32_t j = 0; j < 32; j++) {
                kept[m + j] = logits[base + j];
                ids[m + j] = base + j;
            }
            m += 32;
        } else {
            for (; w; w &= w - 1) {
                int32_t id = base + ctz32(w);
                kept[m] = logits[id];
                ids[m++] = id;
            }
        }
    }
    return 0;
}

int32_t fg_sampler_sample(fg_sampler *s, float *logits, int32_t n_vocab) {
    return fg_sampler_sample_masked(s, logits, n_vocab, NULL);
}

int32_t fg_sampler_sample_masked(fg_sampler *s, float *logits, int32_t n_vocab, const uint32_t *allow) {
    const int32_t none = allow ? FG_SAMPLE_NO_ALLOWED : FG_SAMPLE_NO_CANDIDATE;
    if (n_vocab <= 0) return none;
    int32_t n_allowed = allow ? count_allowed(allow, n_vocab) : n_vocab;
    if (n_allowed == 0) return none;
    int32_t nu = 0, tok;
    if (adjust(s, logits, n_vocab, &nu)) {
        tok = FG_SAMPLE_NO_MEMORY;
    } else if (n_allowed == n_vocab) { /* no mask, or one that allows everything */
        tok = choose(s, logits, n_vocab, n_vocab);
    } else if (n_vocab - n_allowed <= n_vocab / 8) {
        /* few banned: -inf in place (undone below with bias and penalties); the pipeline sees the whole vocabulary */
        tok = ban_in_place(s, logits, n_vocab, allow, n_allowed, &nu) ? FG_SAMPLE_NO_MEMORY
                                                                        : choose(s, logits, n_vocab, n_vocab);
    } else {
        /* the pipeline runs on the allowed tokens only; their order is id order, so ties resolve as unmasked */
        if (gather_allowed(s, logits, n_vocab, allow, n_allowed)) {
            tok = FG_SAMPLE_NO_MEMORY;
        } else {
            tok = choose(s, s->kept, n_allowed, n_vocab);
            if (tok >= 0) tok = s->kept_ids[tok];
        }
    }
    restore(s, logits, nu);
    return tok == FG_SAMPLE_NO_CANDIDATE ? none : tok;
}

int fg_sampler_apply(fg_sampler *s, float *logits, int32_t n_vocab) {
    int32_t nu = 0;
    return adjust(s, logits, n_vocab, &nu);
}
