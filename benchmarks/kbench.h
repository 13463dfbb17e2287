/* What the kernel benchmarks (gemv_ab.c, gemm_ab.c, gemv_ceiling.c, gemv_repack.c) share: a build of csrc/ loaded
 * with dlopen (libX.so, built as gemv_ab.c says) and its type table's facts, random blocks with finite scales, random
 * activations, and a clock. A format's block bytes and elements come from the library's table (fg_type_size,
 * fg_blck_size), not from a list here. Header-only: each benchmark is one gcc line (-Icsrc -Ibenchmarks -ldl). */
#ifndef FG_KBENCH_H
#define FG_KBENCH_H
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fg_blocks.h"
#include "fg_kernels.h"

typedef struct {
    void *h;
    const fg_type_kernels *(*kernels_of)(int isa, int type);
    size_t (*type_size)(int type);
    int64_t (*blck_size)(int type);
    int (*vec_dot_type)(int type);
} kb_lib;

/* The library at `path` (RTLD_LOCAL: two builds side by side in one process); exits with a message if it cannot. */
static kb_lib kb_open(const char *path) {
    kb_lib l = {dlopen(path, RTLD_NOW | RTLD_LOCAL), 0, 0, 0, 0};
    if (!l.h) { fprintf(stderr, "%s\n", dlerror()); exit(1); }
    l.kernels_of = (const fg_type_kernels *(*)(int, int))dlsym(l.h, "fg_kernels_of");
    l.type_size = (size_t (*)(int))dlsym(l.h, "fg_type_size");
    l.blck_size = (int64_t (*)(int))dlsym(l.h, "fg_blck_size");
    l.vec_dot_type = (int (*)(int))dlsym(l.h, "fg_vec_dot_type");
    if (!l.kernels_of || !l.type_size || !l.blck_size || !l.vec_dot_type) {
        fprintf(stderr, "%s: not a kernels build\n", path);
        exit(1);
    }
    return l;
}

/* Bytes of a row of n elements of `type` (0: unknown type, or n not a multiple of its block). */
static size_t kb_row_size(const kb_lib *l, int type, long n) {
    const size_t bs = l->type_size(type);
    const long blk = (long)l->blck_size(type);
    return bs && blk && n % blk == 0 ? (size_t)(n / blk) * bs : 0;
}

static uint64_t kb_rand(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

/* CLOCK_MONOTONIC (wall) or CLOCK_THREAD_CPUTIME_ID (this thread's CPU time) in seconds. */
static double kb_now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* nbytes (a multiple of the block) of random `type` blocks, 64-byte aligned, with finite scales: fp16 d ~0.1 (and a
 * K-quant's dmin ~-0.1) where the format has them, MXFP4's E8M0 2^-7. */
static unsigned char *kb_random_blocks(const kb_lib *l, int type, size_t nbytes, uint64_t *s) {
    const size_t bs = l->type_size(type);
    unsigned char *w = aligned_alloc(64, (nbytes + 63) / 64 * 64);
    for (size_t i = 0; i < nbytes; i++) w[i] = (unsigned char)kb_rand(s);
    for (size_t b = 0; b < nbytes; b += bs) {
        if (type == FG_TYPE_MXFP4) { w[b] = 120; continue; }
        const size_t d = type == FG_TYPE_Q6_K ? offsetof(block_q6_K, d) : 0;
        w[b + d] = 0x66, w[b + d + 1] = 0x2e;
        if (type == FG_TYPE_Q4_1 || type == FG_TYPE_Q5_1 || type == FG_TYPE_Q4_K || type == FG_TYPE_Q5_K)
            w[b + 2] = 0x66, w[b + 3] = 0xae; /* m / dmin */
    }
    return w;
}

/* n activations uniform in [-2, 2], quantized to `type`'s activation type by the scalar reference: its row, 64-byte
 * aligned (free() it). */
static void *kb_random_activation(const kb_lib *l, int type, long n, uint64_t *s) {
    float *x = malloc(n * sizeof(float));
    for (long i = 0; i < n; i++) x[i] = (float)((int)(kb_rand(s) % 2001) - 1000) / 500.f;
    void *xq = aligned_alloc(64, (kb_row_size(l, l->vec_dot_type(type), n) + 63) / 64 * 64);
    l->kernels_of(FG_ISA_SCALAR, l->vec_dot_type(type))->quantize(x, xq, n);
    free(x);
    return xq;
}
#endif
