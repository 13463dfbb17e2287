/* fastgguf kernel API: the contract between the kernels (fg_quant_*.c, fg_dispatch.c, fg_cpu.c) and their users
 * (the forward pass in C, the Cython wrappers through fastgguf/kernels.pxd).
 *
 * Types are ggml type ids. Weights are rows of blocks, each row `fg_row_size(type, n)` bytes apart (or a given
 * stride). Before a matrix product the float activation vector is quantized ONCE into fg_vec_dot_type(wtype)
 * (Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4 weights, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants, F32 for F16/BF16/F32), then every output row is an integer dot.
 *
 * Threading: fg_gemv_rows / fg_gemm_rows compute a slice [r0, r1) of output rows and never start threads; the
 * forward pass calls them from inside its one parallel call (fg_threads.h) per step. fg_gemm is a
 * self-contained convenience (it quantizes and runs its own team) for tests and benchmarks.
 *
 * Kernels trust their inputs (validation happens where data enters: the reader and the Python API). */
#ifndef FG_KERNELS_H
#define FG_KERNELS_H

#include <stddef.h>
#include <stdint.h>

enum fg_type {
    FG_TYPE_F32 = 0,
    FG_TYPE_F16 = 1,
    FG_TYPE_Q4_0 = 2,
    FG_TYPE_Q4_1 = 3,
    FG_TYPE_Q5_0 = 6,
    FG_TYPE_Q5_1 = 7,
    FG_TYPE_Q8_0 = 8,
    FG_TYPE_Q8_1 = 9,
    FG_TYPE_Q2_K = 10,
    FG_TYPE_Q3_K = 11,
    FG_TYPE_Q4_K = 12,
    FG_TYPE_Q5_K = 13,
    FG_TYPE_Q6_K = 14,
    FG_TYPE_Q8_K = 15,
    FG_TYPE_IQ4_NL = 20,
    FG_TYPE_IQ4_XS = 23,
    FG_TYPE_BF16 = 30,
    FG_TYPE_MXFP4 = 39,
    FG_TYPE_MAX = 40
};

enum fg_isa {
    FG_ISA_SCALAR = 0,
    FG_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    FG_ISA_AVX512 = 2, /* AVX-512 F/BW/VL (+VNNI when present) */
    FG_ISA_NEON = 3,   /* ARMv8 NEON (+dotprod, +i8mm when present) */
    FG_ISA_COUNT = 4
};

/* A hint to load the cache line at p for reading (callers outside the kernels: the bandwidth probe,
 * csrc/fg_bandwidth.c). MSVC has no __builtin_prefetch: its intrinsics instead; elsewhere nothing. */
#if defined(__GNUC__) || defined(__clang__)
#define fg_prefetch_line(p) __builtin_prefetch((const void *)(p))
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#include <xmmintrin.h>
#define fg_prefetch_line(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#elif defined(_MSC_VER) && defined(_M_ARM64)
#include <intrin.h>
#define fg_prefetch_line(p) __prefetch((const void *)(p))
#else
#define fg_prefetch_line(p) ((void)(p))
#endif

/* Per-type kernels of one ISA. NULL entries fall back to the scalar reference. */
typedef void (*fg_quantize_fn)(const float *x, void *y, int64_t n);          /* x: (n,) -> y: row of blocks */
typedef void (*fg_dequantize_fn)(const void *x, float *y, int64_t n);        /* x: row of blocks -> y: (n,) */
typedef float (*fg_vec_dot_fn)(int64_t n, const void *w, const void *xq);   /* one weight row . activation */
/* Optional multi-row product: y[r] = dot(W + r*stride, xq) for r in [0, nrows). */
typedef void (*fg_gemv_fn)(int64_t n, const void *w, size_t stride, const void *xq, float *y, int64_t nrows);
/* Optional multi-activation product: y[i*ldy + r] = dot(W + r*stride, xq + i*xq_stride) for i < m, r < nrows.
 * Each weight block is unpacked once per tile of activation rows; results equal the gemv/vec_dot ones exactly. */
typedef void (*fg_gemm_fn)(int64_t n, const void *w, size_t stride, const void *xq, size_t xq_stride, int64_t m,
                           float *y, int64_t ldy, int64_t nrows);

/* Optional row-interleaved copy for decode (fg_type_info packed_size, fg_blocks.h's block_<fmt>_r16): pack writes
 * rows [0, FG_PACK_ROWS * ngroups) of W into wp, group after group (a group: its n / blck packed blocks in order);
 * gemv_packed gives y[r] for those rows from wp, equal to the gemv's bit for bit. */
#define FG_PACK_ROWS 16
typedef void (*fg_pack_fn)(int64_t n, const void *w, size_t stride, void *wp, int64_t ngroups);
typedef void (*fg_gemv_packed_fn)(int64_t n, const void *wp, const void *xq, float *y, int64_t ngroups);

typedef struct {
    fg_quantize_fn quantize;
    fg_dequantize_fn dequantize;
    fg_vec_dot_fn vec_dot;
    fg_gemv_fn gemv;
    fg_gemm_fn gemm; /* NULL: gemv (or vec_dot) once per activation row */
    fg_pack_fn pack; /* the scalar row's (the layout is the format's); NULL: no packed copy */
    fg_gemv_packed_fn gemv_packed;
} fg_type_kernels;

/* ---- types: one table (fg_dispatch.c) owns every fact about a format; Python and the forward pass ask it ---- */
typedef struct {
    int type;          /* ggml type id */
    const char *name;  /* "Q4_0", as ggml names it */
    int64_t blck;      /* elements per block (1 for float types) */
    size_t size;       /* bytes per block */
    int dot_type;      /* activation type its dot product takes; -1: an activation-only type (Q8_1, ...) */
    size_t packed_size; /* bytes of a packed block (FG_PACK_ROWS rows, fg_pack_fn); 0: no packed layout */
} fg_type_info;

/* Kernel kinds, as bits of fg_kernel_mask */
enum { FG_K_QUANTIZE = 1, FG_K_DEQUANTIZE = 2, FG_K_VEC_DOT = 4, FG_K_GEMV = 8, FG_K_GEMM = 16, FG_K_GEMV_PACKED = 32 };

int fg_type_count(void);
const fg_type_info *fg_type_at(int i);        /* i in [0, fg_type_count()) */
/* The kernels an ISA has of its own for a type (its extension included when enabled); 0 where it runs scalar. */
unsigned fg_kernel_mask(int isa, int type);
/* Bytes of the largest activation row of n elements over every weight type's activation type. */
size_t fg_max_act_row_size(int64_t n);
int fg_type_supported(int type);              /* 1 if kernels exist for this weight/activation type */
int64_t fg_blck_size(int type);               /* elements per block (1 for float types), 0 if unknown */
size_t fg_type_size(int type);                /* bytes per block, 0 if unknown */
size_t fg_row_size(int type, int64_t n);      /* bytes of a row of n elements (n multiple of the block size) */
int fg_vec_dot_type(int wtype);               /* activation type for weights of wtype, -1 if unsupported */

/* ---- instruction sets ---- */
int fg_init(void);                            /* idempotent; honours FASTGGUF_ISA; 0 ok, -1 unknown/unavailable */
int fg_isa_compiled(int isa);                 /* 1 if this build holds the ISA's kernels */
int fg_isa_available(int isa);                /* compiled in, and this CPU (and OS) runs it */
int fg_isa_active(void);
int fg_set_isa(int isa);                      /* 0 ok, -1 if not available (active ISA unchanged) */
const char *fg_isa_name(int isa);             /* "scalar", "avx2", "avx512", "neon" */
int fg_isa_from_name(const char *name);       /* -1 if unknown */
const char *fg_cpu_features(void);            /* e.g. "avx2 fma f16c avx512f avx512bw avx512vl avx512vnni" */

/* Extensions inside an ISA, chosen at run time: VNNI (avx512) and dotprod (neon), with i8mm (SMMLA) above dotprod
 * where the CPU has both. They are used where the CPU has them unless the environment sets FASTGGUF_NO_EXT=1 or
 * fg_set_ext(0) is called (all of them: i8mm and dotprod go together). */
int fg_isa_ext_available(int isa);            /* 1 if this CPU has the extension of `isa` (neon: dotprod) */
const char *fg_isa_ext_name(int isa);         /* "vnni", "i8mm" (a CPU with it), "dotprod" or "" */
int fg_ext_enabled(void);
int fg_set_ext(int on);                       /* re-selects the kernels; returns 1 if the active ISA now uses it */

/* ---- kernels (active ISA) ---- */
void fg_quantize_row(int type, const float *x, void *y, int64_t n);
/* The rows llama-quantize writes (ggml_quantize_chunk without an importance matrix): the scalar reference of
 * fg_quantize_row, except IQ4_NL, whose file quantizer (quantize_iq4_nl) tries 7 trial scales either side of the
 * first guess where quantize_row_iq4_nl_ref tries none. */
void fg_quantize_row_file(int type, const float *x, void *y, int64_t n);
void fg_quantize_row_iq4_nl_search(const float *x, void *y, int64_t n);
void fg_dequantize_row(int type, const void *x, float *y, int64_t n);
float fg_vec_dot(int wtype, int64_t n, const void *w, const void *xq);

/* Y rows r0..r1 of W (rows of n elements, `stride` bytes apart) times one quantized activation vector. */
void fg_gemv_rows(int wtype, const void *w, size_t stride, int64_t n, const void *xq, float *y,
                  int64_t r0, int64_t r1);
/* m activation rows (xq_stride bytes apart): Y[i*ldy + r] = dot(W_r, xq_i) for i < m, r in [r0, r1). */
void fg_gemm_rows(int wtype, const void *w, size_t stride, int64_t n, const void *xq, size_t xq_stride,
                  int64_t m, float *y, int64_t ldy, int64_t r0, int64_t r1);

/* The packed copy of a matrix for decode (fg_pack_fn; Model(repack=True)): fg_packed_size gives the bytes of the copy
 * of its first rows - rows % FG_PACK_ROWS rows (0: the type has no packed layout), fg_pack_rows writes it, and
 * fg_gemv_rows_packed is fg_gemv_rows reading the rows it holds from it (the rest, and a slice's ends that are not
 * whole groups, from W): equal results. */
size_t fg_packed_size(int type, int64_t rows, int64_t n);
void fg_pack_rows(int type, const void *w, size_t stride, int64_t rows, int64_t n, void *wp);
void fg_gemv_rows_packed(int wtype, const void *w, size_t stride, const void *wp, int64_t n, const void *xq, float *y,
                         int64_t r0, int64_t r1);

/* Self-contained: quantize x (m, n) then Y (m, rows) = X . W^T with n_threads (<=0: all). Returns 0, or -1 on
 * allocation failure / unsupported type. */
int fg_gemm(int wtype, const void *w, size_t stride, int64_t rows, int64_t n, const float *x, int64_t m,
            float *y, int n_threads);

/* Kernel table of one ISA with its extension when enabled (for tests that compare ISAs directly); NULL entries
 * mean "scalar". */
const fg_type_kernels *fg_kernels_of(int isa, int type);

/* Split `n` rows among `nth` threads; rows are handed out in multiples of `align` so each thread owns whole
 * cache lines of output and the same rows on every call. */
static inline void fg_split_rows(int64_t n, int nth, int ith, int64_t align, int64_t *r0, int64_t *r1) {
    int64_t chunks = (n + align - 1) / align;
    int64_t per = chunks / nth, extra = chunks % nth;
    int64_t c0 = ith * per + (ith < extra ? ith : extra);
    int64_t c1 = c0 + per + (ith < extra ? 1 : 0);
    *r0 = c0 * align < n ? c0 * align : n;
    *r1 = c1 * align < n ? c1 * align : n;
}

#endif
