/* Issue 35, item 5: does the row-interleaved copy (Model(repack=True)) pay for decode? A format's gemv from its
 * packed copy (gemv_packed: Q4_K's block_q4_K_r16; the branch repack-q4_0 has Q4_0's, which did not pay) against
 * its gemv from the rows, one build (libX.so as gemv_ab.c says), one ISA (default 2: AVX-512 + VNNI), one thread,
 * on the same random matrix and activation: first equal bit for bit, then the GB/s of each (bytes of the rows over
 * the best of REPS alternating runs), with the matrix in L2 (KB small) and from DRAM (KB = 262144). Where the gemv
 * from the rows runs near the memory's speed with its matrix in L2, it is bound by its arithmetic and a faster
 * kernel pays.
 *   gcc -O2 -Icsrc benchmarks/gemv_repack.c -ldl -o gemv_repack
 *   ./gemv_repack ./libX.so TYPE N KB [ISA]   (TYPE a format with a packed layout; N a multiple of its block) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fg_blocks.h"
#include "fg_kernels.h"

typedef const fg_type_kernels *(*kof_fn)(int, int);
typedef size_t (*size_fn)(int);
typedef int64_t (*blck_fn)(int);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: %s LIB TYPE N KB [ISA]\n", argv[0]); return 2; }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    kof_fn kof = (kof_fn)dlsym(h, "fg_kernels_of");
    size_t (*packed_size)(int, int64_t, int64_t) = (size_t (*)(int, int64_t, int64_t))dlsym(h, "fg_packed_size");
    const fg_type_info *(*type_at)(int) = (const fg_type_info *(*)(int))dlsym(h, "fg_type_at");
    const int count = ((int (*)(void))dlsym(h, "fg_type_count"))();
    int type = -1, xtype = -1;
    for (int t = 0; t < count; t++)
        if (strcmp(type_at(t)->name, argv[2]) == 0 && type_at(t)->packed_size)
            type = type_at(t)->type, xtype = type_at(t)->dot_type;
    if (type < 0) { fprintf(stderr, "%s: no such format with a packed layout\n", argv[2]); return 2; }
    const long n = atol(argv[3]), kb = atol(argv[4]);
    const long blck = ((blck_fn)dlsym(h, "fg_blck_size"))(type), nb = n / blck;
    const size_t bs = ((size_fn)dlsym(h, "fg_type_size"))(type), rs = nb * bs;
    const int isa = argc > 5 ? atoi(argv[5]) : FG_ISA_AVX512;
    long rows = kb * 1024 / rs;
    rows -= rows % FG_PACK_ROWS;
    unsigned char *wb = aligned_alloc(64, (rs * rows + 63) / 64 * 64); /* [rows][nb] blocks */
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < rs * rows; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; wb[i] = (unsigned char)s; }
    for (long b = 0; b < rows * nb; b++) { /* finite scales: the leading fp16 d (a K-quant's dmin), as gemv_ceiling */
        const uint16_t d = 0x2e66, dmin = 0xae66;
        memcpy(wb + b * bs, &d, 2);
        if (blck == QK_K) memcpy(wb + b * bs + 2, &dmin, 2);
    }
    const fg_type_kernels *k = kof(isa, type), *ref = kof(FG_ISA_SCALAR, type);
    void *p = aligned_alloc(64, (packed_size(type, rows, n) + 63) / 64 * 64);
    ref->pack(n, wb, rs, p, rows / FG_PACK_ROWS);
    float *x = malloc(n * sizeof(float)), *y0 = malloc(rows * 4), *y1 = malloc(rows * 4);
    for (long i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        x[i] = (float)((int)(s % 2001) - 1000) / 500.f;
    }
    void *xq = aligned_alloc(64, 4096 + n * 2);
    kof(FG_ISA_SCALAR, xtype)->quantize(x, xq, n);
    fg_gemv_packed_fn packed = k->gemv_packed ? k->gemv_packed : ref->gemv_packed;
    k->gemv(n, wb, rs, xq, y0, rows);
    packed(n, p, xq, y1, rows / FG_PACK_ROWS);
    long bad = 0;
    for (long r = 0; r < rows; r++) bad += memcmp(&y0[r], &y1[r], 4) != 0;
    const int reps = getenv("REPS") ? atoi(getenv("REPS")) : 15;
    double best0 = 1e9, best1 = 1e9;
    for (int r = 0; r < reps; r++) { /* alternating */
        double t0 = now();
        k->gemv(n, wb, rs, xq, y0, rows);
        if (now() - t0 < best0) best0 = now() - t0;
        t0 = now();
        packed(n, p, xq, y1, rows / FG_PACK_ROWS);
        if (now() - t0 < best1) best1 = now() - t0;
    }
    printf("%s %ld x %ld, %ld KB, isa %d: gemv %.1f GB/s, gemv_packed %.1f GB/s (%.2fx); %ld of %ld rows differ\n",
           argv[2], rows, n, kb, isa, rs * rows / best0 / 1e9, rs * rows / best1 / 1e9, best0 / best1, bad, rows);
    return bad != 0;
}
