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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FG_HAVE_X86 1
#include <immintrin.h>

#define FG_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FG_TARGET_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define FG_TARGET_AVX512_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define FG_INLINE_AVX2 static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define FG_INLINE_AVX512 static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))

FG_INLINE_AVX2 float fg_hsum_256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

FG_INLINE_AVX2 float fg_hmax_256(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

FG_INLINE_AVX2 int fg_hsum_256i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

FG_INLINE_AVX2 float fg_f16(uint16_t h) { return _cvtsh_ss(h); }

/* roundf() (half away from zero) on 8 floats, exactly: t = trunc(v); t += sign(v) where |v - t| >= 0.5.
 * v - t is exact for |v| < 2^23, so this matches roundf bit for bit (round-to-nearest-even would not). */
FG_INLINE_AVX2 __m256 fg_roundf_256(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(sign, v));
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
}

/* 32 unsigned bytes . 32 signed bytes -> 8 int32 partial sums (pairs of u8*s8 saturate to int16 first;
 * callers keep |u| <= 15 or |s| <= 127 with |u| <= 128 so nothing saturates). */
FG_INLINE_AVX2 __m256i fg_dot_u8s8_256(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* 16 packed nibbles -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31). */
FG_INLINE_AVX2 __m256i fg_nibbles_256(const uint8_t *qs) {
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* 16 packed nibbles -> 32 floats in element order (4 x 8). */
FG_INLINE_AVX2 void fg_nibbles_ps(const uint8_t *qs, __m256 q[4]) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}

FG_INLINE_AVX512 float fg_hsum_512(__m512 v) { return _mm512_reduce_add_ps(v); }

/* Two blocks' packed nibbles (16 bytes each) -> 64 bytes in 128-bit lanes [lo0 lo1 hi0 hi1]: 5 instructions.
 * Pair it with fg_q8_pair_nib_512, which puts two q8 blocks in the same order. */
FG_INLINE_AVX512 __m512i fg_nibbles_512(const uint8_t *qs0, const uint8_t *qs1) {
    __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qs0)),
                                        _mm_loadu_si128((const __m128i *)qs1), 1);
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1);
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
}

/* Two consecutive 32-byte runs -> one zmm. */
FG_INLINE_AVX512 __m512i fg_load_2x256(const void *p0, const void *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* Two blocks of 32 int8 -> 128-bit lanes [x0[0:16] x1[0:16] x0[16:32] x1[16:32]] (the fg_nibbles_512 order). */
FG_INLINE_AVX512 __m512i fg_q8_pair_nib_512(const int8_t *qs0, const int8_t *qs1) {
    const __m512i v = fg_load_2x256(qs0, qs1);
    return _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));
}

/* Scales [a, ?, b, ?] -> zmm [a x8, b x8] (block order of fg_load_2x256) ... */
FG_INLINE_AVX512 __m512 fg_spread2_512(__m128 ab) {
    const __m512i idx = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(ab));
}

/* ... or -> zmm [a x4, b x4, a x4, b x4] (nibble order of fg_nibbles_512). */
FG_INLINE_AVX512 __m512 fg_spread2_nib_512(__m128 ab) {
    const __m512i idx = _mm512_set_epi32(2, 2, 2, 2, 0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(ab));
}

/* The first two fp16 of one block header -> floats [a, b, ?, ?]; of two headers -> [a0, b0, a1, b1].
 * (For blocks with a single fp16 scale the second value is the first quant bytes: ignore those lanes.) */
FG_INLINE_AVX2 __m128 fg_f16_pair(const void *p) {
    int32_t a;
    memcpy(&a, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(a));
}

FG_INLINE_AVX2 __m128 fg_f16_pairs(const void *p0, const void *p1) {
    int32_t a, b;
    memcpy(&a, p0, 4);
    memcpy(&b, p1, 4);
    return _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(a), b, 1));
}

#define FG_DOT_U8S8_512_BW(u, s) _mm512_madd_epi16(_mm512_maddubs_epi16((u), (s)), _mm512_set1_epi16(1))
#define FG_DOT_U8S8_512_VNNI(u, s) _mm512_dpbusd_epi32(_mm512_setzero_si512(), (u), (s))
#endif /* x86 */

#if defined(__aarch64__)
#define FG_HAVE_NEON 1
#include <arm_neon.h>
#define FG_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))

/* 16 x int8 . 16 x int8 -> 4 int32 partial sums, without the dotprod extension. */
static inline int32x4_t fg_dot_s8_emul(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}
#endif

#endif
