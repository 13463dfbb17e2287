"""Ollama's API over the same engine: Ollama request bodies -> OpenAI bodies (then protocol.prepare_*), and the OpenAI
chunks of responses.ResponseBuilder -> Ollama's NDJSON lines.

    body, mode = chat_body(ollama_body, model)   # an OpenAI chat body: protocol.prepare_chat takes it
    prep = prepare_chat(model, ollama_body, n_ctx)   # both steps (prepare_generate, prepare_embed)
    shape = Shaper(model, chat=True, message=True)   # then shape.lines(openai_chunks) ... shape.final(...)
    Reply(model, prep, shape, t_received)        # the builder the server's routes.respond drives (EmbedReply)

Translating into the OpenAI body (rather than a second prepare_*) keeps one owner per fact: the sampling fields are
still validated by SamplingParams, the template, tools and reasoning by prepare_chat, so the same greedy request gives
the same tokens through either API. Every Ollama field is either mapped, accepted and ignored (IGNORED_OPTIONS,
keep_alive, num_ctx beyond the server's context), or refused with an APIError naming it. No web framework here.
"""
import datetime
import json
import time
from collections.abc import Mapping

from fastgguf.engine.scheduler import Start
from fastgguf.gguf.constants import GGMLType
from fastgguf.api.openai import protocol
from fastgguf.api.openai.protocol import UNSUPPORTED, APIError, model_id
from fastgguf.api.openai.protocol import check_model as check_openai_model
from fastgguf.api.openai.responses import builder, error_body

__all__ = ["chat_body", "generate_body", "embed_body", "prepare_chat", "prepare_generate", "prepare_embed", "Shaper",
           "Reply", "EmbedReply", "check_model", "check_show", "error_dict", "error_status", "details", "PREFIX",
           "OPTION_FIELDS", "IGNORED_OPTIONS"]

PREFIX = "/api"  # Ollama's routes: errors under it take Ollama's shape (error_status, error_dict)

# options.<name> -> the OpenAI body field it sets (SamplingParams validates the values)
OPTION_FIELDS = {"num_predict": "max_tokens", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                 "min_p": "min_p", "seed": "seed", "stop": "stop", "repeat_penalty": "repeat_penalty",
                 "repeat_last_n": "repeat_last_n", "presence_penalty": "presence_penalty",
                 "frequency_penalty": "frequency_penalty"}
# accepted and ignored: runtime settings the server owns (threads, context, batch, memory) or samplers fastgguf does
# not have (a client's defaults send some of them on every request, so refusing them would break it)
IGNORED_OPTIONS = frozenset({"num_ctx", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv", "logits_all",
                             "vocab_only", "use_mmap", "use_mlock", "embedding_only", "num_thread", "numa",
                             "num_keep", "tfs_z", "typical_p", "mirostat", "mirostat_tau", "mirostat_eta",
                             "penalize_newline"})


def _object(body):
    """The request body, which must be a JSON object (a Mapping)."""
    if not isinstance(body, Mapping):
        raise APIError("the request body must be a JSON object")
    return body


def check_model(body, model):
    """The Ollama body (a JSON object) must name this model in `model`: its id, the id with .gguf, or either with
    Ollama's default tag ":latest" (what Ollama adds to a name without a tag). Missing: Ollama refuses, so does
    this."""
    name = _object(body).get("model")
    if not isinstance(name, str) or not name:
        raise APIError("model is required", param="model")
    base = name[:-len(":latest")] if name.endswith(":latest") else name
    try:
        check_openai_model({"model": base}, model)
    except APIError:
        raise APIError(f"model '{name}' not found", status=404, param="model") from None


def check_show(body, model):
    """/api/show's body must name this model (check_model) in `model`, or in `name`: older clients' field, which
    Ollama still takes when `model` is empty."""
    body = _object(body)
    if not body.get("model") and body.get("name") is not None:
        body = {"model": body["name"]}
    check_model(body, model)


def _options(body):
    opts = body.get("options") or {}
    if not isinstance(opts, Mapping):
        raise APIError("options must be an object", param="options")
    out = {}
    for k, v in opts.items():
        if k in OPTION_FIELDS:
            if k == "num_predict" and isinstance(v, int) and not isinstance(v, bool) and v < 0:
                v = None  # -1: no limit, -2: fill the context: both until end of generation or a full context
            out[OPTION_FIELDS[k]] = v  # (there is no context shift), as _defaults tells prepare_*
        elif k not in IGNORED_OPTIONS:
            raise APIError(f"options.{k} is {UNSUPPORTED}", param="options")
    return out


def _format(fmt):
    """Ollama's format: "json" (any JSON value... Ollama means an object) or a JSON Schema -> response_format."""
    if fmt in (None, ""):
        return None
    if fmt == "json":
        return {"type": "json_object"}
    if isinstance(fmt, Mapping):
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": dict(fmt), "strict": True}}
    raise APIError("format must be \"json\" or a JSON Schema object", param="format")


def _think(body):
    """Ollama's think (true, false, or a level "low" / "medium" / "high") -> reasoning_format: thoughts in
    message.thinking ("parsed"), or not asked for where the template allows and dropped ("none")."""
    think = body.get("think")
    if think is None or think is True or think in ("low", "medium", "high"):
        return "parsed"
    if think is False:
        return "none"
    raise APIError("think must be true, false, \"low\", \"medium\" or \"high\"", param="think")


def _common(body, model):
    check_model(body, model)
    stream = body.get("stream", True)  # Ollama streams unless told not to
    if not isinstance(stream, bool):
        raise APIError("stream must be a boolean", param="stream")
    if body.get("images"):
        raise APIError(f"images are {UNSUPPORTED}", param="images")
    out = {"stream": stream, **_options(body)}
    rf = _format(body.get("format"))
    if rf is not None:
        out["response_format"] = rf
    return out


def _message(i, m):
    """An Ollama chat message -> an OpenAI one: tool_calls' arguments objects kept (prepare_chat takes objects),
    a tool result's tool_name kept as `name`."""
    if not isinstance(m, Mapping):
        raise APIError(f"messages[{i}] must be an object", param="messages")
    if m.get("images"):
        raise APIError(f"messages[{i}].images: images are {UNSUPPORTED}", param="messages")
    out = {"role": m.get("role"), "content": m.get("content", "")}
    calls = m.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise APIError(f"messages[{i}].tool_calls must be a list", param="messages")
        out["tool_calls"] = [{"id": c.get("id") or f"call_{i}_{j}", "type": "function",
                              "function": c.get("function")} if isinstance(c, Mapping) else c
                             for j, c in enumerate(calls)]
    if m.get("tool_name") is not None:
        out["name"] = m["tool_name"]
    return out


def chat_body(body, model):
    """/api/chat -> (an OpenAI chat body, its reasoning_format)."""
    out = _common(body, model)
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise APIError("messages must be a non-empty list", param="messages")
    out["messages"] = [_message(i, m) for i, m in enumerate(msgs)]
    if body.get("tools"):
        out["tools"] = body["tools"]
    return out, _think(body)


def generate_body(body, model):
    """/api/generate -> (kind, OpenAI body, reasoning_format): the prompt through the chat template as a user
    message (with `system` before it), as Ollama does; raw=true: the prompt as is, a completion. An empty prompt is
    kind "load" (Ollama answers done_reason "load")."""
    out = _common(body, model)
    for field in ("suffix", "context", "template"):
        if body.get(field):
            raise APIError(f"{field} is {UNSUPPORTED}", param=field)
    prompt = body.get("prompt") or ""
    if not isinstance(prompt, str):
        raise APIError("prompt must be a string", param="prompt")
    if not prompt:
        return "load", out, None
    raw = body.get("raw")
    if raw is not None and not isinstance(raw, bool):
        raise APIError("raw must be a boolean", param="raw")
    if raw:
        out["prompt"] = prompt
        return "completion", out, None
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise APIError("system must be a string", param="system")
    out["messages"] = ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": prompt}]
    return "chat", out, _think(body)


def embed_body(body, model, legacy=False):
    """/api/embed (input: a string or a list of strings) or the legacy /api/embeddings (prompt: a string) -> an
    OpenAI embeddings body. A too-long input is refused (truncate is not done: truncate=true is accepted and
    ignored, like a too-long input under truncate=false)."""
    check_model(body, model)
    _options(body)  # checked; none of them applies to an embedding
    inp = body.get("prompt") if legacy else body.get("input")
    field = "prompt" if legacy else "input"
    if not (isinstance(inp, str) or (not legacy and isinstance(inp, list) and inp
                                     and all(isinstance(s, str) for s in inp))):
        raise APIError(f"{field} must be a string" + ("" if legacy else " or a non-empty list of strings"),
                       param=field)
    out = {"input": inp}
    if body.get("dimensions") is not None:
        out["dimensions"] = body["dimensions"]
    return out


def _defaults(out):
    """protocol.prepare_*'s `defaults` for an OpenAI body made here: its max_tokens None (a negative num_predict) is
    no limit, where an OpenAI body's null means the server's default (SamplingParams': 256 tokens)."""
    return {"max_tokens": None} if "max_tokens" in out and out["max_tokens"] is None else None


def prepare_chat(model, body, n_ctx):
    """/api/chat's body -> protocol.prepare_chat's Prepared."""
    out, mode = chat_body(body, model)
    return protocol.prepare_chat(model, out, n_ctx, reasoning_format=mode, defaults=_defaults(out))


def prepare_generate(model, body, n_ctx):
    """/api/generate's body -> (kind, Prepared): kind "chat" (the prompt through the template), "completion" (raw)
    or "load" (no prompt: Prepared None)."""
    kind, out, mode = generate_body(body, model)
    if kind == "chat":
        return kind, protocol.prepare_chat(model, out, n_ctx, reasoning_format=mode, defaults=_defaults(out))
    if kind == "completion":
        return kind, protocol.prepare_completion(model, out, n_ctx, defaults=_defaults(out))
    return kind, None


def prepare_embed(model, body, n_ctx, legacy=False):
    """/api/embed's body (legacy: /api/embeddings') -> protocol.prepare_embedding's EmbeddingPrepared."""
    return protocol.prepare_embedding(model, embed_body(body, model, legacy), n_ctx)


def error_dict(exc_body):
    """Ollama's error body {"error": message} of OpenAI's {"error": {"message", ...}}."""
    return {"error": exc_body["error"]["message"]}


def error_status(status):
    """Ollama's HTTP status of an error: OpenAI's, except a full queue (429): 503, Ollama's "server busy"."""
    return 503 if status == 429 else status


def now():
    """Ollama's created_at: RFC 3339 in UTC with nanoseconds' worth of digits."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _size(n):
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def details(model):
    """Ollama's `details` of a model: format, family (the architecture), parameter_size, quantization_level (the
    type holding the most weight bytes)."""
    by_type = {}
    for t in model.file.tensors.values():
        by_type[t.type] = by_type.get(t.type, 0) + t.nbytes
    main = max(by_type, key=by_type.get) if by_type else None
    arch = model.hparams.arch
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch],
            "parameter_size": _size(sum(t.n_elements for t in model.file.tensors.values())),
            "quantization_level": GGMLType(main).name if main is not None else ""}


def _ns(seconds):
    return max(int(seconds * 1e9), 0)


class Shaper:
    """OpenAI chat (`chat`) or completion chunks (responses.ResponseBuilder) -> Ollama's lines: /api/chat's
    {"message": {...}} (`message`) or /api/generate's {"response": ...}, each with model, created_at and done; the
    last line has done_reason and the timings (nanoseconds). Tool calls go out whole (arguments an object), in the
    line where their choice finishes, as Ollama sends them."""

    def __init__(self, model, chat, message):
        self.model, self.chat, self.message = model_id(model), chat, message
        self.calls = {}  # tool call index -> {"name", "arguments" text so far}

    def _line(self, content="", thinking="", calls=None, done=False):
        line = {"model": self.model, "created_at": now()}
        if self.message:
            msg = {"role": "assistant", "content": content}
            if thinking:
                msg["thinking"] = thinking
            if calls:
                msg["tool_calls"] = calls
            line["message"] = msg
        else:
            line["response"] = content
            if thinking:
                line["thinking"] = thinking
        line["done"] = done
        return line

    def _finished_calls(self):
        calls = []
        for _, c in sorted(self.calls.items()):
            try:
                args = json.loads(c["arguments"] or "{}")
            except ValueError:
                args = {}
            calls.append({"function": {"name": c["name"], "arguments": args}})
        self.calls = {}
        return calls

    def lines(self, chunks):
        """The Ollama lines (dicts) of OpenAI chunks; the final line comes from final()."""
        out = []
        for c in chunks:
            for ch in c.get("choices", ()):
                if self.chat:
                    d = ch.get("delta", {})
                    for frag in d.get("tool_calls") or ():
                        call = self.calls.setdefault(frag["index"], {"name": "", "arguments": ""})
                        fn = frag.get("function") or {}
                        call["name"] = fn.get("name") or call["name"]
                        call["arguments"] += fn.get("arguments") or ""
                    content, thinking = d.get("content") or "", d.get("reasoning_content") or ""
                else:
                    content, thinking = ch.get("text") or "", ""
                calls = self._finished_calls() if ch.get("finish_reason") and self.calls else None
                if content or thinking or calls:
                    out.append(self._line(content, thinking, calls))
        return out

    def whole(self, response):
        """The one line of a non-streamed OpenAI response (its choice 0), before final() adds the ending."""
        ch = response["choices"][0]
        if not self.chat:
            return self._line(ch["text"])
        m = ch["message"]
        calls = [{"function": {"name": c["function"]["name"], "arguments": _args(c["function"]["arguments"])}}
                 for c in m.get("tool_calls") or ()]
        return self._line(m.get("content") or "", m.get("reasoning_content") or "", calls)

    def final(self, finish_reason, usage, t_received, t_submit, t_first, t_done, line=None):
        """The last line: `line` (a whole response's) or an empty one, with done, done_reason and the timings:
        total (received -> done), load 0 (the model was loaded when the server started), prompt_eval (submitted
        -> first token, queueing included), eval (first token -> done); prompt_eval_count counts the whole
        prompt, cached tokens included."""
        line = line or self._line()
        t_first = t_first or t_done
        line.update(done=True, done_reason="length" if finish_reason == "length" else "stop",
                    total_duration=_ns(t_done - t_received), load_duration=0,
                    prompt_eval_count=usage["prompt_tokens"], prompt_eval_duration=_ns(t_first - t_submit),
                    eval_count=usage["completion_tokens"], eval_duration=_ns(t_done - t_first))
        return line


class Reply:
    """The builder routes.respond drives for /api/chat and /api/generate: the Scheduler's events -> the OpenAI
    builder's chunks -> the Shaper's lines, the last one (done, done_reason, timings) when the request is done;
    or feed(events) then final(), the whole reply. Made just before the request is submitted: that is its
    t_submit; its first token is the first event other than Start; t_received is when the route began."""

    def __init__(self, model, prep, shaper, t_received):
        self.b, self.shaper, self.t_received = builder(model, prep), shaper, t_received
        self.t_submit, self.t_first = time.perf_counter(), None

    @property
    def usage(self):
        return self.b.usage

    def _arrived(self, events):
        if self.t_first is None and any(not isinstance(ev, Start) for ev in events):
            self.t_first = time.perf_counter()

    def _last(self, line=None):
        return self.shaper.final(self.b.finish[0], self.b.usage, self.t_received, self.t_submit, self.t_first,
                                 time.perf_counter(), line)

    def chunks(self, events):
        self._arrived(events)
        out = self.shaper.lines(self.b.chunks(events))
        return out + [self._last()] if self.usage is not None else out

    def feed(self, events):
        self._arrived(events)
        self.b.feed(events)

    def final(self):
        return self._last(self.shaper.whole(self.b.final()))

    def error_chunk(self, exc):
        """The line that ends a stream on an error after it began."""
        return error_dict(error_body(exc)[1])


class EmbedReply:
    """The builder routes.respond drives for /api/embed (or the legacy /api/embeddings): feed(events), then
    final(), Ollama's body of the OpenAI embeddings."""

    def __init__(self, model, prep, legacy, t_received):
        self.b, self.model, self.legacy, self.t_received = builder(model, prep), model, legacy, t_received

    @property
    def usage(self):
        return self.b.usage

    def feed(self, events):
        self.b.feed(events)

    def final(self):
        vectors = [v["embedding"] for v in self.b.final()["data"]]
        if self.legacy:
            return {"embedding": vectors[0]}
        return {"model": model_id(self.model), "embeddings": vectors,
                "total_duration": _ns(time.perf_counter() - self.t_received), "load_duration": 0,
                "prompt_eval_count": self.usage["prompt_tokens"]}


def _args(text):
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}
