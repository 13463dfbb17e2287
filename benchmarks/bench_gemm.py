#!/usr/bin/env python3
"""Prompt-processing GEMM throughput of the K-quants, one thread: Y = X . W^T for m activation rows (512: a pp512
batch) on the K-quant matrices of the default models (SmolLM2's ffn_down 576x1536, Gemma 3 270M's ffn_down
640x2048 and attn_output 640x1024; random weights), activation quantization included as in the forward pass.
Prints per case the median and the minimum over the rounds (process CPU time) and GMAC/s of the median.

    python benchmarks/bench_gemm.py [--formats Q4_K,Q6_K,Q5_K] [--m 512] [--rounds 9] [--shapes 2048x8192,...]
"""
import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = [(576, 1536), (640, 2048), (640, 1024)]  # (rows, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="Q4_K,Q6_K,Q5_K")
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--shapes", default=None, help="rows x n, comma-separated (default: the models' matrices)")
    args = ap.parse_args()
    shapes = SHAPES if args.shapes is None else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    from fastgguf import kernels
    rng = np.random.default_rng(0)
    print(f"{platform.processor() or platform.machine()}, isa {kernels.active()}, m = {args.m}, one thread")
    for fmt in args.formats.split(","):
        for rows, n in shapes:
            w = kernels.quantize(rng.standard_normal((rows, n), dtype=np.float32) * 0.05, fmt)
            x = rng.standard_normal((args.m, n), dtype=np.float32)
            kernels.matmul(w, fmt, x, n_threads=1)  # warm-up
            ts = []
            for _ in range(args.rounds):
                t = time.process_time()
                kernels.matmul(w, fmt, x, n_threads=1)
                ts.append(time.process_time() - t)
            med = statistics.median(ts)
            print(f"{fmt:5} {rows}x{n}: median {med * 1e3:7.2f} ms, min {min(ts) * 1e3:7.2f} ms, "
                  f"{rows * n * args.m / med / 1e9:6.1f} GMAC/s")


if __name__ == "__main__":
    main()
