"""Exact speculative decoding: drafters that guess the next tokens, and the one rule that verifies them.

A decoding step of a speculative sequence evaluates its next token followed by K drafted tokens in ONE forward
(all rows' logits); `Speculation.verify` then steps the sequence on each row in order with its own Sequence.step,
exactly as plain decoding would, and stops at the first row whose sampled token differs from the draft that follows
it (the rows after it saw a token the sequence did not take), whose rows it rewinds out of the KV cache.

Why this is exact. Plain decoding samples t_i from p_i (the target's distribution after t_1..t_{i-1}). Row i of the
batched forward computes p_i bit for bit (rows of one forward equal single steps: the project's batched == solo
invariant), and it is only used while every earlier draft was accepted, i.e. while the row's context is the
sequence's real one. The drafts are deterministic: the draft distribution q is a point mass on draft d. The
standard speculative-sampling rule accepts d with probability min(1, p(d)/q(d)) = p(d) and otherwise samples from
the normalized (p - q)+, which is p with d removed. "Sample t from p with the sequence's sampler; accept iff t == d,
else emit t" does exactly that: P(emit d) = p(d), and given t != d, t is distributed as p without d. So sampled
output has p's distribution, and it even consumes the sampler's random numbers as plain decoding does (one draw per
emitted token), so a seeded run emits the very same tokens; greedy output is identical token for token. Penalties,
logit bias, grammar masks and stop strings see the same tokens in the same order, since each row is stepped only
after the previous token was accepted by the Sequence.

The rule is written once, in Speculation, and both decode drivers run it: generate()'s speculative loop (one
sequence, one forward per step) and the Scheduler's batched step (each sequence's rows out of the batch's forward).
"""
from typing import List, NamedTuple

import numpy as np

from fastgguf.engine.params import is_draft_model

__all__ = ["Speculation", "Verified", "PromptLookup", "ModelDraft", "make_drafter", "check_draft", "draft_context",
           "draft_budget"]


class _Drafter:
    """What both drafters share: an adaptive cap on the drafts of a step. Each drafted row costs compute (a step of
    9 rows costs several single steps on a CPU), so after a rejection the next step drafts at most one more token
    than were accepted, and after a step whose drafts were all accepted the cap doubles (up to draft_max). It only
    decides how much is drafted: the output is the same whatever it does."""
    cap = 1 << 30

    def verified(self, drafted, accepted):
        if drafted:
            self.cap = 2 * drafted if accepted == drafted else accepted + 1


class PromptLookup(_Drafter):
    """Drafts by n-gram lookup in the sequence's own tokens (prompt and generated): the last n tokens (n =
    ngram_max down to ngram_min) are looked up among earlier n-grams, and the tokens that followed their most recent
    earlier occurrence are proposed. The index (n -> {n-gram: position after it}) grows by one entry per n and
    token, so a lookup costs O(ngram_max) whatever the prompt's length."""

    def __init__(self, ids, ngram_max=3, ngram_min=1):
        self.ids = []
        self.nmin, self.nmax = ngram_min, ngram_max
        self.index = {n: {} for n in range(ngram_min, ngram_max + 1)}
        for t in ids:
            self.accept(t)

    def accept(self, tok):
        """tok is the sequence's next token: the n-grams that end just before it now have a continuation."""
        ids, p = self.ids, len(self.ids)
        for n, idx in self.index.items():
            if p >= n:
                idx[tuple(ids[p - n:p])] = p  # overwritten: the most recent occurrence wins
        ids.append(int(tok))

    def propose(self, k):
        ids, k = self.ids, min(k, self.cap)
        for n in range(self.nmax, self.nmin - 1, -1):
            if len(ids) < n:
                continue
            j = self.index[n].get(tuple(ids[len(ids) - n:]))
            if j is not None:
                return ids[j:j + k]
        return []


class ModelDraft(_Drafter):
    """Drafts greedily with a small model of the same vocabulary, in its own Context: before each proposal the
    context is brought to the sequence's tokens (its common prefix kept, the rejected drafts rewound away, the rest
    evaluated), then up to k argmax tokens are drafted."""

    def __init__(self, model, ids, ctx):
        self.model, self.ctx, self.ids = model, ctx, [int(t) for t in ids]

    def accept(self, tok):
        self.ids.append(int(tok))

    def propose(self, k):
        ctx, ids, k = self.ctx, self.ids, min(k, self.cap)
        if k <= 0 or len(ids) + k > ctx.n_ctx:
            return []
        cached = ctx.tokens
        keep, lim = 0, min(len(cached), len(ids) - 1)
        while keep < lim and cached[keep] == ids[keep]:
            keep += 1
        keep = ctx.reusable(keep)
        if keep == 0:
            ctx.reset()
        elif keep < ctx.n_past:
            ctx.rewind(keep)
        logits = ctx.eval(ids[keep:])
        out = []
        while True:
            out.append(int(np.argmax(logits)))
            if len(out) >= k:
                return out
            logits = ctx.eval(out[-1:])


def check_draft(model, params):
    """ValueError unless params' draft model (if any) can draft for `model`: the same vocabulary size and the same
    tokenizer (token texts), since its token ids are proposed to `model` as they are."""
    draft = params.speculative
    if not is_draft_model(draft):
        return
    if draft is model:
        return
    if int(draft.n_vocab) != int(model.n_vocab):
        raise ValueError(f"speculative: the draft model's vocabulary has {draft.n_vocab} tokens, the model's "
                         f"{model.n_vocab}: a draft model needs the same vocabulary")
    key = "tokenizer.ggml.tokens"
    if draft.metadata.get(key) != model.metadata.get(key):
        raise ValueError("speculative: the draft model's tokenizer differs from the model's (tokenizer.ggml.tokens): "
                         "a draft model needs the same tokenizer")
    draft.check_generative()


def draft_context(draft, n_ctx):
    """A Context of the draft model for a target context of n_ctx tokens (at most its training context)."""
    return draft.context(n_ctx=min(n_ctx, int(draft.n_ctx_train or n_ctx)))


def make_drafter(params, ids, n_ctx, ctx=None):
    """The drafter params.speculative asks for (None when off), over the sequence's tokens so far `ids`; a draft
    model drafts in `ctx` (default: a new draft_context; a kept one keeps its cached prefix)."""
    spec = params.speculative
    if spec is None:
        return None
    if spec == "prompt_lookup":
        return PromptLookup(ids, params.draft_ngram_max, params.draft_ngram_min)
    assert is_draft_model(spec)
    return ModelDraft(spec, ids, ctx if ctx is not None else draft_context(spec, n_ctx))


def draft_budget(params, n_past, n_ctx, n_sampled, max_tokens):
    """How many tokens may be drafted after the next one: at most draft_max, never past the context (the next token
    and the drafts must fit in n_ctx), never more than max_tokens could still emit."""
    k = min(params.draft_max, n_ctx - n_past - 1)
    if max_tokens is not None:
        k = min(k, max_tokens - n_sampled - 1)
    return max(k, 0)


class Verified(NamedTuple):
    """What Speculation.verify did with a step's rows: `steps` (the Steps of the rows used, in order: the last one
    finished the sequence or gives its next token), `drafted` (drafts evaluated), `accepted` (of them, those whose
    row sampled them)."""
    steps: List
    drafted: int
    accepted: int


class Speculation:
    """One decoding sequence's drafts and their verification: the rule (see the module docstring), for generate()
    and the Scheduler alike. `drafter` (make_drafter; None: no drafts, every step is one row) over the sequence's
    tokens so far; `ctx` its Context, whose rejected rows verify() drops with ctx's own methods, or with the unguarded
    ones (`guarded=False`) for a caller that holds the context (generate()'s claim).

        tokens = spec.inputs(next_tok, seq)   # next_tok and its drafts: one forward, every row's logits
        done = spec.verify(rows, step)        # step(logits, full) -> Step on the rows while they match (Verified)

    A drafter that fails (e.g. a broken draft model's NaN) is dropped: drafts only save time, the sequence goes on
    without them and its output is the same."""

    def __init__(self, drafter, ctx, guarded=True):
        self.drafter, self.ctx = drafter, ctx
        self._ops = (ctx.rewind, ctx.reset, ctx.eval) if guarded else (ctx._rewind, ctx._reset, ctx._eval)
        self.drafts = []
        # a model with recurrent (DeltaNet, Mamba-2) state cannot rewind over rejected drafts: a snapshot of the
        # cache before each forward with drafts is restored instead, and the accepted tokens evaluated again
        self._recurrent = ctx.model.hparams.recurrent()
        self._snap = None

    def inputs(self, tok, seq):
        """The tokens of seq's next forward: tok (its next token, sampled, not yet evaluated) and the drafts that
        may follow it (draft_budget: they fit the context and max_tokens)."""
        self.drafts = []
        if self.drafter is not None:
            self.drafter.accept(tok)
            ctx = self.ctx
            k = draft_budget(seq.params, ctx.n_past, ctx.n_ctx, seq.n_sampled, seq.max_tokens)
            try:
                self.drafts = self.drafter.propose(k) if k > 0 else []
            except Exception:  # noqa: BLE001 - see the class docstring
                self.drafter = None
        self._snap = self.ctx.runner.snapshot() if self._recurrent and self.drafts else None
        return [tok] + self.drafts

    def verify(self, rows, step):
        """Step the sequence on the rows of inputs()' forward (row i follows draft i - 1; row 0 the next token):
        `step(logits, full)` (full: no room in the context for another token) steps it on row i and returns the
        Step. Stops at the first Step that finishes the sequence or whose token is not the draft that row i + 1
        assumed, and rewinds the rows after it out of the cache (it keeps the next token and the drafts accepted)."""
        drafts, self.drafts = self.drafts, []
        ctx = self.ctx
        n_past = ctx.n_past - len(drafts) - 1  # before this forward
        steps, hit = [], False
        for i in range(len(drafts) + 1):
            st = step(rows[i], n_past + i + 1 >= ctx.n_ctx)
            steps.append(st)
            hit = i < len(drafts) and st.token == drafts[i]
            if st.finish is not None or not hit:
                break
            self.drafter.accept(st.token)
        if drafts:
            self.drafter.verified(len(drafts), len(steps) - 1)
            if len(steps) <= len(drafts):
                self._truncate(n_past + len(steps))
        return Verified(steps, len(drafts), len(steps) - 1 + hit)

    def _truncate(self, keep):
        """Drop the cache's rows after the first `keep` (rejected drafts): a rewind; with recurrent (DeltaNet, Mamba-2)
        layers the snapshot taken before the forward restored and the accepted tokens after it evaluated again; or
        where sliding-window layers no longer hold the positions before it, those tokens evaluated again from a
        fresh cache."""
        rewind, reset, evaluate = self._ops
        snap, self._snap = self._snap, None
        if self.ctx.reusable(keep) == keep:
            rewind(keep)
        elif snap is not None and snap[0] <= keep:
            tokens = list(self.ctx.tokens[snap[0]:keep])
            self.ctx.runner.restore(snap)
            if tokens:
                evaluate(tokens)
        else:
            tokens = list(self.ctx.tokens[:keep])
            reset()
            evaluate(tokens)
