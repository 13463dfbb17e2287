"""End-to-end speed of the default model: prompt processing and decode, per weight format and thread count.

    python -m pytest benchmarks/bench_model.py --benchmark-only -q -s

Cases, for the default model in Q4_1 and its Q4_0 and Q8_0 variants (made once in the cache by
fastgguf.gguf.quantize.quantized_variant), at 1 thread and at all physical cores:
- test_prompt[pp128|pp512]: Context.eval of 128 / 512 prompt tokens from an empty cache (one call, batched).
- test_decode: model.generate of 128 greedy tokens after a short prompt (end-of-generation tokens banned so every
  round decodes all of them), as a script would call it: sampling, detokenization and stop handling included.
- test_python_overhead (Q4_1): the same decode, timing inside it each step of the Cython loop (generate_ids:
  Runner.step + sampling with the GIL released); extra_info["overhead_pct"] is the share of model.generate's
  decode time spent outside that loop, in Python (target: under 2%).
extra_info records tokens_per_s (median round). Before anything is timed, each model is checked: it must
agree with llama.cpp's top-1, teacher-forced along its greedy continuation of a fixed prompt, wherever llama.cpp's
margin is not a near-tie (references: tests/data/smollm2-q4_1-logits.json, and benchmarks/data/variants-greedy.json
for the Q4_0/Q8_0 files, written by `python benchmarks/bench_model.py` with llama-cpp-python installed).
Rounds are few (3) so the whole module runs in about two minutes on two cores; llama.cpp itself is compared by
benchmarks/compare.py.
"""
import json
import os
import statistics
import time

import numpy as np
import pytest

import fastgguf
from fastgguf import hub
from fastgguf.engine.model import physical_cores

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(os.path.dirname(HERE), "tests", "data", "smollm2-q4_1-logits.json")
VARIANT_REF = os.path.join(HERE, "data", "variants-greedy.json")  # llama.cpp on our Q4_0/Q8_0 files (see __main__)
VARIANTS = ["q4_1", "q4_0", "q8_0"]
THREADS = sorted({1, physical_cores()})
ROUNDS = 3
N_GEN = 128
TIE = 0.5  # llama.cpp logit margin (top-1 minus top-2) under which our greedy path may legitimately differ
TEXT = ("The history of the city begins with a small settlement on the river, where traders met to exchange salt, "
        "grain and cloth. Over the centuries it grew into a market town, then a centre of learning with a library "
        "and a university, and finally a busy modern capital with trams, bridges and museums. ") * 40

_models = {}


def _path(variant):
    base = hub.default_model_path(download=True)
    if variant == "q4_1":
        return base
    from fastgguf.gguf.quantize import quantized_variant
    return quantized_variant(base, variant)


def _reference(variant):
    """(prompt ids, llama.cpp's greedy ids, its top-1 minus top-2 logit margin at each of them) for this file."""
    if variant == "q4_1":
        with open(REF) as f:
            r = json.load(f)["results"][0]
        return r["prompt_ids"], r["greedy_ids"], [p["top_logits"][0] - p["top_logits"][1] for p in r["positions"]]
    with open(VARIANT_REF) as f:
        r = json.load(f)[variant]
    return r["prompt_ids"], r["greedy_ids"], r["margins"]


def _check(model, variant):
    """Teacher-forced on llama.cpp's greedy continuation of a fixed prompt (same file): our top-1 must be llama.cpp's
    at every position where its top-1 leads the runner-up by TIE or more."""
    prompt, want, margins = _reference(variant)
    logits = model.context(n_ctx=256).eval(prompt + want[:-1], all_logits=True)[len(prompt) - 1:]
    logits[:, sorted(model.tokenizer.eog_ids)] = -np.inf
    got = logits.argmax(axis=1).tolist()
    checked = [i for i, m in enumerate(margins[:len(want)]) if m >= TIE]
    bad = [(i, got[i], want[i]) for i in checked if got[i] != want[i]]
    assert len(checked) >= 8 and not bad, f"{variant}: (position, ours, llama.cpp's) top-1 differ: {bad}"


def _model(variant, threads):
    key = (variant, threads)
    if key not in _models:
        m = fastgguf.Model(_path(variant), n_threads=threads)
        _check(m, variant)
        _models[key] = m
    return _models[key]


_top1s = {}


def _top1(variant, n):
    if (variant, n) not in _top1s:
        model = _model(variant, 1)
        _top1s[variant, n] = int(np.argmax(model.context(n_ctx=1024).eval(_prompt_ids(model, n))))
    return _top1s[variant, n]


def _prompt_ids(model, n):
    ids = model.tokenize(TEXT, add_special=False)
    assert len(ids) >= n
    return ids[:n]


def _record(benchmark, n_tokens, seconds):
    benchmark.extra_info["tokens"] = n_tokens
    benchmark.extra_info["tokens_per_s"] = round(n_tokens / statistics.median(seconds), 2)
    benchmark.extra_info["tokens_per_s_best"] = round(n_tokens / min(seconds), 2)


@pytest.mark.parametrize("threads", THREADS, ids=lambda t: f"t{t}")
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", [128, 512], ids=lambda n: f"pp{n}")
def test_prompt(benchmark, variant, threads, n):
    model = _model(variant, threads)
    ctx = model.context(n_ctx=1024)
    ids = _prompt_ids(model, n)
    ref = _top1(variant, n)  # the timed call must agree with a separate one-thread evaluation
    seconds = []

    def run():
        ctx.reset()
        t = time.perf_counter()
        out = ctx.eval(ids)
        seconds.append(time.perf_counter() - t)
        return out

    out = benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    assert int(np.argmax(out)) == ref
    _record(benchmark, n, seconds)


@pytest.mark.parametrize("threads", THREADS, ids=lambda t: f"t{t}")
@pytest.mark.parametrize("variant", VARIANTS)
def test_decode(benchmark, variant, threads):
    model = _model(variant, threads)
    ctx = model.context(n_ctx=256)
    prompt = _prompt_ids(model, 8)
    ban = {int(t): float("-inf") for t in model.tokenizer.eog_ids}
    seconds, ids = [], []

    def run():
        # N_GEN + 1 sampled tokens = N_GEN forward steps (the last sampled token is never stepped)
        res = model.generate(prompt, max_tokens=N_GEN + 1, temperature=0.0, logit_bias=ban, context=ctx)
        assert res.usage.completion_tokens == N_GEN + 1 and res.finish_reason == "length"
        seconds.append(res.timings.generation_seconds)
        ids.append(res.token_ids)
        return res

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    assert all(x == ids[0] for x in ids), "greedy decode is not deterministic"
    _record(benchmark, N_GEN, seconds)


@pytest.mark.parametrize("threads", THREADS, ids=lambda t: f"t{t}")
def test_python_overhead(benchmark, monkeypatch, threads):
    """Time model.generate spends outside the Cython decode loop (generate_ids: Runner.step + sampling with the GIL
    released): each next() on the loop is timed inside the same run, so machine-load drift cancels out."""
    from fastgguf.engine import generate as gen_module
    model = _model("q4_1", threads)
    ctx = model.context(n_ctx=256)
    prompt = _prompt_ids(model, 8)
    ban = {int(t): float("-inf") for t in model.tokenizer.eog_ids}
    inner = []
    real = gen_module.generate_ids

    def timed_generate_ids(*args, **kwargs):
        it = real(*args, **kwargs)
        inner.append(0.0)  # seconds inside the loop during this generate() call
        while True:
            t = time.perf_counter()
            tok = next(it, None)
            inner[-1] += time.perf_counter() - t
            if tok is None:
                return
            yield tok

    monkeypatch.setattr(gen_module, "generate_ids", timed_generate_ids)
    end_to_end = []

    def run():
        ctx.reset()
        res = model.generate(prompt, max_tokens=N_GEN + 1, temperature=0.0, logit_bias=ban, context=ctx)
        end_to_end.append(res.timings.generation_seconds)
        return res

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    assert len(inner) == ROUNDS
    over = [e - c for e, c in zip(end_to_end, inner)]
    pct = [100.0 * o / e for o, e in zip(over, end_to_end)]
    benchmark.extra_info["c_loop_tokens_per_s"] = round(N_GEN / statistics.median(inner), 2)
    benchmark.extra_info["generate_tokens_per_s"] = round(N_GEN / statistics.median(end_to_end), 2)
    benchmark.extra_info["overhead_us_per_token"] = round(statistics.median(over) / (N_GEN + 1) * 1e6, 1)
    benchmark.extra_info["overhead_pct"] = round(statistics.median(pct), 3)
    print(f"\nPython overhead per generated token: {benchmark.extra_info['overhead_us_per_token']} us, "
          f"{benchmark.extra_info['overhead_pct']}% of model.generate's decode time")


def _make_variant_reference():  # pragma: no cover - development tool, needs llama-cpp-python
    """Write benchmarks/data/variants-greedy.json: llama.cpp's greedy continuation of the Q4_1 reference prompt on
    our Q4_0 and Q8_0 files, with the teacher-forced top-1 minus top-2 logit margin at each generated position."""
    import llama_cpp
    with open(REF) as f:
        prompt = json.load(f)["results"][0]["prompt_ids"]
    out = {}
    for v in ("q4_0", "q8_0"):
        llm = llama_cpp.Llama(model_path=_path(v), n_ctx=256, n_threads=1, logits_all=True, verbose=False)
        eog = [t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t)]
        llm.eval(prompt)
        ids, margins = [], []
        for _ in range(32):
            lg = np.array(llm.scores[llm.n_tokens - 1])
            lg[eog] = -np.inf
            top = np.sort(lg)[-2:]
            ids.append(int(np.argmax(lg)))
            margins.append(round(float(top[1] - top[0]), 4))
            llm.eval([ids[-1]])
        out[v] = {"engine": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}", "model_file":
                  os.path.basename(_path(v)), "prompt_ids": prompt, "greedy_ids": ids, "margins": margins}
    os.makedirs(os.path.dirname(VARIANT_REF), exist_ok=True)
    with open(VARIANT_REF, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {VARIANT_REF}")


if __name__ == "__main__":
    _make_variant_reference()
