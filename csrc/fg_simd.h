/* Internal helpers shared by the SIMD kernels (fg_quant_*.c): target attributes, horizontal sums, and the
 * rounding used by the activation quantizers. Each helper is always_inline and carries the smallest target it
 * needs, so it inlines into any kernel whose target is a superset. */
#ifndef FG_SIMD_H
#define FG_SIMD_H

#include "fg_blocks.h"
#include "fg_kernels.h"

/* Run-time choices inside an ISA (fg_cpu.c): VNNI on avx512, dotprod on neon. */
int fg_cpu_has_vnni(void);
int fg_cpu_has_dotprod(void);

/* A format's kernel table (fg_<fmt>_kernels in fg_quant_<fmt>.c, read by fg_dispatch.c): a row per ISA (enum
 * fg_isa), then a row per ISA extension, whose entries replace the ISA row's where the CPU has the extension. A table
 * names only what the format has: an empty AVX-512 row runs the AVX2 one, a missing entry the scalar reference. */
enum { FG_ROW_VNNI = FG_ISA_COUNT, FG_ROW_DOTPROD, FG_KERNEL_ROWS };

/* The TARGET of the FG_*_FROM_* kernel makers below for code the whole build can run (base NEON): no attribute. */
#define FG_NO_TARGET

/* From a "rows" helper  ROWS(const int R, int64_t nb, const char *w, size_t stride, const void *x, float *y)
 * that computes R <= 4 consecutive rows sharing the activation loads (R a constant after inlining), make the
 * table's vec_dot (one row) and gemv (4 rows at a time, then the 1..3 left). BLK: elements per block. */
#define FG_DOT_FROM_ROWS(NAME, TARGET, ROWS, BLK)                                                            \
    TARGET static float NAME(int64_t n, const void *w, const void *x) {                                      \
        float y;                                                                                             \
        ROWS(1, n / (BLK), (const char *)w, 0, x, &y);                                                       \
        return y;                                                                                            \
    }
#define FG_GEMV_FROM_ROWS(NAME, TARGET, ROWS, BLK)                                                           \
    TARGET static void NAME(int64_t n, const void *w, size_t stride, const void *x, float *y, int64_t nrows) { \
        const char *wr = (const char *)w;                                                                    \
        const int64_t nb = n / (BLK);                                                                        \
        int64_t r = 0;                                                                                       \
        for (; r + 4 <= nrows; r += 4) ROWS(4, nb, wr + r * stride, stride, x, y + r);                       \
        switch (nrows - r) {                                                                                 \
        case 3: ROWS(3, nb, wr + r * stride, stride, x, y + r); break;                                       \
        case 2: ROWS(2, nb, wr + r * stride, stride, x, y + r); break;                                       \
        case 1: ROWS(1, nb, wr + r * stride, stride, x, y + r); break;                                       \
        default: break;                                                                                      \
        }                                                                                                    \
    }

/* From a "tile" helper  TILE(const int R, const int M, int64_t nb, const char *w, size_t stride, const char *x,
 * size_t xs, float *y, int64_t ldy)  that computes y[a * ldy + r] = dot(weight row r, activation a) for R <= 4
 * consecutive weight rows and M <= 4 activation rows `xs` bytes apart, each (r, a) pair by the same float ops in the
 * same order whatever R and M (R, M constants after inlining): the format's "rows" helper (vec_dot, gemv) is TILE
 * with M = 1, and this gemm runs tiles of RT <= 4 rows x MT <= 4 activations, so gemm equals gemv bit for bit. */
#define FG_TILE_M(TILE, R, M, MT, nb, w, stride, x, xs, y, ldy)                                             \
    switch (M) {                                                                                             \
    case 4: if ((MT) >= 4) { TILE(R, 4, nb, w, stride, x, xs, y, ldy); break; } /* fallthrough */           \
    case 3: if ((MT) >= 3) { TILE(R, 3, nb, w, stride, x, xs, y, ldy); break; } /* fallthrough */           \
    case 2: if ((MT) >= 2) { TILE(R, 2, nb, w, stride, x, xs, y, ldy); break; } /* fallthrough */           \
    default: TILE(R, 1, nb, w, stride, x, xs, y, ldy); break;                                                \
    }
#define FG_GEMM_FROM_TILE(NAME, TARGET, TILE, BLK, RT, MT)                                                   \
    TARGET static void NAME(int64_t n, const void *w, size_t stride, const void *xq, size_t xs, int64_t m,   \
                            float *y, int64_t ldy, int64_t nrows) {                                          \
        const char *wr = (const char *)w, *xr = (const char *)xq;                                            \
        const int64_t nb = n / (BLK);                                                                        \
        for (int64_t a = 0; a < m; a += (MT)) {                                                              \
            const int M = m - a < (MT) ? (int)(m - a) : (MT);                                                \
            const char *xa = xr + a * xs;                                                                    \
            float *ya = y + a * ldy;                                                                         \
            int64_t r = 0;                                                                                   \
            for (; r + (RT) <= nrows; r += (RT)) FG_TILE_M(TILE, RT, M, MT, nb, wr + r * stride, stride, xa, xs, ya + r, ldy) \
            switch (nrows - r) {                                                                             \
            case 3: if ((RT) > 3) { FG_TILE_M(TILE, 3, M, MT, nb, wr + r * stride, stride, xa, xs, ya + r, ldy) } break; \
            case 2: if ((RT) > 2) { FG_TILE_M(TILE, 2, M, MT, nb, wr + r * stride, stride, xa, xs, ya + r, ldy) } break; \
            case 1: if ((RT) > 1) { FG_TILE_M(TILE, 1, M, MT, nb, wr + r * stride, stride, xa, xs, ya + r, ldy) } break; \
            default: break;                                                                                  \
            }                                                                                                \
        }                                                                                                    \
    }

/* Row-lane tiles: TILE(R, M, first, kc, w, stride, x, xs, aux, y, ldy) computes R <= 8 (or 16) consecutive weight rows
 * (`stride` bytes apart) x M <= 8 activation rows (`xs` apart) over kc <= FG_KC blocks, row r in float lane r, so
 * every (r, a) pair has ONE float accumulator: it starts at 0 (first) or at y[a * ldy + r] and runs block by block,
 * in order, acc = fma((float)int_dot, dw * dx, acc). What a block needs of the activation alone (its scale, a
 * correction) is computed once per chunk of FG_KC blocks by AUX(x, kc, aux) for every row group. The float ops per
 * pair are the same whatever R, M and the chunking, so vec_dot (R = 1), gemv (M = 1) and the gemm tiles of 8 rows x
 * MT activations agree bit for bit. R is a constant 8 in the main loop and a run-time value on the last rows. */
#define FG_KC 128
typedef struct {
    float d; /* the activation block's scale */
    union {
        int32_t c; /* a per-format integer correction of the block dot (e.g. 8 * sum(q) for q4_0), or */
        float s;   /* q8_1's d * sum(q), for the weights' offset term (q4_1, q5_1) */
    };
} fg_xaux;

#define FG_TILE8_M(TILE, R, M, MT, ...)                                                                     \
    switch (M) {                                                                                             \
    case 8: if ((MT) >= 8) { TILE(R, 8, __VA_ARGS__); break; } /* fallthrough */                             \
    case 7: if ((MT) >= 7) { TILE(R, 7, __VA_ARGS__); break; } /* fallthrough */                             \
    case 6: if ((MT) >= 6) { TILE(R, 6, __VA_ARGS__); break; } /* fallthrough */                             \
    case 5: if ((MT) >= 5) { TILE(R, 5, __VA_ARGS__); break; } /* fallthrough */                             \
    case 4: if ((MT) >= 4) { TILE(R, 4, __VA_ARGS__); break; } /* fallthrough */                             \
    case 3: if ((MT) >= 3) { TILE(R, 3, __VA_ARGS__); break; } /* fallthrough */                             \
    case 2: if ((MT) >= 2) { TILE(R, 2, __VA_ARGS__); break; } /* fallthrough */                             \
    default: TILE(R, 1, __VA_ARGS__); break;                                                                 \
    }
/* FG_KERNELS_FROM_TILE8 for tiles of RT rows (8: ymm row lanes; 16: the AVX-512 zmm tiles, FG_KERNELS_FROM_TILE16). */
#define FG_KERNELS_FROM_TILE8(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT) \
    FG_KERNELS_FROM_TILE(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT, 8)
#define FG_KERNELS_FROM_TILE16(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT) \
    FG_KERNELS_FROM_TILE(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT, 16)
#define FG_KERNELS_FROM_TILE(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT, RT)                   \
    TARGET static void GEMM(int64_t n, const void *w, size_t stride, const void *xq, size_t xs, int64_t m,   \
                            float *y, int64_t ldy, int64_t nrows) {                                          \
        const int64_t nb = n / (BLK);                                                                        \
        fg_xaux aux[MT][FG_KC];                                                                              \
        for (int64_t a = 0; a < m; a += (MT)) {                                                              \
            const int M = m - a < (MT) ? (int)(m - a) : (MT);                                                \
            for (int64_t k0 = 0; k0 < nb; k0 += FG_KC) {                                                     \
                const int kc = nb - k0 < FG_KC ? (int)(nb - k0) : FG_KC, first = k0 == 0;                    \
                const char *wk = (const char *)w + k0 * (WBLK), *xk = (const char *)xq + a * xs + k0 * (XBLK); \
                float *ya = y + a * ldy;                                                                     \
                for (int i = 0; i < M; i++) AUX(xk + i * xs, kc, aux[i]);                                    \
                /* tiles take aux as const; before C23 that conversion of an array pointer needs a cast */   \
                const fg_xaux(*caux)[FG_KC] = (const fg_xaux(*)[FG_KC])aux;                                  \
                int64_t r = 0;                                                                               \
                for (; r + (RT) <= nrows; r += (RT))                                                         \
                    FG_TILE8_M(TILE, RT, M, MT, first, kc, wk + r * stride, stride, xk, xs, caux, ya + r, ldy) \
                if (r < nrows) {                                                                             \
                    const int R = (int)(nrows - r);                                                          \
                    FG_TILE8_M(TILE, R, M, MT, first, kc, wk + r * stride, stride, xk, xs, caux, ya + r, ldy) \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    TARGET static void GEMV(int64_t n, const void *w, size_t stride, const void *x, float *y, int64_t nrows) { \
        GEMM(n, w, stride, x, 0, 1, y, 0, nrows);                                                            \
    }                                                                                                        \
    TARGET static float DOT(int64_t n, const void *w, const void *x) {                                       \
        float y;                                                                                             \
        GEMM(n, w, 0, x, 0, 1, &y, 0, 1);                                                                    \
        return y;                                                                                            \
    }

/* SIMD code is compiled where the compiler takes target attributes: gcc, clang and clang-cl (which defines __clang__
 * and _M_X64 / _M_ARM64, and like every clang __x86_64__ / __aarch64__ too). MSVC's cl.exe (neither __GNUC__ nor
 * __clang__) and -DFG_NO_SIMD builds get scalar only: then fg_isa_available() reports scalar alone. */
#if !defined(FG_NO_SIMD) && (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define FG_HAVE_X86 1
#include "fg_simd_x86.h"
#elif !defined(FG_NO_SIMD) && (defined(__aarch64__) || defined(_M_ARM64)) && (defined(__GNUC__) || defined(__clang__))
#define FG_HAVE_NEON 1
#include "fg_simd_neon.h"
#endif

#endif
