"""OpenAI-compatible requests and responses, shared by the HTTP server and the in-process API.

    model.create_completion("Once upon a time", max_tokens=16, temperature=0)          # -> dict
    model.create_chat_completion([{"role": "user", "content": "Hi"}], stream=True)     # -> iterator of chunk dicts
    model.create_embedding(["a cat sat", "a dog ran"])                                  # -> dict (/v1/embeddings)

The names follow llama-cpp-python; the dicts are exactly what fastgguf's server sends (OpenAI's shapes: id, object,
created, model, choices[...], usage). The same code turns a request body into (prompts, SamplingParams, options)
(`prepare_completion`, `prepare_chat`: every bad field is an APIError with `param` set; sampling fields are validated
by SamplingParams, nowhere else) and the Engine's events into responses (`ResponseBuilder`). No web framework is
imported here.
"""
import base64
import math
import queue
import threading
import time
import uuid
from collections.abc import Mapping

import numpy as np

from fastgguf.engine.params import SamplingParams, check_logit_bias

__all__ = ["APIError", "prepare_completion", "prepare_chat", "prepare_embedding", "ResponseBuilder",
           "embedding_response", "create_completion", "create_chat_completion", "create_embedding", "model_id",
           "error_body", "usage_dict"]

MAX_N = 16
MAX_EMBED_INPUTS = 2048  # as OpenAI
UNSUPPORTED = "not supported yet"

# OpenAI request field -> SamplingParams field
_SAMPLING_FIELDS = {
    "temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed",
    "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
    "repetition_penalty": "repeat_penalty", "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n",
    "logit_bias": "logit_bias", "stop": "stop",
}


class APIError(ValueError):
    """A request the API refuses, in OpenAI's error shape: `status` (HTTP), `type`, `param`, `code`."""

    def __init__(self, message, *, status=400, type="invalid_request_error", param=None, code=None, headers=None):
        super().__init__(message)
        self.message, self.status, self.type, self.param, self.code = message, status, type, param, code
        self.headers = headers or {}

    def body(self):
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def error_body(exc):
    """(HTTP status, OpenAI error dict, headers) of any exception."""
    if isinstance(exc, APIError):
        return exc.status, exc.body(), exc.headers
    from fastgguf.server.engine import QueueFull
    if isinstance(exc, QueueFull):
        e = APIError(str(exc), status=429, type="rate_limit_error", code="rate_limit_exceeded",
                     headers={"Retry-After": str(exc.retry_after)})
        return e.status, e.body(), e.headers
    if isinstance(exc, (ValueError, TypeError)):
        return 400, APIError(str(exc)).body(), {}
    return 500, APIError(f"internal error: {type(exc).__name__}: {exc}", type="server_error").body(), {}


def model_id(model):
    """The id the API shows for a model: its file name without .gguf."""
    import os
    name = os.path.basename(getattr(model, "path", "") or "model")
    return name[:-5] if name.lower().endswith(".gguf") else name


def _param_of(exc, names):
    """The request field a SamplingParams error names (its message starts with the field)."""
    head = str(exc).split(" ", 1)[0].split("[", 1)[0].rstrip(":")
    for api, field in names.items():
        if field == head:
            return api
    return head or None


def sampling_params(body, n_vocab):
    """SamplingParams from an OpenAI request body (absent or null fields keep SamplingParams' defaults)."""
    kw, given = {}, {}
    for api, field in _SAMPLING_FIELDS.items():
        v = body.get(api)
        if v is not None:
            kw[field] = v
            given[api] = field
    mt = body.get("max_completion_tokens")
    if mt is None:
        mt = body.get("max_tokens")
        if mt is not None:
            given["max_tokens"] = "max_tokens"
    else:
        given["max_completion_tokens"] = "max_tokens"
    if mt is not None:
        kw["max_tokens"] = mt
    if "logit_bias" in kw:
        try:
            kw["logit_bias"] = check_logit_bias(kw["logit_bias"], n_vocab)
        except (TypeError, ValueError) as e:
            raise APIError(str(e), param="logit_bias") from None
    try:
        return SamplingParams(**kw)
    except (TypeError, ValueError) as e:
        raise APIError(str(e), param=_param_of(e, given)) from None


def _int_field(body, name, default, lo, hi):
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise APIError(f"{name} must be an integer, got {type(v).__name__}", param=name)
    if not lo <= v <= hi:
        raise APIError(f"{name} must be in [{lo}, {hi}], got {v}", param=name)
    return v


def _bool_field(body, name):
    v = body.get(name)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise APIError(f"{name} must be a boolean, got {type(v).__name__}", param=name)
    return v


def _unsupported(body):
    rf = body.get("response_format")
    if rf is not None:
        kind = rf.get("type") if isinstance(rf, Mapping) else rf
        if kind != "text":
            raise APIError(f"response_format {kind!r} is {UNSUPPORTED}", param="response_format",
                           code="unsupported_parameter")
    if body.get("tools"):
        raise APIError(f"tools are {UNSUPPORTED}", param="tools", code="unsupported_parameter")
    tc = body.get("tool_choice")
    if tc not in (None, "none", "auto"):
        raise APIError(f"tool_choice is {UNSUPPORTED}", param="tool_choice", code="unsupported_parameter")
    if body.get("suffix"):
        raise APIError(f"suffix is {UNSUPPORTED}", param="suffix", code="unsupported_parameter")
    bo = body.get("best_of")
    if bo not in (None, 1) and bo != body.get("n", 1):
        raise APIError(f"best_of is {UNSUPPORTED}", param="best_of", code="unsupported_parameter")


def _check_model(body, model):
    name = body.get("model")
    if name is None:
        return
    if not isinstance(name, str):
        raise APIError("model must be a string", param="model")
    mid = model_id(model)
    if name not in (mid, mid + ".gguf", getattr(model, "path", None)):
        raise APIError(f"The model {name!r} does not exist (this server serves {mid!r})", status=404,
                       param="model", code="model_not_found")


def _stream_options(body, stream):
    so = body.get("stream_options")
    if so is None:
        return False
    if not isinstance(so, Mapping):
        raise APIError("stream_options must be an object", param="stream_options")
    if not stream:
        raise APIError("stream_options is only allowed with stream=true", param="stream_options")
    iu = so.get("include_usage")
    if iu is not None and not isinstance(iu, bool):
        raise APIError("stream_options.include_usage must be a boolean", param="stream_options")
    return bool(iu)


def _fit(prompts, params, n_ctx):
    for p in prompts:
        n = len(p)
        if params.max_tokens is not None and n + params.max_tokens > n_ctx:
            raise APIError(f"This model's maximum context length is {n_ctx} tokens. However, you requested "
                           f"{n + params.max_tokens} tokens ({n} in the prompt, {params.max_tokens} for the "
                           f"completion). Please reduce the prompt or max_tokens.", param="messages",
                           code="context_length_exceeded")
        if n >= n_ctx:
            raise APIError(f"This model's maximum context length is {n_ctx} tokens. However, the prompt has {n} "
                           f"tokens. Please reduce the prompt.", param="messages", code="context_length_exceeded")


class Prepared:
    """A validated request: what the Engine needs and how to shape the answer."""

    def __init__(self, kind, prompts, params, n, logprobs, stream, include_usage, echo_texts=None):
        self.kind, self.prompts, self.params, self.n = kind, prompts, params, n
        self.logprobs, self.stream, self.include_usage = logprobs, stream, include_usage
        self.echo_texts = echo_texts  # completions with echo: the prompt text per prompt
        self.prompt_logprobs = echo_texts is not None and logprobs is not None  # echo's tokens get logprobs too

    def request(self, sink, loop=None):
        """The Engine request of this one."""
        from fastgguf.server.engine import Request
        return Request(self.prompts, self.params, sink, n=self.n, logprobs=self.logprobs, loop=loop,
                       prompt_logprobs=self.prompt_logprobs)


def _common(model, body, kind):
    if not isinstance(body, Mapping):
        raise APIError("the request body must be a JSON object")
    _check_model(body, model)
    _unsupported(body)
    stream = _bool_field(body, "stream")
    include_usage = _stream_options(body, stream)
    n = _int_field(body, "n", 1, 1, MAX_N)
    params = sampling_params(body, model.n_vocab)
    return stream, include_usage, n, params


def _prompt_list(model, prompt, field="prompt"):
    """OpenAI's prompt (or embedding input: field="input"): a string, a list of strings, a list of token ids, or a
    list of lists of token ids. Returns a list of token id lists."""
    n_vocab = model.n_vocab

    def ids_of(x, where):
        if isinstance(x, str):
            ids = list(model.tokenize(x))
        elif isinstance(x, list) and all(_is_int(t) for t in x):
            for t in x:
                if not 0 <= t < n_vocab:
                    raise APIError(f"{where}: token id {t} is out of range for a vocabulary of {n_vocab}",
                                   param=field)
            ids = list(x)
        else:
            raise APIError(f"{field} must be a string, a list of strings, a list of token ids or a list of such "
                           "lists", param=field)
        if not ids:
            raise APIError(f"{where} is empty", param=field)
        return ids
    if prompt is None:
        raise APIError(f"{field} is required", param=field)
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and _is_int(prompt[0])):
        return [ids_of(prompt, field)]
    if isinstance(prompt, list) and prompt:
        return [ids_of(p, f"{field}[{i}]") for i, p in enumerate(prompt)]
    raise APIError(f"{field} must be a non-empty string or list", param=field)


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def prepare_completion(model, body, n_ctx):
    stream, include_usage, n, params = _common(model, body, "completion")
    prompts = _prompt_list(model, body.get("prompt"))
    lp = body.get("logprobs")
    if lp is not None and (isinstance(lp, bool) or not isinstance(lp, int) or not 0 <= lp <= 20):
        raise APIError("logprobs must be an integer in [0, 20] for completions", param="logprobs")
    echo = _bool_field(body, "echo")
    _fit(prompts, params, n_ctx)
    echo_texts = [model.detokenize(p) for p in prompts] if echo else None
    return Prepared("text_completion", prompts, params, n, lp, stream, include_usage, echo_texts)


class EmbeddingPrepared:
    """A validated /v1/embeddings request: prompts (token id lists), encoding_format ("float" or "base64")."""
    stream = False

    def __init__(self, prompts, encoding_format):
        self.prompts, self.encoding_format = prompts, encoding_format

    def request(self, sink, loop=None):
        from fastgguf.server.engine import Request
        return Request(self.prompts, None, sink, loop=loop, embed=True)


def prepare_embedding(model, body, n_ctx):
    """/v1/embeddings: input is a string, a list of strings, a list of token ids or a list of such lists (no
    empty strings: OpenAI refuses them too); each at most n_ctx tokens."""
    if not isinstance(body, Mapping):
        raise APIError("the request body must be a JSON object")
    _check_model(body, model)
    fmt = body.get("encoding_format")
    fmt = "float" if fmt is None else fmt
    if fmt not in ("float", "base64"):
        raise APIError(f"encoding_format must be 'float' or 'base64', got {fmt!r}", param="encoding_format")
    dims = body.get("dimensions")
    if dims is not None and dims != model.n_embd:
        raise APIError(f"dimensions must be {model.n_embd} (this model's embedding size); other sizes are "
                       f"{UNSUPPORTED}", param="dimensions", code="unsupported_parameter")
    inp = body.get("input")
    if inp == "" or (isinstance(inp, list) and "" in inp):
        raise APIError("input: an empty string cannot be embedded", param="input")
    if isinstance(inp, list) and len(inp) > MAX_EMBED_INPUTS and not _is_int(inp[0]):
        raise APIError(f"input has {len(inp)} items; at most {MAX_EMBED_INPUTS} are allowed", param="input")
    prompts = _prompt_list(model, inp, "input")
    for i, ids in enumerate(prompts):
        if len(ids) > n_ctx:
            raise APIError(f"This model's maximum context length is {n_ctx} tokens. However, input[{i}] has "
                           f"{len(ids)} tokens. Please reduce the input.", param="input",
                           code="context_length_exceeded")
    return EmbeddingPrepared(prompts, fmt)


def embedding_response(model, prep, vectors, usage):
    """OpenAI's /v1/embeddings response: vectors (float32 (n_embd,) per input, in order), usage from the Engine."""
    data = []
    for i, v in enumerate(vectors):
        v = np.asarray(v, dtype="<f4")
        emb = base64.b64encode(v.tobytes()).decode("ascii") if prep.encoding_format == "base64" else v.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    n = usage["prompt_tokens"]
    return {"object": "list", "data": data, "model": model_id(model),
            "usage": {"prompt_tokens": n, "total_tokens": n}}


class EmbeddingCollector:
    """Engine events of an embedding request -> the response dict (`feed(events)`, then `final()`)."""

    def __init__(self, model, prep):
        self.model, self.prep = model, prep
        self.vectors = [None] * len(prep.prompts)
        self.usage = None

    def feed(self, events):
        for ev in events:
            if ev[0] == "embedding":
                self.vectors[ev[1]] = ev[2]
            elif ev[0] == "done":
                self.usage = ev[1]
            elif ev[0] == "error":
                raise ev[1]

    def final(self):
        return embedding_response(self.model, self.prep, self.vectors, self.usage)


_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def _messages(messages):
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if not isinstance(messages, list) or not messages:
        raise APIError("messages must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise APIError(f"messages[{i}] must be an object", param="messages")
        role = m.get("role")
        if role not in _ROLES:
            raise APIError(f"messages[{i}].role must be one of {', '.join(_ROLES)}, got {role!r}",
                           param="messages")
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif isinstance(part, Mapping) and part.get("type") in ("image_url", "input_audio", "file"):
                    raise APIError(f"messages[{i}].content[{j}]: {part.get('type')} parts are {UNSUPPORTED}",
                                   param="messages", code="unsupported_parameter")
                else:
                    raise APIError(f"messages[{i}].content[{j}] must be a text part "
                                   f"{{'type': 'text', 'text': ...}}", param="messages")
            content = "".join(parts)
        elif content is None:
            if not (role == "assistant" and m.get("tool_calls")):
                raise APIError(f"messages[{i}].content is required", param="messages")
        elif not isinstance(content, str):
            raise APIError(f"messages[{i}].content must be a string or a list of text parts", param="messages")
        msg = {k: v for k, v in m.items() if k not in ("role", "content")}
        msg["role"], msg["content"] = _ROLES[role], content
        out.append(msg)
    return out


def prepare_chat(model, body, n_ctx):
    from fastgguf.engine.chat import prepare_chat as _prepare
    stream, include_usage, n, params = _common(model, body, "chat.completion")
    msgs = _messages(body.get("messages"))
    lp = body.get("logprobs")
    if lp is not None and not isinstance(lp, bool):
        raise APIError("logprobs must be a boolean for chat completions", param="logprobs")
    top = _int_field(body, "top_logprobs", None, 0, 20)
    if top is not None and not lp:
        raise APIError("top_logprobs requires logprobs=true", param="top_logprobs")
    try:
        ids, params = _prepare(model, msgs, params)
    except (TypeError, ValueError) as e:
        raise APIError(str(e), param="messages") from None
    prompts = [ids]
    _fit(prompts, params, n_ctx)
    return Prepared("chat.completion", prompts, params, n, (top or 0) if lp else None, stream, include_usage)


def usage_dict(u):
    return {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
            "total_tokens": u["prompt_tokens"] + u["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": u["cached_tokens"]}}


class ResponseBuilder:
    """Engine events -> OpenAI response dicts: `chunks(events)` (streaming) or `feed(events)` then `final()`."""

    def __init__(self, model, prep):
        self.model, self.prep = model, prep
        self.chat = prep.kind == "chat.completion"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model_name = model_id(model)
        n = len(prep.prompts) * prep.n
        self.texts = [""] * n
        self.lps = [[] for _ in range(n)]
        self.offsets = [0] * n
        self.finish = [None] * n
        self.prompt_lps = [None] * n  # echo with logprobs: the prompt tokens' entries per choice
        self.usage = None
        self.error = None
        self.started = False
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

    def _cmpl_lp(self, entries, index):
        """Completions' logprobs of entries (token_id, logprob, top); the echoed prompt's first token has
        logprob and top None (null, as OpenAI and llama-cpp-python)."""
        d = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for tid, lp, top in entries:
            s, _ = self._tok(tid)
            d["tokens"].append(s)
            d["token_logprobs"].append(None if lp is None else _finite(lp))
            d["top_logprobs"].append(None if top is None else {self._tok(t2)[0]: _finite(lp2) for t2, lp2 in top})
            d["text_offset"].append(self.offsets[index])
            self.offsets[index] += len(s)
        return d

    def _echo_lp(self, i):
        """The echoed prompt's logprobs of choice i (offsets from 0); generated tokens' offsets then start after
        the echoed text."""
        self.offsets[i] = 0
        d = self._cmpl_lp(self.prompt_lps[i], i)
        self.offsets[i] = len(self.prep.echo_texts[i // self.prep.n])
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

    # -- streaming ---------------------------------------------------------------------------------------------

    def chunks(self, events):
        """The chunk dicts for a list of engine events (raises the request's error, if any)."""
        out = []
        for ev in events:
            kind = ev[0]
            if kind == "start":
                self.started = True
                for i in range(len(self.texts)):
                    if self.chat:
                        out.append(self._chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                                                 "logprobs": None, "finish_reason": None}]))
                    elif self.prep.echo_texts and not self.prep.prompt_logprobs:
                        out.append(self._chunk([{"index": i, "text": self.texts[i], "logprobs": None,
                                                 "finish_reason": None}]))
            elif kind == "prompt_logprobs":  # the echo, now with its logprobs
                _, i, entries = ev
                self.prompt_lps[i] = entries
                out.append(self._chunk([{"index": i, "text": self.prep.echo_texts[i // self.prep.n],
                                         "logprobs": self._echo_lp(i), "finish_reason": None}]))
            elif kind == "delta":
                _, i, text, lps = ev
                self.texts[i] += text
                if self.chat:
                    lp = {"content": self._chat_lp(lps), "refusal": None} if lps is not None else None
                    out.append(self._chunk([{"index": i, "delta": {"content": text}, "logprobs": lp,
                                             "finish_reason": None}]))
                else:
                    lp = self._cmpl_lp(lps, i) if lps is not None else None
                    out.append(self._chunk([{"index": i, "text": text, "logprobs": lp, "finish_reason": None}]))
            elif kind == "finish":
                _, i, reason = ev
                self.finish[i] = reason
                if self.chat:
                    out.append(self._chunk([{"index": i, "delta": {}, "logprobs": None, "finish_reason": reason}]))
                else:
                    out.append(self._chunk([{"index": i, "text": "", "logprobs": None, "finish_reason": reason}]))
            elif kind == "done":
                self.usage = usage_dict(ev[1])
                if self.prep.include_usage:
                    c = self._chunk([])
                    c["usage"] = self.usage
                    out.append(c)
            elif kind == "error":
                self.error = ev[1]
                raise ev[1]
        return out

    # -- whole response ----------------------------------------------------------------------------------------

    def feed(self, events):
        for ev in events:
            kind = ev[0]
            if kind == "delta":
                _, i, text, lps = ev
                self.texts[i] += text
                if lps is not None:
                    self.lps[i].extend(lps)
            elif kind == "prompt_logprobs":
                self.prompt_lps[ev[1]] = ev[2]
            elif kind == "finish":
                self.finish[ev[1]] = ev[2]
            elif kind == "done":
                self.usage = usage_dict(ev[1])
            elif kind == "error":
                self.error = ev[1]
                raise ev[1]

    def final(self):
        choices = []
        for i, text in enumerate(self.texts):
            want_lp = self.prep.logprobs is not None
            if self.chat:
                lp = {"content": self._chat_lp(self.lps[i]), "refusal": None} if want_lp else None
                choices.append({"index": i, "message": {"role": "assistant", "content": text}, "logprobs": lp,
                                "finish_reason": self.finish[i]})
            else:
                lp = None
                if want_lp:
                    self.offsets[i] = len(self.prep.echo_texts[i // self.prep.n]) if self.prep.echo_texts else 0
                    head = self._echo_lp(i) if self.prompt_lps[i] is not None else None
                    lp = self._cmpl_lp(self.lps[i], i)
                    if head is not None:
                        lp = {k: head[k] + lp[k] for k in lp}
                choices.append({"index": i, "text": text, "logprobs": lp, "finish_reason": self.finish[i]})
        r = self._head(self.prep.kind if self.chat else "text_completion")
        r["choices"] = choices
        r["usage"] = self.usage
        return r


def _finite(x):
    return x if math.isfinite(x) else -9999.0


# -- in-process API -----------------------------------------------------------------------------------------------

_engine_lock = threading.Lock()


def default_engine(model):
    """The model's own Engine for the in-process API (started on first use; 4 slots of up to 4096 tokens)."""
    with _engine_lock:
        eng = getattr(model, "_api_engine", None)
        if eng is None:
            from fastgguf.server.engine import Engine
            n_ctx = min(int(getattr(model, "n_ctx_train", 0) or 4096), 4096)
            eng = Engine(model, parallel=4, n_ctx=n_ctx)
            model._api_engine = eng
        return eng


def builder(model, prep):
    """The events -> response shaper of a prepared request."""
    return EmbeddingCollector(model, prep) if isinstance(prep, EmbeddingPrepared) else ResponseBuilder(model, prep)


def run(model, prep, engine=None):
    """Submit a prepared request; returns the response dict, or an iterator of chunk dicts when prep.stream."""
    engine = engine or default_engine(model)
    q = queue.SimpleQueue()
    req = prep.request(q.put)
    b = builder(model, prep)
    engine.submit(req)

    if not prep.stream:
        try:
            while b.usage is None:
                b.feed(q.get())
        finally:
            req.cancel()
        return b.final()

    def gen():
        try:
            while b.usage is None:
                yield from b.chunks(q.get())
        finally:
            req.cancel()
    return gen()


def _body(kw, **fields):
    body = {k: v for k, v in kw.items() if v is not None}
    body.update({k: v for k, v in fields.items() if v is not None})
    return body


def create_completion(model, prompt, *, engine=None, **kwargs):
    """OpenAI /v1/completions in-process: keyword arguments are the request's fields (max_tokens, temperature,
    stop, seed, n, logprobs, echo, stream, ...). Returns the response dict, or an iterator of chunks with stream."""
    eng = engine or default_engine(model)
    return run(model, prepare_completion(model, _body(kwargs, prompt=prompt), eng.n_ctx), eng)


def create_chat_completion(model, messages, *, engine=None, **kwargs):
    """OpenAI /v1/chat/completions in-process (see create_completion)."""
    eng = engine or default_engine(model)
    return run(model, prepare_chat(model, _body(kwargs, messages=messages), eng.n_ctx), eng)


def create_embedding(model, input, *, engine=None, **kwargs):
    """OpenAI /v1/embeddings in-process (llama-cpp-python's name): input is a string, a list of strings, token
    ids or lists of token ids; keywords: encoding_format ("float" or "base64"), model, dimensions. Each vector is
    the model's final hidden state (after the output norm, before the lm_head) mean-pooled over the input's
    tokens and L2-normalized. Returns the dict the server sends."""
    eng = engine or default_engine(model)
    return run(model, prepare_embedding(model, _body(kwargs, input=input), eng.n_ctx), eng)


def embed(model, input, *, engine=None):
    """The embedding (a list of floats) of a string or of a list of token ids; for a list of strings (or of id
    lists), a list of them. See create_embedding."""
    r = create_embedding(model, input, engine=engine)
    vecs = [d["embedding"] for d in r["data"]]
    single = isinstance(input, str) or (isinstance(input, list) and input and _is_int(input[0]))
    return vecs[0] if single else vecs
