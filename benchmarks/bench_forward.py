"""Quick decode / prompt speed of the forward pass (not a test): python benchmarks/bench_forward.py [threads...]"""
import os
import sys
import time

import numpy as np

from fastgguf.model import Model

path = os.path.expanduser("~/.cache/fastgguf/SmolLM2-135M-Instruct.Q4_1.gguf")
threads = [int(a) for a in sys.argv[1:]] or [1, 2]
m = Model(path)
rng = np.random.default_rng(0)
for nth in threads:
    c = m.context(512, n_threads=nth)
    prompt = rng.integers(0, m.n_vocab, 128)
    c.eval(prompt[:8]); c.reset()
    t = time.perf_counter(); c.eval(prompt); pp = 128 / (time.perf_counter() - t)
    c.reset(); c.eval(prompt[:16])
    n = 128
    t = time.perf_counter()
    for i in range(n):
        c.runner.step_py(int(prompt[i % 128]))
    tg = n / (time.perf_counter() - t)
    print(f"threads={nth}: pp128 {pp:.0f} tok/s, tg{n} (from pos 16) {tg:.1f} tok/s")
