/* A/B of a K-quant gemm (Q4_K, Q5_K or Q6_K weights against Q8_K activations, random blocks) between two builds of
 * the kernels, dlopen'ed into one process and run alternately, each for `secs` of this thread's CPU time per round
 * (CLOCK_THREAD_CPUTIME_ID: on a shared, busy VM the wall clock counts other processes' turns); prints GMAC/s per
 * round, the median and best of each build, and whether both give the same floats. Build each side's kernels as
 * gemv_ab.c says (libbase.so, libnew.so in the current directory), then:
 *   gcc -O2 -Icsrc -Ibenchmarks benchmarks/gemm_ab.c -ldl -o gab
 *   ./gab TYPE ISA ROWS N M ROUNDS SECS   (TYPE 12 = Q4_K, 13 = Q5_K, 14 = Q6_K; ISA 1 = AVX2, 2 = AVX-512 + VNNI;
 *                                         N a multiple of 256, ROUNDS <= 64) */
#include "kbench.h"
int main(int argc, char **argv) {
    if (argc < 8) { fprintf(stderr, "usage: %s TYPE ISA ROWS N M ROUNDS SECS\n", argv[0]); return 2; }
    int type = atoi(argv[1]), isa = atoi(argv[2]); long rows = atol(argv[3]), n = atol(argv[4]), m = atol(argv[5]);
    int rounds = atoi(argv[6]) > 64 ? 64 : atoi(argv[6]); double secs = atof(argv[7]);
    const kb_lib lib[2] = {kb_open("./libbase.so"), kb_open("./libnew.so")};
    const int xtype = lib[0].vec_dot_type(type);
    const size_t rs = kb_row_size(&lib[0], type, n), xs = kb_row_size(&lib[0], xtype, n);
    if (!rs || !xs) { fprintf(stderr, "type %d: unknown, or N not a multiple of its block\n", type); return 2; }
    uint64_t s = 88172645463325252ull;
    unsigned char *w = kb_random_blocks(&lib[0], type, rs * rows, &s), *xq = malloc(xs * m);
    for (long a = 0; a < m; a++) { /* m activation rows, xs bytes apart */
        void *x1 = kb_random_activation(&lib[0], type, n, &s);
        memcpy(xq + a * xs, x1, xs);
        free(x1);
    }
    float *y[2] = {malloc(rows * m * 4), malloc(rows * m * 4)};
    for (int v = 0; v < 2; v++) lib[v].kernels_of(isa, type)->gemm(n, w, rs, xq, xs, m, y[v], rows, rows);
    printf("rows %ld x %ld, m %ld, same result: %s\n", rows, n, m, memcmp(y[0], y[1], rows * m * 4) ? "NO" : "yes");
    double best[2] = {0, 0}, all[2][64];
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < 2; v++) {
            const fg_type_kernels *k = lib[v].kernels_of(isa, type);
            int it = 0; double t0 = kb_now(CLOCK_THREAD_CPUTIME_ID), t;
            do {
                k->gemm(n, w, rs, xq, xs, m, y[v], rows, rows);
                it++;
            } while ((t = kb_now(CLOCK_THREAD_CPUTIME_ID) - t0) < secs);
            double g = (double)rows * n * m * it / t / 1e9;
            if (g > best[v]) best[v] = g;
            all[v][r] = g;
            printf("round %d %s %.1f GMAC/s\n", r, v ? "new " : "base", g);
            fflush(stdout);
        }
    for (int v = 0; v < 2; v++) /* sort each build's rounds for the median */
        for (int a = 0; a < rounds; a++)
            for (int b = a + 1; b < rounds; b++)
                if (all[v][b] < all[v][a]) { double z = all[v][a]; all[v][a] = all[v][b]; all[v][b] = z; }
    const double med0 = all[0][rounds / 2], med1 = all[1][rounds / 2];
    printf("median base %.1f new %.1f (%.3fx)\n", med0, med1, med1 / med0);
    printf("best base %.1f new %.1f (%.3fx)\n", best[0], best[1], best[1] / best[0]);
    return 0;
}
