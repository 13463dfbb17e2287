/* Type facts, the run-time kernel table, and the row-parallel GEMV/GEMM built on the dispatched dot products. */
#include <stdlib.h>
#include <string.h>
#include "fg_simd.h"
#include "fg_threads.h"

/* Each format file exports its kernel table: a row per ISA, then a row per ISA extension (fg_simd.h). */
#define FG_TABLES(t) extern const fg_type_kernels fg_##t##_kernels[FG_KERNEL_ROWS];
FG_TABLES(f32)
FG_TABLES(f16)
FG_TABLES(bf16)
FG_TABLES(q4_0)
FG_TABLES(q4_1)
FG_TABLES(q8_0)
FG_TABLES(q8_1)
FG_TABLES(q8_k)
FG_TABLES(q4_k)
FG_TABLES(q6_k)
FG_TABLES(q5_0)
FG_TABLES(q5_1)
FG_TABLES(q5_k)
FG_TABLES(q3_k)
FG_TABLES(q2_k)
FG_TABLES(iq4_nl)
FG_TABLES(iq4_xs)
FG_TABLES(mxfp4)

/* The type table: one row per format. Adding a format = its fg_quant_<fmt>.c plus one row here. */
static const struct {
    fg_type_info info;
    const fg_type_kernels *tab; /* [FG_KERNEL_ROWS] */
} types[] = {
    {{FG_TYPE_F32, "F32", 1, 4, FG_TYPE_F32}, fg_f32_kernels},
    {{FG_TYPE_F16, "F16", 1, 2, FG_TYPE_F32}, fg_f16_kernels},
    {{FG_TYPE_BF16, "BF16", 1, 2, FG_TYPE_F32}, fg_bf16_kernels},
    {{FG_TYPE_Q4_0, "Q4_0", QK4_0, sizeof(block_q4_0), FG_TYPE_Q8_0}, fg_q4_0_kernels},
    {{FG_TYPE_Q4_1, "Q4_1", QK4_1, sizeof(block_q4_1), FG_TYPE_Q8_1}, fg_q4_1_kernels},
    {{FG_TYPE_Q8_0, "Q8_0", QK8_0, sizeof(block_q8_0), FG_TYPE_Q8_0}, fg_q8_0_kernels},
    {{FG_TYPE_Q8_1, "Q8_1", QK8_1, sizeof(block_q8_1), -1}, fg_q8_1_kernels},
    {{FG_TYPE_Q8_K, "Q8_K", QK_K, sizeof(block_q8_K), -1}, fg_q8_k_kernels},
    {{FG_TYPE_Q4_K, "Q4_K", QK_K, sizeof(block_q4_K), FG_TYPE_Q8_K, sizeof(block_q4_K_r16)}, fg_q4_k_kernels},
    {{FG_TYPE_Q6_K, "Q6_K", QK_K, sizeof(block_q6_K), FG_TYPE_Q8_K}, fg_q6_k_kernels},
    {{FG_TYPE_Q5_0, "Q5_0", QK5_0, sizeof(block_q5_0), FG_TYPE_Q8_0}, fg_q5_0_kernels},
    {{FG_TYPE_Q5_1, "Q5_1", QK5_1, sizeof(block_q5_1), FG_TYPE_Q8_1}, fg_q5_1_kernels},
    {{FG_TYPE_Q5_K, "Q5_K", QK_K, sizeof(block_q5_K), FG_TYPE_Q8_K}, fg_q5_k_kernels},
    {{FG_TYPE_Q3_K, "Q3_K", QK_K, sizeof(block_q3_K), FG_TYPE_Q8_K}, fg_q3_k_kernels},
    {{FG_TYPE_Q2_K, "Q2_K", QK_K, sizeof(block_q2_K), FG_TYPE_Q8_K}, fg_q2_k_kernels},
    {{FG_TYPE_IQ4_NL, "IQ4_NL", QK4_NL, sizeof(block_iq4_nl), FG_TYPE_Q8_0}, fg_iq4_nl_kernels},
    {{FG_TYPE_IQ4_XS, "IQ4_XS", QK_K, sizeof(block_iq4_xs), FG_TYPE_Q8_K}, fg_iq4_xs_kernels},
    {{FG_TYPE_MXFP4, "MXFP4", QK_MXFP4, sizeof(block_mxfp4), FG_TYPE_Q8_0}, fg_mxfp4_kernels},
};
#define N_TYPES ((int)(sizeof(types) / sizeof(types[0])))

static int find(int type) {
    for (int i = 0; i < N_TYPES; i++)
        if (types[i].info.type == type) return i;
    return -1;
}

int fg_type_count(void) { return N_TYPES; }
const fg_type_info *fg_type_at(int i) { return i >= 0 && i < N_TYPES ? &types[i].info : NULL; }

size_t fg_max_act_row_size(int64_t n) {
    size_t best = 0;
    for (int i = 0; i < N_TYPES; i++) {
        size_t b = types[i].info.dot_type < 0 ? 0 : fg_row_size(types[i].info.dot_type, n);
        best = b > best ? b : best;
    }
    return best;
}

int fg_type_supported(int type) { return find(type) >= 0; }
int64_t fg_blck_size(int type) { int i = find(type); return i < 0 ? 0 : types[i].info.blck; }
size_t fg_type_size(int type) { int i = find(type); return i < 0 ? 0 : types[i].info.size; }
size_t fg_row_size(int type, int64_t n) {
    int i = find(type);
    return i < 0 ? 0 : (size_t)(n / types[i].info.blck) * types[i].info.size;
}
int fg_vec_dot_type(int wtype) { int i = find(wtype); return i < 0 ? -1 : types[i].info.dot_type; }

/* ISA extensions: used where the CPU has them unless FASTGGUF_NO_EXT=1 or fg_set_ext(0). */
static int ext_on = -1;

int fg_isa_ext_available(int isa) {
    return (isa == FG_ISA_AVX512 && fg_isa_available(isa) && fg_cpu_has_vnni()) ||
           (isa == FG_ISA_NEON && fg_isa_available(isa) && fg_cpu_has_dotprod());
}

const char *fg_isa_ext_name(int isa) {
    return isa == FG_ISA_AVX512 ? "vnni" : isa == FG_ISA_NEON ? (fg_cpu_has_i8mm() ? "i8mm" : "dotprod") : "";
}

int fg_ext_enabled(void) {
    if (ext_on < 0) {
        const char *env = getenv("FASTGGUF_NO_EXT");
        ext_on = !(env && *env && strcmp(env, "0") != 0);
    }
    return ext_on;
}

static int row_empty(const fg_type_kernels *k) {
    return !k->quantize && !k->dequantize && !k->vec_dot && !k->gemv && !k->gemm;
}

/* k overlaid with an extension row's entries. */
static void overlay(fg_type_kernels *k, const fg_type_kernels *e) {
    if (e->quantize) k->quantize = e->quantize;
    if (e->dequantize) k->dequantize = e->dequantize;
    if (e->vec_dot) k->vec_dot = e->vec_dot;
    if (e->gemv) k->gemv = e->gemv;
    /* a gemm must match the gemv it stands for: an extension's gemv without its gemm drops the base one */
    if (e->gemv || e->gemm) k->gemm = e->gemm;
    if (e->gemv_packed) k->gemv_packed = e->gemv_packed;
}

/* Per type and ISA: the ISA's row (an empty AVX-512 row: the AVX2 one, as ggml's arch-fallback.h maps a kernel an
 * arch lacks to one it can run) overlaid with the extension's entries when the extension is in use: VNNI on avx512;
 * dotprod on neon, then i8mm where the CPU has it (a level above dotprod, which every i8mm CPU has). */
static fg_type_kernels effective[sizeof(types) / sizeof(types[0])][FG_ISA_COUNT];
static int effective_ext = -1;

static void fill_effective(void) {
    int on = fg_ext_enabled();
    if (effective_ext == on) return;
    for (int i = 0; i < N_TYPES; i++) {
        for (int isa = 0; isa < FG_ISA_COUNT; isa++) {
            fg_type_kernels k = types[i].tab[isa];
            if (isa == FG_ISA_AVX512 && row_empty(&k)) k = types[i].tab[FG_ISA_AVX2];
            if (on && fg_isa_ext_available(isa)) {
                overlay(&k, &types[i].tab[isa == FG_ISA_AVX512 ? FG_ROW_VNNI : FG_ROW_DOTPROD]);
                if (isa == FG_ISA_NEON && fg_cpu_has_i8mm()) overlay(&k, &types[i].tab[FG_ROW_I8MM]);
            }
            effective[i][isa] = k;
        }
    }
    effective_ext = on;
}

unsigned fg_kernel_mask(int isa, int type) {
    const fg_type_kernels *k = fg_kernels_of(isa, type);
    if (!k || !fg_isa_available(isa)) return 0;
    return (k->quantize ? FG_K_QUANTIZE : 0) | (k->dequantize ? FG_K_DEQUANTIZE : 0) | (k->vec_dot ? FG_K_VEC_DOT : 0) |
           (k->gemv ? FG_K_GEMV : 0) | (k->gemm ? FG_K_GEMM : 0) | (k->gemv_packed ? FG_K_GEMV_PACKED : 0);
}

const fg_type_kernels *fg_kernels_of(int isa, int type) {
    int i = find(type);
    if (i < 0 || isa < 0 || isa >= FG_ISA_COUNT) return NULL;
    fill_effective();
    return &effective[i][isa];
}

/* The active table: for each type, the active ISA's kernel where it has one, else the scalar reference. */
static fg_type_kernels active[FG_TYPE_MAX];
static int active_isa = -1;

static void fill(int isa) {
    fill_effective();
    for (int i = 0; i < N_TYPES; i++) {
        const fg_type_kernels *s = &types[i].tab[FG_ISA_SCALAR], *k = &effective[i][isa];
        fg_type_kernels *a = &active[types[i].info.type];
        a->quantize = k->quantize ? k->quantize : s->quantize;
        a->dequantize = k->dequantize ? k->dequantize : s->dequantize;
        a->vec_dot = k->vec_dot ? k->vec_dot : s->vec_dot;
        a->gemv = k->gemv; /* may stay NULL: then rows loop over vec_dot */
        a->gemm = k->gemm; /* may stay NULL: then gemv (or vec_dot) per activation row */
        a->pack = s->pack;
        a->gemv_packed = k->gemv_packed ? k->gemv_packed : s->gemv_packed;
    }
    active_isa = isa;
}

int fg_set_isa(int isa) {
    if (isa < 0 || isa >= FG_ISA_COUNT || !fg_isa_available(isa)) return -1;
    fill(isa);
    return 0;
}

int fg_set_ext(int on) {
    if (active_isa < 0) fg_init();
    ext_on = on != 0;
    fill(active_isa);
    return fg_isa_ext_available(active_isa) && ext_on;
}

int fg_isa_active(void) {
    if (active_isa < 0) fg_init();
    return active_isa;
}

int fg_init(void) {
    const char *env = getenv("FASTGGUF_ISA");
    int best = FG_ISA_SCALAR;
    for (int isa = FG_ISA_COUNT - 1; isa > 0; isa--)
        if (fg_isa_available(isa)) { best = isa; break; }
    if (env && *env) {
        int want = fg_isa_from_name(env);
        if (want < 0 || !fg_isa_available(want)) {
            if (active_isa < 0) fill(best);
            return -1;
        }
        best = want;
    }
    fill(best);
    return 0;
}

static inline const fg_type_kernels *act(int type) {
    if (active_isa < 0) fg_init();
    return &active[type];
}

void fg_quantize_row(int type, const float *x, void *y, int64_t n) { act(type)->quantize(x, y, n); }
void fg_quantize_row_file(int type, const float *x, void *y, int64_t n) {
    if (type == FG_TYPE_IQ4_NL) fg_quantize_row_iq4_nl_search(x, y, n);
    else fg_kernels_of(FG_ISA_SCALAR, type)->quantize(x, y, n);
}
void fg_dequantize_row(int type, const void *x, float *y, int64_t n) { act(type)->dequantize(x, y, n); }
float fg_vec_dot(int wtype, int64_t n, const void *w, const void *xq) { return act(wtype)->vec_dot(n, w, xq); }

void fg_gemv_rows(int wtype, const void *w, size_t stride, int64_t n, const void *xq, float *y, int64_t r0,
                  int64_t r1) {
    const fg_type_kernels *k = act(wtype);
    const char *wr = (const char *)w + (size_t)r0 * stride;
    if (k->gemv) {
        k->gemv(n, wr, stride, xq, y + r0, r1 - r0);
        return;
    }
    for (int64_t r = r0; r < r1; r++, wr += stride) y[r] = k->vec_dot(n, wr, xq);
}

size_t fg_packed_size(int type, int64_t rows, int64_t n) {
    int i = find(type);
    if (i < 0 || !types[i].info.packed_size || n % types[i].info.blck) return 0;
    return (size_t)(rows / FG_PACK_ROWS) * (size_t)(n / types[i].info.blck) * types[i].info.packed_size;
}

void fg_pack_rows(int type, const void *w, size_t stride, int64_t rows, int64_t n, void *wp) {
    act(type)->pack(n, w, stride, wp, rows / FG_PACK_ROWS);
}

/* Rows [r0, r1): the whole groups inside from wp, the rest (r0 or r1 inside a group, rows past the copy) from W. */
void fg_gemv_rows_packed(int wtype, const void *w, size_t stride, const void *wp, int64_t n, const void *xq, float *y,
                         int64_t r0, int64_t r1) {
    const int64_t g0 = (r0 + FG_PACK_ROWS - 1) / FG_PACK_ROWS, g1 = r1 / FG_PACK_ROWS;
    if (g1 <= g0) {
        fg_gemv_rows(wtype, w, stride, n, xq, y, r0, r1);
        return;
    }
    const size_t group = fg_packed_size(wtype, FG_PACK_ROWS, n);
    if (r0 < g0 * FG_PACK_ROWS) fg_gemv_rows(wtype, w, stride, n, xq, y, r0, g0 * FG_PACK_ROWS);
    act(wtype)->gemv_packed(n, (const char *)wp + (size_t)g0 * group, xq, y + g0 * FG_PACK_ROWS, g1 - g0);
    if (g1 * FG_PACK_ROWS < r1) fg_gemv_rows(wtype, w, stride, n, xq, y, g1 * FG_PACK_ROWS, r1);
}

#ifndef FG_GEMM_ROWS
#define FG_GEMM_ROWS 64 /* per-activation setup (row-lane tiles) is paid once per block: 64 beat 16 by ~10-15% on 512 x 576x1536 (q4_0, q8_0) */
#endif
void fg_gemm_rows(int wtype, const void *w, size_t stride, int64_t n, const void *xq, size_t xq_stride, int64_t m,
                  float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const fg_type_kernels *k = act(wtype);
    /* Blocks of FG_GEMM_ROWS weight rows stay in L1/L2 while every activation row passes over them. */
    for (int64_t rb = r0; rb < r1; rb += FG_GEMM_ROWS) {
        int64_t re = rb + FG_GEMM_ROWS < r1 ? rb + FG_GEMM_ROWS : r1;
        if (k->gemm) {
            k->gemm(n, (const char *)w + (size_t)rb * stride, stride, xq, xq_stride, m, y + rb, ldy, re - rb);
            continue;
        }
        for (int64_t i = 0; i < m; i++) {
            const void *xi = (const char *)xq + (size_t)i * xq_stride;
            float *yi = y + i * ldy;
            if (k->gemv) {
                k->gemv(n, (const char *)w + (size_t)rb * stride, stride, xi, yi + rb, re - rb);
            } else {
                for (int64_t r = rb; r < re; r++) yi[r] = k->vec_dot(n, (const char *)w + (size_t)r * stride, xi);
            }
        }
    }
}

/* One fg_gemm call: each thread computes its share of the rows. */
typedef struct {
    int wtype;
    const void *w;
    size_t stride, xq_stride;
    int64_t rows, n, m;
    const char *xq;
    float *y;
} gemm_call;

static void gemm_task(int ith, int nth, void *arg) {
    const gemm_call *a = arg;
    int64_t r0, r1;
    fg_split_rows(a->rows, nth, ith, 16, &r0, &r1);
    fg_gemm_rows(a->wtype, a->w, a->stride, a->n, a->xq, a->xq_stride, a->m, a->y, a->rows, r0, r1);
}

int fg_gemm(int wtype, const void *w, size_t stride, int64_t rows, int64_t n, const float *x, int64_t m, float *y,
            int n_threads) {
    int xtype = fg_vec_dot_type(wtype);
    if (xtype < 0) return -1;
    size_t xq_stride = fg_row_size(xtype, n);
    char *xq = malloc(xq_stride * (size_t)(m > 0 ? m : 1));
    if (!xq) return -1;
    for (int64_t i = 0; i < m; i++) fg_quantize_row(xtype, x + i * n, xq + (size_t)i * xq_stride, n);
    int nth = n_threads > 0 ? n_threads : fg_cpu_count();
    /* a team of its own for this call (a convenience for tests and tools: the forward pass keeps its team) */
    fg_pool *pool = nth > 1 ? fg_pool_new() : NULL;
    gemm_call a = {wtype, w, stride, xq_stride, rows, n, m, xq, y};
    fg_parallel(pool, nth, gemm_task, &a);
    fg_pool_free(pool);
    free(xq);
    return 0;
}
