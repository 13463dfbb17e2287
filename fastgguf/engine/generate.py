"""Text generation: prompt -> tokens -> prompt evaluation (batched) -> decode loop -> text.

The decode loop is Cython (`fastgguf._native.generate_ids`): forward step, penalties and sampling run with the GIL
released; Python sees one token id at a time, only to detokenize it (UTF-8 safe streaming decoder) and to look for
stop strings. A stop string is never emitted, even when it arrives split across tokens: text that could be the start
of a stop string is held back until it is known not to be one.

    result = generate(model, "Once upon a time", max_tokens=64, seed=1)
    result.text, result.finish_reason, result.usage.total_tokens, result["text"]
    for piece in generate(model, "Once upon a time", stream=True): print(piece, end="")

finish_reason: "stop" (an end-of-generation token or a stop string), "length" (max_tokens reached, or the context is
full). Usage counts prompt tokens and completion tokens (sampled tokens, without the end-of-generation token).

Speculative decoding (`speculative="prompt_lookup"` or a draft Model) replaces the Cython loop by `_speculative_steps`,
which runs fastgguf.engine.speculative.Speculation (the verification rule the Scheduler runs too): several tokens per
forward where the drafts are right, the same tokens.

Context reuse: with `context=` given, the tokens it already holds from an earlier generate() call on it are kept when
they are a prefix of the new prompt (only the rest is evaluated; see usage.cached_tokens), otherwise it is reset. A
Model with a prompt cache (Model(prompt_cache=DIR): fastgguf.engine.prompt_cache) may restore a longer prefix from
disk instead (counted in cached_tokens too), and stores long prompts once evaluated.
"""
import contextlib
import dataclasses
import time
import weakref
from dataclasses import dataclass, field
from typing import List, Optional

from fastgguf._native import Runner, generate_ids
from fastgguf.engine.grammar import matchers
from fastgguf.engine.params import SamplingParams, check_token_ids
from fastgguf.engine.prompt_cache import prompt_evaluated, reuse_prefix
from fastgguf.engine.sampler import Sampler
from fastgguf.engine.sequence import Sequence
from fastgguf.engine.speculative import Speculation, check_draft, make_drafter

__all__ = ["generate", "GenerationResult", "GenerationStream", "Usage", "Timings", "make_sampler",
           "reusable_prefix"]

CTX_ROUND = 256  # a fresh context is sized to prompt + max_tokens rounded up to this


class _DictLike:
    """result["text"], result.get("usage"), dict(result), result.to_dict()."""

    def __getitem__(self, key):
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key, default=None):
        return getattr(self, key) if key in self.keys() else default

    def keys(self):
        return [f.name for f in dataclasses.fields(self)]

    def __contains__(self, key):
        return key in self.keys()

    def __iter__(self):
        return iter(self.keys())

    def to_dict(self):
        return dataclasses.asdict(self)


@dataclass
class Usage(_DictLike):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens reused from the context's cache (not evaluated again)


@dataclass
class Timings(_DictLike):
    prompt_seconds: float = 0.0            # evaluating the prompt (its uncached tokens)
    generation_seconds: float = 0.0        # the decode loop, detokenization included, consumer's time excluded
    prompt_tokens_per_second: float = 0.0  # evaluated prompt tokens / prompt_seconds
    generation_tokens_per_second: float = 0.0
    draft_tokens: int = 0                  # speculative decoding: tokens drafted (proposed) for verification
    draft_accepted: int = 0                # ... of them accepted (0 and 0 without speculation)


@dataclass
class GenerationResult(_DictLike):
    text: str
    finish_reason: Optional[str]
    usage: Usage
    timings: Timings
    token_ids: List[int] = field(default_factory=list)


def _rate(n, seconds):
    return n / seconds if seconds > 0 else 0.0


def make_sampler(n_vocab=None, params=None, **kwargs):
    """A Sampler following SamplingParams (`params` and/or keyword fields; ValueError/TypeError on bad ones)."""
    return Sampler(SamplingParams.from_args(params, **kwargs), n_vocab=n_vocab)


def _prompt_ids(tokenizer, prompt, n_vocab, add_special, parse_special):
    if isinstance(prompt, str):
        ids = list(tokenizer.tokenize(prompt, add_special=add_special, parse_special=parse_special))
        if not ids:
            raise ValueError("the prompt is empty: it tokenizes to no tokens (give some text, or add_special=True "
                             "on a model that adds a BOS token)")
        return ids
    if isinstance(prompt, (bytes, bytearray)):
        raise TypeError("prompt must be a str or a list of token ids, got bytes (decode it first)")
    return check_token_ids(prompt, n_vocab, "prompt").tolist()


def reusable_prefix(context, ids):
    """How many leading ids a new prompt can keep from what context's KV cache holds (context.tokens): their
    common prefix, at most len(ids) - 1 (one token is always evaluated, for its logits), and 0 where the cache
    cannot rewind that far (sliding-window layers keep a ring of recent positions: Context.reusable)."""
    cached = context.tokens
    keep, lim = 0, min(len(cached), len(ids) - 1)
    while keep < lim and cached[keep] == ids[keep]:
        keep += 1
    return context.reusable(keep)


def _plain_steps(context, seq, logits):
    """The Steps of plain decoding: the Cython loop (fastgguf._native.generate_ids) samples with the sequence's
    sampler (and its constraint), seq.advance does the rest; the loop ends early when the context is full, and the
    sequence with it ("length")."""
    more = {} if seq.constraint is None else {"constraint": seq.constraint}
    with contextlib.closing(generate_ids(context.runner, seq.sampler, seq.max_tokens, seq.eog, logits=logits,
                                         **more)) as ids:
        for tok in ids:
            yield seq.advance(tok)
    yield seq.finish("length")  # reached unfinished only: the context is full, or max_tokens is 0


def _speculative_steps(context, seq, spec, logits, timings):
    """The Steps of speculative decoding: each forward evaluates the next token and its drafts, and spec.verify
    (fastgguf.engine.speculative: the rule the Scheduler runs too) steps the sequence on its rows while they match
    the drafts. The caller holds the context (its claim): the unguarded methods."""
    st = seq.step(logits, full=context.n_past >= context.n_ctx)
    yield st
    while st.finish is None:
        rows = context._eval(spec.inputs(st.token, seq), all_logits=True)
        done = spec.verify(rows, seq.step)
        timings.draft_tokens += done.drafted
        timings.draft_accepted += done.accepted  # counted before the yields: the caller may stop at a stop string
        yield from done.steps
        st = done.steps[-1]


class GenerationStream:
    """Iterator over generated text pieces. After it is exhausted: .finish_reason, .usage, .timings, .text,
    .token_ids (the same values a non-streaming call returns in its result). .result() drains it and returns the
    GenerationResult. close() stops early (finish_reason stays None).

    A live stream owns its context, from its creation until it is exhausted, closed, fails or its last reference
    goes (at once: no garbage collection needed): any other use of that context meanwhile (another generate(),
    eval, reset, from any thread) raises RuntimeError."""

    def __init__(self, gen_fn, release):
        self.text = ""
        self.token_ids = []
        self.finish_reason = None
        self.usage = Usage()
        self.timings = Timings()
        self._release = release
        # the generator writes the results into a weak proxy of the stream: a strong reference would be a cycle
        # (stream -> generator -> stream) that only the garbage collector frees, so a stream abandoned by `break` or
        # by an exception in the consumer's loop kept its context locked until then (issue 24)
        self._gen = gen_fn(weakref.proxy(self))

    def __iter__(self):
        return self

    def __next__(self):
        try:
            piece = next(self._gen)
        except BaseException:  # exhausted (StopIteration) or failed: the context is free again
            self._release()
            raise
        self.text += piece
        return piece

    def close(self):
        try:
            self._gen.close()
        finally:
            self._release()

    def __del__(self):
        release = getattr(self, "_release", None)
        if release is not None:
            release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def result(self):
        for _ in self:
            pass
        return GenerationResult(text=self.text, finish_reason=self.finish_reason, usage=self.usage,
                                timings=self.timings, token_ids=list(self.token_ids))


def _fresh_context(model, n_prompt, max_tokens):
    """generate()'s default Context: prompt + max_tokens (None: the training context) rounded up to CTX_ROUND, at
    most the model's training context."""
    n_ctx_train = int(model.n_ctx_train or 0)
    want = n_prompt + (max_tokens if max_tokens is not None else (n_ctx_train or n_prompt + 1))
    n_ctx = -(-want // CTX_ROUND) * CTX_ROUND
    if n_ctx_train:
        if n_prompt > n_ctx_train:
            raise ValueError(f"the prompt has {n_prompt} tokens, more than the model's context length {n_ctx_train}")
        n_ctx = min(n_ctx, n_ctx_train)
    return model.context(n_ctx=n_ctx)


def generate(model, prompt, params=None, *, stream=False, context=None, add_special=True, parse_special=False,
             **sampling):
    """Complete `prompt` (text, or a list of token ids) with `model`.

    `params`: a SamplingParams (fastgguf.engine.params: sampling, max_tokens, stop, seed); keyword arguments build
    one or override its fields (`generate(m, "Hi", temperature=0, max_tokens=8)`). A stop string ends generation
    before it and is not part of the text. `context`: a Context to run in (default: a fresh one sized
    min(model.n_ctx_train, prompt + max_tokens) rounded up to 256). `max_tokens=None`: until an end-of-generation
    token or the context is full.
    Returns a GenerationResult, or with stream=True a GenerationStream of text pieces."""
    if context is not None and not isinstance(getattr(context, "runner", None), Runner):
        raise TypeError(f"context must be a fastgguf.Context (model.context()), got {type(context).__name__}")
    params = SamplingParams.from_args(params, **sampling)
    ids = _prompt_ids(model.tokenizer, prompt, model.n_vocab, add_special, parse_special)
    grammar = params.constraint()  # json_schema / grammar: every sampled token is masked by it (fails closed)
    constraint = matchers(model, grammar, 1)[0] if grammar is not None else None
    seq = Sequence(model, ids, params, constraint=constraint)  # bad sampling fields fail here, before any context
    check_draft(model, params)
    if context is None:
        context = _fresh_context(model, len(ids), params.max_tokens)
    if len(ids) > context.n_ctx:
        raise ValueError(f"the prompt has {len(ids)} tokens but the context holds only n_ctx={context.n_ctx} tokens")
    if params.max_tokens is None:
        seq.max_tokens = context.n_ctx - len(ids) + 1
    claim = context._claim()
    s = GenerationStream(lambda st: _run(st, context, claim, ids, seq), claim.release)
    return s if stream else s.result()


def _run(st, context, claim, ids, seq):
    """A generate() stream's body: evaluates the prompt (its cached common prefix reused), then decodes, writing the
    results into st (the stream: a weak proxy) and yielding the text pieces. It owns the context (claim: see
    GenerationStream) and runs each step inside claim.guard()."""
    t0 = time.perf_counter()
    with claim.guard():
        keep = reuse_prefix(context, ids, reusable_prefix(context, ids))  # from its cache, or the prompt cache's
        logits = context._eval(ids[keep:])  # at least one token, for its logits
        t1 = time.perf_counter()
        prompt_evaluated(context, ids)
    st.timings.prompt_seconds = t1 - t0
    st.timings.prompt_tokens_per_second = _rate(len(ids) - keep, t1 - t0)
    st.usage = Usage(prompt_tokens=len(ids), completion_tokens=0, total_tokens=len(ids), cached_tokens=keep)
    if seq.params.speculative is None:
        steps = _plain_steps(context, seq, logits)
    else:
        spec = Speculation(make_drafter(seq.params, ids, context.n_ctx), context, guarded=False)
        steps = _speculative_steps(context, seq, spec, logits, st.timings)
    gen_time = 0.0
    t = time.perf_counter()
    with contextlib.closing(steps):
        while True:
            with claim.guard():
                step = next(steps)
            if not step.eog and step.token is not None:
                st.token_ids.append(step.token)
            st.finish_reason = step.finish
            if step.text or step.finish is not None:
                gen_time += time.perf_counter() - t
                n = len(st.token_ids)
                st.usage.completion_tokens, st.usage.total_tokens = n, len(ids) + n
                st.timings.generation_seconds = gen_time
                st.timings.generation_tokens_per_second = _rate(n, gen_time)
                if step.text:
                    yield step.text
                t = time.perf_counter()
            if step.finish is not None:
                return
