"""Generation logic (stop strings, streaming, finish_reason, usage, context handling) on fake models, and the real
Cython decode loop on the default model."""
import os

import numpy as np
import pytest

from fastgguf.engine.generate import GenerationResult, GenerationStream, generate
from gen_fakes import EOS, N_VOCAB, FakeModel

GREEDY = dict(temperature=0.0)


def test_greedy_script_result_fields():
    m = FakeModel("Hello world")
    r = generate(m, "hi", **GREEDY)
    assert isinstance(r, GenerationResult)
    assert r.text == "Hello world"
    assert r.finish_reason == "stop"
    assert r.token_ids == list(b"Hello world")
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (2, 11, 13)
    assert r["text"] == r.text and r["usage"]["total_tokens"] == 13 and "timings" in r
    assert r.to_dict()["usage"]["completion_tokens"] == 11
    t = r.timings
    assert t.prompt_seconds >= 0 and t.generation_seconds > 0 and t.generation_tokens_per_second > 0


def test_max_tokens_length_and_zero():
    m = FakeModel("Hello world")
    r = generate(m, "hi", max_tokens=5, **GREEDY)
    assert (r.text, r.finish_reason, r.usage.completion_tokens) == ("Hello", "length", 5)
    r = generate(m, "hi", max_tokens=0, **GREEDY)
    assert (r.text, r.finish_reason, r.usage.completion_tokens) == ("", "length", 0)


def test_fresh_context_size():
    m = FakeModel("abc", n_ctx_train=512)
    generate(m, "x" * 10, max_tokens=300, **GREEDY)
    assert m.contexts[-1].n_ctx == 512  # 310 rounded up to 512, within n_ctx_train
    generate(m, "x" * 10, max_tokens=20, **GREEDY)
    assert m.contexts[-1].n_ctx == 256
    generate(m, "x" * 10, max_tokens=5000, **GREEDY)
    assert m.contexts[-1].n_ctx == 512  # capped by n_ctx_train


def test_prompt_too_long_and_empty():
    m = FakeModel("abc", n_ctx_train=64)
    with pytest.raises(ValueError, match="100 tokens.*64"):
        generate(m, "x" * 100, **GREEDY)
    ctx = m.context(n_ctx=16)
    with pytest.raises(ValueError, match="20 tokens.*n_ctx=16"):
        generate(m, "y" * 20, context=ctx, **GREEDY)
    with pytest.raises(ValueError, match="empty"):
        generate(m, "", **GREEDY)
    with pytest.raises(ValueError, match="out of range"):
        generate(m, [1, 2, N_VOCAB], **GREEDY)
    with pytest.raises(TypeError):
        generate(m, b"bytes", **GREEDY)


def test_bad_parameters_raise_before_running():
    m = FakeModel("abc")
    for kw, exc in [(dict(top_p=0.0), ValueError), (dict(top_k=-1), ValueError), (dict(temperature=-1), ValueError),
                    (dict(max_tokens=-1), ValueError), (dict(stop=3), TypeError), (dict(stop=["a", 1]), TypeError),
                    (dict(logit_bias={N_VOCAB: 1.0}), ValueError), (dict(min_p=1.5), ValueError)]:
        with pytest.raises(exc):
            generate(m, "hi", stream=True, **kw)
    assert m.contexts == []


def test_context_full_is_length():
    m = FakeModel("abcdefghijklmnop")
    ctx = m.context(n_ctx=8)
    r = generate(m, "hi", context=ctx, max_tokens=100, **GREEDY)
    # 2 prompt tokens + 6 stepped tokens fill the cache; the 7th sampled token is not stepped
    assert (r.text, r.finish_reason) == ("abcdefg", "length")
    assert ctx.n_past == 8


def test_prompt_as_ids():
    m = FakeModel("ok")
    r = generate(m, [104, 105], **GREEDY)
    assert r.text == "ok" and r.usage.prompt_tokens == 2


@pytest.mark.parametrize("script,stop,want", [
    ("Hello STOP world", "STOP", "Hello "),
    ("Hello ST, STOP world", "STOP", "Hello ST, "),     # a partial match released, then the real one
    ("abcabd", ["abd", "xyz"], "abc"),
    ("one\n\ntwo", ["\n\n"], "one"),
    ("SSTOP", "STOP", "S"),
    ("no stop here", "zzz", "no stop here"),
    ("ends with ST", "STOP", "ends with ST"),            # a held partial match is released at the end
    ("héllo wörld", "ö", "héllo w"),                     # multi-byte stop split across byte tokens
    ("stop at start", "stop", ""),
])
def test_stop_strings_never_emitted(script, stop, want):
    m = FakeModel(script)
    r = generate(m, "p", stop=stop, **GREEDY)
    assert r.text == want
    stops = [stop] if isinstance(stop, str) else stop
    assert r.finish_reason == "stop"  # a stop string, or the script's end-of-generation token
    pieces = list(generate(m, "p", stop=stop, stream=True, **GREEDY))
    assert "".join(pieces) == want
    # no emitted prefix of the output ever contained a stop string
    acc = ""
    for p in pieces:
        acc += p
        assert not any(s in acc for s in stops)


def test_stop_finish_reason_and_tokens():
    m = FakeModel("Hello STOP world")
    r = generate(m, "p", stop="STOP", **GREEDY)
    assert r.finish_reason == "stop"
    assert r.token_ids == list(b"Hello STOP")  # the tokens sampled, the stop string's included
    r = generate(m, "p", stop="STOP", max_tokens=8, **GREEDY)
    assert (r.text, r.finish_reason) == ("Hello ST", "length")  # "ST" held back, released: the stop never came


def test_streaming_equals_non_streaming():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((N_VOCAB, N_VOCAB)).astype(np.float32) * 3
    table[:, EOS] -= 5
    m = FakeModel(table=table)
    kw = dict(max_tokens=60, temperature=0.9, top_k=50, top_p=0.9, min_p=0.02, seed=1234, stop=["\n\n", "zz"])
    r = generate(m, "start", **kw)
    s = generate(m, "start", stream=True, **kw)
    assert isinstance(s, GenerationStream) and s.finish_reason is None
    pieces = list(s)
    assert "".join(pieces) == r.text == s.text
    assert s.finish_reason == r.finish_reason
    assert s.usage == r.usage and s.token_ids == r.token_ids
    assert s.result().text == r.text
    # same seed, same text; another seed, (almost surely) another text
    assert generate(m, "start", **kw).text == r.text
    assert generate(m, "start", **{**kw, "seed": 99}).token_ids != r.token_ids


def test_stream_close_early():
    m = FakeModel("abcdefgh")
    s = generate(m, "p", stream=True, **GREEDY)
    assert next(s) == "a"
    s.close()
    assert s.finish_reason is None
    with pytest.raises(StopIteration):
        next(s)


def test_utf8_pieces_are_whole_characters():
    text = "héllo ✓ 日本 🙂!"
    m = FakeModel(text)
    pieces = list(generate(m, "p", stream=True, **GREEDY))
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    assert generate(m, "p", max_tokens=len("héllo ✓ 日本 ".encode()) + 2, **GREEDY).text.endswith("\ufffd")


def test_logit_bias_ban_and_repeat_penalty():
    m = FakeModel("aaaa")
    r = generate(m, "p", logit_bias={ord("a"): float("-inf")}, max_tokens=3, **GREEDY)
    assert "a" not in r.text and len(r.token_ids) == 3
    table = np.zeros((N_VOCAB, N_VOCAB), dtype=np.float32)
    table[:, ord("x")] = 2.0
    table[:, ord("y")] = 1.5
    m = FakeModel(table=table)
    assert generate(m, "p", max_tokens=4, **GREEDY).text == "xxxx"
    # once x is in the window its logit is 2.0 / 1.5 = 1.33 < 1.5
    assert generate(m, "p", max_tokens=4, repeat_penalty=1.5, **GREEDY).text == "xyxx"
    assert generate(m, "p", max_tokens=4, repeat_penalty=1.5, repeat_last_n=1, **GREEDY).text == "xyxy"
    assert generate(m, "p", max_tokens=4, presence_penalty=1.0, **GREEDY).text == "xyxx"
    assert generate(m, "p", max_tokens=4, frequency_penalty=0.3, **GREEDY).text == "xxyx"
    # the prompt counts for the repetition penalty (llama.cpp), not for frequency/presence (OpenAI)
    assert generate(m, "x", max_tokens=2, repeat_penalty=1.5, **GREEDY).text == "yx"
    assert generate(m, "x", max_tokens=2, presence_penalty=1.0, **GREEDY).text == "xy"


def test_context_reuse_keeps_common_prefix():
    m = FakeModel("Hi!")
    ctx = m.context(n_ctx=64)
    r1 = generate(m, "hello", context=ctx, **GREEDY)
    assert r1.usage.cached_tokens == 0 and r1.text == "Hi!"
    assert ctx.tokens == list(b"helloHi!")  # <eos> was sampled, never run
    n = len(ctx.evals)
    r2 = generate(m, "helloHi! more", context=ctx, **GREEDY)
    assert r2.usage.cached_tokens == 8 and r2.usage.prompt_tokens == 13
    assert ctx.evals[n] == list(b" more") and r2.text == "Hi!"
    n = len(ctx.evals)
    r3 = generate(m, "helloX", context=ctx, **GREEDY)  # rewinds to the common prefix
    assert r3.usage.cached_tokens == 5 and ctx.evals[n] == list(b"X") and r3.text == "Hi!"
    r4 = generate(m, "other", context=ctx, **GREEDY)
    assert r4.usage.cached_tokens == 0 and ctx.tokens == list(b"otherHi!")
    r5 = generate(m, "other", context=ctx, **GREEDY)  # the same prompt: its last token is evaluated again
    assert r5.usage.cached_tokens == 4 and r5.text == "Hi!"


# ---- the real decode loop (Cython generate_ids over the Runner) on the default model ----

@pytest.fixture(scope="module")
def model(default_model_path):
    from fastgguf.engine.model import Model
    return Model(default_model_path)


class PythonLoopContext:
    """A real Context seen without its Runner: generate() then uses its Python reference decode loop."""

    def __init__(self, ctx):
        self._ctx = ctx
        self.runner = None

    n_ctx = property(lambda self: self._ctx.n_ctx)
    n_past = property(lambda self: self._ctx.n_past)
    tokens = property(lambda self: self._ctx.tokens)

    def eval(self, ids, all_logits=False):
        return self._ctx.eval(ids, all_logits)

    def reset(self):
        self._ctx.reset()

    def rewind(self, n):
        self._ctx.rewind(n)


def test_real_greedy_completion(model):
    r = generate(model, "The capital of France is", max_tokens=4, temperature=0)
    assert r.text.startswith(" Paris")
    assert r.finish_reason == "length" and r.usage.completion_tokens == 4
    assert r.usage.prompt_tokens == len(model.tokenize("The capital of France is"))
    assert r.timings.generation_tokens_per_second > 0 and r.timings.prompt_tokens_per_second > 0


def test_real_cython_loop_matches_python_loop(model):
    kw = dict(max_tokens=8, temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, seed=42)
    a = generate(model, "Once upon a time", context=model.context(n_ctx=64), **kw)
    b = generate(model, "Once upon a time", context=PythonLoopContext(model.context(n_ctx=64)), **kw)
    assert a.token_ids == b.token_ids and a.text == b.text
    s = generate(model, "Once upon a time", context=model.context(n_ctx=64), stream=True, **kw)
    assert "".join(s) == a.text and s.finish_reason == a.finish_reason and s.token_ids == a.token_ids


def test_real_prefix_reuse_follows_the_cache_not_the_last_generate(model):
    """Context.tokens is what the KV cache holds, whoever filled it: generate() reuses exactly that prefix."""
    kw = dict(max_tokens=4, temperature=0)
    ctx = model.context(n_ctx=64)
    first = generate(model, "Once upon a time", context=ctx, **kw)
    held = ctx.tokens
    assert len(held) == ctx.n_past == first.usage.prompt_tokens + 3  # the last sampled token is never run
    assert held[:first.usage.prompt_tokens] == model.tokenize("Once upon a time")
    # refill the cache directly with other ids of the same length: nothing of the old prompt may be reused
    other = [(t + 1) % model.n_vocab for t in held]
    ctx.reset()
    ctx.eval(other)
    assert ctx.tokens == other
    again = generate(model, "Once upon a time", context=ctx, **kw)
    assert again.usage.cached_tokens == 0 and again.token_ids == first.token_ids
    # and the same prompt right after: all but its last token come from the cache
    third = generate(model, "Once upon a time", context=ctx, **kw)
    assert third.usage.cached_tokens == first.usage.prompt_tokens - 1 and third.token_ids == first.token_ids


def test_real_generate_ids_direct(model):
    from fastgguf._native import generate_ids
    from fastgguf.engine.sampler import Sampler
    ctx = model.context(n_ctx=16)
    ids = model.tokenize("The capital of France is")
    logits = ctx.eval(ids)
    out = list(generate_ids(ctx.runner, Sampler(temperature=0), 3, model.tokenizer.eog_ids, logits=logits))
    assert len(out) == 3 and out[0] == int(np.argmax(logits))
    assert ctx.n_past == len(ids) + 2  # the last token is sampled, not run
    # the context fills up: generation ends early instead of failing
    out = list(generate_ids(ctx.runner, Sampler(temperature=0), 100, [], token=out[-1]))
    assert ctx.n_past == 16 and len(out) == 16 - (len(ids) + 2)
    with pytest.raises(ValueError):
        next(generate_ids(ctx.runner, Sampler(), 3, []))  # neither logits nor token


def test_real_stop_string_and_context_reuse(model):
    ctx = model.context(n_ctx=64)
    r = generate(model, "The capital of France is", max_tokens=6, temperature=0, stop="ris", context=ctx)
    assert r.text == " Pa" and r.finish_reason == "stop"
    r2 = generate(model, "The capital of France is", max_tokens=2, temperature=0, context=ctx)
    assert r2.usage.cached_tokens == r2.usage.prompt_tokens - 1 and r2.text.startswith(" Paris")


def test_real_chat(model):
    r = model.chat([{"role": "user", "content": "What is 2+2?"}], max_tokens=12, temperature=0)
    assert "4" in r.text
    assert r.usage.prompt_tokens > 20  # the template's default system prompt is there


def test_real_context_used_by_another_thread_raises(model):
    ctx = model.context(n_ctx=32)
    s = generate(model, "Hello", max_tokens=4, temperature=0, context=ctx, stream=True)
    next(s)
    ctx._lock.acquire()  # as if another thread were running it
    try:
        with pytest.raises(RuntimeError, match="another thread"):
            list(s)
    finally:
        ctx._lock.release()
