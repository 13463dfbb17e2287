/* The core's int8 multiply-add ceiling, one thread, operands in registers (issue 35: the wall under the K-quant
 * gemms). Each loop is inline assembly (the compiler would hoist a loop-invariant product out of an intrinsics loop):
 * 12 independent instructions per iteration, so only throughput counts:
 *   maddubs       AVX2 vpmaddubsw (u8 x s8, pairs summed into int16), 12 results: 32 MAC per op, the AVX2 kernels' core
 *   maddubs+madd  6 vpmaddubsw each widened by a vpmaddwd (the int32 step every 1-8 maddubs of the AVX2 kernels)
 *   dpbusd256     VNNI vpdpbusd on ymm (AVX512VL; AVX-VNNI's is the same op), 12 accumulators: 32 MAC per op
 *   dpbusd512     VNNI vpdpbusd on zmm, 12 accumulators: 64 MAC per op
 * Prints GMAC/s per loop (1 GMAC = 1e9 int8 multiply-adds). A kernel's GMAC/s over its line is its share of the core.
 *   gcc -O2 benchmarks/int8_peak.c -o int8_peak && ./int8_peak        (x86-64, GCC or clang; the VNNI loops run only
 *   where the CPU has AVX-512 VNNI) */
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#define ITERS 20000000L
#define X12(op) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11) op(12) op(13)
#define MADDUBS(r) "vpmaddubsw %%ymm1, %%ymm0, %%ymm" #r "\n\t"
#define DP256(r) "vpdpbusd %%ymm1, %%ymm0, %%ymm" #r "\n\t"
#define DP512(r) "vpdpbusd %%zmm1, %%zmm0, %%zmm" #r "\n\t"
#define PAIR(r) "vpmaddubsw %%ymm1, %%ymm0, %%ymm" #r "\n\tvpmaddwd %%ymm14, %%ymm" #r ", %%ymm" #r "\n\t"
#define CLOBBER12 "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13"

static double run(int which) {
    double t0 = now();
    for (long i = 0; i < ITERS; i++) {
        switch (which) {
        case 0: __asm__ volatile(X12(MADDUBS)::: CLOBBER12); break;
        case 1: __asm__ volatile(PAIR(2) PAIR(3) PAIR(4) PAIR(5) PAIR(6) PAIR(7)::: CLOBBER12); break;
        case 2: __asm__ volatile(X12(DP256)::: CLOBBER12); break;
        default: __asm__ volatile(X12(DP512)::: CLOBBER12); break;
        }
    }
    return now() - t0;
}

int main(void) {
    static const char *name[4] = {"maddubs", "maddubs+madd", "dpbusd256", "dpbusd512"};
    static const double mac[4] = {12 * 32, 6 * 32, 12 * 32, 12 * 64}; /* per iteration */
    __builtin_cpu_init();
    const int vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
    for (int w = 0; w < (vnni ? 4 : 2); w++) {
        double best = 1e30;
        for (int r = 0; r < 3; r++) {
            double t = run(w);
            if (t < best) best = t;
        }
        printf("%-14s %7.1f GMAC/s\n", name[w], ITERS * mac[w] / best / 1e9);
    }
    return 0;
}
