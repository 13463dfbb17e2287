/* fg_sampler_sample_masked against fg_sampler_sample on logits whose masked entries are -inf (same seed, same
 * token), with bias and penalties on, over sparse, half, dense and full masks, odd vocabulary sizes, +inf and NaN
 * logits. The mask and logits are allocated at exactly their documented sizes (AddressSanitizer catches a read past
 * the last mask word); the caller's logits must come back bit for bit. Built and run by .ci/kernels.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_sample.h"

static int passed, failed;
static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

static void check(int ok, const char *what, int n, int trial) {
    if (ok) {
        passed++;
    } else if (++failed < 20) {
        printf("FAIL %s n=%d trial=%d\n", what, n, trial);
    }
}

static void setup(fg_sampler *s, int trial, int n) {
    static const float temps[] = {0.0f, 1.0f, 0.7f};
    static const int32_t top_ks[] = {0, 5, 40, 100000};
    fg_sampler_init(s, (uint64_t)trial);
    s->temperature = temps[trial % 3];
    s->top_k = top_ks[(trial / 3) % 4];
    s->top_p = (trial / 12) % 2 ? 0.9f : 1.0f;
    s->min_p = (trial / 24) % 2 ? 0.05f : 0.0f;
    s->repeat_penalty = 1.1f;
    s->repeat_last_n = 8;
    int32_t ids[2] = {3 % n, 5 % n};
    float vals[2] = {2.0f, -1.0f};
    fg_sampler_set_bias(s, ids, vals, n > 5 ? 2 : 0);
    fg_sampler_accept(s, 1 % n, 1);
}

int main(void) {
    static const int sizes[] = {1, 7, 31, 32, 33, 1000, 49157};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        int n = sizes[si], nw = (n + 31) / 32;
        float *x = malloc(sizeof(float) * (size_t)n), *x0 = malloc(sizeof(float) * (size_t)n);
        float *y = malloc(sizeof(float) * (size_t)n);
        uint32_t *allow = malloc(sizeof(uint32_t) * (size_t)nw);
        for (int trial = 0; trial < 400; trial++) {
            for (int i = 0; i < n; i++) x[i] = (float)((int)(rnd() % 2000) - 1000) / 200.0f;
            if (trial % 7 == 0) x[rnd() % n] = NAN;
            if (trial % 11 == 0) x[rnd() % n] = INFINITY;
            int density = (trial / 48) % 4; /* sparse, half, dense, all */
            for (int w = 0; w < nw; w++) {
                uint32_t v = rnd() ^ (rnd() << 16), sparse = v & rnd() & rnd() & rnd();
                allow[w] = density == 0 ? sparse : density == 1 ? v : density == 2 ? ~sparse : ~0u;
            }
            allow[0] |= 1u;
            memcpy(x0, x, sizeof(float) * (size_t)n);
            for (int i = 0; i < n; i++) y[i] = (allow[i / 32] >> (i % 32) & 1) ? x[i] : -INFINITY;
            fg_sampler a, b;
            setup(&a, trial, n);
            setup(&b, trial, n);
            for (int k = 0; k < 4; k++) {
                int32_t ta = fg_sampler_sample_masked(&a, x, n, allow), tb = fg_sampler_sample(&b, y, n);
                if (tb == FG_SAMPLE_NO_CANDIDATE) {
                    check(ta == FG_SAMPLE_NO_ALLOWED, "no allowed token", n, trial);
                } else {
                    check(ta == tb && ta >= 0 && (allow[ta / 32] >> (ta % 32) & 1), "same token", n, trial);
                    fg_sampler_accept(&a, ta, 1);
                    fg_sampler_accept(&b, tb, 1);
                }
                check(memcmp(x, x0, sizeof(float) * (size_t)n) == 0, "logits restored", n, trial);
            }
            fg_sampler_free(&a);
            fg_sampler_free(&b);
        }
        fg_sampler s;
        fg_sampler_init(&s, 1);
        memset(allow, 0, sizeof(uint32_t) * (size_t)nw);
        check(fg_sampler_sample_masked(&s, x, n, allow) == FG_SAMPLE_NO_ALLOWED, "empty mask", n, 0);
        memset(allow, 0xFF, sizeof(uint32_t) * (size_t)nw);
        for (int i = 0; i < n; i++) x[i] = (float)((int)(rnd() % 2000) - 1000) / 200.0f; /* no NaN left over */
        fg_sampler_free(&s);
        fg_sampler_init(&s, 2); /* every bit set, including those past n: exactly the unmasked sampler */
        int32_t t1 = fg_sampler_sample_masked(&s, x, n, allow);
        fg_sampler_free(&s);
        fg_sampler_init(&s, 2);
        check(t1 == fg_sampler_sample(&s, x, n), "full mask", n, 0);
        fg_sampler_free(&s);
        free(x);
        free(x0);
        free(y);
        free(allow);
    }
    printf("kernels: %d passed, %d failed\n", passed, failed); /* the summary line .ci/kernels.sh demands */
    return failed != 0;
}
