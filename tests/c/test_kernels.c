/* C-level check of every SIMD kernel against the scalar reference, for each ISA this CPU runs (with and without
 * its run-time extensions: VNNI on avx512, dotprod and i8mm on neon), on random data at odd sizes. NEON's extensions go
 * on and off together (fg_set_ext): .ci/kernels.sh runs this under qemu on CPUs with i8mm, with dotprod alone and
 * with neither, so each path runs somewhere. The i8mm gemms (SMMLA) equal the gemv of each activation bit for bit
 * (their gemv is the dotprod one) in every gemm check here: test_type's m = 1..9 x rows 1..27, and test_gemm_many.
 *
 * Build (see .ci/kernels.sh): cc -Icsrc tests/c/test_kernels.c csrc/fg_cpu.c csrc/fg_dispatch.c
 *                               csrc/fg_quant_float.c csrc/fg_quant_q4_0.c csrc/fg_quant_q4_1.c csrc/fg_quant_q8.c
 *                               csrc/fg_quant_q8_k.c csrc/fg_quant_q4_k.c ... (every format file) -lm
 * Exit status 0 when everything passed; the last line reads "kernels: N passed, M failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_kernels.h"

/* Dot products may differ from the scalar reference only by float summation order: bound the difference
 * relative to sum |w_i x_i| (exact integer block sums, so this is pure accumulation error). */
#define DOT_RTOL 2e-5

static int passed, failed;

static void check(int ok, const char *what, const char *isa, int type, long n, long extra) {
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAIL %s isa=%s type=%d n=%ld (%ld)\n", what, isa, type, n, extra);
    }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* Random floats at a few scales, with ties for the rounding: in every 4th block of 32 the largest magnitude is
 * 127 so d = 1 and the other elements k + 0.5 land exactly on roundf's half-way points. */
static void fill(float *x, long n, int salt) {
    for (long i = 0; i < n; i++) x[i] = frand() * (salt % 3 == 0 ? 1.0f : salt % 3 == 1 ? 30.0f : 1e-3f);
    for (long b = 0; b + 32 <= n; b += 128) {
        for (int j = 0; j < 32; j++) x[b + j] = (float)((int)(frand() * 120)) + (j & 1 ? 0.5f : -0.5f);
        x[b + 5] = 127.0f;
    }
    if (n >= 64) memset(x + n - 32, 0, 32 * sizeof(float)); /* an all-zero block: d = 0 */
    if (n >= 768) {
        memset(x + n - 256, 0, 256 * sizeof(float)); /* an all-zero super-block */
        x[256 + 3] = -200.0f;                         /* largest magnitude twice, opposite signs: the first wins */
        x[256 + 7] = 200.0f;
    }
}

static const int types[] = {FG_TYPE_F32, FG_TYPE_F16, FG_TYPE_BF16, FG_TYPE_Q4_0, FG_TYPE_Q4_1, FG_TYPE_Q8_0,
                            FG_TYPE_Q8_1, FG_TYPE_Q8_K, FG_TYPE_Q4_K, FG_TYPE_Q6_K, FG_TYPE_Q5_0, FG_TYPE_Q5_1,
                            FG_TYPE_Q5_K, FG_TYPE_Q3_K, FG_TYPE_Q2_K,
                            FG_TYPE_IQ4_NL, FG_TYPE_IQ4_XS, FG_TYPE_MXFP4};
static const long sizes[] = {32, 64, 96, 544, 576, 608, 1536, 4128};
static const long k_sizes[] = {256, 512, 768, 2304, 4352}; /* super-block types (QK_K = 256) */
static const long odd_float_sizes[] = {1, 7, 13, 33, 100, 577};
static const long row_counts[] = {1, 2, 3, 4, 5, 7, 9, 17, 27}; /* 27: a 16-row tile and 11 more (both halves) */

/* The row-lane tiles that take the scalar reference's float step per block (no FMA) equal the scalar vec_dot bit for
 * bit, in vec_dot, gemv and gemm. tests/test_kernels.py checks x86's; it cannot run on aarch64, so NEON's are
 * checked here (the dotprod tiles: base NEON has none), and x86's Q5_0 and table formats too (Q5_0, IQ4_NL, MXFP4
 * on AVX2 and AVX-512; IQ4_XS with VNNI). */
static int tile_equals_scalar(int isa, int type) {
    const int ext = fg_ext_enabled() && fg_isa_ext_available(isa);
    if (isa == FG_ISA_AVX2 || isa == FG_ISA_AVX512)
        return type == FG_TYPE_Q5_0 || type == FG_TYPE_IQ4_NL || type == FG_TYPE_MXFP4 ||
               (ext && type == FG_TYPE_IQ4_XS);
    if (isa != FG_ISA_NEON || !ext) return 0;
    return type == FG_TYPE_Q4_1 || type == FG_TYPE_Q5_0 || type == FG_TYPE_Q5_1 || type == FG_TYPE_IQ4_NL ||
           type == FG_TYPE_MXFP4 || type == FG_TYPE_Q4_K || type == FG_TYPE_Q5_K || type == FG_TYPE_Q6_K;
}

/* The row-interleaved copy (fg_pack_fn) of the first whole groups of `maxr` rows: the ISA's own gemv_packed equals
 * its gemv bit for bit (an ISA without one falls back to the scalar gemv_packed: equal to the scalar vec_dot, yvec),
 * and the dispatched fg_gemv_rows_packed over slices that start and end inside groups gives the slice's whole groups
 * from the copy, its ends from the gemv, writing nothing outside its rows. */
static void test_packed(int isa, const char *name, int type, long n, const unsigned char *w, size_t stride, long maxr,
                        const unsigned char *xq, const float *yvec) {
    const fg_type_kernels *ref = fg_kernels_of(FG_ISA_SCALAR, type), *k = fg_kernels_of(isa, type);
    const size_t bytes = fg_packed_size(type, maxr, n);
    if (!bytes) return;
    const long groups = maxr / FG_PACK_ROWS;
    unsigned char *wp = malloc(bytes); /* exactly the copy's bytes: ASan sees a read past it */
    float *y = malloc((maxr + 1) * sizeof(float)), *yg = malloc(maxr * sizeof(float));
    if (k->gemv) k->gemv(n, w, stride, xq, yg, maxr); /* the gemv's rows, and the packed gemv's expected ones: */
    else memcpy(yg, yvec, maxr * sizeof(float));
    const float *yp = k->gemv_packed ? yg : yvec;
    ref->pack(n, w, stride, wp, groups);
    fg_gemv_packed_fn fn = k->gemv_packed ? k->gemv_packed : ref->gemv_packed;
    for (long r = 0; r <= maxr; r++) y[r] = NAN;
    fn(n, wp, xq, y, groups);
    int ok = 1;
    for (long r = 0; r <= maxr; r++) ok &= r < groups * FG_PACK_ROWS ? y[r] == yp[r] : isnan(y[r]);
    check(ok, "gemv_packed", name, type, n, groups);
    static const long slices[][2] = {{0, 27}, {0, 16}, {3, 27}, {3, 16}, {5, 9}, {16, 27}, {0, 149}, {17, 140}};
    if (fg_set_isa(isa) == 0)
        for (size_t s = 0; s < sizeof(slices) / sizeof(slices[0]); s++) {
            const long r0 = slices[s][0], r1 = slices[s][1] < maxr ? slices[s][1] : maxr;
            const long p0 = (r0 + FG_PACK_ROWS - 1) / FG_PACK_ROWS * FG_PACK_ROWS; /* the slice's whole groups */
            const long p1 = r1 / FG_PACK_ROWS * FG_PACK_ROWS;
            for (long r = 0; r <= maxr; r++) y[r] = NAN;
            fg_gemv_rows_packed(type, w, stride, wp, n, xq, y, r0, r1);
            ok = 1;
            for (long r = 0; r <= maxr; r++)
                ok &= r < r0 || r >= r1 ? isnan(y[r]) : y[r] == (r >= p0 && r < p1 ? yp[r] : yg[r]);
            check(ok, "gemv_rows_packed", name, type, n, r0 * 100 + r1);
        }
    free(wp), free(y), free(yg);
}

/* test_packed's check on 149 rows (9 groups: the kernels' 4 streams twice, then one group alone, 5 rows past). */
static void test_packed_many(int isa, const char *name, int type, long n) {
    const long rows = 149;
    const int xtype = fg_vec_dot_type(type);
    const size_t stride = fg_row_size(type, n);
    float *f = malloc(n * sizeof(float)), *yvec = malloc(rows * sizeof(float));
    unsigned char *w = malloc(stride * rows), *xq = malloc(fg_row_size(xtype, n));
    for (long r = 0; r < rows; r++) {
        fill(f, n, (int)(3 * r + n));
        fg_kernels_of(FG_ISA_SCALAR, type)->quantize(f, w + r * stride, n);
    }
    fill(f, n, 11);
    fg_kernels_of(FG_ISA_SCALAR, xtype)->quantize(f, xq, n);
    for (long r = 0; r < rows; r++) yvec[r] = fg_kernels_of(FG_ISA_SCALAR, type)->vec_dot(n, w + r * stride, xq);
    test_packed(isa, name, type, n, w, stride, rows, xq, yvec);
    free(f), free(yvec), free(w), free(xq);
}

static void test_type(int isa, const char *name, int type, long n) {
    const fg_type_kernels *ref = fg_kernels_of(FG_ISA_SCALAR, type), *k = fg_kernels_of(isa, type);
    const int xtype = fg_vec_dot_type(type);
    const size_t rs = fg_row_size(type, n), pad = 64, stride = rs + pad; /* rows apart by more than a row */
    const long maxr = 27;
    float *x = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    float *wf = malloc(n * maxr * sizeof(float)), *y = malloc(maxr * sizeof(float));
    unsigned char *q1 = malloc(rs + 1), *q2 = malloc(rs + 1), *w = malloc(stride * maxr);
    fill(x, n, (int)n + type);

    /* quantize and dequantize: bit-exact */
    if (k->quantize) {
        ref->quantize(x, q1, n);
        k->quantize(x, q2, n);
        check(memcmp(q1, q2, rs) == 0, "quantize", name, type, n, 0);
    }
    ref->quantize(x, q1, n);
    if (k->dequantize) {
        ref->dequantize(q1, a, n);
        k->dequantize(q1, b, n);
        check(memcmp(a, b, n * sizeof(float)) == 0, "dequantize", name, type, n, 0);
    }

    if (xtype >= 0) {
        /* weights: maxr rows `stride` bytes apart, plus their dequantized values */
        for (long r = 0; r < maxr; r++) {
            fill(wf + r * n, n, (int)(r + 7 * n));
            ref->quantize(wf + r * n, w + r * stride, n);
            ref->dequantize(w + r * stride, wf + r * n, n);
        }
        const fg_type_kernels *xk = fg_kernels_of(FG_ISA_SCALAR, xtype);
        unsigned char *xq = malloc(fg_row_size(xtype, n));
        xk->quantize(x, xq, n);
        xk->dequantize(xq, a, n);
        double *mag = malloc(maxr * sizeof(double));
        float *yref = malloc(maxr * sizeof(float));
        for (long r = 0; r < maxr; r++) {
            mag[r] = 1e-30;
            for (long i = 0; i < n; i++) mag[r] += fabs((double)wf[r * n + i] * a[i]);
            yref[r] = ref->vec_dot(n, w + r * stride, xq);
        }
        if (k->vec_dot) {
            for (long r = 0; r < maxr; r++) {
                float d = k->vec_dot(n, w + r * stride, xq);
                check(fabs((double)d - yref[r]) <= DOT_RTOL * mag[r], "vec_dot", name, type, n, r);
                if (tile_equals_scalar(isa, type)) check(d == yref[r], "vec_dot-exact", name, type, n, r);
            }
        }
        if (k->gemv) {
            for (size_t c = 0; c < sizeof(row_counts) / sizeof(row_counts[0]); c++) {
                long nr = row_counts[c];
                for (long r = 0; r < maxr; r++) y[r] = NAN;
                k->gemv(n, w, stride, xq, y, nr);
                int ok = 1;
                for (long r = 0; r < nr; r++) ok &= fabs((double)y[r] - yref[r]) <= DOT_RTOL * mag[r];
                for (long r = nr; r < maxr; r++) ok &= isnan(y[r]); /* nothing written past the rows */
                check(ok, "gemv", name, type, n, nr);
                if (tile_equals_scalar(isa, type)) {
                    ok = 1;
                    for (long r = 0; r < nr; r++) ok &= y[r] == yref[r];
                    check(ok, "gemv-exact", name, type, n, nr);
                }
            }
        }
        if (k->gemm && k->gemv) {
            /* m activation rows xs bytes apart into y rows ldy apart: exactly gemv per activation row, and nothing
             * written outside the (m, nr) tile */
            enum { M = 9 }; /* m = 1..9: whole activation tiles (8 for the K-quants) and every remainder */
            /* not the row size: a real stride (+4 keeps the 4-byte alignment of Q8_K's float d and int16 bsums) */
            const size_t xs = fg_row_size(xtype, n) + 4;
            const long ldy = maxr + 1;
            unsigned char *xm = malloc(xs * M);
            float *ym = malloc(M * ldy * sizeof(float)), *ye = malloc(maxr * sizeof(float));
            for (int i = 0; i < M; i++) {
                fill(a, n, (int)n + 31 * i);
                xk->quantize(a, xm + i * xs, n);
            }
            for (size_t c = 0; c < sizeof(row_counts) / sizeof(row_counts[0]); c++) {
                long nr = row_counts[c];
                for (int m = 1; m <= M; m++) {
                    for (long j = 0; j < M * ldy; j++) ym[j] = NAN;
                    k->gemm(n, w, stride, xm, xs, m, ym, ldy, nr);
                    int ok = 1;
                    for (int i = 0; i < M; i++) {
                        k->gemv(n, w, stride, xm + i * xs, ye, nr);
                        for (long r = 0; r < ldy; r++)
                            ok &= (i < m && r < nr) ? ym[i * ldy + r] == ye[r] : isnan(ym[i * ldy + r]);
                    }
                    check(ok, "gemm", name, type, n, nr * 10 + m);
                }
            }
            xk->dequantize(xq, a, n); /* a back to the activation the checks below expect */
            free(xm), free(ym), free(ye);
        }
        /* the dispatched row slice, as the forward pass calls it */
        if (fg_set_isa(isa) == 0) {
            for (long r = 0; r < maxr; r++) y[r] = NAN;
            fg_gemv_rows(type, w, stride, n, xq, y, 3, 16);
            int ok = isnan(y[2]) && isnan(y[16]);
            for (long r = 3; r < 16; r++) ok &= fabs((double)y[r] - yref[r]) <= DOT_RTOL * mag[r];
            check(ok, "gemv_rows", name, type, n, 13);
        }
        test_packed(isa, name, type, n, w, stride, maxr, xq, yref);
        free(xq);
        free(mag);
        free(yref);
    }
    free(x), free(a), free(b), free(wf), free(y), free(q1), free(q2), free(w);
}

/* Non-finite activations stay visible (issue 24): one NaN or inf in an activation row makes every output of that row
 * non-finite (NaN through a quantized activation: its block's scale is NaN) for every weight type, through the
 * dispatched quantize + gemm of `isa`, while the other rows of the batch stay finite; the activation blocks are the
 * scalar reference's bytes. Odd block counts, the bad value first, mid-block or last. */
static void test_nonfinite(int isa, const char *name) {
    enum { R = 5, M = 3 };
    const float bad[] = {NAN, INFINITY, -INFINITY};
    if (fg_set_isa(isa) != 0) return;
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        const int type = types[t], xtype = fg_vec_dot_type(type);
        if (xtype < 0) continue;
        const long n = fg_blck_size(type) == 256 ? 768 : 96;
        const size_t rs = fg_row_size(type, n), xs = fg_row_size(xtype, n);
        float *x = malloc(M * n * sizeof(float)), *y = malloc(M * R * sizeof(float));
        unsigned char *w = malloc(rs * R), *q1 = malloc(xs), *q2 = malloc(xs);
        for (long r = 0; r < R; r++) {
            fill(x, n, (int)(r + 3 * n));
            fg_kernels_of(FG_ISA_SCALAR, type)->quantize(x, w + r * rs, n);
        }
        for (int b = 0; b < 3; b++) {
            const long pos[] = {0, n / 2 + 3, n - 1};
            for (int p = 0; p < 3; p++) {
                for (int i = 0; i < M; i++) fill(x + i * n, n, (int)n + i);
                x[n + pos[p]] = bad[b];
                int ok = fg_gemm(type, w, rs, R, n, x, M, y, 1) == 0;
                for (long r = 0; r < R; r++) {
                    ok &= isfinite(y[r]) && isfinite(y[2 * R + r]);
                    ok &= xtype == FG_TYPE_F32 ? !isfinite(y[R + r]) : isnan(y[R + r]);
                }
                check(ok, "nonfinite-gemm", name, type, n, b * 10 + p);
                const fg_type_kernels *xk = fg_kernels_of(isa, xtype);
                if (xk->quantize) {
                    fg_kernels_of(FG_ISA_SCALAR, xtype)->quantize(x + n, q1, n);
                    xk->quantize(x + n, q2, n);
                    check(memcmp(q1, q2, xs) == 0, "nonfinite-quantize", name, xtype, n, b * 10 + p);
                }
                fg_quantize_row(xtype, x + n, q2, n);
                const float d = fg_vec_dot(type, n, w, q2);
                check(xtype == FG_TYPE_F32 ? !isfinite(d) : isnan(d), "nonfinite-vec_dot", name, type, n, b * 10 + p);
            }
        }
        free(x), free(y), free(w), free(q1), free(q2);
    }
}

/* Tiles built by FG_KERNELS_FROM_TILE8 restart their accumulators' load every FG_KC = 128 blocks: the sizes above
 * cross that for blocks of 32 (4128) but not for super-blocks, so the exact tiles of the K-quants get one size past
 * 128 super-blocks here (9 rows, 3 activations: every pair equals the scalar vec_dot, so gemm == gemv too). */
static void test_kq_chunks(int isa, const char *name) {
    static const int ktypes[] = {FG_TYPE_Q4_K, FG_TYPE_Q5_K, FG_TYPE_Q6_K, FG_TYPE_IQ4_XS};
    const long n = 129 * 256, R = 9, M = 3;
    for (size_t t = 0; t < sizeof(ktypes) / sizeof(ktypes[0]); t++) {
        const int type = ktypes[t], xtype = fg_vec_dot_type(type);
        const fg_type_kernels *ref = fg_kernels_of(FG_ISA_SCALAR, type), *k = fg_kernels_of(isa, type);
        if (!tile_equals_scalar(isa, type) || !k->gemm) continue;
        const size_t rs = fg_row_size(type, n), xs = fg_row_size(xtype, n);
        float *f = malloc(n * sizeof(float)), *y = malloc(M * R * sizeof(float));
        unsigned char *w = malloc(rs * R), *x = malloc(xs * M);
        for (long r = 0; r < R; r++) fill(f, n, (int)(r + 3)), ref->quantize(f, w + r * rs, n);
        for (long a = 0; a < M; a++)
            fill(f, n, (int)(a + 11)), fg_kernels_of(FG_ISA_SCALAR, xtype)->quantize(f, x + a * xs, n);
        k->gemm(n, w, rs, x, xs, M, y, R, R);
        int ok = 1;
        for (long a = 0; a < M; a++)
            for (long r = 0; r < R; r++) ok &= y[a * R + r] == ref->vec_dot(n, w + r * rs, x + a * xs);
        check(ok, "gemm-exact-chunks", name, type, n, 0);
        free(f), free(y), free(w), free(x);
    }
}

static void test_gemm_m(int isa, const char *name, const long M, const long R, const long n) {
    const long ldy = R + 3;
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        const int type = types[t], xtype = fg_vec_dot_type(type);
        const fg_type_kernels *ref = fg_kernels_of(FG_ISA_SCALAR, type), *k = fg_kernels_of(isa, type);
        if (!k->gemm || !k->gemv) continue;
        const size_t rs = fg_row_size(type, n), xs = fg_row_size(xtype, n) + 4;
        float *f = malloc(n * sizeof(float)), *y = malloc(M * ldy * sizeof(float)), *ye = malloc(R * sizeof(float));
        unsigned char *w = malloc(rs * R), *x = malloc(xs * M);
        for (long r = 0; r < R; r++) fill(f, n, (int)(r + 5)), ref->quantize(f, w + r * rs, n);
        for (long a = 0; a < M; a++)
            fill(f, n, (int)(a + 17)), fg_kernels_of(FG_ISA_SCALAR, xtype)->quantize(f, x + a * xs, n);
        for (long j = 0; j < M * ldy; j++) y[j] = NAN;
        k->gemm(n, w, rs, x, xs, M, y, ldy, R);
        int ok = 1;
        for (long a = 0; a < M; a++) {
            k->gemv(n, w, rs, x + a * xs, ye, R);
            for (long r = 0; r < ldy; r++) ok &= r < R ? y[a * ldy + r] == ye[r] : isnan(y[a * ldy + r]);
        }
        check(ok, "gemm-many", name, type, n, M * 100 + R);
        free(f), free(y), free(ye), free(w), free(x);
    }
}

/* Gemms that change their loop from many activations up (the panels of FG_GEMM_FROM_PANEL from 32: 64 activations
 * per pass, 64 blocks per panel; Q4_0's and Q8_0's VNNI panels, fg_panel_vnni.h: 256 activations per pass, 8 at a
 * time, 32 blocks per panel; the K-quants' VNNI gemm: 8 activations at a time over each 16-row super-block,
 * unpacked in zmm) against the gemv of each activation, bit for bit, as the m <= 9 test above: 32, 65 (a whole pass of
 * 64, then 1), 70 activations (8 x 8, then 6) and 263 (a pass of 256, then 7), 37 rows (two 16-row tiles, then 5;
 * and 29: one, then 13) and 72 blocks of 32 (a 64-block panel, then 8; or two of 32, then 8) or 9 super-blocks, with
 * y rows ldy apart and nothing written outside the (m, rows) tile. A failure names M * 100 + rows. */
static void test_gemm_many(int isa, const char *name) {
    static const long ms[] = {32, 65, 70, 263};
    for (size_t c = 0; c < sizeof(ms) / sizeof(ms[0]); c++) test_gemm_m(isa, name, ms[c], 37, 2304);
    test_gemm_m(isa, name, 70, 29, 2304); /* a 16-row tile, then 13: the K-quants' zmm unpack of 9..15 rows */
    /* the K-quant gemms' columns of FG_KQ_KC = 8 super-blocks: 17 super-blocks (two columns, then 1) at the
     * activation counts around their thresholds and passes (8, 9, 33, 65) and rows that fill no 8- or 16-row block */
    static const long mk[] = {1, 2, 3, 7, 8, 9, 33, 65}, rk[] = {1, 3, 5, 13, 21}; /* 2, 3: i8mm's activation pairs */
    for (size_t c = 0; c < sizeof(mk) / sizeof(mk[0]); c++)
        for (size_t r = 0; r < sizeof(rk) / sizeof(rk[0]); r++) test_gemm_m(isa, name, mk[c], rk[r], 17 * 256);
}

static void test_isa(int isa, const char *name) {
    test_nonfinite(isa, name);
    for (int t = 0; t < fg_type_count(); t++)
        if (fg_type_at(t)->packed_size) test_packed_many(isa, name, fg_type_at(t)->type, 3 * fg_type_at(t)->blck * 3);
    test_kq_chunks(isa, name);
    test_gemm_many(isa, name);
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        if (fg_blck_size(types[t]) == 256)
            for (size_t s = 0; s < sizeof(k_sizes) / sizeof(k_sizes[0]); s++) test_type(isa, name, types[t], k_sizes[s]);
        else
            for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) test_type(isa, name, types[t], sizes[s]);
        if (fg_blck_size(types[t]) == 1)
            for (size_t s = 0; s < sizeof(odd_float_sizes) / sizeof(odd_float_sizes[0]); s++)
                test_type(isa, name, types[t], odd_float_sizes[s]);
    }
}

int main(void) {
    fg_init();
    printf("cpu: %s\n", fg_cpu_features());
    /* An ISA is available only if this build holds its code; -DFG_NO_SIMD builds scalar only (as MSVC does). */
    for (int isa = 0; isa < FG_ISA_COUNT; isa++) {
        check(!fg_isa_available(isa) || fg_isa_compiled(isa), "available-implies-compiled", fg_isa_name(isa), 0, 0, 0);
#ifdef FG_NO_SIMD
        check(fg_isa_available(isa) == (isa == FG_ISA_SCALAR), "no-simd-build", fg_isa_name(isa), 0, 0, 0);
#endif
    }
    printf("compiled:");
    for (int isa = 0; isa < FG_ISA_COUNT; isa++)
        if (fg_isa_compiled(isa)) printf(" %s", fg_isa_name(isa));
    printf("\n");
    test_nonfinite(FG_ISA_SCALAR, "scalar");
    for (int isa = 1; isa < FG_ISA_COUNT; isa++) {
        if (!fg_isa_available(isa)) continue;
        char name[32];
        if (fg_isa_ext_available(isa)) {
            fg_set_ext(1);
            snprintf(name, sizeof name, "%s+%s", fg_isa_name(isa), fg_isa_ext_name(isa));
            int before = failed;
            test_isa(isa, name);
            printf("%s: %s\n", name, failed == before ? "ok" : "FAILED");
            fg_set_ext(0);
        }
        int before = failed;
        test_isa(isa, fg_isa_name(isa));
        printf("%s: %s\n", fg_isa_name(isa), failed == before ? "ok" : "FAILED");
        fg_set_ext(1);
    }
    printf("kernels: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
