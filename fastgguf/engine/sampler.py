"""Sampler: the extension's sampler (fastgguf._native.Sampler, C underneath) built from a SamplingParams.

    s = Sampler(params, n_vocab=None)          # or Sampler(temperature=..., ...): keywords build (or override) params
    tok = s.sample(logits); s.accept(tok)

SamplingParams validates the parameters; with n_vocab, token ids (logit_bias, accepted tokens) are also checked
against the vocabulary. The extension trusts what it is given and imports nothing of fastgguf: the checks are here.
"""
import numpy as np

from fastgguf import _native
from fastgguf.engine.params import SamplingParams, check_logit_bias, check_token_id

__all__ = ["Sampler"]


def _check_n_vocab(n_vocab):
    """n_vocab as an int in [1, 2**31), or None."""
    if n_vocab is None:
        return None
    if isinstance(n_vocab, bool) or not isinstance(n_vocab, (int, np.integer)):
        raise TypeError(f"n_vocab must be an int, got {type(n_vocab).__name__}")
    if not 1 <= n_vocab <= 0x7FFFFFFF:
        raise ValueError(f"n_vocab must be in [1, 2**31), got {n_vocab}")
    return int(n_vocab)


def _unpickle_sampler(params, n_vocab, state):
    s = Sampler(params, n_vocab=n_vocab)
    s.set_state(state)
    return s


class Sampler(_native.Sampler):
    """Turns logits into token ids, as a SamplingParams says (see fastgguf.engine.params for the order of the
    samplers). `Sampler(params, n_vocab=None)` or `Sampler(temperature=..., ...)`: keywords build (or override) the
    SamplingParams, which validates them; the C underneath trusts the result. With n_vocab, token ids (logit_bias,
    accepted tokens) are checked against the vocabulary. `params`: the SamplingParams it follows."""

    def __init__(self, params=None, *, n_vocab=None, **kwargs):
        p = SamplingParams.from_args(params, **kwargs)
        n_vocab = _check_n_vocab(n_vocab)
        super().__init__(temperature=p.temperature, top_k=p.top_k, top_p=p.top_p, min_p=p.min_p,
                         repeat_penalty=p.repeat_penalty, repeat_last_n=p.repeat_last_n,
                         frequency_penalty=p.frequency_penalty, presence_penalty=p.presence_penalty,
                         logit_bias=check_logit_bias(p.logit_bias, n_vocab), seed=p.seed, n_vocab=n_vocab)
        self.params = p

    def get_state(self):
        """The sampler's state: random generator, history and counts (set_state takes it back; a pickle of a
        Sampler holds its params, n_vocab and this)."""
        return super().get_state()

    def set_state(self, state):
        """Continue from a get_state() of a sampler with the same params: the same draws follow."""
        for t in [*state["history"], *(t for t, _ in state["generated"])]:
            check_token_id("token", t, self.n_vocab)
        counts = [n for _, n in state["generated"]]
        if (len({t for t, _ in state["generated"]}) != len(counts) or any(not 1 <= n for n in counts)
                or sum(counts) > len(state["history"])):
            raise ValueError("generated must be distinct (id, count) pairs, counts >= 1 and together at most the "
                             "history's length")
        super().set_state(state)

    def __reduce__(self):
        return (_unpickle_sampler, (self.params, self.n_vocab, self.get_state()))

    def accept(self, token, generated=True):
        """Record a token id (int, or a decimal string; checked against n_vocab when given): it enters the
        repetition-penalty window, and when ``generated`` also the counts of the frequency/presence penalties
        (prompt tokens: ``generated=False``)."""
        super().accept(check_token_id("token", token, self.n_vocab), generated)
