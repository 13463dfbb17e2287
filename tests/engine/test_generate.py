"""Generation logic (stop strings, streaming, finish_reason, usage, context handling) on a tiny random-weight model
(tests/models.py "vocab": GPT-2's vocabulary, noise over all of it), and the real Cython decode loop on the default
model. The expected outputs are derived from the model's own plain output (a stop string cut out of it, a prefix of
it) or written out as a Python reference loop (Sequence.step on one Context.eval per token)."""
import numpy as np
import pytest

from fastgguf.engine.generate import GenerationResult, GenerationStream, generate
from fastgguf.engine.model import Model
from fastgguf.engine.params import SamplingParams
from fastgguf.engine.sequence import Sequence
import models

GREEDY = dict(temperature=0.0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """2 random layers over GPT-2's vocabulary, a training context of 512 tokens: free output never ends early once
    its end-of-generation token is banned (no_eog)."""
    path = models.build(tmp_path_factory.mktemp("gen") / "tiny.gguf", "vocab", vocab="gpt-2", seed=1, n_ctx=512)
    return Model(path, n_threads=1)


def no_eog(model):
    return {t: float("-inf") for t in model.tokenizer.eog_ids}


def reference(model, prompt_ids, n_ctx=256, **kw):
    """Plain decoding written out: one Context.eval per token and Sequence.step on its logits (as the Scheduler
    steps a sequence). Returns (completion token ids, text, finish_reason)."""
    seq = Sequence(model, prompt_ids, SamplingParams(**kw))
    ctx = model.context(n_ctx=n_ctx)
    logits = ctx.eval(prompt_ids)
    ids, text = [], ""
    while True:
        st = seq.step(logits, full=ctx.n_past >= ctx.n_ctx)
        if st.token is not None and not st.eog:
            ids.append(st.token)
        text += st.text
        if st.finish is not None:
            return ids, text, st.finish
        logits = ctx.eval([st.token])


@pytest.fixture(scope="module")
def plain(tiny):
    """24 greedy tokens after "hi" (no end of generation): what stop strings and limits are cut out of."""
    return generate(tiny, "hi", max_tokens=24, logit_bias=no_eog(tiny), **GREEDY)


def test_result_fields(tiny, plain):
    r = plain
    assert isinstance(r, GenerationResult) and r.finish_reason == "length"
    assert len(r.token_ids) == 24 and r.text == tiny.detokenize(r.token_ids)
    n = len(tiny.tokenize("hi"))
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (n, 24, n + 24)
    assert r["text"] == r.text and r["usage"]["total_tokens"] == n + 24 and "timings" in r
    assert r.to_dict()["usage"]["completion_tokens"] == 24
    t = r.timings
    assert t.prompt_seconds >= 0 and t.generation_seconds > 0 and t.generation_tokens_per_second > 0
    # an end-of-generation token ends with "stop", and is neither text nor a completion token
    eos = tiny.tokenizer.eos_id
    r = generate(tiny, "hi", logit_bias={eos: 100.0}, **GREEDY)
    assert (r.text, r.finish_reason, r.token_ids, r.usage.completion_tokens) == ("", "stop", [], 0)


def test_max_tokens_length_and_zero(tiny, plain):
    r = generate(tiny, "hi", max_tokens=5, logit_bias=no_eog(tiny), **GREEDY)
    assert (r.token_ids, r.finish_reason, r.usage.completion_tokens) == (plain.token_ids[:5], "length", 5)
    assert r.text == tiny.detokenize(plain.token_ids[:5])
    r = generate(tiny, "hi", max_tokens=0, **GREEDY)
    assert (r.text, r.finish_reason, r.usage.completion_tokens) == ("", "length", 0)


def spy_contexts(model, monkeypatch):
    """The n_ctx of every Context model.context() makes from now on."""
    made, real = [], model.context

    def context(n_ctx=4096, n_threads=None):
        made.append(n_ctx)
        return real(n_ctx, n_threads)
    monkeypatch.setattr(model, "context", context)
    return made


def test_fresh_context_size(tiny, monkeypatch):
    made = spy_contexts(tiny, monkeypatch)
    for max_tokens in (300, 20, 5000, None):  # (the context is made by the call: the stream need not run)
        generate(tiny, [5] * 10, max_tokens=max_tokens, stream=True, **GREEDY).close()
    assert made == [512, 256, 512, 512]  # 310 rounded up to 512; 30 to 256; capped by n_ctx_train (512)


def test_prompt_too_long_and_empty(tiny):
    with pytest.raises(ValueError, match="600 tokens.*512"):
        generate(tiny, [5] * 600, **GREEDY)
    ctx = tiny.context(n_ctx=16)
    with pytest.raises(ValueError, match="20 tokens.*n_ctx=16"):
        generate(tiny, [5] * 20, context=ctx, **GREEDY)
    with pytest.raises(ValueError, match="empty"):
        generate(tiny, "", **GREEDY)
    with pytest.raises(ValueError, match="out of range"):
        generate(tiny, [1, 2, tiny.n_vocab], **GREEDY)
    with pytest.raises(TypeError):
        generate(tiny, b"bytes", **GREEDY)
    with pytest.raises(TypeError, match="Context"):
        generate(tiny, "hi", context=object(), **GREEDY)


def test_bad_parameters_raise_before_running(tiny, monkeypatch):
    made = spy_contexts(tiny, monkeypatch)
    for kw, exc in [(dict(top_p=0.0), ValueError), (dict(top_k=-1), ValueError), (dict(temperature=-1), ValueError),
                    (dict(max_tokens=-1), ValueError), (dict(stop=3), TypeError), (dict(stop=["a", 1]), TypeError),
                    (dict(logit_bias={tiny.n_vocab: 1.0}), ValueError), (dict(min_p=1.5), ValueError)]:
        with pytest.raises(exc):
            generate(tiny, "hi", stream=True, **kw)
    assert made == []


def test_context_full_is_length(tiny, plain):
    ctx = tiny.context(n_ctx=8)
    prompt = tiny.tokenize("hi") + [5]
    r = generate(tiny, prompt, context=ctx, max_tokens=100, logit_bias=no_eog(tiny), **GREEDY)
    # 2 prompt tokens + 6 stepped tokens fill the cache; the 7th sampled token is not stepped
    assert len(r.token_ids) == 7 and r.finish_reason == "length" and ctx.n_past == 8
    assert r.token_ids == generate(tiny, prompt, max_tokens=7, logit_bias=no_eog(tiny), **GREEDY).token_ids


def test_prompt_as_ids(tiny, plain):
    r = generate(tiny, tiny.tokenize("hi"), max_tokens=24, logit_bias=no_eog(tiny), **GREEDY)
    assert r.token_ids == plain.token_ids and r.text == plain.text and r.usage.prompt_tokens == 1


def stops_of(text):
    """Stop strings cut out of text: spanning tokens, at the very start, a single character, several at once (the
    earliest wins), and ones that never complete (their start held back, then released at the end)."""
    return [text[8:14], text[:3], text[12], [text[20:22], text[8:12], "\x00zz"], "\x00zz", text[-2:] + "\x00"]


def test_stop_strings_never_emitted(tiny, plain):
    text = plain.text
    for stop in stops_of(text):
        stops = [stop] if isinstance(stop, str) else stop
        cut = min((text.find(s) for s in stops if s in text), default=len(text))
        kw = dict(max_tokens=24, logit_bias=no_eog(tiny), stop=stop, **GREEDY)
        r = generate(tiny, "hi", **kw)
        assert r.text == text[:cut], stop
        assert r.finish_reason == ("stop" if cut < len(text) else "length")
        pieces = list(generate(tiny, "hi", stream=True, **kw))
        assert "".join(pieces) == text[:cut]
        acc = ""  # no emitted prefix of the output ever contained a stop string
        for p in pieces:
            acc += p
            assert not any(s in acc for s in stops)


def test_stop_finish_reason_and_tokens(tiny, plain):
    text, ids = plain.text, plain.token_ids
    stop = text[8:12]
    j = next(j for j in range(len(ids)) if stop in tiny.detokenize(ids[:j + 1]))  # the token that completes it
    kw = dict(logit_bias=no_eog(tiny), stop=stop, **GREEDY)
    r = generate(tiny, "hi", max_tokens=24, **kw)
    assert r.finish_reason == "stop" and r.token_ids == ids[:j + 1]  # the tokens sampled, the stop string's included
    r = generate(tiny, "hi", max_tokens=j, **kw)
    assert (r.text, r.finish_reason) == (tiny.detokenize(ids[:j]), "length")  # held back, released: no stop came


def test_streaming_equals_non_streaming(tiny):
    kw = dict(max_tokens=60, temperature=0.9, top_k=50, top_p=0.9, min_p=0.02, seed=1234, stop=["\n\n", "zz"])
    r = generate(tiny, "start", **kw)
    s = generate(tiny, "start", stream=True, **kw)
    assert isinstance(s, GenerationStream) and s.finish_reason is None
    pieces = list(s)
    assert "".join(pieces) == r.text == s.text
    assert s.finish_reason == r.finish_reason
    assert s.usage == r.usage and s.token_ids == r.token_ids
    assert s.result().text == r.text
    # same seed, same text; another seed, (almost surely) another text
    assert generate(tiny, "start", **kw).text == r.text
    assert generate(tiny, "start", **{**kw, "seed": 99}).token_ids != r.token_ids


def test_stream_close_early(tiny, plain):
    ctx = tiny.context(n_ctx=64)
    s = generate(tiny, "hi", context=ctx, max_tokens=24, logit_bias=no_eog(tiny), stream=True, **GREEDY)
    assert next(s) == tiny.detokenize(plain.token_ids[:1])
    s.close()
    assert s.finish_reason is None
    with pytest.raises(StopIteration):
        next(s)
    assert generate(tiny, "hi", context=ctx, max_tokens=2, **GREEDY).token_ids == plain.token_ids[:2]  # released


def test_pieces_are_the_streaming_decoders_whole_characters(tiny):
    """The text pieces are what the UTF-8 safe streaming decoder lets out token by token (its flush at the end): the
    output is drawn from the byte tokens of multi-byte characters, so some tokens carry only part of one."""
    parts = tiny.tokenize("日本 🙂 ✓ é", add_special=False)
    bias = {t: 8.0 for t in parts}
    r = generate(tiny, "p", stream=True, max_tokens=40, temperature=1.0, seed=3, logit_bias=bias)
    pieces = list(r)
    dec = tiny.tokenizer.streaming_decoder()
    outs = [dec.feed(t) for t in r.token_ids]
    outs[-1] += dec.flush()
    assert pieces == [o for o in outs if o] and "".join(pieces) == r.text
    assert any(o == "" for o in outs) and sum(t in parts for t in r.token_ids) > 20


@pytest.mark.parametrize("kw", [
    dict(temperature=0),
    dict(temperature=0, repeat_penalty=1.5, repeat_last_n=4),
    dict(temperature=0, presence_penalty=1.0, frequency_penalty=0.3),
    dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, seed=42),
])
def test_cython_loop_equals_the_reference_loop(tiny, kw):
    """Penalties (the prompt in the repetition window), logit bias and sampling: the Cython loop samples exactly as
    Sequence.step does on one Context.eval per token."""
    prompt = tiny.tokenize("once upon a time")
    bias = {**no_eog(tiny), generate(tiny, prompt, max_tokens=1, **GREEDY).token_ids[0]: float("-inf")}
    r = generate(tiny, prompt, max_tokens=16, logit_bias=bias, **kw)
    assert (r.token_ids, r.text, r.finish_reason) == reference(tiny, prompt, max_tokens=16, logit_bias=bias, **kw)
    assert not set(r.token_ids) & set(bias)  # banned: never sampled


def test_context_reuse_keeps_common_prefix(tiny):
    """Context reuse keeps what the cache holds of the new prompt, and decodes as a fresh context would."""
    kw = dict(max_tokens=6, logit_bias=no_eog(tiny), **GREEDY)
    ctx = tiny.context(n_ctx=128)

    def run(prompt, cached):
        r = generate(tiny, prompt, context=ctx, **kw)
        assert r.usage.cached_tokens == cached and r.usage.prompt_tokens == len(prompt)
        assert r.token_ids == generate(tiny, prompt, **kw).token_ids  # cached decode == full recompute
        assert ctx.tokens == prompt + r.token_ids[:-1]  # the last sampled token is never run
        return r

    p = tiny.tokenize("hello there")
    run(p, 0)
    more = ctx.tokens + tiny.tokenize(" more")
    run(more, len(ctx.tokens))
    run(p[:1] + [5, 6], 1)  # rewinds to the common prefix
    run([7, 8, 9], 0)
    run([7, 8, 9], 2)  # the same prompt: its last token is evaluated again


# ---- the real decode loop (Cython generate_ids over the Runner) on the default model ----

@pytest.fixture(scope="module")
def model(default_model_path):
    from fastgguf.engine.model import Model
    return Model(default_model_path)


def test_real_greedy_completion(model):
    r = generate(model, "The capital of France is", max_tokens=4, temperature=0)
    assert r.text.startswith(" Paris")
    assert r.finish_reason == "length" and r.usage.completion_tokens == 4
    assert r.usage.prompt_tokens == len(model.tokenize("The capital of France is"))
    assert r.timings.generation_tokens_per_second > 0 and r.timings.prompt_tokens_per_second > 0


def test_real_cython_loop_equals_the_reference_loop(model):
    kw = dict(max_tokens=8, temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, seed=42)
    a = generate(model, "Once upon a time", context=model.context(n_ctx=64), **kw)
    assert (a.token_ids, a.text, a.finish_reason) == reference(model, model.tokenize("Once upon a time"), 64, **kw)
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
