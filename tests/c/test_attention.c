/* fg_attention_tile against fg_attention_group query by query (bit for bit: a row's attention must not depend on
 * whether it is computed alone, in a tile, or beside other sequences) and against a float64 reference, on every
 * available ISA: odd head counts and head sizes, full-length caches and sliding windows over a ring, with and
 * without soft-capping, with attention sinks (gpt-oss), tiles of consecutive and of scattered positions. The scores scratch is allocated at exactly
 * the documented size (AddressSanitizer catches any overrun). Also fg_gelu (BERT's FFN; AVX2 has its own loop) on
 * every ISA against float64 and the scalar ISA's, at odd lengths (a SIMD body and a scalar tail). Built and run by
 * .ci/kernels.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_kernels.h"
#include "fg_ops.h"

static int passed, failed;
static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / (double)(1 << 23)) - 1.0f;
}

static float f16_to_f32(uint16_t h) { /* exact, for the reference */
    int e = (h >> 10) & 31, m = h & 1023;
    float x = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024), e - 25);
    return h >> 15 ? -x : x;
}

/* float64 attention of one query (n_rep heads) over keys lo .. lo + n - 1 (slot p mod ring); sinks (n_rep,) or
 * NULL: one more logit per head in the softmax's denominator */
static void reference(double *out, const float *q, int n_rep, int hd, const uint16_t *k, const uint16_t *v,
                      int64_t stride, int64_t lo, int64_t n, int64_t ring, float scale, float softcap,
                      const float *sinks) {
    double *p = malloc(sizeof(double) * (size_t)n);
    for (int r = 0; r < n_rep; r++) {
        double mx = -INFINITY, sum = 0.0;
        for (int64_t t = 0; t < n; t++) {
            const uint16_t *kt = k + ((lo + t) % ring) * stride;
            double s = 0.0;
            for (int d = 0; d < hd; d++) s += (double)q[r * hd + d] * f16_to_f32(kt[d]);
            s *= scale;
            if (softcap > 0.0f) s = softcap * tanh(s / softcap);
            p[t] = s;
            mx = s > mx ? s : mx;
        }
        if (sinks && sinks[r] > mx) mx = sinks[r];
        for (int64_t t = 0; t < n; t++) sum += p[t] = exp(p[t] - mx);
        if (sinks) sum += exp(sinks[r] - mx);
        for (int d = 0; d < hd; d++) {
            double o = 0.0;
            for (int64_t t = 0; t < n; t++) o += p[t] / sum * f16_to_f32(v[((lo + t) % ring) * stride + d]);
            out[r * hd + d] = o;
        }
    }
    free(p);
}

/* nq queries at positions pos[], each seeing at most `window` keys (0: all up to its own position); the last KV
 * group of `groups`: rows kv_stride = groups * hd apart, offset g * hd (groups 1: the rows adjacent, as the engine's
 * per-group caches) */
static void check_case(const char *isa, int groups, int n_rep, int hd, int nq, const int64_t *pos, int64_t window,
                       float softcap, const float *sinks) {
    const int g = groups - 1;
    int64_t stride = (int64_t)groups * hd, ring = 0, lo[FG_ATT_TILE], n[FG_ATT_TILE], total = 0;
    for (int i = 0; i < nq; i++) {
        n[i] = window > 0 && pos[i] + 1 > window ? window : pos[i] + 1;
        lo[i] = pos[i] + 1 - n[i];
        ring = pos[i] + 1 > ring ? pos[i] + 1 : ring;
        total += n[i];
    }
    if (window > 0 && ring > window + 7) ring = window + 7; /* a ring that wraps (room for the window + 7 rows) */
    float scale = 1.0f / sqrtf((float)hd);
    int64_t qd = (int64_t)n_rep * hd + 8; /* query rows further apart than their heads, as in a batch */
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)(ring * stride)), *v = malloc(sizeof(uint16_t) * (size_t)(ring * stride));
    float *row = malloc(sizeof(float) * (size_t)stride), *q = malloc(sizeof(float) * (size_t)(nq * qd));
    float *out = malloc(sizeof(float) * (size_t)(nq * qd)), *one = malloc(sizeof(float) * (size_t)(n_rep * hd));
    float *scores = malloc(sizeof(float) * (size_t)(n_rep * total));
    double *ref = malloc(sizeof(double) * (size_t)(n_rep * hd));
    for (int64_t s = 0; s < ring; s++) {
        for (int64_t d = 0; d < stride; d++) row[d] = 2.0f * frand();
        fg_f32_to_f16_row(k + s * stride, row, stride);
        for (int64_t d = 0; d < stride; d++) row[d] = frand();
        fg_f32_to_f16_row(v + s * stride, row, stride);
    }
    for (int64_t x = 0; x < nq * qd; x++) q[x] = 2.0f * frand();
    fg_attention_tile(out, qd, q, qd, nq, n_rep, hd, k + g * hd, v + g * hd, stride, lo, n, ring, scale, softcap,
                      sinks, scores);
    int ok_bits = 1, ok_ref = 1;
    for (int i = 0; i < nq; i++) {
        float *sc1 = malloc(sizeof(float) * (size_t)(n_rep * n[i]));
        fg_attention_group(one, q + i * qd, n_rep, hd, k + g * hd, v + g * hd, stride, n[i], lo[i] % ring, ring, scale,
                           softcap, sinks, sc1);
        free(sc1);
        if (memcmp(one, out + i * qd, sizeof(float) * (size_t)(n_rep * hd)) != 0) ok_bits = 0;
        reference(ref, q + i * qd, n_rep, hd, k + g * hd, v + g * hd, stride, lo[i], n[i], ring, scale, softcap,
                  sinks);
        for (int x = 0; x < n_rep * hd; x++)
            if (fabs(out[i * qd + x] - ref[x]) > 1e-4 * (1.0 + fabs(ref[x]))) ok_ref = 0;
    }
    passed += ok_bits + ok_ref;
    failed += !ok_bits + !ok_ref;
    if (!ok_bits || !ok_ref)
        printf("FAIL %s groups=%d n_rep=%d hd=%d nq=%d pos0=%ld window=%ld softcap=%g sinks=%d: %s\n", isa, groups,
               n_rep, hd, nq, (long)pos[0], (long)window, softcap, sinks != NULL,
               !ok_bits ? "tile != one by one" : "off the float64 reference");
    free(k), free(v), free(row), free(q), free(out), free(one), free(scores), free(ref);
}

/* fg_gelu (tanh form, x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3))) of n values in [-8, 8) against float64 (4e-6
 * relative, 1e-6 absolute: a few float ulps plus the exp polynomial's) and against the scalar ISA's (the same). */
static void check_gelu(int isa, int64_t n) {
    size_t bytes = sizeof(float) * (size_t)n;
    float *x = malloc(bytes), *y = malloc(bytes), *s = malloc(bytes);
    for (int64_t i = 0; i < n; i++) x[i] = y[i] = s[i] = 8.0f * frand();
    fg_set_isa(isa);
    fg_gelu(y, n);
    fg_set_isa(FG_ISA_SCALAR);
    fg_gelu(s, n);
    fg_set_isa(isa);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], ref = v / (1.0 + exp(-1.5957691216057308 * (v + 0.044715 * v * v * v)));
        ok &= fabs(y[i] - ref) <= 4e-6 * fabs(ref) + 1e-6 && fabs(y[i] - s[i]) <= 4e-6 * fabs(ref) + 1e-6;
    }
    if (ok) passed++;
    else failed++, printf("FAIL gelu %s n=%lld\n", fg_isa_name(isa), (long long)n);
    free(x), free(y), free(s);
}

int main(void) {
    fg_init();
    static const int reps[] = {1, 3, 5}, hds[] = {8, 24, 64, 72, 80, 256};
    static const int64_t starts[] = {0, 5, 37, 130}, scattered[] = {3, 40, 4, 9}, windows[] = {0, 13};
    static const float sink_vals[] = {0.5f, -1.0f, 2.5f, 0.0f, 1.5f}; /* one per head (n_rep <= 5); 2.5 beats most
                                                                       * scores, so the max comes from the sink */
    for (int isa = 0; isa < FG_ISA_COUNT; isa++) {
        if (!fg_isa_available(isa)) continue;
        fg_set_isa(isa);
        int before = failed;
        for (int gr = 1; gr <= 2; gr++) /* groups */
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 6; b++)
                    for (int w = 0; w < 2; w++)
                        for (int cap = 0; cap < 3; cap++) { /* plain, soft-capped, with sinks */
                            float softcap = cap == 1 ? 3.0f : 0.0f;
                            const float *sinks = cap == 2 ? sink_vals : NULL;
                            for (int nq = 1; nq <= FG_ATT_TILE; nq++)
                                for (int s = 0; s < 4; s++) {
                                    int64_t pos[FG_ATT_TILE];
                                    for (int i = 0; i < nq; i++) pos[i] = starts[s] + i;
                                    check_case(fg_isa_name(isa), gr, reps[a], hds[b], nq, pos, windows[w], softcap,
                                               sinks);
                                }
                            check_case(fg_isa_name(isa), gr, reps[a], hds[b], FG_ATT_TILE, scattered, windows[w],
                                       softcap, sinks);
                        }
        /* decode at depth (the kernels' long streams and their prefetches): a lone query and a tile, the n_rep of
         * Llama 3.2 1B (4: every head's output in registers on AVX-512 when hd <= 64), odd key counts, a wrapped
         * sliding window, head sizes 64, 80, 128 */
        static const int64_t deep[] = {1000, 2049}, deep_tile[] = {1997, 1998, 1999, 2000};
        for (int b = 0; b < 3; b++)
            for (int s = 0; s < 2; s++) {
                int hd = b == 0 ? 64 : b == 1 ? 80 : 128;
                check_case(fg_isa_name(isa), 1, 4, hd, 1, deep + s, 0, 0.0f, NULL);
                check_case(fg_isa_name(isa), 2, 4, hd, 1, deep + s, 333, 0.0f, NULL);
                check_case(fg_isa_name(isa), 1, 4, hd, 3 + s, deep_tile, 0, 0.0f, s ? sink_vals : NULL);
            }
        for (int64_t n = 1; n <= 41; n += 4) check_gelu(isa, n);
        check_gelu(isa, 1541);
        printf("%s: %s\n", fg_isa_name(isa), failed == before ? "ok" : "FAILED");
    }
    printf("kernels: %d passed, %d failed\n", passed, failed); /* the summary line .ci/kernels.sh demands */
    return failed != 0;
}
