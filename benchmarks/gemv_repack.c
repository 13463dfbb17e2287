/* Issue 35, item 5: does the row-interleaved copy (Model(repack=True)) pay for decode? A format's gemv from its
 * packed copy (gemv_packed: Q4_K's block_q4_K_r16; the branch repack-q4_0 has Q4_0's, which did not pay) against
 * its gemv from the rows, one build (libX.so as gemv_ab.c says), one ISA (default 2: AVX-512 + VNNI), one thread,
 * on the same random matrix and activation: first equal bit for bit, then the GB/s of each (bytes of the rows over
 * the best of REPS alternating runs), with the matrix in L2 (KB small) and from DRAM (KB = 262144). Where the gemv
 * from the rows runs near the memory's speed with its matrix in L2, it is bound by its arithmetic and a faster
 * kernel pays.
 *   gcc -O2 -Icsrc -Ibenchmarks benchmarks/gemv_repack.c -ldl -o gemv_repack
 *   ./gemv_repack ./libX.so TYPE N KB [ISA]   (TYPE a format with a packed layout; N a multiple of its block) */
#include "kbench.h"
int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: %s LIB TYPE N KB [ISA]\n", argv[0]); return 2; }
    const kb_lib lib = kb_open(argv[1]);
    const fg_type_info *(*type_at)(int) = (const fg_type_info *(*)(int))dlsym(lib.h, "fg_type_at");
    const int count = ((int (*)(void))dlsym(lib.h, "fg_type_count"))();
    size_t (*packed_size)(int, int64_t, int64_t) = (size_t (*)(int, int64_t, int64_t))dlsym(lib.h, "fg_packed_size");
    int type = -1;
    for (int t = 0; t < count; t++)
        if (strcmp(type_at(t)->name, argv[2]) == 0 && type_at(t)->packed_size) type = type_at(t)->type;
    if (type < 0) { fprintf(stderr, "%s: no such format with a packed layout\n", argv[2]); return 2; }
    const long n = atol(argv[3]), kb = atol(argv[4]);
    const int isa = argc > 5 ? atoi(argv[5]) : FG_ISA_AVX512;
    const size_t rs = kb_row_size(&lib, type, n);
    if (!rs) { fprintf(stderr, "N must be a multiple of %s's block\n", argv[2]); return 2; }
    long rows = kb * 1024 / rs;
    rows -= rows % FG_PACK_ROWS;
    uint64_t s = 88172645463325252ull;
    unsigned char *w = kb_random_blocks(&lib, type, rs * rows, &s); /* [rows][rs] */
    const fg_type_kernels *k = lib.kernels_of(isa, type), *ref = lib.kernels_of(FG_ISA_SCALAR, type);
    void *p = aligned_alloc(64, (packed_size(type, rows, n) + 63) / 64 * 64);
    ref->pack(n, w, rs, p, rows / FG_PACK_ROWS);
    void *xq = kb_random_activation(&lib, type, n, &s);
    float *y0 = malloc(rows * 4), *y1 = malloc(rows * 4);
    fg_gemv_packed_fn packed = k->gemv_packed ? k->gemv_packed : ref->gemv_packed;
    k->gemv(n, w, rs, xq, y0, rows);
    packed(n, p, xq, y1, rows / FG_PACK_ROWS);
    long bad = 0;
    for (long r = 0; r < rows; r++) bad += memcmp(&y0[r], &y1[r], 4) != 0;
    const int reps = getenv("REPS") ? atoi(getenv("REPS")) : 15;
    double best0 = 1e9, best1 = 1e9;
    for (int r = 0; r < reps; r++) { /* alternating */
        double t0 = kb_now(CLOCK_MONOTONIC);
        k->gemv(n, w, rs, xq, y0, rows);
        if (kb_now(CLOCK_MONOTONIC) - t0 < best0) best0 = kb_now(CLOCK_MONOTONIC) - t0;
        t0 = kb_now(CLOCK_MONOTONIC);
        packed(n, p, xq, y1, rows / FG_PACK_ROWS);
        if (kb_now(CLOCK_MONOTONIC) - t0 < best1) best1 = kb_now(CLOCK_MONOTONIC) - t0;
    }
    printf("%s %ld x %ld, %ld KB, isa %d: gemv %.1f GB/s, gemv_packed %.1f GB/s (%.2fx); %ld of %ld rows differ\n",
           argv[2], rows, n, kb, isa, rs * rows / best0 / 1e9, rs * rows / best1 / 1e9, best0 / best1, bad, rows);
    return bad != 0;
}
