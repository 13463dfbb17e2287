"""The Scheduler's typed events -> OpenAI's response dicts, and any exception -> OpenAI's error shape.

    b = builder(model, prep)             # ResponseBuilder (completions, chat), EmbeddingCollector or RerankCollector
    b.chunks(events) -> [chunk dicts]    # streaming; or b.feed(events) ... b.final() -> the response dict
    status, body, headers = error_body(exc)

The dicts are exactly what fastgguf's server sends and what the in-process API returns (OpenAI's shapes: id,
object, created, model, choices[...], usage). No web framework is imported here.
"""
import base64
import math
import time
import uuid

import numpy as np

from fastgguf.engine.sandbox import Cancelled
from fastgguf.engine.scheduler import Delta, Done, Embedding, Error, Finish, Progress, PromptLogprobs, QueueFull, \
    Start
from fastgguf.api.openai.protocol import APIError, EmbeddingPrepared, RerankPrepared, model_id

__all__ = ["ResponseBuilder", "EmbeddingCollector", "RerankCollector", "builder", "embedding_response",
           "rerank_response", "usage_dict", "error_body"]


def error_body(exc):
    """(HTTP status, OpenAI error dict, headers) of any exception: the one translation, for every route, handler and
    stream (an APIError keeps its own; QueueFull is 429 with Retry-After; ValueError / TypeError 400; a compile
    cancelled because the client left 499; else 500)."""
    if isinstance(exc, Cancelled):
        exc = APIError("the client closed the request", status=499, type="invalid_request_error")
    elif isinstance(exc, QueueFull):
        exc = APIError(str(exc), status=429, type="rate_limit_error", code="rate_limit_exceeded",
                       headers={"Retry-After": str(exc.retry_after)})
    elif not isinstance(exc, APIError):
        exc = (APIError(str(exc)) if isinstance(exc, (ValueError, TypeError)) else
               APIError(f"internal error: {type(exc).__name__}: {exc}", status=500, type="server_error"))
    return exc.status, exc.body(), exc.headers


def builder(model, prep):
    """The events -> response shaper of a prepared request."""
    if isinstance(prep, RerankPrepared):
        return RerankCollector(model, prep)
    return EmbeddingCollector(model, prep) if isinstance(prep, EmbeddingPrepared) else ResponseBuilder(model, prep)


def embedding_response(model, prep, vectors, usage):
    """OpenAI's /v1/embeddings response: vectors (float32 (n_embd,) per input, in order), usage from the Scheduler's Done."""
    data = []
    for i, v in enumerate(vectors):
        v = np.asarray(v, dtype="<f4")
        emb = base64.b64encode(v.tobytes()).decode("ascii") if prep.encoding_format == "base64" else v.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    n = usage["prompt_tokens"]
    return {"object": "list", "data": data, "model": model_id(model),
            "usage": {"prompt_tokens": n, "total_tokens": n}}


class EmbeddingCollector:
    """The events of an embedding request -> the response dict (`feed(events)`, then `final()`)."""

    def __init__(self, model, prep):
        self.model, self.prep = model, prep
        self.vectors = [None] * len(prep.prompts)
        self.usage = None

    def feed(self, events):
        for ev in events:
            if isinstance(ev, Embedding):
                self.vectors[ev.index] = ev.vector
            elif isinstance(ev, Done):
                self.usage = ev.usage
            elif isinstance(ev, Error):
                raise ev.error

    def final(self):
        return embedding_response(self.model, self.prep, self.vectors, self.usage)


def rerank_response(model, prep, scores, usage):
    """llama-server's /v1/rerank response (Jina's shape): results sorted by relevance_score, best first (a stable
    sort: equal scores keep the documents' order), the first top_n; with return_documents each result also
    carries {"document": {"text": ...}} as Jina and Cohere do. relevance_score is score 0 of the model's rank head,
    not normalised (Qwen3 rerankers: P(yes))."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[:prep.top_n]
    results = []
    for i in order:
        r = {"index": i, "relevance_score": scores[i]}
        if prep.return_documents:
            r["document"] = {"text": prep.documents[i]}
        results.append(r)
    n = usage["prompt_tokens"]
    return {"model": model_id(model), "object": "list", "results": results,
            "usage": {"prompt_tokens": n, "total_tokens": n}}


class RerankCollector(EmbeddingCollector):
    """The events of a rerank request (one Embedding event of scores per document) -> the response dict."""

    def final(self):
        scores = [float(np.asarray(v).reshape(-1)[0]) for v in self.vectors]
        return rerank_response(self.model, self.prep, scores, self.usage)


def timings(usage, t0, t_first, t_done):
    """llama-server's `timings` of a request: its prompt (the tokens evaluated, not those in the cache; from
    submission, queueing included, to the first token) and its generation (first token to done), in ms and per
    second."""
    t_first = t_first or t_done
    prompt_n = usage["prompt_tokens"] - usage["cached_tokens"]
    out = {"cache_n": usage["cached_tokens"]}
    for name, n, secs in (("prompt", prompt_n, t_first - t0), ("predicted", usage["completion_tokens"],
                                                               t_done - t_first)):
        ms = max(secs, 0.0) * 1e3
        out.update({f"{name}_n": n, f"{name}_ms": ms, f"{name}_per_token_ms": ms / n if n else 0.0,
                    f"{name}_per_second": n * 1e3 / ms if n and ms else 0.0})
    return out


def usage_dict(u):
    return {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
            "total_tokens": u["prompt_tokens"] + u["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": u["cached_tokens"]}}


class ResponseBuilder:
    """The Scheduler's events -> OpenAI response dicts: `chunks(events)` (streaming) or `feed(events)` then `final()`."""

    def __init__(self, model, prep):
        self.model, self.prep = model, prep
        self.chat = prep.kind == "chat.completion"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model_name = model_id(model)
        n = len(prep.prompts) * prep.n
        self.texts = [""] * n
        self.lps = [[] for _ in range(n)]
        self.offsets = [0] * n  # completions' text_offset: characters of the choice's text before its next token
        self.decoders = [model.tokenizer.streaming_decoder() for _ in range(n)]  # what each token adds to the text
        self.finish = [None] * n
        self.prompt_lps = [None] * n  # echo with logprobs: the prompt tokens' entries per choice
        self.usage = None
        self.timings = None  # llama-server's (timings()), once done
        self.t0, self.t_first = time.perf_counter(), None
        self.error = None
        self.started = False
        # a chat with an output parser (tool calls, reasoning): per choice, its ChatDeltas joined
        self.parsed = getattr(prep, "parser", None) is not None
        self.content = [""] * n
        self.reasoning = [""] * n
        self.calls = [[] for _ in range(n)]
        if prep.echo_texts:
            for i in range(n):
                self.texts[i] = prep.echo_texts[i // prep.n]
                self.offsets[i] = len(self.texts[i])

    # -- pieces ------------------------------------------------------------------------------------------------

    def _tok(self, tid):
        b = self.model.tokenizer.token_to_piece(tid, special=True)
        return b.decode("utf-8", "replace"), list(b)

    def _chat_lp(self, entries):
        out = []
        for tid, lp, top in entries:
            s, b = self._tok(tid)
            tops = []
            for t2, lp2 in top:
                s2, b2 = self._tok(t2)
                tops.append({"token": s2, "logprob": _finite(lp2), "bytes": b2})
            out.append({"token": s, "logprob": _finite(lp), "bytes": b, "top_logprobs": tops})
        return out

    def _cmpl_lp(self, entries, index, shift=0):
        """Completions' logprobs of entries (token_id, logprob, top); the echoed prompt's first token has
        logprob and top None (null, as OpenAI and llama-cpp-python). text_offset: where the token's text starts in
        the choice's text, counted by what each token adds to it (a special token adds nothing, a UTF-8 character
        split over tokens counts once; less `shift`: a leading space the text dropped), never past the text so
        far: monotonic and within the text."""
        d = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        dec, end = self.decoders[index], len(self.texts[index])
        for tid, lp, top in entries:
            d["tokens"].append(self._tok(tid)[0])
            d["token_logprobs"].append(None if lp is None else _finite(lp))
            d["top_logprobs"].append(None if top is None else {self._tok(t2)[0]: _finite(lp2) for t2, lp2 in top})
            d["text_offset"].append(min(max(self.offsets[index] - shift, 0), end))
            self.offsets[index] += len(dec.feed(tid))
        return d

    def _echo_lp(self, i):
        """The echoed prompt's logprobs of choice i (offsets from 0); generated tokens' offsets then start after
        the echoed text."""
        echo = self.prep.echo_texts[i // self.prep.n]
        ids = [tid for tid, _, _ in self.prompt_lps[i]]
        # the echo is Tokenizer.detokenize(prompt), which may drop the first piece's leading space (SPM)
        dec = self.model.tokenizer.streaming_decoder()
        shift = max(sum(len(dec.feed(t)) for t in ids) - len(echo), 0)
        self.offsets[i], self.decoders[i] = 0, self.model.tokenizer.streaming_decoder()
        d = self._cmpl_lp(self.prompt_lps[i], i, shift)
        self.offsets[i], self.decoders[i] = len(echo), self.model.tokenizer.streaming_decoder()
        return d

    def _head(self, obj):
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_name,
                "system_fingerprint": None}

    def _chunk(self, choices):
        c = self._head("chat.completion.chunk" if self.chat else "text_completion")
        c["choices"] = choices
        if self.prep.include_usage:
            c["usage"] = None
        return c

    # -- tool calls and reasoning (a chat with an output parser) --------------------------------------------------

    def _parsed_delta(self, ev):
        """Record a Delta's ChatDeltas (engine.output) for its choice; returns the chunk's `delta` dict: content,
        reasoning_content and tool_calls fragments (each with its `index`), joined in order."""
        i, delta = ev.index, {}
        for d in ev.parsed or ():
            if d.reasoning:
                self.reasoning[i] += d.reasoning
                delta["reasoning_content"] = delta.get("reasoning_content", "") + d.reasoning
            if d.content:
                self.content[i] += d.content
                delta["content"] = delta.get("content", "") + d.content
            for frag in d.tool_calls or ():
                calls = self.calls[i]
                if "id" in frag:
                    calls.append({"id": frag["id"], "type": frag.get("type", "function"),
                                  "function": {"name": frag["function"]["name"], "arguments": ""}})
                calls[frag["index"]]["function"]["arguments"] += frag["function"].get("arguments", "")
                delta.setdefault("tool_calls", []).append(frag)
        return delta

    def _message(self, i):
        if not self.parsed:
            return {"role": "assistant", "content": self.texts[i]}
        calls = self.calls[i]
        msg = {"role": "assistant", "content": self.content[i] or (None if calls else "")}
        if self.reasoning[i]:
            msg["reasoning_content"] = self.reasoning[i]
        if calls:
            msg["tool_calls"] = calls
        return msg

    def _finish_reason(self, i):
        """OpenAI's "tool_calls" when the reply made calls and ended on its own (not cut at "length")."""
        reason = self.finish[i]
        return "tool_calls" if reason == "stop" and self.calls[i] else reason

    # -- streaming ---------------------------------------------------------------------------------------------

    def chunks(self, events):
        """The chunk dicts for a list of events (raises the request's error, if any)."""
        out = []
        for ev in events:
            if isinstance(ev, Start):
                self.started = True
                for i in range(len(self.texts)):
                    if self.chat:
                        out.append(self._chunk([{"index": i, "delta": {"role": "assistant", "content": None},
                                                 "logprobs": None, "finish_reason": None}]))
                    elif self.prep.echo_texts and not self.prep.prompt_logprobs:
                        out.append(self._chunk([{"index": i, "text": self.texts[i], "logprobs": None,
                                                 "finish_reason": None}]))
            elif isinstance(ev, Progress):  # llama-server's return_progress: a chunk without choices
                c = self._chunk([])
                c["prompt_progress"] = {"total": ev.total, "cache": ev.cache, "processed": ev.processed,
                                        "time_ms": (time.perf_counter() - self.t0) * 1e3}
                out.append(c)
            elif isinstance(ev, PromptLogprobs):  # the echo, now with its logprobs
                i = ev.index
                self.prompt_lps[i] = ev.logprobs
                out.append(self._chunk([{"index": i, "text": self.prep.echo_texts[i // self.prep.n],
                                         "logprobs": self._echo_lp(i), "finish_reason": None}]))
            elif isinstance(ev, Delta):
                i, text, lps = ev.index, ev.text, ev.logprobs
                self.texts[i] += text
                self.t_first = self.t_first or time.perf_counter()
                if self.chat:
                    lp = {"content": self._chat_lp(lps), "refusal": None} if lps is not None else None
                    delta = self._parsed_delta(ev) if self.parsed else {"content": text}
                    if delta or lp is not None:
                        out.append(self._chunk([{"index": i, "delta": delta, "logprobs": lp,
                                                 "finish_reason": None}]))
                else:
                    lp = self._cmpl_lp(lps, i) if lps is not None else None
                    out.append(self._chunk([{"index": i, "text": text, "logprobs": lp, "finish_reason": None}]))
            elif isinstance(ev, Finish):
                i = ev.index
                self.finish[i] = ev.reason
                if self.chat:
                    out.append(self._chunk([{"index": i, "delta": {}, "logprobs": None,
                                             "finish_reason": self._finish_reason(i)}]))
                else:
                    out.append(self._chunk([{"index": i, "text": "", "logprobs": None, "finish_reason": ev.reason}]))
            elif isinstance(ev, Done):
                self._done(ev)
                if self.prep.include_usage:
                    c = self._chunk([])
                    c["usage"], c["timings"] = self.usage, self.timings
                    out.append(c)
            elif isinstance(ev, Error):
                self.error = ev.error
                raise ev.error
        return out

    def _done(self, ev):
        self.usage = usage_dict(ev.usage)
        self.timings = timings(ev.usage, self.t0, self.t_first, time.perf_counter())

    def error_chunk(self, exc):
        """The stream's last chunk for an exception raised after it began: OpenAI's error dict."""
        return error_body(exc)[1]

    # -- whole response ----------------------------------------------------------------------------------------

    def feed(self, events):
        for ev in events:
            if isinstance(ev, Delta):
                self.texts[ev.index] += ev.text
                self.t_first = self.t_first or time.perf_counter()
                if self.parsed:
                    self._parsed_delta(ev)
                if ev.logprobs is not None:
                    self.lps[ev.index].extend(ev.logprobs)
            elif isinstance(ev, PromptLogprobs):
                self.prompt_lps[ev.index] = ev.logprobs
            elif isinstance(ev, Finish):
                self.finish[ev.index] = ev.reason
            elif isinstance(ev, Done):
                self._done(ev)
            elif isinstance(ev, Error):
                self.error = ev.error
                raise ev.error

    def final(self):
        choices = []
        for i, text in enumerate(self.texts):
            want_lp = self.prep.logprobs is not None
            if self.chat:
                lp = {"content": self._chat_lp(self.lps[i]), "refusal": None} if want_lp else None
                choices.append({"index": i, "message": self._message(i), "logprobs": lp,
                                "finish_reason": self._finish_reason(i)})
            else:
                lp = None
                if want_lp:
                    self.offsets[i] = len(self.prep.echo_texts[i // self.prep.n]) if self.prep.echo_texts else 0
                    self.decoders[i] = self.model.tokenizer.streaming_decoder()
                    head = self._echo_lp(i) if self.prompt_lps[i] is not None else None
                    lp = self._cmpl_lp(self.lps[i], i)
                    if head is not None:
                        lp = {k: head[k] + lp[k] for k in lp}
                choices.append({"index": i, "text": text, "logprobs": lp, "finish_reason": self.finish[i]})
        r = self._head(self.prep.kind if self.chat else "text_completion")
        r["choices"] = choices
        r["usage"], r["timings"] = self.usage, self.timings
        if self.prep.verbose:  # llama-server's, for debugging: the prompt text
            r["__verbose"] = {"prompt": self.prep.prompt_text, "content": self.texts[0] if self.texts else ""}
        return r


def _finite(x):
    return x if math.isfinite(x) else -9999.0
