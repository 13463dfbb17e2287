"""Batched decode (fastgguf.engine.batch.forward_batch) against the same sequences stepped one by one.

    python benchmarks/bench_batch.py [--rounds 7] [--pos 64] [--threads 1,2] [--sizes 1,2,4,8,16]

On the default model (SmolLM2-135M-Instruct Q4_1): N contexts each hold `pos` prompt tokens; one decode step of
all N (one token each, at position `pos`) is timed as ONE forward_batch call and as N single steps
(Runner.step, the decode loop's call). After each round the contexts are rewound to `pos`, so every round
decodes at the same position. Prints aggregate tokens/s of both and their ratio per (threads, N), median over
rounds (the two are timed alternately so a busy machine slows both alike), and the CPU's lscpu model name.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, when not installed
from fastgguf import hub  # noqa: E402
from fastgguf.engine.batch import forward_batch  # noqa: E402
from fastgguf.engine.model import Model  # noqa: E402


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no lscpu)"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def bench(model, n, n_threads, pos, rounds, rng):
    ctxs = [model.context(pos + 8, n_threads=n_threads) for _ in range(n)]
    forward_batch(model, [(c, rng.integers(0, model.n_vocab, pos)) for c in ctxs], n_threads=n_threads)
    nxt = [int(t) for t in rng.integers(0, model.n_vocab, n)]
    single, batched = [], []
    for r in range(rounds + 1):  # round 0 warms up
        t0 = time.perf_counter()
        for c, t in zip(ctxs, nxt):
            c.runner.step_py(t)
        t1 = time.perf_counter()
        for c in ctxs:
            c.rewind(pos)
        t2 = time.perf_counter()
        forward_batch(model, [(c, [t]) for c, t in zip(ctxs, nxt)], n_threads=n_threads)
        t3 = time.perf_counter()
        for c in ctxs:
            c.rewind(pos)
        if r:
            single.append(t1 - t0)
            batched.append(t3 - t2)
    return n / statistics.median(single), n / statistics.median(batched)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pos", type=int, default=64)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--sizes", default="1,2,4,8,16")
    ap.add_argument("--model", default=None, help="a GGUF file (default: the default model)")
    a = ap.parse_args(argv)
    path = a.model or hub.default_model_path(download=True)
    model = Model(path, n_threads=1)
    rng = np.random.default_rng(0)
    print(f"model: {os.path.basename(path)}; CPU: {cpu_name()} ({os.cpu_count()} logical CPUs); "
          f"decode at position {a.pos}, median of {a.rounds} rounds")
    print(f"{'threads':>7} {'N':>3} {'N single steps tok/s':>21} {'one batched step tok/s':>23} {'ratio':>6}")
    for nth in (int(x) for x in a.threads.split(",")):
        for n in (int(x) for x in a.sizes.split(",")):
            s, b = bench(model, n, nth, a.pos, a.rounds, rng)
            print(f"{nth:>7} {n:>3} {s:>21.1f} {b:>23.1f} {b / s:>6.2f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
