#!/usr/bin/env python3
"""Gemma 3 270M: fastgguf against llama.cpp's llama-bench, decode (128 tokens) and pp512 at 1 and 2 threads,
alternating the engines in each round, plus where fastgguf's decode time goes (the 262,144-row Q8_0 lm_head
GEMV against the machine's single-thread read bandwidth).

    python benchmarks/gemma3_speed.py [MODEL] [--llama-bench PATH] [--rounds 2]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fastgguf_run(model, threads, n_prompt=512, n_gen=128):
    from fastgguf import Model
    m = Model(model, n_threads=threads)
    ids = list(np.random.default_rng(0).integers(1000, 200000, n_prompt))
    ctx = m.context(n_prompt + n_gen + 8)
    ctx.eval(ids[:8])                        # warm-up
    ctx.reset()
    t = time.perf_counter()
    ctx.eval(ids)
    pp = n_prompt / (time.perf_counter() - t)
    ctx.reset()
    lg = ctx.eval(ids[:1])
    t = time.perf_counter()
    for _ in range(n_gen):
        lg = ctx.runner.step_py(int(np.argmax(lg)))
    tg = n_gen / (time.perf_counter() - t)
    return pp, tg


def lm_head(model):
    """Seconds and GB/s of one Q8_0 lm_head GEMV (1 thread), and the read bandwidth."""
    from fastgguf import kernels
    from fastgguf.gguf import GGUFFile
    f = GGUFFile(model)
    w = f.tensor("token_embd.weight")
    x = np.random.default_rng(1).standard_normal(640).astype(np.float32)
    xq = kernels.quantize(x.reshape(1, -1), kernels.vec_dot_type(int(f.tensors["token_embd.weight"].type)))
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        kernels.gemv(w, int(f.tensors["token_embd.weight"].type), xq)
        best = min(best, time.perf_counter() - t0)
    return best, w.nbytes / best / 1e9, kernels.read_bandwidth()


def llama_bench(bench, model, threads):
    out = subprocess.run([bench, "-m", model, "-t", str(threads), "-p", "512", "-n", "128", "-r", "3", "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    res = {}
    for r in json.loads(out):
        res["pp" if r["n_prompt"] else "tg"] = r["avg_ts"]
    return res["pp"], res["tg"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--llama-bench", default="/work/ref/llama/build/bin/llama-bench")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    model = a.model
    if model is None:
        from fastgguf import hub
        model = hub.model_path("gemma3-270m")
    cpu = [ln.split(":", 1)[1].strip() for ln in subprocess.run(["lscpu"], capture_output=True, text=True).stdout
           .splitlines() if ln.startswith("Model name")]
    print(f"CPU: {cpu[0] if cpu else platform.processor()}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    rows = []
    for rnd in range(a.rounds):
        for th in (1, 2):
            pp, tg = llama_bench(a.llama_bench, model, th)
            rows.append(("llama.cpp", th, pp, tg))
            print(f"round {rnd} llama.cpp t={th}: pp512 {pp:.1f} tok/s, tg128 {tg:.1f} tok/s", flush=True)
            pp, tg = fastgguf_run(model, th)
            rows.append(("fastgguf", th, pp, tg))
            print(f"round {rnd} fastgguf  t={th}: pp512 {pp:.1f} tok/s, tg128 {tg:.1f} tok/s", flush=True)
    for eng in ("llama.cpp", "fastgguf"):
        for th in (1, 2):
            r = [x for x in rows if x[0] == eng and x[1] == th]
            print(f"best {eng:<9} t={th}: pp512 {max(x[2] for x in r):7.1f}  tg128 {max(x[3] for x in r):6.1f} tok/s")
    s, gbs, bw = lm_head(model)
    print(f"lm_head Q8_0 262144x640 GEMV (1 thread): {s * 1e3:.1f} ms, {gbs:.1f} GB/s; read_bandwidth {bw:.1f} GB/s")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
