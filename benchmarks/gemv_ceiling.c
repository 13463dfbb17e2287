/* A GEMV's compute ceiling against its streaming speed (issue 35): one build of the kernels (libX.so, built as
 * gemv_ab.c says), one format and ISA, one thread; y = W x over random blocks of KB kilobytes, best of REPS
 * (default 15) runs. A matrix that fits in L2 (512 KB) gives the kernel's ceiling with the memory out of the way;
 * one of 256 MB gives what it reaches from DRAM. Where the first is near the bandwidth probe's figure, the GEMV is
 * bound by its arithmetic, not by memory.
 *   gcc -O2 -Icsrc -Ibenchmarks benchmarks/gemv_ceiling.c -ldl -o gemv_ceiling
 *   ./gemv_ceiling ./libX.so TYPE ISA N KB      (TYPE 2 = Q4_0, 8 = Q8_0, 12 = Q4_K, 13 = Q5_K, 14 = Q6_K,
 *                                               39 = MXFP4; ISA 1 = AVX2, 2 = AVX-512 + VNNI; N a row's length) */
#include "kbench.h"
int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: %s LIB TYPE ISA N KB\n", argv[0]); return 2; }
    const kb_lib lib = kb_open(argv[1]);
    const int type = atoi(argv[2]), isa = atoi(argv[3]);
    const long n = atol(argv[4]), kb = atol(argv[5]);
    const size_t rs = kb_row_size(&lib, type, n); /* bytes per row, from the library's type table */
    if (!rs) { fprintf(stderr, "type %d: unknown, or N not a multiple of its block\n", type); return 2; }
    long rows = kb * 1024 / rs;
    rows -= rows % 8;
    uint64_t s = 88172645463325252ull;
    unsigned char *w = kb_random_blocks(&lib, type, rs * rows, &s); /* [rows][rs] */
    void *xq = kb_random_activation(&lib, type, n, &s);
    float *y = malloc(rows * sizeof(float));
    const fg_type_kernels *k = lib.kernels_of(isa, type);
    const int reps = getenv("REPS") ? atoi(getenv("REPS")) : 15;
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        const double t0 = kb_now(CLOCK_MONOTONIC);
        k->gemv(n, w, rs, xq, y, rows);
        if (kb_now(CLOCK_MONOTONIC) - t0 < best) best = kb_now(CLOCK_MONOTONIC) - t0;
    }
    printf("type %d isa %d: %ld x %ld, %ld KB: %.1f GB/s\n", type, isa, rows, n, kb, rs * rows / best / 1e9);
    return 0;
}
