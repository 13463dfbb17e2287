#!/usr/bin/env python3
"""Development-only: regenerate tests/data/kquants_ref.npz, llama.cpp's own quantization of a fixed set of
float rows, the byte-identity oracle of tests/test_kquants.py.

    python tools/gen_kquant_fixtures.py [path/to/libggml-base.so]

Calls ggml's reference quantizers (quantize_row_<fmt>_ref, no importance matrix) from a llama.cpp build's
libggml-base through ctypes; default library: $GGML_BASE_LIB or /work/ref/llama/build/bin/libggml-base.so.
Build that library for a baseline CPU (ggml-base gets no -march flags, so no FMA contraction changes its float
arithmetic). The fixture holds the rows of inputs() below (x) and the bytes llama.cpp made of them.
"""
import ctypes
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data", "kquants_ref.npz")
N = 512  # two super-blocks per row

# name: (ggml type id, block elements, block bytes)
FORMATS = {
    "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110),
    "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "Q8_K": (15, 256, 292),
    "IQ4_NL": (20, 32, 18), "IQ4_XS": (23, 256, 136), "MXFP4": (39, 32, 17),
}


def inputs():
    """(rows, N) float32: shapes of data that reach different branches of the quantizers."""
    rng = np.random.default_rng(20260101)
    rows = [
        rng.standard_normal(N),                                   # plain
        rng.standard_normal(N) * 1e-3,                            # small
        rng.uniform(-30, 30, N),                                  # wide
        np.exp(rng.standard_normal(N)),                           # all positive (min > 0)
        -np.exp(rng.standard_normal(N)),                          # all negative
        np.where(rng.uniform(size=N) < 0.05, rng.standard_normal(N) * 10, 0.0),  # sparse spikes
        np.round(rng.uniform(-20, 20, N)) + 0.5,                  # rounding ties
        rng.standard_normal(N) / np.maximum(rng.uniform(size=N), 0.05),  # heavy tails
        np.repeat(rng.standard_normal(N // 16), 16),              # constant runs of 16 (max == min)
        rng.standard_normal(N) * 1e-20,                           # below fp16 range
        rng.standard_normal(N) * 3e3,                             # large
    ]
    x = np.array(rows, dtype=np.float32)
    x[5, :256] = 0.0  # an all-zero super-block
    x[7, 300] = -80.0  # one outlier of each sign
    x[7, 301] = 80.0
    x[0, 40], x[0, 41] = -9.0, 9.0  # largest magnitude twice with opposite signs: the first one sets the sign
    return x


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "GGML_BASE_LIB", "/work/ref/llama/build/bin/libggml-base.so")
    lib = ctypes.CDLL(path)
    x = inputs()
    out = {}
    for name, (_tid, blk, size) in FORMATS.items():
        fn = getattr(lib, f"quantize_row_{name.lower().replace('_k', '_K')}_ref", None)
        if fn is None:
            print(f"{name}: no quantize_row_*_ref in {path}, skipped")
            continue
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
        q = np.zeros((x.shape[0], N // blk * size), dtype=np.uint8)  # zeroed: ggml leaves some bytes unwritten
        for r in range(x.shape[0]):
            fn(x[r].ctypes.data, q[r].ctypes.data, N)
        out[name] = q
        print(f"{name}: {q.shape}")
    np.savez_compressed(OUT, x=x, **out)
    print(f"wrote {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
