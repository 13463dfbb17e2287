"""Sequence: one live sequence's sampling, detokenizing and stopping, written once for generate() and the Scheduler.

    seq = Sequence(model, prompt_ids, params, choice=j)   # choice j of a request samples with seed + j
    step = seq.step(logits, full=ctx.n_past >= ctx.n_ctx) # logits (n_vocab,) of the sequence's last row
    step.token, step.text, step.finish                    # the sampled id (None: nothing was sampled),
                                                          # the text it may emit now, "stop"/"length"/None

A Sequence owns its Sampler (primed with the prompt's repetition window, as llama.cpp does), its StreamingDecoder
(UTF-8 safe) and its StopText (fastgguf.engine.stops: one automaton over all the stop strings; a stop string is never
emitted, even split across tokens). generate() keeps the fast Cython decode loop, which samples with `seq.sampler`
itself, and hands each sampled id to `seq.advance(tok)`: the detokenize/stop half of step().

Where later features plug in, each in one place:
  - `constraint` (structured output): an object with fill_mask() -> uint32 (ceil(n_vocab/32),) allowed-token bits
    and consume(tok); sample() masks the sampler with it and tells it the token. The Cython loop gets the same
    object (generate_ids(..., constraint=)).
  - `parser` (tool calls, reasoning): an object with feed(text) -> list of typed deltas and flush() -> list;
    _emit() runs the emitted text through it, and Step.parsed carries what it returned (None without a parser).
"""
from typing import NamedTuple, Optional

from fastgguf._native import check_logits
from fastgguf.engine.sampler import Sampler
from fastgguf.engine.stops import StopText

__all__ = ["Sequence", "Step", "StopText"]


class Step(NamedTuple):
    """What one sampled token did: `token` (None when nothing was sampled: max_tokens was already reached), `eog`
    (it is an end-of-generation token: no text, not a completion token), `text` to emit now (may be ""), `finish`
    ("stop", "length", or None while the sequence goes on), `parsed` (the parser's deltas of text; None without one)."""
    token: Optional[int]
    eog: bool
    text: str
    finish: Optional[str]
    parsed: Optional[list] = None


class Sequence:
    """One live sequence of `model` after `prompt` (token ids): Sequence(model, prompt, params, choice=0,
    constraint=None, parser=None). `choice` j > 0 samples with params.seed + j (when seeded). Counters: n_sampled
    (ids sampled, end-of-generation included: what max_tokens counts), n_out (completion tokens); max_tokens
    (params.max_tokens; generate() bounds None by its context); finish_reason once finished."""
    __slots__ = ("params", "sampler", "decoder", "stopper", "eog", "max_tokens", "n_sampled", "n_out",
                 "finish_reason", "constraint", "parser")

    def __init__(self, model, prompt, params, *, choice=0, constraint=None, parser=None):
        tokenizer = model.tokenizer
        if params.seed is not None and choice:
            params = params.replace(seed=params.seed + choice)
        self.params = params
        self.sampler = Sampler(params, n_vocab=model.n_vocab)
        if params.repeat_penalty != 1.0 and params.repeat_last_n != 0:  # the prompt is in the repetition window
            window = prompt if params.repeat_last_n < 0 else prompt[-params.repeat_last_n:]
            self.sampler.accept_many(window, generated=False)
        # (a parser whose markers are control tokens reads them as text: special tokens are rendered for it)
        self.decoder = (tokenizer.streaming_decoder(skip_special=False) if getattr(parser, "special_text", False)
                        else tokenizer.streaming_decoder())
        self.stopper = StopText(params.stop_matcher())  # holds back text that may be the start of a stop string
        self.eog = frozenset(int(e) for e in tokenizer.eog_ids)
        self.max_tokens = params.max_tokens
        self.n_sampled = 0
        self.n_out = 0
        self.finish_reason = None
        self.constraint = constraint
        self.parser = parser

    def sample(self, logits):
        """The next token id from logits (n_vocab,), recorded in the sampler (and the constraint, if any).
        FloatingPointError when a logit is NaN (a broken model; the Sampler alone would skip it)."""
        check_logits(logits)
        if self.constraint is None:
            tok = self.sampler.sample(logits)
        else:
            tok = self.sampler.sample(logits, self.constraint.fill_mask())
            self.constraint.consume(tok)
        self.sampler.accept(tok)
        return tok

    def step(self, logits, full=False):
        """Sample from the logits of the sequence's last row and advance (see advance). `full`: the context has no
        room for another token. With max_tokens already reached (max_tokens=0) nothing is sampled."""
        if self.max_tokens is not None and self.n_sampled >= self.max_tokens:
            return self.finish("length")
        return self.advance(self.sample(logits), full)

    def advance(self, tok, full=False):
        """The detokenize/stop half of step() for a token sampled elsewhere (generate()'s Cython loop): the text
        it lets out and whether it finished: an end-of-generation token or a stop string ("stop"), max_tokens
        or a full context ("length", unless the flushed tail completes a stop string)."""
        self.n_sampled += 1
        if tok in self.eog:
            return self._emit(tok, True, self.stopper.flush(self.decoder.flush()), "stop")
        self.n_out += 1
        text = self.stopper.feed(self.decoder.feed(tok))
        if self.stopper.stopped:
            return self._emit(tok, False, text, "stop")
        if full or (self.max_tokens is not None and self.n_sampled >= self.max_tokens):
            text += self.stopper.flush(self.decoder.flush())
            return self._emit(tok, False, text, "stop" if self.stopper.stopped else "length")
        return self._emit(tok, False, text, None)

    def finish(self, reason="length"):
        """End the sequence from outside (its decode loop ran out: a full context): the held-back text."""
        text = self.stopper.flush(self.decoder.flush())
        return self._emit(None, False, text, "stop" if self.stopper.stopped else reason)

    def _emit(self, tok, eog, text, finish):
        parsed = None
        if self.parser is not None:  # tool calls / reasoning: typed deltas of the emitted text
            parsed = self.parser.feed(text)
            if finish is not None:
                parsed += self.parser.flush()
        self.finish_reason = finish
        return Step(tok, eog, text, finish, parsed)
