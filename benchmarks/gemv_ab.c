/* A/B of one-activation GEMVs (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL or MXFP4 weights, random blocks, beyond cache)
 * between two builds of the kernels, dlopen'ed into one process and run alternately, each for `secs` seconds per
 * round; prints GB/s of weights read and whether both builds give the same floats. Build each side's csrc/ (kernel
 * files as .ci/kernels.sh lists them) as
 *   gcc -std=gnu11 -O3 -ffp-contract=off -fPIC -shared -pthread -Wl,-Bsymbolic -I. <kernel files> -lm -o libX.so
 * into ./libbase.so and ./libnew.so, then: gcc -O2 -Icsrc -Ibenchmarks benchmarks/gemv_ab.c -ldl -o ab
 *   ./ab TYPE ISA N MB ROUNDS SECS   (TYPE 2 = Q4_0, 3 = Q4_1, 6 = Q5_0, 7 = Q5_1, 8 = Q8_0, 20 = IQ4_NL,
 *                                     39 = MXFP4; ISA 1 = AVX2, 2 = AVX-512 + VNNI) */
#include "kbench.h"
int main(int argc, char **argv) {
    if (argc < 7) { fprintf(stderr, "usage: %s TYPE ISA N MB ROUNDS SECS\n", argv[0]); return 2; }
    int type = atoi(argv[1]), isa = atoi(argv[2]); long n = atol(argv[3]); double mb = atof(argv[4]);
    int rounds = atoi(argv[5]); double secs = atof(argv[6]);
    const kb_lib lib[2] = {kb_open("./libbase.so"), kb_open("./libnew.so")};
    const size_t rs = kb_row_size(&lib[0], type, n);
    if (!rs) { fprintf(stderr, "type %d: unknown, or N not a multiple of its block\n", type); return 2; }
    long rows = (long)(mb * 1e6 / rs);
    uint64_t s = 88172645463325252ull;
    unsigned char *w = kb_random_blocks(&lib[0], type, rs * rows, &s);
    void *xq = kb_random_activation(&lib[0], type, n, &s);
    float *y[2] = {malloc(rows * 4), malloc(rows * 4)};
    for (int v = 0; v < 2; v++) lib[v].kernels_of(isa, type)->gemv(n, w, rs, xq, y[v], rows);
    printf("rows %ld x %ld (%.0f MB), same result: %s\n", rows, n, rs * rows / 1e6,
           memcmp(y[0], y[1], rows * 4) ? "NO" : "yes");
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < 2; v++) {
            const fg_type_kernels *k = lib[v].kernels_of(isa, type);
            int it = 0; double t0 = kb_now(CLOCK_MONOTONIC), t;
            do { k->gemv(n, w, rs, xq, y[v], rows); it++; } while ((t = kb_now(CLOCK_MONOTONIC) - t0) < secs);
            printf("round %d %s %.2f GB/s\n", r, v ? "new " : "base", rs * rows * (double)it / t / 1e9);
            fflush(stdout);
        }
    return 0;
}
