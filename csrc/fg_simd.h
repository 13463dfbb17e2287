/* The common part of the SIMD kernels (fg_quant_*.c): the rows of a format's kernel table, the kernel makers that turn
 * a format's inner helper into its vec_dot, gemv and gemm, and the ISA detection, which includes the ISA's helpers:
 * fg_simd_x86.h (AVX2, AVX-512, VNNI) or fg_simd_neon.h (NEON, dotprod). Each helper there is always_inline and
 * carries the smallest target it needs, so it inlines into any kernel whose target is a superset. The K-quants' own
 * helpers are in fg_kquant.h.
 *
 * Kernel shapes. In each, every (weight row, activation) pair takes the same float ops in the same order whatever the
 * tile it falls in, so a format's vec_dot, gemv and gemm agree bit for bit:
 *   rows     FG_DOT_FROM_ROWS, FG_GEMV_FROM_ROWS: R <= 4 weight rows share each activation load. No gemm: fg_dispatch.c
 *            runs the gemv once per activation row.
 *   4xMT     FG_GEMM_FROM_TILE: tiles of R <= 4 rows x M <= MT activations, an accumulator register per pair; the
 *            rows helper is its M = 1 case.
 *   lanes    FG_KERNELS_FROM_TILE8 / 16: row r in float lane r (8 rows: a ymm, or two float32x4; 16: a zmm) x M <= MT
 *            activations (8; Q4_0's VNNI zmm tile 16), FG_KC blocks at a time, what a block needs of the activation
 *            alone (fg_xaux) computed once.
 *   kq       fg_kquant_x86.h: for few activations, tiles of R x A <= 8 (row, activation) pairs in the lanes of one
 *            ymm; from FG_KQ_ROWS8_MIN_M activations, rows in lanes (8 rows unpacked and transposed once per
 *            super-block, then every activation); with VNNI, from FG_KQ_ROWS8_MIN_M activations, 16 rows in the
 *            lanes of a zmm (fg_kquant_vnni.h: unpacked and transposed in zmm once per super-block, the panel
 *            idea below with one super-block as the panel: 8 activations at a time run over it, their int32 sums
 *            in registers through its sub-blocks, dpbusd).
 *   panel    FG_GEMM_FROM_PANEL: the lanes tiles from FG_PANEL_MIN_M (32) activations, each tile's blocks unpacked
 *            once into a stack panel and up to 64 activations run over it (Q4_0 and Q8_0, on AVX2; with VNNI
 *            fg_panel_vnni.h, also IQ4_NL and MXFP4: 16 rows x 32 blocks, up to 256 activations, 8 at a time in
 *            8 dpbusd chains).
 *   q5_0     fg_quant_q5_0.c's own rows in lanes: below 16 activations (4 at a time) each row's block sums gathered
 *            into its lane (the gemv: as 8 streams, FG_GEMV_STREAMS); from 16, the rows transposed once per block for
 *            every activation.
 * Stamps: a format's inner helper written once as a macro and stamped per ISA or extension with its target and its
 * integer dot: Q4_0_TILE8, Q4_1_TILE8 (AVX2 maddubs, VNNI dpbusd), Q5_0_KERNELS (avx2, vnni), the <FMT>_ROWS_NEON
 * (base NEON fg_dot_s8_emul; dotprod vdotq_s32 where the dotprod kernels are rows), FLOAT_KERNELS_<ISA> (per float
 * type).
 *
 * The shape of each format's dot kernels per ISA ("=": the AVX2 kernels, an empty AVX-512 row; "-": no extension
 * kernels, the ISA's own run):
 *   format               AVX2      AVX-512     +VNNI      NEON   +dotprod  +i8mm
 *   F32 F16 BF16         4x2       4x4 (zmm)   -          4x4    -         -
 *   Q4_0 Q8_0            lanes 8   =           lanes 16   rows   lanes 8   lanes 8 mm  (both x86 rows: panels from 32)
 *   Q4_1                 lanes 8   =           lanes 16   rows   lanes 8   lanes 8 mm
 *   Q5_0                 q5_0      =           q5_0       rows   lanes 8   lanes 8 mm
 *   Q5_1                 lanes 8   =           -          rows   lanes 8   lanes 8 mm
 *   IQ4_NL               lanes 8   =           lanes 16   rows   lanes 8   lanes 8 mm  (VNNI: panels from 32)
 *   MXFP4                lanes 8   =           lanes 16   rows   lanes 8   -           (VNNI: panels from 32)
 *   Q4_K Q5_K            kq        =           kq (gemm)  rows   lanes 8   lanes 8 mm
 *   Q6_K                 kq        =           kq (gemm)  rows   lanes 8   -
 *   IQ4_XS               rows      =           lanes 8    rows   rows      -
 *   Q2_K Q3_K            rows      =           -          rows   rows      -
 * ("lanes 8 mm": the dotprod lanes tiles with each pair of activations' integer block sums from SMMLA, vmmlaq_s32, 2
 * rows x 2 activations an instruction; their gemv is the dotprod one.)
 * Quantize and dequantize kernels (the activation types' quantizers on AVX2 and NEON, the AVX2 dequantizers) are
 * elementwise, of no shape. */
#ifndef FG_SIMD_H
#define FG_SIMD_H

#include "fg_blocks.h"
#include "fg_kernels.h"

/* Run-time choices inside an ISA (fg_cpu.c): VNNI on avx512, dotprod on neon and i8mm above it. */
int fg_cpu_has_vnni(void);
int fg_cpu_has_dotprod(void);
int fg_cpu_has_i8mm(void); /* and this build holds the i8mm kernels (FG_HAVE_I8MM) */
int fg_cpu_is_amd(void);    /* x86 vendor AuthenticAMD (or HygonGenuine, its licensed Zen) */

/* A format's kernel table (fg_<fmt>_kernels in fg_quant_<fmt>.c, read by fg_dispatch.c): a row per ISA (enum
 * fg_isa), then a row per ISA extension, whose entries replace the ISA row's where the CPU has the extension (i8mm's
 * replace those of dotprod's overlay in turn: a level above it). A table names only what the format has: an empty
 * AVX-512 row runs the AVX2 one, a missing entry the scalar reference. */
enum { FG_ROW_VNNI = FG_ISA_COUNT, FG_ROW_DOTPROD, FG_ROW_I8MM, FG_KERNEL_ROWS };

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
 * (`stride` bytes apart) x M <= MT activation rows (`xs` apart) over kc <= FG_KC blocks, row r in float lane r, so
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

/* A tile of M activations (a run-time value) called with M a constant: FG_TILE_M_<MT>, MT the most a tile takes. */
#define FG_TILE_M_8(TILE, R, M, ...)                                                                     \
    switch (M) {                                                                                         \
    case 8: TILE(R, 8, __VA_ARGS__); break;                                                              \
    case 7: TILE(R, 7, __VA_ARGS__); break;                                                              \
    case 6: TILE(R, 6, __VA_ARGS__); break;                                                              \
    case 5: TILE(R, 5, __VA_ARGS__); break;                                                              \
    case 4: TILE(R, 4, __VA_ARGS__); break;                                                              \
    case 3: TILE(R, 3, __VA_ARGS__); break;                                                              \
    case 2: TILE(R, 2, __VA_ARGS__); break;                                                              \
    default: TILE(R, 1, __VA_ARGS__); break;                                                             \
    }
#define FG_TILE_M_16(TILE, R, M, ...)                                                                    \
    switch (M) {                                                                                         \
    case 16: TILE(R, 16, __VA_ARGS__); break;                                                            \
    case 15: TILE(R, 15, __VA_ARGS__); break;                                                            \
    case 14: TILE(R, 14, __VA_ARGS__); break;                                                            \
    case 13: TILE(R, 13, __VA_ARGS__); break;                                                            \
    case 12: TILE(R, 12, __VA_ARGS__); break;                                                            \
    case 11: TILE(R, 11, __VA_ARGS__); break;                                                            \
    case 10: TILE(R, 10, __VA_ARGS__); break;                                                            \
    case 9: TILE(R, 9, __VA_ARGS__); break;                                                              \
    default: FG_TILE_M_8(TILE, R, M, __VA_ARGS__); break;                                                \
    }
/* FG_KERNELS_FROM_TILE8 for tiles of RT rows (8: ymm row lanes; 16: the AVX-512 zmm tiles, FG_KERNELS_FROM_TILE16). */
#define FG_KERNELS_FROM_TILE8(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT) \
    FG_KERNELS_FROM_TILE(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT, 8)
#define FG_KERNELS_FROM_TILE16(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT) \
    FG_KERNELS_FROM_TILE(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT, 16)
#define FG_KERNELS_FROM_TILE(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT, RT)                   \
    FG_GEMM_DOT_FROM_TILE(DOT, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT, RT)                             \
    TARGET static void GEMV(int64_t n, const void *w, size_t stride, const void *x, float *y, int64_t nrows) { \
        GEMM(n, w, stride, x, 0, 1, y, 0, nrows);                                                            \
    }
/* Its gemm and vec_dot alone (a format whose gemv is FG_GEMV_STREAMS). */
#define FG_GEMM_DOT_FROM_TILE(DOT, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, MT, RT)                         \
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
                    FG_TILE_M_##MT(TILE, RT, M, first, kc, wk + r * stride, stride, xk, xs, caux, ya + r, ldy) \
                if (r < nrows) {                                                                             \
                    const int R = (int)(nrows - r);                                                          \
                    FG_TILE_M_##MT(TILE, R, M, first, kc, wk + r * stride, stride, xk, xs, caux, ya + r, ldy) \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    TARGET static float DOT(int64_t n, const void *w, const void *x) {                                       \
        float y;                                                                                             \
        GEMM(n, w, 0, x, 0, 1, &y, 0, 1);                                                                    \
        return y;                                                                                            \
    }

/* The gemv (one activation) of a row-lane format read as 8 ascending streams: the matrix is cut into 8 runs of q =
 * nrows / 8 rows and tile t takes row t of each run (rows t, t + q, ..., t + 7q: TILE1 with stride q * stride), whole
 * (block after block, FG_KC at a time, its 8 sums carried in acc), each row's block asking for the bytes
 * fg_stream_ahead on in its stream, so every run is read in address order, row after row, as the K-quant gemvs
 * (fg_kquant_vnni.h: 8-row tiles of adjacent rows narrower than a 4 KB page read it back and forth, which the hardware
 * prefetcher follows badly). Rows left over (nrows % 8) take one tile of adjacent rows. TILE1(R, first, kc, w,
 * stride, ahead, x, aux, y): the format's 8-row tile with one activation (y: lanes r < R, read unless first); the
 * same per-row float steps as GEMM's tiles, so the results equal its bit for bit. The aux of the whole activation is
 * made first (FG_GEMV_STREAMS_KB blocks at most, 8 KB on the stack; wider rows run GEMM). */
/* The two entries a row-lane format's NAME##_at tile (R rows x M activations, each row's block asked for `ahead`
 * bytes on) gives: NAME, the tiles' shape (8 rows on), and NAME##_gemv, FG_GEMV_STREAMS's one-activation TILE1. */
#define FG_TILE8_ENTRIES(NAME, INLINE)                                                                      \
    INLINE void NAME(const int R, const int M, int first, int kc, const char *w, size_t stride, const char *x, \
                     size_t xs, const fg_xaux (*aux)[FG_KC], float *y, int64_t ldy) {                       \
        NAME##_at(R, M, first, kc, w, stride, 8 * stride, x, xs, aux, y, ldy);                              \
    }                                                                                                       \
    INLINE void NAME##_gemv(const int R, int first, int kc, const char *w, size_t stride, size_t ahead,     \
                            const char *x, const fg_xaux (*aux)[FG_KC], float *y) {                         \
        NAME##_at(R, 1, first, kc, w, stride, ahead, x, 0, aux, y, 0);                                      \
    }
/* How far ahead in its stream each (row, block) of a streams gemv asks for (FG_GEMV_STREAMS, the K-quant gemvs of
 * fg_kquant_x86.h and fg_kquant_vnni.h; a stream's rows lie end to end): the same block of the stream's next row
 * (stride bytes on), except on AMD, a fixed FG_STREAM_AHEAD bytes. On an AMD EPYC (Zen 4) a row ahead kept 8 rows of
 * lines in flight, 37-70 KB at 8192 wide (Q4_K, Q8_0), past its 32 KB L1, so lines were evicted before use: one
 * thread, 256 MB of random blocks (benchmarks/gemv_ceiling.c), quiet, GB/s a row ahead -> 384 bytes: AVX2 Q6_K 20.3
 * -> 25.0 (2048 wide), 16.2 -> 22.9 (8192); AVX2 Q4_K 16.0 -> 20.4 (8192); VNNI Q6_K 18.8 -> 26.1 (8192), Q4_K 17.9
 * -> 22.1 (8192); Q8_0 25.0 -> 29.3 (2048); 1B decode +10-28%; 256 and 640 bytes did no better. On an Intel Xeon
 * (2 vCPUs, 48 KB L1, 16.6 GB/s probe) a row ahead is the faster: 384 bytes read every format 3-10% slower in that
 * benchmark, and 1B decode at 1 thread 2-5% slower with 768 bytes (3 alternating rounds), which the row ahead
 * recovers (benchmarks/results/gemv-2026-12-05e-xeon-stream-ahead.txt, decode-2026-12-05e-xeon-ahead-ab.txt).
 * Only those two hosts were measured: other x86 vendors take Intel's choice. */
#ifndef FG_STREAM_AHEAD
#define FG_STREAM_AHEAD 384
#endif
static inline size_t fg_stream_ahead(size_t stride) { return fg_cpu_is_amd() ? FG_STREAM_AHEAD : stride; }
#define FG_GEMV_STREAMS_KB (8 * FG_KC)
#define FG_GEMV_STREAMS(GEMV, TARGET, TILE1, GEMM, AUX, WBLK, XBLK, BLK)                                     \
    TARGET static void GEMV(int64_t n, const void *w, size_t stride, const void *x, float *y, int64_t nrows) { \
        const int64_t nb = n / (BLK), q = nrows / 8; /* rows per stream */                                   \
        if (nb > FG_GEMV_STREAMS_KB) {                                                                       \
            GEMM(n, w, stride, x, 0, 1, y, 0, nrows);                                                        \
            return;                                                                                          \
        }                                                                                                    \
        fg_xaux aux[FG_GEMV_STREAMS_KB / FG_KC][FG_KC]; /* [chunk][block] */                                 \
        for (int64_t k0 = 0; k0 < nb; k0 += FG_KC)                                                           \
            AUX((const char *)x + k0 * (XBLK), nb - k0 < FG_KC ? (int)(nb - k0) : FG_KC, aux[k0 / FG_KC]);   \
        const fg_xaux(*caux)[FG_KC] = (const fg_xaux(*)[FG_KC])aux;                                          \
        float acc[8]; /* the tile's 8 rows */                                                                \
        const size_t ahead = fg_stream_ahead(stride);                                                        \
        for (int64_t t = 0; t < q; t++) {                                                                    \
            for (int64_t k0 = 0; k0 < nb; k0 += FG_KC)                                                       \
                TILE1(8, k0 == 0, nb - k0 < FG_KC ? (int)(nb - k0) : FG_KC,                                  \
                      (const char *)w + t * stride + k0 * (WBLK), q * stride, ahead,                         \
                      (const char *)x + k0 * (XBLK), caux + k0 / FG_KC, acc);                                 \
            for (int r = 0; r < 8; r++) y[t + r * q] = acc[r];                                               \
        }                                                                                                    \
        if (nrows > 8 * q) {                                                                                 \
            const int R = (int)(nrows - 8 * q);                                                              \
            for (int64_t k0 = 0; k0 < nb; k0 += FG_KC)                                                       \
                TILE1(R, k0 == 0, nb - k0 < FG_KC ? (int)(nb - k0) : FG_KC,                                  \
                      (const char *)w + 8 * q * stride + k0 * (WBLK), stride, 8 * stride,                    \
                      (const char *)x + k0 * (XBLK), caux + k0 / FG_KC, acc);                                 \
            for (int r = 0; r < R; r++) y[8 * q + r] = acc[r];                                               \
        }                                                                                                    \
    }

/* An 8-row lanes format's kernels from its tile entries (FG_TILE8_ENTRIES: TILE and TILE##_gemv): DOT and GEMM over
 * TILE (8 activations a tile), GEMV over TILE##_gemv as 8 streams. */
#define FG_KERNELS_FROM_TILE8_STREAMS(DOT, GEMV, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK)                     \
    FG_GEMM_DOT_FROM_TILE(DOT, GEMM, TARGET, TILE, AUX, WBLK, XBLK, BLK, 8, 8)                                   \
    FG_GEMV_STREAMS(GEMV, TARGET, TILE##_gemv, GEMM, AUX, WBLK, XBLK, BLK)

/* Panels: the lanes shape for many activations. From FG_PANEL_MIN_M activations, GEMM unpacks each tile of RT rows
 * once per FG_PANEL_KC blocks into a panel on the stack (FILL(R, kc, w, stride, p): the tile's per-block unpack, kept)
 * and runs up to FG_PANEL_MG activations over it, MT at a time (PTILE(R, M, first, kc, p, x, xs, aux, y, ldy): the
 * lanes tile with its weights read from p). In a lanes tile the unpack of each block waits between two runs of MT
 * activations, and its latency (row loads, transposes, the scales' inserts) is not hidden; here it is paid once per 64
 * activations, and the unpacks of consecutive blocks overlap. PTILE takes the lanes tile's float ops per (row,
 * activation) pair, so GEMM equals FEW (the lanes gemm, run below FG_PANEL_MIN_M) and the gemv bit for bit. The stack
 * holds the panel (FG_PANEL_KC x sizeof(PANEL_T): 18 KB for 8 rows of Q4_0, 37 KB for 16) and the aux (32 KB). The
 * VNNI panels of Q4_0 and Q8_0 take their own sizes (FG_GEMM_FROM_PANEL_KM; fg_panel_vnni.h: 18 KB + 64 KB). */
#define FG_PANEL_KC 64
#define FG_PANEL_MG 64
#define FG_PANEL_MIN_M 32
#define FG_GEMM_FROM_PANEL(GEMM, TARGET, PANEL_T, FILL, PTILE, AUX, FEW, WBLK, XBLK, BLK, MT, RT)               \
    FG_GEMM_FROM_PANEL_KM(GEMM, TARGET, PANEL_T, FILL, PTILE, AUX, FEW, WBLK, XBLK, BLK, MT, RT, FG_PANEL_KC,   \
                          FG_PANEL_MG)
/* The same with the panel's KC blocks and the MG activations run over it given (PTILE's aux: fg_xaux (*)[KC]). */
#define FG_GEMM_FROM_PANEL_KM(GEMM, TARGET, PANEL_T, FILL, PTILE, AUX, FEW, WBLK, XBLK, BLK, MT, RT, KC, MG)  \
    TARGET static void GEMM(int64_t n, const void *w, size_t stride, const void *xq, size_t xs, int64_t m,    \
                            float *y, int64_t ldy, int64_t nrows) {                                           \
        if (m < FG_PANEL_MIN_M) {                                                                             \
            FEW(n, w, stride, xq, xs, m, y, ldy, nrows);                                                      \
            return;                                                                                           \
        }                                                                                                     \
        const int64_t nb = n / (BLK);                                                                         \
        PANEL_T panel[KC];                                                                                    \
        fg_xaux aux[MG][KC];                                                                                  \
        for (int64_t a0 = 0; a0 < m; a0 += (MG)) {                                                            \
            const int mg = m - a0 < (MG) ? (int)(m - a0) : (MG);                                              \
            for (int64_t k0 = 0; k0 < nb; k0 += (KC)) {                                                       \
                const int kc = nb - k0 < (KC) ? (int)(nb - k0) : (KC), first = k0 == 0;                       \
                const char *wk = (const char *)w + k0 * (WBLK), *xk = (const char *)xq + a0 * xs + k0 * (XBLK); \
                for (int i = 0; i < mg; i++) AUX(xk + i * xs, kc, aux[i]);                                    \
                for (int64_t r = 0; r < nrows; r += (RT)) {                                                   \
                    const int R = nrows - r < (RT) ? (int)(nrows - r) : (RT);                                 \
                    FILL(R, kc, wk + r * stride, stride, panel);                                              \
                    for (int a = 0; a < mg; a += (MT)) {                                                      \
                        const int M = mg - a < (MT) ? mg - a : (MT);                                          \
                        const fg_xaux(*caux)[(KC)] = (const fg_xaux(*)[(KC)])(aux + a);                       \
                        FG_TILE_M_##MT(PTILE, R, M, first, kc, panel, xk + a * xs, xs, caux, y + (a0 + a) * ldy + r, \
                                       ldy)                                                                   \
                    }                                                                                         \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }

/* GCC's unroll-and-jam fuses two passes of a loop whose sums are meant to stay in registers (the K-quant rows8 and
 * VNNI gemms, the VNNI panel tile): twice the vectors live, spilled (1.1-1.4x slower). Put on the kernel functions. */
#if defined(__GNUC__) && !defined(__clang__)
#define FG_NO_UNROLL_JAM __attribute__((optimize("no-loop-unroll-and-jam")))
#else
#define FG_NO_UNROLL_JAM
#endif

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
#ifndef FG_HAVE_I8MM /* fg_simd_neon.h: whether the compiler builds the i8mm (SMMLA) kernels */
#define FG_HAVE_I8MM 0
#endif

#endif
