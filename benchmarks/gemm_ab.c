/* A/B of a K-quant gemm (Q4_K, Q5_K or Q6_K weights against Q8_K activations, random blocks) between two builds of
 * the kernels, dlopen'ed into one process and run alternately, each for `secs` of this thread's CPU time per round
 * (CLOCK_THREAD_CPUTIME_ID: on a shared, busy VM the wall clock counts other processes' turns); prints GMAC/s per
 * round, the median and best of each build, and whether both give the same floats. Build each side's kernels as
 * gemv_ab.c says (libbase.so, libnew.so in the current directory), then:
 *   gcc -O2 -Icsrc benchmarks/gemm_ab.c -ldl -o gab
 *   ./gab TYPE ISA ROWS N M ROUNDS SECS   (TYPE 12 = Q4_K, 13 = Q5_K, 14 = Q6_K; ISA 1 = AVX2, 2 = AVX-512 + VNNI;
 *                                         N a multiple of 256, ROUNDS <= 64) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fg_kernels.h"
typedef const fg_type_kernels *(*kof_fn)(int, int);
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    if (argc < 8) { fprintf(stderr, "usage: %s TYPE ISA ROWS N M ROUNDS SECS\n", argv[0]); return 2; }
    int type = atoi(argv[1]), isa = atoi(argv[2]); long rows = atol(argv[3]), n = atol(argv[4]), m = atol(argv[5]);
    int rounds = atoi(argv[6]) > 64 ? 64 : atoi(argv[6]); double secs = atof(argv[7]);
    void *h[2] = {dlopen("./libbase.so", RTLD_NOW | RTLD_LOCAL), dlopen("./libnew.so", RTLD_NOW | RTLD_LOCAL)};
    if (!h[0] || !h[1]) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    size_t bs = type == FG_TYPE_Q6_K ? 210 : type == FG_TYPE_Q4_K ? 144 : 176;
    size_t rs = (size_t)(n / 256) * bs, xs = (size_t)(n / 256) * 292;
    unsigned char *w = aligned_alloc(64, (rs * rows + 63) / 64 * 64);
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < rs * rows; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; w[i] = (unsigned char)s; }
    for (size_t b = 0; b < rs * rows; b += bs) {
        if (type == FG_TYPE_Q6_K) { w[b + 208] = 0x66; w[b + 209] = 0x2e; }
        else { w[b] = 0x66; w[b + 1] = 0x2e; w[b + 2] = 0x66; w[b + 3] = 0xae; }
    }
    float *x = malloc(n * m * 4), *y[2] = {malloc(rows * m * 4), malloc(rows * m * 4)};
    for (long i = 0; i < n * m; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; x[i] = (float)((int)(s % 2001) - 1000) / 500.f; }
    unsigned char *xq = malloc(xs * m);
    kof_fn kof[2];
    for (int v = 0; v < 2; v++) kof[v] = (kof_fn)dlsym(h[v], "fg_kernels_of");
    for (long a = 0; a < m; a++) kof[0](FG_ISA_SCALAR, FG_TYPE_Q8_K)->quantize(x + a * n, xq + a * xs, n);
    for (int v = 0; v < 2; v++) kof[v](isa, type)->gemm(n, w, rs, xq, xs, m, y[v], rows, rows);
    printf("rows %ld x %ld, m %ld, same result: %s\n", rows, n, m, memcmp(y[0], y[1], rows * m * 4) ? "NO" : "yes");
    double best[2] = {0, 0}, all[2][64];
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < 2; v++) {
            const fg_type_kernels *k = kof[v](isa, type);
            int it = 0; double t0 = now(), t;
            do { k->gemm(n, w, rs, xq, xs, m, y[v], rows, rows); it++; } while ((t = now() - t0) < secs);
            double g = (double)rows * n * m * it / t / 1e9;
            if (g > best[v]) best[v] = g;
            all[v][r] = g;
            printf("round %d %s %.1f GMAC/s\n", r, v ? "new " : "base", g);
            fflush(stdout);
        }
    for (int v = 0; v < 2; v++) for (int a = 0; a < rounds; a++) for (int b = a + 1; b < rounds; b++) if (all[v][b] < all[v][a]) { double z = all[v][a]; all[v][a] = all[v][b]; all[v][b] = z; }
    printf("median base %.1f new %.1f (%.3fx)\n", all[0][rounds / 2], all[1][rounds / 2], all[1][rounds / 2] / all[0][rounds / 2]);
    printf("best base %.1f new %.1f (%.3fx)\n", best[0], best[1], best[1] / best[0]);
    return 0;
}
