"""Scheduler: the continuous-batching thread behind the server and the in-process OpenAI-style API (`Engine`, its
older name, is the same class).

One thread owns the model, the slots (`parallel` Contexts, each one live sequence and its KV cache) and the batch.
Each step it:
  1. admits queued sequences into free slots (the idle slot whose cached tokens share the longest prefix with the
     prompt is chosen, and only the rest is evaluated: `usage.prompt_tokens_details.cached_tokens`; a model with a
     prompt cache may restore a longer prefix from disk, and stores long prompts: fastgguf.engine.prompt_cache); the
     later choices of an n > 1 request wait until the first has evaluated the prompt, then copy its KV rows
     (Context.copy_prefix) and sample their first token from its logits: the prompt is evaluated once,
  2. drops cancelled requests (a client that went away frees its slots within one step),
  3. gives every sequence its next tokens: a chunk of at most `chunk` prompt tokens while prefilling (a long prompt
     never stalls the others for more than one chunk), else its last sampled token (with speculative decoding,
     followed by its drafts: fastgguf.engine.speculative),
  4. runs ONE `forward_batch` for all of them (an embedding input asks for its rows' hidden states and pays no
     lm_head; a completion with echo and logprobs asks for every prompt row's logits),
  5. steps each decoding sequence (fastgguf.engine.sequence.Sequence, as generate() does): its own Sampler (its own
     SamplingParams and seed), streaming decoder and held-back stop strings; a speculative one on each of its rows
     while they match its drafts (the rows after are rewound out of its cache),
  6. hands the step's events to their consumers: one `loop.call_soon_threadsafe` per asyncio loop, or a direct call
     of the request's sink when it has no loop (the in-process API).

Batching changes who waits, never what is computed: forward_batch is bit-identical to running each sequence alone and
every sequence samples exactly as generate() does (prompt tokens in the repetition window, same seed), so a request's
output under load equals the same request run alone through `model.generate`.

Events a request's sink receives (lists of them), in order:
  Start()                                     the request left the queue (its first sequence has a slot)
  Delta(index, text, logprobs)                text of choice `index` (may be ""), logprobs: list of
                                              (token_id, logprob, [(id, logprob), ...]) or None
  Finish(index, reason, stop)                 choice `index` ended ("stop" or "length"); stop: the stop string
                                              that ended it, if one did
  PromptLogprobs(index, logprobs)             (echo with logprobs) the prompt tokens of choice `index`: a list
                                              as in Delta, the first token's entry (token_id, None, None)
  Embedding(index, vector)                    (embedding requests) input `index`'s final hidden rows pooled as
                                              the file says (fastgguf.engine.pooling.embedding): float32
                                              (n_embd,), L2-normalized; (n_tokens, n_embd) for pooling none;
                                              the scores (n_cls_out,) for rank
  Done(usage)                                 every choice ended: a Usage (prompt_tokens, completion_tokens,
                                              total_tokens, cached_tokens; usage["prompt_tokens"] works too)
  Error(error)                                the request failed (no Done follows)
  Progress(index, total, cache, processed)    (a request with progress=True) prompt `index`'s evaluation: its
                                              tokens, those reused from a cache, those in the KV cache so far
                                              (the reused included); once placed, then after each chunk
"""
import collections
import contextlib
import itertools
import math
import threading
import time

from dataclasses import dataclass
from typing import Any, List, Optional

import numpy as np

from fastgguf._native import check_logits
from fastgguf.engine import batch as _batch
from fastgguf.engine import pooling as _pooling
from fastgguf.engine.generate import Usage, reusable_prefix
from fastgguf.engine.params import SamplingParams, is_draft_model
from fastgguf.engine.prompt_cache import prompt_evaluated, reuse_prefix
from fastgguf.engine.sequence import Sequence
from fastgguf.engine.speculative import Speculation, check_draft, draft_context, make_drafter
from fastgguf.errors import QueueFull

__all__ = ["Scheduler", "Engine", "default_parallel", "Request", "QueueFull", "Start", "Delta", "Finish",
           "PromptLogprobs", "Embedding", "Done", "Error", "Progress"]

CHUNK = 64  # prompt tokens per sequence per step


# -- events (see the module docstring) ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Start:
    pass


@dataclass(frozen=True)
class Delta:
    index: int
    text: str
    logprobs: Optional[List[tuple]] = None
    parsed: Optional[list] = None  # the choice's output parser's deltas of text (tool calls, reasoning), if any


@dataclass(frozen=True)
class Finish:
    index: int
    reason: str
    stop: Optional[str] = None


@dataclass(frozen=True)
class PromptLogprobs:
    index: int
    logprobs: List[tuple]


@dataclass(frozen=True)
class Embedding:
    index: int
    vector: Any  # float32 (n_embd,)


@dataclass(frozen=True)
class Progress:
    index: int
    total: int
    cache: int
    processed: int


@dataclass(frozen=True)
class Done:
    usage: Usage


@dataclass(frozen=True)
class Error:
    error: BaseException


_ids = itertools.count(1)


class Request:
    """One API request: `prompts` (lists of token ids), `n` choices per prompt (choice index = prompt * n + j, seed
    + j), params (SamplingParams), logprobs (None: off; k >= 0: the chosen token's logprob and the k best);
    prompt_logprobs: also the prompt tokens' (echo); embed: an embedding request (one "embedding" event per
    prompt, nothing sampled; params, n and logprobs unused); progress: Progress events while its prompts are
    evaluated. `sink(events)` receives lists of events; with `loop` (asyncio) it is called in that loop's
    thread."""

    def __init__(self, prompts, params, sink, *, n=1, logprobs=None, loop=None, prompt_logprobs=False,
                 embed=False, constraints=None, parser=None, progress=False):
        self.id = next(_ids)
        self.prompts = [list(p) for p in prompts]
        self.params = SamplingParams.from_args(params)
        self.embed = bool(embed)
        self.n = 1 if self.embed else int(n)
        self.n_choices = len(self.prompts) * self.n
        # one grammar matcher per choice (engine.grammar.matchers), built by the caller before it submits: a
        # grammar is compiled where the request is prepared, never on the engine thread; none given -> refused
        if self.params.constraint() is not None and not self.embed and (
                constraints is None or len(constraints) != self.n_choices):
            raise ValueError(f"a request with a grammar needs one matcher per choice ({self.n_choices}): "
                             f"fastgguf.engine.grammar.matchers(model, params.constraint(), n)")
        self.constraints = list(constraints) if constraints is not None else None
        self.parser = parser  # () -> a choice's output parser (tool calls, reasoning), or None
        self.logprobs = logprobs
        self.prompt_logprobs = bool(prompt_logprobs) and logprobs is not None and not self.embed
        self.progress = bool(progress) and not self.embed
        self.sink = sink
        self.loop = loop
        self.cancelled = False
        self.state = "queued"  # -> "running" -> "done"
        self.t_submit = time.perf_counter()
        self.t_first = None
        self.n_finished = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0

    def cancel(self):
        """Stop generating (thread-safe): the engine frees the request's slots at its next step."""
        self.cancelled = True


class _Seq:
    """One choice of a request, in a slot: its place in the batch; `sequence` (a Sequence, from its placement on) does
    the sampling, detokenizing and stopping."""
    __slots__ = ("req", "index", "prompt", "sequence", "slot", "pos", "next_tok", "leader", "home", "first_logits",
                 "pending", "rows", "prompt_lps", "spec", "cached")

    def __init__(self, req, index, prompt, leader=None):
        self.req, self.index, self.prompt = req, index, prompt
        self.leader = leader      # choice 0 of the same prompt, for the later choices of an n > 1 request
        self.home = None          # the slot it was placed in (kept after it is freed: the KV its followers copy)
        self.first_logits = None  # (n_vocab,) of the prompt's last token, kept by a leader for its followers
        self.pending = None       # logits a copied follower samples its first token from, without a forward row
        self.rows = []            # embedding: the hidden states (rows, n_embd) of its chunks so far
        self.prompt_lps = None    # echo with logprobs: entries of the prompt tokens scored so far
        self.sequence = None      # its Sequence (sampler, decoder, stop strings), made when placed
        self.slot = None
        self.pos = 0        # prompt tokens in the slot's KV cache
        self.next_tok = -1  # sampled, not yet evaluated
        self.spec = None    # its Speculation (fastgguf.engine.speculative): the rows of each decoding step, verified
        self.cached = 0     # prompt tokens reused (a slot's or the prompt cache's), not evaluated


class _Slot:
    __slots__ = ("ctx", "seq", "draft", "held")

    def __init__(self, ctx):
        self.ctx, self.seq = ctx, None
        self.held = False  # Scheduler.hold_slot: kept from new sequences while another thread uses its Context
        self.draft = None  # (draft model, its Context): kept for the slot's next sequences drafting with that model

    def draft_context(self, params, n_ctx):
        """The slot's Context of params' draft model (None without one); its cached prefix serves later requests."""
        draft = params.speculative
        if not is_draft_model(draft):
            return None
        if self.draft is None or self.draft[0] is not draft:
            self.draft = (draft, draft_context(draft, n_ctx))
        return self.draft[1]


def _logprobs(logits, tok, k):
    x = check_logits(logits).astype(np.float64)  # a NaN would make every logprob NaN (-9999 over HTTP)
    m = np.max(x[np.isfinite(x)]) if np.isfinite(x).any() else 0.0
    lse = m + math.log(np.sum(np.exp(x - m)))
    lp = x - lse
    top = []
    if k > 0:
        kk = min(k, lp.shape[0])
        idx = np.argpartition(-lp, kk - 1)[:kk]
        idx = idx[np.lexsort((idx, -lp[idx]))]
        top = [(int(i), float(lp[i])) for i in idx]
    return (int(tok), float(lp[tok]), top)


def default_parallel(model):
    """Slots a Scheduler gets unless told: 4 for a generative model (each slot's cache holds n_ctx tokens); 16 for
    an encoder, whose inputs finish in the step that runs them (one batched pass over 16 inputs: +10-16%
    embeddings/s over 4 for all-MiniLM-L6-v2 at 64 inputs, 2 threads) and whose caches are short (n_ctx_train)."""
    return 16 if model.is_encoder else 4


class Scheduler:
    """`Scheduler(model, parallel=None, n_ctx=2048, n_threads=None, max_queue=64, chunk=64)`; `start()`,
    `submit(req)`, `stop()`. Slots are created on first use (each a Context of n_ctx tokens). parallel (the slots)
    defaults to default_parallel(model); max_queue: the sequences (prompts x n) that may wait for a slot."""

    def __init__(self, model, parallel=None, n_ctx=2048, n_threads=None, max_queue=64, chunk=CHUNK):
        parallel = default_parallel(model) if parallel is None else parallel
        if int(parallel) < 1:
            raise ValueError(f"parallel must be >= 1, got {parallel}")
        if int(n_ctx) < 2:
            raise ValueError(f"n_ctx must be >= 2, got {n_ctx}")
        if int(chunk) < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self.model = model
        self.parallel = int(parallel)
        self.n_ctx = int(n_ctx)
        self.n_threads = n_threads
        self.max_queue = int(max_queue)
        self.chunk = int(chunk)
        self._slots = []
        self._queue = collections.deque()  # _Seq waiting for a slot
        self._cond = threading.Condition()
        self._step_lock = threading.Lock()  # held by the engine thread during a step (see hold_slot)
        self._thread = None
        self._stopping = False
        # metrics (read without the lock: plain ints and floats)
        self.m = dict(prompt_tokens=0, prompt_tokens_evaluated=0, prompt_tokens_copied=0, completion_tokens=0,
                      requests=0, steps=0, batch_tokens=0, batch_seqs=0, ttft_sum=0.0, ttft_count=0, errors=0,
                      draft_tokens=0, draft_accepted=0)

    # -- public ------------------------------------------------------------------------------------------------

    def start(self):
        with self._cond:
            if self._thread is None:
                self._stopping = False
                self._thread = threading.Thread(target=self._run, name="fastgguf-engine", daemon=True)
                self._thread.start()
        return self

    def stop(self, timeout=None):
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        t = self._thread
        if t is not None:
            t.join(timeout)
        self._thread = None

    def submit(self, req):
        """Queue a request (thread-safe). The queue holds at most `max_queue` sequences (prompts x n of each request,
        not requests: one request of many prompts must not fill it alone): ValueError for a request larger than that,
        QueueFull when it does not fit beside those already waiting."""
        limit = _pooling.max_input_tokens(self.model, self.n_ctx)
        for p in req.prompts:
            if not 1 <= len(p) <= limit:
                raise ValueError(f"a prompt of {len(p)} tokens does not fit a context of {limit} tokens")
        check_draft(self.model, req.params)
        if req.n_choices > self.max_queue:
            raise ValueError(f"this request has {req.n_choices} sequences (prompts x n); at most {self.max_queue} "
                             f"may be queued (max_queue)")
        seqs = []
        for i, p in enumerate(req.prompts):
            seqs.append(_Seq(req, i * req.n, p))
            seqs += [_Seq(req, i * req.n + j, p, leader=seqs[-1]) for j in range(1, req.n)]
        with self._cond:
            queued = self.queued_sequences()
            if queued + len(seqs) > self.max_queue:
                raise QueueFull(f"the server is busy: {queued} sequences are queued and this request adds "
                                f"{len(seqs)}; at most {self.max_queue} may be queued (max_queue)", retry_after=1)
            req.prompt_tokens = sum(len(p) for p in req.prompts)
            self._queue.extend(seqs)
            self.m["requests"] += 1
            self._cond.notify_all()
        self.start()
        return req

    # (read under the lock: the engine thread mutates the queue, and iterating a deque meanwhile raises)
    def queued_requests(self):
        with self._cond:
            return len({id(s.req) for s in self._queue if s.req.state == "queued" and not s.req.cancelled})

    def queued_sequences(self):
        """Sequences waiting for a slot (a cancelled request's no longer count): what max_queue bounds."""
        with self._cond:
            return sum(1 for s in self._queue if not s.req.cancelled)

    def running_requests(self):
        with self._cond:
            return len({id(s.seq.req) for s in self._slots if s.seq is not None})

    def live_sequences(self):
        with self._cond:
            return sum(1 for s in self._slots if s.seq is not None)

    def slot_states(self):
        """A snapshot of the `parallel` slots (those not created yet are idle), one dict each: id, state ("idle" or
        "processing"), n_ctx, n_past (tokens in its KV cache); a processing slot also: id_task (its request's id),
        n_prompt_tokens, n_decoded (tokens sampled so far) and prompt_ids (its prompt's token ids: the server shows
        them only when told to)."""
        with self._cond:
            slots = list(self._slots)
        out = []
        for i in range(self.parallel):
            slot = slots[i] if i < len(slots) else None
            seq = slot.seq if slot is not None else None
            d = {"id": i, "state": "processing" if seq is not None else "idle", "n_ctx": self.n_ctx,
                 "n_past": slot.ctx.n_past if slot is not None else 0}
            if seq is not None:
                d.update(id_task=seq.req.id, n_prompt_tokens=len(seq.prompt), prompt_ids=list(seq.prompt),
                         n_decoded=seq.sequence.n_sampled if seq.sequence is not None else 0)
            out.append(d)
        return out

    @contextlib.contextmanager
    def hold_slot(self, i):
        """Slot i's Context, idle and kept from new sequences while the block runs in the caller's thread
        (llama-server's slot save, restore and erase). ValueError for an id outside [0, parallel); RuntimeError
        while the slot runs a sequence or is held already. Taken between two steps: a slot idle then is no longer
        touched by the step that freed it."""
        with self._step_lock, self._cond:
            if not 0 <= i < self.parallel:
                raise ValueError(f"slot {i} does not exist: the ids are 0..{self.parallel - 1}")
            while len(self._slots) <= i:
                self._slots.append(_Slot(self.model.context(n_ctx=self.n_ctx, n_threads=self.n_threads)))
            slot = self._slots[i]
            if slot.seq is not None or slot.held:
                raise RuntimeError(f"slot {i} is busy")
            slot.held = True
        try:
            yield slot.ctx
        finally:
            with self._cond:
                slot.held = False
                self._cond.notify_all()

    # -- the thread --------------------------------------------------------------------------------------------

    def _run(self):
        while True:
            with self._cond:
                while not self._stopping and not self._queue and not any(s.seq for s in self._slots):
                    self._cond.wait()
                if self._stopping:
                    return
            out = collections.defaultdict(list)  # request -> its events of this step
            try:
                with self._step_lock:
                    self._step(out)
            except Exception as e:  # noqa: BLE001 - a failed step fails its requests, the engine lives on
                for slot in self._slots:
                    if slot.seq is not None:
                        self._fail(slot.seq.req, e, out)
            self._deliver(out)

    def _deliver(self, out):
        by_loop = collections.defaultdict(list)
        for req, evs in out.items():
            if req.loop is None:
                try:
                    req.sink(evs)
                except Exception:  # noqa: BLE001 - a consumer's bug must not kill the engine
                    req.cancel()
            else:
                by_loop[req.loop].append((req, evs))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_dispatch, items)
            except RuntimeError:  # the loop is closed: nobody listens any more
                for req, _ in items:
                    req.cancel()

    def _free(self, seq):
        if seq.slot is not None:
            seq.slot.seq = None
            seq.slot = None

    def _fail(self, req, exc, out):
        if req.state == "done":
            return
        req.state = "done"
        self.m["errors"] += 1
        for slot in self._slots:
            if slot.seq is not None and slot.seq.req is req:
                slot.ctx.reset()  # its cache may be half-written
                self._free(slot.seq)
        with self._cond:
            self._queue = collections.deque(s for s in self._queue if s.req is not req)
        out[req].append(Error(exc))

    def _admit(self, out):
        with self._cond:
            waiting = []  # later choices whose first choice has not evaluated the prompt yet
            while self._queue:
                seq = self._queue.popleft()
                if seq.req.cancelled:
                    seq.req.state = "done"
                    continue
                if seq.leader is not None and seq.leader.first_logits is None:
                    waiting.append(seq)
                    continue
                free = [s for s in self._slots if s.seq is None and not s.held]
                if not free and len(self._slots) < self.parallel:
                    slot = _Slot(self.model.context(n_ctx=self.n_ctx, n_threads=self.n_threads))
                    self._slots.append(slot)
                    free = [slot]
                if not free:
                    self._queue.appendleft(seq)
                    break
                self._place(seq, free, out)
            self._queue.extendleft(reversed(waiting))

    def _copy_source(self, seq):
        """The slot holding seq's prompt evaluated by its leader (still there: not reset or rewound), or None."""
        src = seq.leader.home if seq.leader is not None else None
        n = len(seq.prompt)
        if src is None or src.held or src.ctx.n_past < n or not src.ctx.runner.can_rewind(n):
            return None
        return src if src.ctx.tokens[:n] == seq.prompt else None

    def _place(self, seq, free, out):
        req, ids = seq.req, seq.prompt
        src = self._copy_source(seq)
        if src is not None:  # a later choice: the leader's KV rows and last logits, no prompt row evaluated
            best = min(free, key=lambda s: (s is src, s.ctx.n_past))  # the source itself only as a last resort
            if best is src:
                best.ctx.rewind(len(ids))
            else:
                best.ctx.copy_prefix(src.ctx, len(ids))
            keep, seq.pending, seq.prompt_lps = len(ids), seq.leader.first_logits, seq.leader.prompt_lps
            self.m["prompt_tokens_copied"] += len(ids)
        elif req.embed or req.prompt_logprobs or not self.model.hparams.causal:
            # every prompt row is needed, or (non-causal) every row depends on the whole input: nothing reused
            best = min(free, key=lambda s: s.ctx.n_past)
            best.ctx.reset()
            keep = 0
        else:
            best = max(free, key=lambda s: (reusable_prefix(s.ctx, ids), -s.ctx.n_past))
            keep = reuse_prefix(best.ctx, ids, reusable_prefix(best.ctx, ids))  # the prompt cache's, if longer
        best.seq, seq.slot, seq.home, seq.pos, seq.cached = seq, best, best, keep, keep
        if seq.index % req.n == 0:  # prompt tokens are counted once per prompt, not per choice
            req.cached_tokens += keep
            self.m["prompt_tokens"] += len(ids) - keep
        if req.state == "queued":
            req.state = "running"
            out[req].append(Start())
        if req.progress and src is None:
            out[req].append(Progress(seq.index, len(ids), keep, keep))
        if req.embed:
            return
        if seq.prompt_lps is not None:
            out[req].append(PromptLogprobs(seq.index, seq.prompt_lps))
        seq.sequence = Sequence(self.model, ids, req.params, choice=seq.index % req.n,
                                constraint=req.constraints[seq.index] if req.constraints is not None else None,
                                parser=req.parser() if req.parser is not None else None)
        seq.spec = Speculation(make_drafter(req.params, ids, self.n_ctx, best.draft_context(req.params, self.n_ctx)),
                               best.ctx)

    def _step(self, out):
        self._admit(out)
        for slot in self._slots:
            seq = slot.seq
            if seq is not None and seq.req.cancelled:
                seq.req.state = "done"
                self._free(seq)
        for slot in self._slots:  # copied choices: their first token, from their leader's logits
            seq = slot.seq
            if seq is not None and seq.pending is not None:
                lg, seq.pending = seq.pending, None
                self._sample(seq, lg, out)
        items, seqs, outputs = [], [], []
        for slot in self._slots:
            seq = slot.seq
            if seq is None:
                continue
            if seq.pos < len(seq.prompt):
                # a non-causal model's rows attend to their whole sequence: its input goes in whole, in one call
                # from position 0 (the shared contract with fg_forward), never split over steps
                n = self.chunk if self.model.hparams.causal else len(seq.prompt)
                chunk = seq.prompt[seq.pos:seq.pos + n]
                outputs.append("hidden" if seq.req.embed else "all" if seq.req.prompt_logprobs else "last")
            else:  # its next token; a speculative sequence's drafts too, with every row's logits to verify them
                chunk = seq.spec.inputs(seq.next_tok, seq.sequence)
                outputs.append("all" if len(chunk) > 1 else "last")
            items.append((slot.ctx, chunk))
            seqs.append(seq)
        if not items:
            return
        results = _batch.forward_batch(self.model, items, self.n_threads, outputs)
        self.m["steps"] += 1
        self.m["batch_seqs"] += len(items)
        self.m["batch_tokens"] += sum(len(c) for _, c in items)
        for seq, (_, chunk), res in zip(seqs, items, results):
            try:
                self._took(seq, len(chunk), res, out)
            except Exception as e:  # noqa: BLE001 - e.g. NaN rows: this request fails, not the others of the batch
                self._fail(seq.req, e, out)

    def _took(self, seq, n, res, out):
        """seq's share of a batched forward over n of its tokens: res, its rows (prompt rows, a decoding step's
        rows) or last logits."""
        if seq.pos == len(seq.prompt):
            self._verify(seq, res if n > 1 else [res], out)
            return
        lg = res
        if seq.pos < len(seq.prompt):
            self.m["prompt_tokens_evaluated"] += n
            if seq.req.embed:
                seq.rows.append(res)
            elif seq.req.prompt_logprobs:
                self._score_prompt(seq, res)
                lg = res[-1]
            seq.pos += n
            if seq.req.progress:
                out[seq.req].append(Progress(seq.index, len(seq.prompt), seq.cached, seq.pos))
            if seq.pos < len(seq.prompt):
                return
            if seq.req.embed:
                self._embedded(seq, out)
                return
            prompt_evaluated(seq.slot.ctx, seq.prompt)  # the model's prompt cache, if any, stores it
            if seq.req.prompt_logprobs:
                out[seq.req].append(PromptLogprobs(seq.index, seq.prompt_lps))
            if seq.req.n > 1:
                seq.first_logits = np.array(lg)
        self._advance(seq, lg, out)

    def _score_prompt(self, seq, logits):
        """Extend seq.prompt_lps with the entries (token_id, logprob, top) of the prompt tokens that a chunk's
        all-row logits (rows at positions seq.pos..) score: each token under the row before it; the first token
        has none: (id, None, None)."""
        ids, k = seq.prompt, seq.req.logprobs
        if seq.pos == 0:
            seq.prompt_lps = [(int(ids[0]), None, None)]
        for j in range(min(len(logits), len(ids) - 1 - seq.pos)):
            seq.prompt_lps.append(_logprobs(logits[j], ids[seq.pos + j + 1], k))

    def _embedded(self, seq, out):
        """The embedding of an input: its hidden rows pooled as the file says (fastgguf.engine.pooling)."""
        rows, seq.rows = np.concatenate(seq.rows), []
        out[seq.req].append(Embedding(seq.index, _pooling.embedding(self.model, rows)))
        self._end(seq, out)

    def _sample(self, seq, lg, out):
        try:
            self._advance(seq, lg, out)
        except Exception as e:  # noqa: BLE001 - e.g. every token banned: this request fails, not the others
            self._fail(seq.req, e, out)

    def _verify(self, seq, rows, out):
        """A decoding step's rows (the next token's, then a speculative sequence's drafts'): seq is stepped on each
        while the sampled tokens match the drafts, the rows after the first mismatch rewound out of the slot's cache
        (fastgguf.engine.speculative.Speculation.verify: the rule generate() runs too, and why it is exact)."""
        done = seq.spec.verify(rows, lambda lg, full: self._advance(seq, lg, out, full))
        self.m["draft_tokens"] += done.drafted
        self.m["draft_accepted"] += done.accepted

    def _advance(self, seq, lg, out, full=None):
        """Step seq's Sequence on lg (n_vocab,), the logits of its last row, and turn what it did into events;
        returns the Step. `full`: no room for another token (default: the slot's cache is full)."""
        req = seq.req
        st = seq.sequence.step(lg, full=seq.slot.ctx.n_past >= self.n_ctx if full is None else full)
        lps = None
        if st.token is not None:
            if req.t_first is None:
                req.t_first = time.perf_counter()
                self.m["ttft_sum"] += req.t_first - req.t_submit
                self.m["ttft_count"] += 1
            if not st.eog:  # an end-of-generation token is no completion token and has no logprobs entry
                req.completion_tokens += 1
                self.m["completion_tokens"] += 1
                if req.logprobs is not None:
                    lps = [_logprobs(lg, st.token, req.logprobs)]
        if st.text or lps or st.parsed:
            out[req].append(Delta(seq.index, st.text, lps, st.parsed))
        if st.finish is None:
            seq.next_tok = st.token
            return st
        out[req].append(Finish(seq.index, st.finish, seq.sequence.stopper.matched))
        self._end(seq, out)
        return st

    def _end(self, seq, out):
        """seq is done: free its slot; the request's Done once all its choices are."""
        req = seq.req
        self._free(seq)
        req.n_finished += 1
        if req.n_finished == req.n_choices:
            req.state = "done"
            out[req].append(Done(Usage(prompt_tokens=req.prompt_tokens, completion_tokens=req.completion_tokens,
                                       total_tokens=req.prompt_tokens + req.completion_tokens,
                                       cached_tokens=req.cached_tokens)))


Engine = Scheduler  # the name the server and the tests knew it by


def _dispatch(items):
    for req, evs in items:
        try:
            req.sink(evs)
        except Exception:  # noqa: BLE001
            req.cancel()
