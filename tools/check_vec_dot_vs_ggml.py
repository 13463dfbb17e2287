#!/usr/bin/env python3
"""Development-only: our vec_dot (every instruction set) against llama.cpp's generic ggml_vec_dot_<w>_<x>_generic
on the same bytes (our quantizers are byte-identical to ggml's), through ctypes on a llama.cpp build's
libggml-cpu; prints the largest difference relative to sum |w x| per format.

    python tools/check_vec_dot_vs_ggml.py [path/to/libggml-cpu.so]
"""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fastgguf import kernels  # noqa: E402

PAIRS = {"Q4_K": "q8_K", "Q5_K": "q8_K", "Q6_K": "q8_K", "Q3_K": "q8_K", "Q2_K": "q8_K", "IQ4_XS": "q8_K",
         "Q5_0": "q8_0", "Q5_1": "q8_1", "IQ4_NL": "q8_0", "MXFP4": "q8_0"}


def main():
    lib = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "GGML_CPU_LIB", "/work/ref/llama/build/bin/libggml-cpu.so"))
    lib.ggml_cpu_init()  # fills ggml's fp16 -> fp32 table
    names = {v: k for k, v in kernels.SUPPORTED_TYPES.items()}
    rng = np.random.default_rng(1)
    for t, act in PAIRS.items():
        fname = f"ggml_vec_dot_{t.lower().replace('_k', '_K')}_{act}_generic"
        fn = getattr(lib, fname)
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                       ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        n = 4096
        w = kernels.quantize(rng.standard_normal((8, n)).astype(np.float32), t)
        x = rng.standard_normal(n).astype(np.float32)
        at = names[kernels.vec_dot_type(t)]
        xq = kernels.quantize(x, at)
        mag = np.abs(kernels.dequantize(w, t, n)) @ np.abs(kernels.dequantize(xq, at, n))
        ref = np.empty(8, np.float32)
        for r in range(8):
            out = np.zeros(1, np.float32)
            fn(n, out.ctypes.data, 0, w[r].ctypes.data, 0, xq.ctypes.data, 0, 1)
            ref[r] = out[0]
        worst = {isa: float(np.max(np.abs(kernels.gemv(w, t, xq, isa=isa) - ref) / mag)) for isa in kernels.available()}
        print(f"{t:7s} vs {fname}: max |ours - ggml| / sum|w x| = " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))


if __name__ == "__main__":
    main()
