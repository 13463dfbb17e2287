/* Block layouts of the quantized formats, byte-identical to GGUF/ggml, and fp16/bf16 scalar helpers.
 * One owner for these facts: every kernel file includes this header. */
#ifndef FG_BLOCKS_H
#define FG_BLOCKS_H

#include <stdint.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include "fg_kernels.h" /* FG_PACK_ROWS */

#define QK4_0 32
#define QK4_1 32
#define QK8_0 32
#define QK8_1 32
#define QK5_0 32
#define QK5_1 32
#define QK4_NL 32
#define QK_MXFP4 32
#define QK_K 256         /* super-block of the K-quants */
#define K_SCALE_SIZE 12  /* 8 six-bit scales + 8 six-bit mins (q4_K, q5_K) */

typedef struct {
    uint16_t d;              /* fp16 scale */
    uint8_t qs[QK4_0 / 2];   /* nibbles: low nibble = element j, high nibble = element j + 16 */
} block_q4_0;

typedef struct {
    uint16_t d;              /* fp16 scale */
    uint16_t m;              /* fp16 minimum */
    uint8_t qs[QK4_1 / 2];   /* nibbles as q4_0 */
} block_q4_1;

typedef struct {
    uint16_t d;              /* fp16 scale */
    int8_t qs[QK8_0];
} block_q8_0;

typedef struct {
    uint16_t d;              /* fp16 scale */
    uint16_t s;              /* fp16 of d * sum(qs) */
    int8_t qs[QK8_1];
} block_q8_1;

typedef struct {
    uint16_t d;              /* fp16 scale; x = d * (q - 16) */
    uint8_t qh[4];           /* bit j (little-endian u32) = bit 4 of element j */
    uint8_t qs[QK5_0 / 2];   /* low 4 bits, nibbles as q4_0 */
} block_q5_0;

typedef struct {
    uint16_t d;              /* fp16 scale; x = d * q + m */
    uint16_t m;              /* fp16 minimum */
    uint8_t qh[4];           /* as q5_0 */
    uint8_t qs[QK5_1 / 2];
} block_q5_1;

/* K-quants: super-blocks of 256 with per-sub-block scales. */
typedef struct {
    uint16_t d;                    /* fp16 super-scale of the 6-bit scales */
    uint16_t dmin;                 /* fp16 super-scale of the 6-bit mins */
    uint8_t scales[K_SCALE_SIZE];  /* 8 (scale, min) pairs of 6 bits, one per 32 elements (see fg_kquant_ref.h) */
    uint8_t qs[QK_K / 2];          /* 4 runs of 32 bytes: low nibbles = 32 elements, high nibbles = the next 32 */
} block_q4_K;                      /* x = d * sc * q - dmin * m */

/* Row-interleaved (repacked) copies for decode (Model(repack=True); fg_kernels.h's fg_pack_fn): super-block i of
 * FG_PACK_ROWS rows side by side, so a kernel reads the rows in vector lanes with no transpose and no per-row
 * horizontal sum. */
typedef struct {
    uint16_t d[FG_PACK_ROWS], dmin[FG_PACK_ROWS]; /* row r's fp16 d, dmin */
    uint8_t sc[8][FG_PACK_ROWS];                  /* sub-block j's 6-bit scale of row r: sc[j][r] */
    uint8_t mn[4][FG_PACK_ROWS][2];               /* the mins of sub-blocks 2t, 2t + 1 of row r: mn[t][r] */
    uint8_t qs[32][FG_PACK_ROWS][4];              /* bytes 4g..4g+3 of row r's qs: qs[g][r] */
} block_q4_K_r16;                                 /* 2,368 bytes for the rows' 2,304 */

typedef struct {
    uint8_t ql[QK_K / 2];          /* low 4 bits: per half of 128, ql[l] lo/hi -> l, l+64; ql[l+32] lo/hi -> l+32, l+96 */
    uint8_t qh[QK_K / 4];          /* high 2 bits: per half, qh[l] bits 2k..2k+1 -> element l + 32k */
    int8_t scales[QK_K / 16];      /* one per 16 elements */
    uint16_t d;                    /* fp16 super-scale (last) */
} block_q6_K;                      /* x = d * scale * (q - 32) */

typedef struct {
    uint16_t d;                    /* fp16 super-scale of the 6-bit scales */
    uint16_t dmin;                 /* fp16 super-scale of the 6-bit mins */
    uint8_t scales[K_SCALE_SIZE];  /* as q4_K */
    uint8_t qh[QK_K / 8];          /* bit 4 of element 64k + l (l < 32) in bit 2k of qh[l], of 64k + 32 + l in 2k+1 */
    uint8_t qs[QK_K / 2];          /* low 4 bits, as q4_K's nibbles */
} block_q5_K;                      /* x = d * sc * q - dmin * m, q in 0..31 */

typedef struct {
    uint8_t hmask[QK_K / 8];       /* bit 2 of element 128h + 32j + l (l < 32): bit 4h + j of hmask[l] */
    uint8_t qs[QK_K / 4];          /* low 2 bits of element 128h + 32j + l: bits 2j..2j+1 of qs[32h + l] */
    uint8_t scales[12];            /* 16 six-bit signed scales (fg_kquant_ref.h), one per 16 elements */
    uint16_t d;                    /* fp16 super-scale (last) */
} block_q3_K;                      /* x = d * (sc - 32) * (q - 4), q in 0..7 */

typedef struct {
    uint8_t scales[QK_K / 16];     /* per 16 elements: low nibble scale, high nibble min */
    uint8_t qs[QK_K / 4];          /* 2 bits of element 128h + 32j + l: bits 2j..2j+1 of qs[32h + l] */
    uint16_t d;                    /* fp16 super-scale of the scales (after the quants) */
    uint16_t dmin;                 /* fp16 super-scale of the mins */
} block_q2_K;                      /* x = d * sc * q - dmin * m, q in 0..3 */

typedef struct {
    uint16_t d;                    /* fp16 scale; x = d * kvalues[q] (16 non-uniform levels) */
    uint8_t qs[QK4_NL / 2];        /* nibbles as q4_0 */
} block_iq4_nl;

typedef struct {
    uint8_t e;                     /* E8M0 scale: a power of two, 2^(e - 127) (see fg_e8m0_to_fp32_half) */
    uint8_t qs[QK_MXFP4 / 2];      /* nibbles as q4_0: indices of fp4 e2m1 values (fg_kvalues_mxfp4) */
} block_mxfp4;                     /* x = 2^(e - 128) * kvalues[q]: the table holds the e2m1 values doubled */

typedef struct {
    uint16_t d;                    /* fp16 super-scale */
    uint16_t scales_h;             /* top 2 bits of the 8 six-bit scales, 2 bits each */
    uint8_t scales_l[QK_K / 64];   /* low 4 bits of the scales, two per byte (sub-block 2k low nibble) */
    uint8_t qs[QK_K / 2];          /* 8 sub-blocks of 32: 16 bytes each, nibbles as q4_0 */
} block_iq4_xs;                    /* x = d * (ls - 32) * kvalues[q] */

typedef struct {
    float d;                       /* float scale (not fp16) */
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];      /* sum of qs per group of 16 */
} block_q8_K;

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 must be 18 bytes");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 must be 20 bytes");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 must be 34 bytes");
_Static_assert(sizeof(block_q4_K_r16) == 2368, "block_q4_K_r16 must be 2368 bytes");
_Static_assert(sizeof(block_q8_1) == 36, "block_q8_1 must be 36 bytes");
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 must be 22 bytes");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 must be 24 bytes");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K must be 144 bytes");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K must be 210 bytes");
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K must be 292 bytes");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K must be 176 bytes");
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K must be 110 bytes");
_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K must be 84 bytes");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl must be 18 bytes");
_Static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 must be 17 bytes");
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs must be 136 bytes");

/* IEEE half <-> float, portable, round-to-nearest-even (matches numpy's float16 conversion). */
static inline float fg_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + (127 - 15)) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Activation blocks keep non-finite input visible: a block holding a NaN or an inf gets the scale NaN (and zero
 * quants), so every dot with it is NaN, as a float dot would be non-finite; each ISA's quantizer detects it through
 * its block maximum, once per block. fg_absmax(m, x): max(m, |x|) with NaN sticky (fmaxf drops NaN). */
static inline float fg_absmax(float m, float x) {
    const float a = fabsf(x);
    return a > m || a != a ? a : m;
}
#define FG_FINITE(amax) ((amax) <= FLT_MAX) /* false for inf and NaN */

static inline uint16_t fg_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) { /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 | ((absx >> 13) & 0x3ff) : 0));
    }
    if (absx >= 0x477ff000u) { /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    }
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to zero */
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t hm = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t hm = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (hm & 1))) hm++;
    return (uint16_t)(sign | hm);
}

/* Half the E8M0 scale, 2^(e - 128), as ggml_e8m0_to_fp32_half builds it (e < 2: the subnormals 2^-128, 2^-127);
 * halved because the fp4 table holds the e2m1 values doubled, so that they are integers. */
static inline float fg_e8m0_to_fp32_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float fg_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round-to-nearest-even; NaN kept quiet (as ggml and gguf-py do). */
static inline uint16_t fg_fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

#endif
