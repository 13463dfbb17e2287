/* A GEMV's compute ceiling against its streaming speed (issue 35): one build of the kernels (libX.so, built as
 * gemv_ab.c says), one format and ISA, one thread; y = W x over random blocks of KB kilobytes, best of REPS
 * (default 15) runs. A matrix that fits in L2 (512 KB) gives the kernel's ceiling with the memory out of the way;
 * one of 256 MB gives what it reaches from DRAM. Where the first is near the bandwidth probe's figure, the GEMV is
 * bound by its arithmetic, not by memory.
 *   gcc -O2 -Icsrc benchmarks/gemv_ceiling.c -ldl -o gemv_ceiling
 *   ./gemv_ceiling ./libX.so TYPE ISA N KB      (TYPE 2 = Q4_0, 8 = Q8_0, 12 = Q4_K, 13 = Q5_K, 14 = Q6_K,
 *                                               39 = MXFP4; ISA 1 = AVX2, 2 = AVX-512 + VNNI; N a row's length) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <stddef.h>
#include "fg_blocks.h"
#include "fg_kernels.h"
typedef const fg_type_kernels *(*kof_fn)(int, int);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: %s LIB TYPE ISA N KB\n", argv[0]); return 2; }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    const int type = atoi(argv[2]), isa = atoi(argv[3]);
    const long n = atol(argv[4]), kb = atol(argv[5]);
    /* the format's facts from the library's type table */
    const size_t bs = ((size_t (*)(int))dlsym(h, "fg_type_size"))(type);
    const long blk = (long)((int64_t (*)(int))dlsym(h, "fg_blck_size"))(type);
    const int k_quant = blk == QK_K;
    if (!bs || !blk || n % blk) { fprintf(stderr, "type %d: unknown, or N not a multiple of its block\n", type); return 2; }
    const size_t rs = n / blk * bs; /* bytes per row */
    long rows = kb * 1024 / rs;
    rows -= rows % 8;
    unsigned char *w = aligned_alloc(64, (rs * rows + 63) / 64 * 64); /* [rows][rs] */
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < rs * rows; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; w[i] = (unsigned char)s; }
    for (size_t b = 0; b < rs * rows; b += bs) { /* finite scales: fp16 0x2e66 (~0.1), E8M0 2^-7 */
        if (type == FG_TYPE_Q6_K) w[b + offsetof(block_q6_K, d)] = 0x66, w[b + offsetof(block_q6_K, d) + 1] = 0x2e;
        else if (type == FG_TYPE_MXFP4) w[b] = 120;
        else w[b] = 0x66, w[b + 1] = 0x2e;
        if (type == FG_TYPE_Q4_K || type == FG_TYPE_Q5_K) w[b + 2] = 0x66, w[b + 3] = 0xae; /* dmin */
    }
    kof_fn kof = (kof_fn)dlsym(h, "fg_kernels_of");
    float *x = malloc(n * sizeof(float)), *y = malloc(rows * sizeof(float));
    for (long i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        x[i] = (float)((int)(s % 2001) - 1000) / 500.f;
    }
    void *xq = malloc(n / 32 * 36 + 512);
    kof(FG_ISA_SCALAR, k_quant ? FG_TYPE_Q8_K : FG_TYPE_Q8_0)->quantize(x, xq, n);
    const fg_type_kernels *k = kof(isa, type);
    const int reps = getenv("REPS") ? atoi(getenv("REPS")) : 15;
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        k->gemv(n, w, rs, xq, y, rows);
        if (now() - t0 < best) best = now() - t0;
    }
    printf("type %d isa %d: %ld x %ld, %ld KB: %.1f GB/s\n", type, isa, rows, n, kb, rs * rows / best / 1e9);
    return 0;
}
