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

Speculative decoding (`speculative="prompt_lookup"` or a draft Model; fastgguf.engine.speculative) replaces the
Cython loop by `_speculative_decode`: several tokens per forward where the drafts are right, the same tokens.

Context reuse: with `context=` given, the tokens it already holds from an earlier generate() call on it are kept when
they are a prefix of the new prompt (only the rest is evaluated; see usage.cached_tokens), otherwise it is reset.
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
from fastgguf.engine.sampler import Sampler
from fastgguf.engine.sequence import Sequence
from fastgguf.engine.speculative import check_draft, draft_budget, make_drafter, rewind_or_replay

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
    reusable = getattr(context, "reusable", None)
    return reusable(keep) if reusable is not None else keep


def _python_decode(context, c_eval, seq, max_tokens, logits):
    """Reference decode loop for contexts without a compiled Runner (test fakes): same contract as generate_ids
    (the last yielded token is not evaluated)."""
    n = 0
    while n < max_tokens:
        tok = seq.sample(logits)
        n += 1
        yield tok
        if tok in seq.eog or n >= max_tokens or context.n_past >= context.n_ctx:
            return
        logits = c_eval([tok])


def _speculative_decode(context, c_eval, c_rewind, c_reset, seq, drafter, max_tokens, logits, timings):
    """The decode loop of a speculative sequence (fastgguf.engine.speculative says why it is exact), with the same
    contract as generate_ids: it yields sampled ids, the caller advances the Sequence on each, and it stops after an
    end-of-generation token, max_tokens, or a full context (the last yielded token not evaluated). A step evaluates
    the next token and its drafts in one forward and yields the tokens sampled from its rows in order while they
    match the drafts; the rows past the first mismatch are rewound out of the cache."""
    tok = seq.sample(logits)
    n = 1
    yield tok
    while tok not in seq.eog and n < max_tokens and context.n_past < context.n_ctx:
        drafter.accept(tok)
        n_past = context.n_past
        drafts = drafter.propose(draft_budget(seq.params, n_past, context.n_ctx, n, max_tokens))
        rows = c_eval([tok] + drafts, all_logits=True)
        timings.draft_tokens += len(drafts)
        for i in range(len(drafts) + 1):
            tok = seq.sample(rows[i])
            n += 1
            used = i + 1
            hit = i < len(drafts) and tok == drafts[i]
            timings.draft_accepted += hit  # counted before the yield: the caller may stop here (a stop string)
            yield tok
            if not hit or tok in seq.eog or n >= max_tokens:
                break
            drafter.accept(tok)
        drafter.verified(len(drafts), used - 1)
        if used < len(drafts) + 1:
            rewind_or_replay(context, n_past + used, c_rewind, c_reset, c_eval)


class _NoClaim:
    release = staticmethod(lambda: None)
    guard = staticmethod(contextlib.nullcontext)


_NO_CLAIM = _NoClaim()


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


def generate(model, prompt, params=None, *, stream=False, context=None, add_special=True, parse_special=False,
             **sampling):
    """Complete `prompt` (text, or a list of token ids) with `model`.

    `params`: a SamplingParams (fastgguf.engine.params: sampling, max_tokens, stop, seed); keyword arguments build
    one or override its fields (`generate(m, "Hi", temperature=0, max_tokens=8)`). A stop string ends generation
    before it and is not part of the text. `context`: a Context to run in (default: a fresh one sized
    min(model.n_ctx_train, prompt + max_tokens) rounded up to 256). `max_tokens=None`: until an end-of-generation
    token or the context is full.
    Returns a GenerationResult, or with stream=True a GenerationStream of text pieces."""
    if context is not None and not hasattr(context, "_claim") and not all(
            hasattr(context, a) for a in ("eval", "reset", "rewind", "tokens", "n_past", "n_ctx")):
        raise TypeError(f"context must be a fastgguf.Context (model.context()), got {type(context).__name__}")
    params = SamplingParams.from_args(params, **sampling)
    max_tokens = params.max_tokens
    tokenizer = model.tokenizer
    n_vocab = int(getattr(model, "n_vocab", None) or tokenizer.n_vocab)
    ids = _prompt_ids(tokenizer, prompt, n_vocab, add_special, parse_special)
    n_prompt = len(ids)
    grammar = params.constraint()  # json_schema / grammar: every sampled token is masked by it (fails closed)
    constraint = matchers(model, grammar, 1)[0] if grammar is not None else None
    seq = Sequence(model, ids, params, constraint=constraint)  # bad sampling fields fail here, before any context
    check_draft(model, params)

    n_ctx_train = int(getattr(model, "n_ctx_train", 0) or 0)
    if context is None:
        want = n_prompt + (max_tokens if max_tokens is not None else (n_ctx_train or n_prompt + 1))
        n_ctx = -(-want // CTX_ROUND) * CTX_ROUND
        if n_ctx_train:
            if n_prompt > n_ctx_train:
                raise ValueError(f"the prompt has {n_prompt} tokens, more than the model's context length "
                                 f"{n_ctx_train}")
            n_ctx = min(n_ctx, n_ctx_train)
        context = model.context(n_ctx=n_ctx)
    if n_prompt > context.n_ctx:
        raise ValueError(f"the prompt has {n_prompt} tokens but the context holds only n_ctx={context.n_ctx} tokens")
    if max_tokens is None:
        max_tokens = seq.max_tokens = context.n_ctx - n_prompt + 1

    def run(st):
        # the stream owns the context (see GenerationStream); each step runs inside claim.guard()
        # prompt: reuse the cached common prefix, evaluate the rest (at least one token, for its logits)
        keep = reusable_prefix(context, ids)
        t0 = time.perf_counter()
        with claim.guard():
            if keep == 0:
                c_reset()
            elif keep < context.n_past:
                c_rewind(keep)
            logits = c_eval(ids[keep:])
        t1 = time.perf_counter()
        st.timings.prompt_seconds = t1 - t0
        st.timings.prompt_tokens_per_second = _rate(n_prompt - keep, t1 - t0)
        st.usage = Usage(prompt_tokens=n_prompt, completion_tokens=0, total_tokens=n_prompt, cached_tokens=keep)

        # the Cython loop samples with the sequence's sampler (and its constraint); seq.advance does the rest
        if params.speculative is not None:
            drafter = make_drafter(params, ids, context.n_ctx)
            id_iter = _speculative_decode(context, c_eval, c_rewind, c_reset, seq, drafter, max_tokens, logits,
                                          st.timings)
        elif isinstance(getattr(context, "runner", None), Runner):
            more = {} if seq.constraint is None else {"constraint": seq.constraint}
            id_iter = generate_ids(context.runner, seq.sampler, max_tokens, seq.eog, logits=logits, **more)
        else:
            id_iter = _python_decode(context, c_eval, seq, max_tokens, logits)

        gen_time = 0.0
        t = time.perf_counter()
        try:
            while seq.finish_reason is None:
                with claim.guard():
                    tok = next(id_iter, None)
                step = seq.advance(tok) if tok is not None else seq.finish("length")  # None: the context is full
                if not step.eog and step.token is not None:
                    st.token_ids.append(tok)
                if step.finish is not None:
                    st.finish_reason = step.finish
                if step.text or step.finish is not None:
                    gen_time += time.perf_counter() - t
                    _update(st, gen_time)
                    if step.text:
                        yield step.text
                    t = time.perf_counter()
        finally:
            close = getattr(id_iter, "close", None)
            if close is not None:
                close()

    def _update(st, gen_time):
        n = len(st.token_ids)
        st.usage.completion_tokens = n
        st.usage.total_tokens = n_prompt + n
        st.timings.generation_seconds = gen_time
        st.timings.generation_tokens_per_second = _rate(n, gen_time)

    if hasattr(context, "_claim"):
        claim, c_eval, c_reset, c_rewind = context._claim(), context._eval, context._reset, context._rewind
    else:  # a duck-typed context (a test double): its own methods, nothing to claim
        claim, c_eval, c_reset, c_rewind = _NO_CLAIM, context.eval, context.reset, context.rewind
    s = GenerationStream(run, claim.release)
    return s if stream else s.result()

