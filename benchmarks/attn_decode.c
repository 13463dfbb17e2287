/* One decode token's attention at depth N from DRAM, as the engine runs it for a 1B-shaped llama: L layers of G KV
 * groups, each group's (N, hd) F16 K and V rows adjacent (the engine's per-group caches), n_rep query heads per
 * group, fg_attention_group per (layer, group) on one thread (the caches, 2 L G N hd halves, far past L2; on
 * transparent huge pages as the engine allocates them when FG_BENCH_HUGE is set). Prints
 * per round the ms per token and the GB/s of K/V read, and the same bytes read by a plain AVX-512 sum (the read
 * bandwidth this thread gets from the same buffers). Build against a csrc/ (kernel files as .ci/kernels.sh's ATT_SRCS):
 *   gcc -std=gnu11 -O3 -ffp-contract=off -pthread -Icsrc benchmarks/attn_decode.c csrc/fg_ops.c <kernel files> -lm
 *   ./a.out [N=4096] [L=16] [G=8] [n_rep=4] [hd=64] [rounds=9] [flush_mb=1024]   (ISA: FASTGGUF_ISA as the engine,
 * else the best). Before each timed pass flush_mb of other memory is read, so the caches come from DRAM as in the
 * engine, where a token's weights (0.8 GB for the 1B Q4_0) pass through the last-level cache between two tokens'
 * attention (this VM's L3 is 480 MB: without the flush the 134 MB of K/V would partly be read from it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/mman.h>
#endif
#ifdef __x86_64__
#include <immintrin.h>
#endif

#include "fg_kernels.h"
#include "fg_ops.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static double cpu_now(void) { /* this thread's CPU time: on a busy machine, without the time others held the core */
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#ifdef __x86_64__
__attribute__((target("avx512f"))) static float read_all(const uint16_t *p, size_t halves) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (size_t i = 0; i + 64 <= halves; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_castsi512_ps(_mm512_loadu_si512(p + i)));
        a1 = _mm512_add_ps(a1, _mm512_castsi512_ps(_mm512_loadu_si512(p + i + 32)));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}
#endif

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int64_t N = argc > 1 ? atol(argv[1]) : 4096;
    int L = argc > 2 ? atoi(argv[2]) : 16, G = argc > 3 ? atoi(argv[3]) : 8, n_rep = argc > 4 ? atoi(argv[4]) : 4;
    int hd = argc > 5 ? atoi(argv[5]) : 64, rounds = argc > 6 ? atoi(argv[6]) : 9;
    size_t flush = (argc > 7 ? (size_t)atol(argv[7]) : 1024) << 19; /* halves */
    fg_init();
    const char *isa = getenv("FASTGGUF_ISA");
    for (int i = 0; isa && i < FG_ISA_COUNT; i++)
        if (!strcmp(isa, fg_isa_name(i)) && fg_isa_available(i)) fg_set_isa(i);
    size_t per = (size_t)N * hd, halves = (size_t)L * G * per; /* one (layer, group)'s K: (N, hd) */
    uint16_t *k = aligned_alloc(1 << 21, (halves * 2 + (1 << 21) - 1) >> 21 << 21), *v = aligned_alloc(1 << 21, (halves * 2 + (1 << 21) - 1) >> 21 << 21);
#ifdef __linux__
    if (getenv("FG_BENCH_HUGE")) /* FG_BENCH_HUGE=1: the caches on transparent huge pages */
        madvise(k, halves * 2, MADV_HUGEPAGE), madvise(v, halves * 2, MADV_HUGEPAGE);
#endif
    float *q = malloc(sizeof(float) * (size_t)n_rep * hd), *out = malloc(sizeof(float) * (size_t)n_rep * hd);
    float *scores = malloc(sizeof(float) * (size_t)n_rep * N), *row = malloc(sizeof(float) * (size_t)hd);
    uint16_t *fl = flush ? malloc(flush * 2) : NULL;
    if (fl) memset(fl, 1, flush * 2);
    uint64_t s = 88172645463325252ull;
    for (size_t r = 0; r < halves / hd; r++) {
        for (int d = 0; d < hd; d++) s = s * 6364136223846793005ull + 1, row[d] = (float)(s >> 40) / 8388608.0f - 1.0f;
        fg_f32_to_f16_row(k + r * hd, row, hd);
        for (int d = 0; d < hd; d++) row[d] *= 0.5f;
        fg_f32_to_f16_row(v + r * hd, row, hd);
    }
    for (int i = 0; i < n_rep * hd; i++) q[i] = (float)((i * 37) % 101) / 50.f - 1.f;
    double bytes = 2.0 * halves * 2, t_att[64], t_rd[64], c_att[64], c_rd[64], chk = 0;
    rounds = rounds > 64 ? 64 : rounds;
    printf("isa %s, N %ld, L %d, G %d, n_rep %d, hd %d: K+V %.0f MB\n", fg_isa_name(fg_isa_active()), (long)N, L, G,
           n_rep, hd, bytes / 1e6);
    for (int r = 0; r < rounds; r++) {
#ifdef __x86_64__
        if (fl) chk += read_all(fl, flush);
#endif
        double t0 = now(), c0 = cpu_now();
        for (int l = 0; l < L; l++)
            for (int g = 0; g < G; g++) {
                size_t o = ((size_t)l * G + g) * per;
                fg_attention_group(out, q, n_rep, hd, k + o, v + o, hd, N, 0, N, 0.125f, 0.0f, NULL, scores);
                chk += out[0];
            }
        t_att[r] = now() - t0, c_att[r] = cpu_now() - c0;
#ifdef __x86_64__
        if (fl) chk += read_all(fl, flush);
#endif
        double t1 = now(), c1 = cpu_now();
#ifdef __x86_64__
        chk += read_all(k, halves) + read_all(v, halves);
#endif
        t_rd[r] = now() - t1, c_rd[r] = cpu_now() - c1;
    }
    qsort(t_att, rounds, sizeof(double), cmp);
    qsort(t_rd, rounds, sizeof(double), cmp);
    qsort(c_att, rounds, sizeof(double), cmp);
    qsort(c_rd, rounds, sizeof(double), cmp);
    double ta = t_att[rounds / 2], tr = t_rd[rounds / 2];
    printf("attention: median %.2f ms/token (min %.2f) = %.1f GB/s; plain read: %.2f ms = %.1f GB/s; CPU time "
           "medians: attention %.2f ms = %.1f GB/s, plain read %.2f ms = %.1f GB/s (chk %g)\n", ta * 1e3,
           t_att[0] * 1e3, bytes / ta / 1e9, tr * 1e3, bytes / tr / 1e9, c_att[rounds / 2] * 1e3,
           bytes / c_att[rounds / 2] / 1e9, c_rd[rounds / 2] * 1e3, bytes / c_rd[rounds / 2] / 1e9, chk);
    free(fl), free(k), free(v), free(q), free(out), free(scores), free(row);
    return 0;
}
