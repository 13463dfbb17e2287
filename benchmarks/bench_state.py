#!/usr/bin/env python3
"""Restoring a saved prefix against recomputing it (issue 37: restore >= 10x faster on the default model).

    python benchmarks/bench_state.py                      # 4,000 tokens, 5 rounds, the model's default threads
    python benchmarks/bench_state.py --tokens 1000 --rounds 3 --threads 2 -m PATH

The prefix: benchmarks/data/library_loans.py tokenized (repeated to --tokens). Timed, medians over --rounds:
  recompute   ctx.reset(); ctx.eval(prefix) in a Context of n_ctx = tokens + 16
  save        ctx.save_state(path) (after the first save: the model's sha256 is cached by then)
  restore     ctx.load_state(path) into a Context that has other tokens (the file warm in the page cache, as a
              server restoring a state it wrote finds it); also into a fresh Context (its KV allocation included)
Printed with the state file's size, the first sha256 of the model file (paid once per Model) and a check that the
restored context's next logits equal the recomputed one's bit for bit.

The persistent prompt cache (Model(prompt_cache=DIR), fastgguf.engine.prompt_cache), --cache-rounds times (3), each
in a new folder: `cold` is generate(prefix, max_tokens=1) on a new Model (the prompt evaluated, then stored: the
store, its copy and the writer thread's write until flush() returns, is timed apart), `hit` is generate(prefix + 1
token) on another new Model on the same folder (a restart: the stored prefix found by its ids and restored, the last
token evaluated); both timings.prompt_seconds, medians; the hit's greedy token checked equal to a cold run's."""
import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..")]

import numpy as np  # noqa: E402

from fastgguf.engine.generate import generate  # noqa: E402
from fastgguf.engine.model import Model  # noqa: E402
from fastgguf.hub import default_model_path  # noqa: E402


def timed(fn, rounds):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=None, help="GGUF path or catalogue name (default: the default model)")
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--cache-rounds", type=int, default=3, help="rounds of the prompt-cache case (0: skip it)")
    a = ap.parse_args(argv)
    model = Model(a.model or default_model_path(download=True), n_threads=a.threads)
    with open(os.path.join(HERE, "data", "library_loans.py"), encoding="utf-8") as f:
        ids = model.tokenize(f.read())
    ids = (ids * (a.tokens // len(ids) + 1))[:a.tokens]
    t = time.perf_counter()
    model.sha256()
    sha_s = time.perf_counter() - t
    ctx = model.context(n_ctx=a.tokens + 16)
    other = model.context(n_ctx=a.tokens + 16)

    def recompute():
        ctx.reset()
        ctx.eval(ids)
    recompute_s = timed(recompute, a.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prefix.fgstate")
        save_s = timed(lambda: ctx.save_state(path), a.rounds)
        size = os.path.getsize(path)

        def restore():
            other.reset()
            other.eval(ids[:8])
            t = time.perf_counter()
            other.load_state(path)
            return time.perf_counter() - t
        restore_s = statistics.median(restore() for _ in range(a.rounds))
        fresh_s = timed(lambda: model.context(n_ctx=a.tokens + 16).load_state(path), a.rounds)
    same = np.array_equal(ctx.eval([ids[0]]), other.eval([ids[0]]))
    print(f"{os.path.basename(model.path)}, {a.tokens} tokens, {model.n_threads} threads, {a.rounds} rounds "
          f"(medians)")
    print(f"  recompute            {recompute_s * 1e3:9.1f} ms")
    print(f"  restore              {restore_s * 1e3:9.1f} ms   {recompute_s / restore_s:6.1f}x faster")
    print(f"  restore, new Context {fresh_s * 1e3:9.1f} ms   {recompute_s / fresh_s:6.1f}x faster")
    print(f"  save                 {save_s * 1e3:9.1f} ms")
    print(f"  state file           {size / 1e6:9.1f} MB ({size / a.tokens / 1e3:.1f} kB a token)")
    print(f"  model sha256, once   {sha_s * 1e3:9.1f} ms")
    print(f"  next logits equal bit for bit: {same}")
    if a.cache_rounds:
        same = prompt_cache(model, ids, a.cache_rounds) and same
    return 0 if same else 1


def prompt_cache(model, ids, rounds):
    """The prompt-cache case (see the module docstring): prints cold, store and hit medians; True if every hit
    restored the whole prefix and gave a cold run's token."""
    cold, store, hit, ok = [], [], [], True
    extra = ids[len(ids) // 2]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            folder = os.path.join(tmp, f"r{r}")
            first = Model(model.path, n_threads=model.n_threads, prompt_cache=folder)
            first.sha256()  # paid once per Model: timed above
            t = time.perf_counter()
            res = generate(first, ids + [extra], max_tokens=1, temperature=0)
            first.prompt_cache.flush()  # the writer thread's file on disk
            wall = time.perf_counter() - t
            cold.append(res.timings.prompt_seconds)
            store.append(wall - res.timings.prompt_seconds - res.timings.generation_seconds)
            again = Model(model.path, n_threads=model.n_threads, prompt_cache=folder)
            again.sha256()
            got = generate(again, ids + [extra, extra], max_tokens=1, temperature=0)
            again.prompt_cache.flush()  # (it stores this longer prompt too)
            hit.append(got.timings.prompt_seconds)
            stored = [n for n in os.listdir(folder) if n.endswith(".fgstate")]
            ok = ok and got.usage.cached_tokens == len(ids) + 1 and len(stored) == 2
            if r == 0:
                want = generate(model, ids + [extra, extra], max_tokens=1, temperature=0)
                ok = ok and got.token_ids == want.token_ids
    c, s, h = (statistics.median(x) for x in (cold, store, hit))
    print(f"prompt cache ({len(ids) + 1}-token prefix stored, {rounds} rounds, medians; new Models on the folder)")
    print(f"  cold prompt          {c * 1e3:9.1f} ms")
    print(f"  store (after it)     {s * 1e3:9.1f} ms   (copied out, then written by a thread)")
    print(f"  hit prompt           {h * 1e3:9.1f} ms   {c / h:6.1f}x faster")
    print(f"  hits restored the prefix, tokens equal a cold run's: {ok}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
