/* A/B of one-activation GEMVs (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL or MXFP4 weights, random blocks, beyond cache)
 * between two builds of the kernels, dlopen'ed into one process and run alternately, each for `secs` seconds per
 * round; prints GB/s of weights read and whether both builds give the same floats. Build each side's csrc/ (kernel
 * files as .ci/kernels.sh lists them) as
 *   gcc -std=gnu11 -O3 -ffp-contract=off -fPIC -shared -pthread -Wl,-Bsymbolic -I. <kernel files> -lm -o libX.so
 * into ./libbase.so and ./libnew.so, then: gcc -O2 -Icsrc benchmarks/gemv_ab.c -ldl -o ab
 *   ./ab TYPE ISA N MB ROUNDS SECS   (TYPE 2 = Q4_0, 3 = Q4_1, 6 = Q5_0, 7 = Q5_1, 8 = Q8_0, 20 = IQ4_NL,
 *                                     39 = MXFP4; ISA 1 = AVX2, 2 = AVX-512 + VNNI) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fg_kernels.h"
typedef const fg_type_kernels *(*kof_fn)(int, int);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    int type = atoi(argv[1]), isa = atoi(argv[2]); long n = atol(argv[3]); double mb = atof(argv[4]);
    int rounds = atoi(argv[5]); double secs = atof(argv[6]);
    void *h[2] = {dlopen("./libbase.so", RTLD_NOW | RTLD_LOCAL), dlopen("./libnew.so", RTLD_NOW | RTLD_LOCAL)};
    if (!h[0] || !h[1]) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    const int q81 = type == FG_TYPE_Q4_1 || type == FG_TYPE_Q5_1; /* activation Q8_1, else Q8_0 */
    size_t bs = type == FG_TYPE_Q4_0 || type == FG_TYPE_IQ4_NL ? 18 : type == FG_TYPE_Q4_1 ? 20
              : type == FG_TYPE_Q5_0 ? 22 : type == FG_TYPE_Q5_1 ? 24 : type == FG_TYPE_MXFP4 ? 17 : 34;
    size_t rs = (size_t)(n / 32) * bs;
    long rows = (long)(mb * 1e6 / rs);
    unsigned char *w = aligned_alloc(64, (rs * rows + 63) / 64 * 64);
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < rs * rows; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; w[i] = (unsigned char)s; }
    for (size_t b = 0; b < rs * rows; b += bs) { /* finite scales: fp16 d (and m), or MXFP4's E8M0 near 2^-2 */
        if (type == FG_TYPE_MXFP4) { w[b] = 126; continue; }
        w[b] = 0x66; w[b + 1] = 0x2e; w[b + 2] = 0x66; w[b + 3] = 0xae;
    }
    float *x = malloc(n * 4), *y[2] = {malloc(rows * 4), malloc(rows * 4)};
    for (long i = 0; i < n; i++) x[i] = (float)((i * 37) % 101) / 50.f - 1.f;
    unsigned char *xq = malloc(n / 32 * 36 + 64);
    kof_fn kof[2];
    for (int v = 0; v < 2; v++) kof[v] = (kof_fn)dlsym(h[v], "fg_kernels_of");
    kof[0](FG_ISA_SCALAR, q81 ? FG_TYPE_Q8_1 : FG_TYPE_Q8_0)->quantize(x, xq, n);
    for (int v = 0; v < 2; v++) kof[v](isa, type)->gemv(n, w, rs, xq, y[v], rows);
    printf("rows %ld x %ld (%.0f MB), same result: %s\n", rows, n, rs * rows / 1e6,
           memcmp(y[0], y[1], rows * 4) ? "NO" : "yes");
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < 2; v++) {
            const fg_type_kernels *k = kof[v](isa, type);
            int it = 0; double t0 = now(), t;
            do { k->gemv(n, w, rs, xq, y[v], rows); it++; } while ((t = now() - t0) < secs);
            printf("round %d %s %.2f GB/s\n", r, v ? "new " : "base", rs * rows * (double)it / t / 1e9);
            fflush(stdout);
        }
    return 0;
}
