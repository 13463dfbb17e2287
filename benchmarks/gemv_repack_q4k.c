/* Issue 35, item 5: does the row-interleaved copy (Model(repack=True)) pay for 1-thread decode? The library's Q4_K
 * gemv from its packed copy (block_q4_K_r16, gemv_packed) against its gemv from the rows, one build (libX.so as
 * gemv_ab.c says), one ISA (default 2: AVX-512 + VNNI), one thread, on the same random Q4_K matrix and Q8_K
 * activation: first equal bit for bit, then the GB/s of each (bytes of the Q4_K rows over the best of REPS
 * alternating runs), with the matrix in L2 (KB small) and from DRAM (KB = 262144). Where the gemv from the rows
 * runs near the memory's speed with its matrix in L2, it is bound by its arithmetic and a faster kernel pays.
 *   gcc -O2 -Icsrc benchmarks/gemv_repack_q4k.c -ldl -o gemv_repack
 *   ./gemv_repack ./libX.so N KB [ISA]   (N a row's length, a multiple of 256) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fg_blocks.h"
#include "fg_kernels.h"

typedef const fg_type_kernels *(*kof_fn)(int, int);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s LIB N KB [ISA]\n", argv[0]); return 2; }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    kof_fn kof = (kof_fn)dlsym(h, "fg_kernels_of");
    const long n = atol(argv[2]), kb = atol(argv[3]), nb = n / QK_K;
    const int isa = argc > 4 ? atoi(argv[4]) : FG_ISA_AVX512;
    const size_t rs = nb * sizeof(block_q4_K);
    long rows = kb * 1024 / rs;
    rows -= rows % FG_PACK_ROWS;
    block_q4_K *w = aligned_alloc(64, (rs * rows + 63) / 64 * 64); /* [rows][nb] */
    uint64_t s = 88172645463325252ull;
    unsigned char *wb = (unsigned char *)w;
    for (size_t i = 0; i < rs * rows; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; wb[i] = (unsigned char)s; }
    for (long b = 0; b < rows * nb; b++) w[b].d = 0x2e66, w[b].dmin = 0xae66; /* finite scales, as gemv_ceiling */
    const fg_type_kernels *k = kof(isa, FG_TYPE_Q4_K), *ref = kof(FG_ISA_SCALAR, FG_TYPE_Q4_K);
    block_q4_K_r16 *p = aligned_alloc(64, rows / FG_PACK_ROWS * nb * sizeof(block_q4_K_r16));
    ref->pack(n, w, rs, p, rows / FG_PACK_ROWS);
    float *x = malloc(n * sizeof(float)), *y0 = malloc(rows * 4), *y1 = malloc(rows * 4);
    for (long i = 0; i < n; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; x[i] = (float)((int)(s % 2001) - 1000) / 500.f; }
    block_q8_K *xq = aligned_alloc(64, nb * sizeof(block_q8_K));
    kof(FG_ISA_SCALAR, FG_TYPE_Q8_K)->quantize(x, xq, n);
    fg_gemv_packed_fn packed = k->gemv_packed ? k->gemv_packed : ref->gemv_packed;
    k->gemv(n, w, rs, xq, y0, rows);
    packed(n, p, xq, y1, rows / FG_PACK_ROWS);
    long bad = 0;
    for (long r = 0; r < rows; r++) bad += memcmp(&y0[r], &y1[r], 4) != 0;
    const int reps = getenv("REPS") ? atoi(getenv("REPS")) : 15;
    double best0 = 1e9, best1 = 1e9;
    for (int r = 0; r < reps; r++) { /* alternating */
        double t0 = now();
        k->gemv(n, w, rs, xq, y0, rows);
        if (now() - t0 < best0) best0 = now() - t0;
        t0 = now();
        packed(n, p, xq, y1, rows / FG_PACK_ROWS);
        if (now() - t0 < best1) best1 = now() - t0;
    }
    printf("Q4_K %ld x %ld, %ld KB, isa %d: gemv %.1f GB/s, gemv_packed %.1f GB/s (%.2fx); %ld of %ld rows differ\n",
           rows, n, kb, isa, rs * rows / best0 / 1e9, rs * rows / best1 / 1e9, best0 / best1, bad, rows);
    return bad != 0;
}
