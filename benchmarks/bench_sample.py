"""Per-token cost of sampling and detokenizing (the scheduler's Python between two batched steps, per stream).

    python benchmarks/bench_sample.py [--rounds 7] [--steps 2000] [--vocab 49152,128256]

Times, per token and median over rounds: fastgguf's argmax (C fg_argmax, what greedy sampling runs) beside numpy's,
check_logits (the NaN guard of every sampled row), and Sequence.step on the default model's tokenizer (sampling,
the repetition window, streaming detokenization, stop strings) for greedy and for the default sampler. At 8 streams a
step pays each of these 8 times while the compute threads wait, so they are the server's per-step serial cost.
Logits cycle through 64 random rows (n_vocab floats each), so they do not stay in L1 as in a tighter loop.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, when not installed
from fastgguf import hub  # noqa: E402
from fastgguf._native import argmax, check_logits  # noqa: E402
from fastgguf.engine.model import Model  # noqa: E402
from fastgguf.engine.params import SamplingParams  # noqa: E402
from fastgguf.engine.sequence import Sequence  # noqa: E402


def per_call_us(fn, rows, steps, rounds):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for k in range(steps):
            fn(rows[k % len(rows)])
        times.append((time.perf_counter() - t0) / steps)
    return 1e6 * statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--vocab", default="49152,128256", help="vocabulary sizes for the argmax and NaN-check rows")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    for n in (int(v) for v in a.vocab.split(",")):
        rows = [rng.standard_normal(n).astype(np.float32) for _ in range(64)]
        for name, fn in (("fastgguf argmax", argmax), ("numpy argmax", np.argmax), ("check_logits", check_logits)):
            print(f"n_vocab {n:>6}  {name:<28} {per_call_us(fn, rows, a.steps, a.rounds):8.1f} us")
    model = Model(hub.default_model_path(download=True), n_threads=1)
    rows = [rng.standard_normal(model.n_vocab).astype(np.float32) for _ in range(64)]
    for name, params in (("greedy", SamplingParams(temperature=0.0)), ("default sampler", SamplingParams())):
        seq = Sequence(model, [1, 2, 3], params.replace(max_tokens=None))
        print(f"n_vocab {model.n_vocab:>6}  Sequence.step {name:<14} "
              f"{per_call_us(seq.step, rows, a.steps, a.rounds):8.1f} us")


if __name__ == "__main__":
    main()
