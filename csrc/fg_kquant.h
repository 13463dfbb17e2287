/* The K-quant helpers, one header per ISA: fg_kquant_ref.h, the scalar port of ggml's reference quantizers (and the
 * scale unpacking the SIMD kernels share); fg_kquant_x86.h, the AVX2 tiles and rows-in-lanes gemm of the K-quant dots;
 * fg_kquant_neon.h, their NEON+dotprod row-lane tiles. For the K-quant kernels (fg_quant_q4_k.c, q5_k.c, q6_k.c);
 * a file that needs the scalar port alone includes fg_kquant_ref.h. Include fg_simd.h first. */
#ifndef FG_KQUANT_H
#define FG_KQUANT_H

#include "fg_kquant_ref.h"
#if FG_HAVE_X86
#include "fg_kquant_x86.h"
#elif FG_HAVE_NEON
#include "fg_kquant_neon.h"
#endif

#endif
