"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) over the chat completion path: a Messages
body becomes a chat body (to_chat), prepared by protocol.prepare_chat, and the chat builder's chunks become
Anthropic's shapes (MessagesBuilder: message_start ... message_stop, or the message object). Errors are Anthropic's
{"type": "error", "error": {"type", "message"}} (error_dict). No web framework is imported here.

Not supported yet: image and document blocks (a 400), prompt caching (cache_control is ignored), a thinking block's
signature (always "").
"""
import json
import uuid
from collections.abc import Mapping

from fastgguf.api.openai.protocol import PASSED_FIELDS, APIError, UNSUPPORTED, model_id, prepare_chat
from fastgguf.engine.scheduler import Finish
from fastgguf.api.openai.responses import ResponseBuilder, error_body

__all__ = ["PATHS", "to_chat", "prepare_messages", "count_tokens", "MessagesBuilder", "error_dict"]

PATHS = ("/v1/messages", "/messages", "/v1/messages/count_tokens", "/messages/count_tokens")
_PARAMS = {"stop": "stop_sequences", "response_format": "output_config"}
# HTTP status -> Anthropic's error type (https://docs.anthropic.com/en/api/errors)
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
          408: "timeout_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}
_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def error_dict(status, body):
    """Anthropic's error body for HTTP `status` and OpenAI's error dict `body` of the same error."""
    return {"type": "error", "error": {"type": _TYPES.get(status, "api_error"), "message": body["error"]["message"]}}


def _text(blocks, where, param):
    """A string, or text blocks joined (images and documents refused)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise APIError(f"{where} must be a string or a list of content blocks", param=param)
    out = []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, Mapping) else None
        if kind == "text" and isinstance(b.get("text"), str):
            out.append(b["text"])
        elif kind in ("image", "document", "search_result"):
            raise APIError(f"{where}[{j}]: {kind} blocks are {UNSUPPORTED} (this server reads text only)",
                           param=param, code="unsupported_parameter")
        else:
            raise APIError(f"{where}[{j}] must be a text block {{'type': 'text', 'text': ...}}, got {kind!r}",
                           param=param)
    return "".join(out)


def _message(m, i):
    """One Anthropic message -> chat messages (a user turn's tool_result blocks become tool messages, before its
    text; an assistant's tool_use blocks its tool_calls; thinking blocks are dropped, as templates drop them)."""
    where = f"messages[{i}]"
    if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant"):
        raise APIError(f"{where} must be an object with role 'user' or 'assistant'", param="messages")
    role, content = m["role"], m.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise APIError(f"{where}.content must be a string or a list of content blocks", param="messages")
    text, calls, results = [], [], []
    for j, b in enumerate(content):
        kind = b.get("type") if isinstance(b, Mapping) else None
        if kind == "tool_use" and role == "assistant":
            calls.append({"id": b.get("id", ""), "type": "function",
                          "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}})
        elif kind == "tool_result" and role == "user":
            c = b.get("content", "")
            results.append({"role": "tool", "tool_call_id": b.get("tool_use_id", ""),
                            "content": _text(c, f"{where}.content[{j}].content", "messages")})
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue
        else:
            text.append(_text([b], f"{where}.content", "messages"))
    out = results
    if calls:
        out.append({"role": role, "content": "".join(text) or None, "tool_calls": calls})
    elif text or not results:
        out.append({"role": role, "content": "".join(text)})
    return out


def _tools(tools):
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise APIError("tools must be a list of {'name', 'description', 'input_schema'} objects", param="tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping) or t.get("type") not in (None, "custom") or "input_schema" not in t:
            raise APIError(f"tools[{i}]: only custom tools {{'name', 'description', 'input_schema'}} are supported; "
                           f"server tools are {UNSUPPORTED}", param="tools", code="unsupported_parameter")
        fn = {"name": t.get("name"), "parameters": t["input_schema"]}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice, chat):
    if choice is None:
        return
    if not isinstance(choice, Mapping) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise APIError("tool_choice must be {'type': 'auto' | 'any' | 'tool' | 'none'}", param="tool_choice")
    kind = choice["type"]
    chat["tool_choice"] = ({"type": "function", "function": {"name": choice.get("name")}} if kind == "tool" else
                           {"any": "required"}.get(kind, kind))
    no_parallel = choice.get("disable_parallel_tool_use")
    if no_parallel is not None:
        if not isinstance(no_parallel, bool):
            raise APIError("tool_choice.disable_parallel_tool_use must be a boolean", param="tool_choice")
        chat["parallel_tool_calls"] = not no_parallel


def to_chat(body, *, count=False):
    """A Messages request body -> the chat completion body that runs it (count: a count_tokens body, which has no
    max_tokens)."""
    if not isinstance(body, Mapping):
        raise APIError("the request body must be a JSON object")
    chat = {k: body[k] for k in PASSED_FIELDS if body.get(k) is not None}
    msgs = []
    if body.get("system") is not None:
        msgs.append({"role": "system", "content": _text(body["system"], "system", "system")})
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError("messages must be a non-empty list", param="messages")
    for i, m in enumerate(messages):
        msgs += _message(m, i)
    chat["messages"] = msgs
    if not count:
        mt = body.get("max_tokens")
        if mt is None:
            raise APIError("max_tokens is required", param="max_tokens")
        chat["max_tokens"] = mt
    if body.get("model") is not None:
        chat["model"] = body["model"]
    if body.get("stream") is not None:
        chat["stream"] = body["stream"]
    stops = body.get("stop_sequences")
    if stops is not None:  # a list of strings (a string is not one: OpenAI's `stop` takes either, Anthropic's not)
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise APIError("stop_sequences must be a list of strings", param="stop_sequences")
        chat["stop"] = stops
    tools = _tools(body.get("tools"))
    if tools is not None:
        chat["tools"] = tools
    _tool_choice(body.get("tool_choice"), chat)
    config = body.get("output_config")
    if config is not None and not isinstance(config, Mapping):
        raise APIError("output_config must be an object such as {'format': {'type': 'json_schema', ...}}",
                       param="output_config")
    fmt = (config or {}).get("format")
    if fmt is not None:  # structured output: {"type": "json_schema", "schema": {...}}
        if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
            raise APIError("output_config.format must be {'type': 'json_schema', 'schema': {...}}",
                           param="output_config")
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output",
                                                                          "schema": fmt.get("schema")}}
    thinking = body.get("thinking")
    if thinking is not None:
        kind = thinking.get("type") if isinstance(thinking, Mapping) else None
        if kind not in ("enabled", "disabled", "adaptive"):
            raise APIError("thinking must be {'type': 'enabled', 'budget_tokens': N} or {'type': 'disabled'}",
                           param="thinking")
        chat["reasoning_format"] = "none" if kind == "disabled" else "parsed"
    return chat


def prepare_messages(model, body, n_ctx, *, reasoning_format="parsed", count=False):
    """protocol.prepare_chat of to_chat(body); an error names the Messages field."""
    try:
        return prepare_chat(model, to_chat(body, count=count), n_ctx, reasoning_format=reasoning_format)
    except APIError as e:
        e.param = _PARAMS.get(e.param, e.param)
        raise


def count_tokens(model, body, n_ctx, *, reasoning_format="parsed"):
    """/v1/messages/count_tokens: the rendered prompt's tokens, {"input_tokens": N}."""
    prep = prepare_messages(model, body, n_ctx, reasoning_format=reasoning_format, count=True)
    return {"input_tokens": len(prep.prompts[0])}


def _usage(u):
    return {"input_tokens": u["prompt_tokens"], "output_tokens": u["completion_tokens"],
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": u["prompt_tokens_details"]["cached_tokens"]}


class MessagesBuilder:
    """The Scheduler's events -> Anthropic shapes, through the chat builder's chunks: `chunks(events)` gives the
    stream's events (dicts whose "type" is the SSE event name), `feed(events)` then `final()` the message. A block
    opens as the reply's parts arrive (thinking, text, each tool_use) and closes when another starts or the reply
    ends."""

    def __init__(self, model, prep, stop_sequences=()):
        self.chat = ResponseBuilder(model, prep)
        self.stop_sequences = stop_sequences or ()  # the request's own (the template may add stops of its own)
        self.stop_sequence = None
        self.id = "msg_" + uuid.uuid4().hex
        self.model_name = model_id(model)
        self.n_prompt = len(prep.prompts[0])
        self.content = []     # the blocks, the open one last
        self.open = False
        self.stop = None
        self.completed = False

    @property
    def usage(self):
        return self.chat.usage

    def message(self, stop=None, usage=None):
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model_name,
                "content": self.content if stop else [], "stop_reason": stop,
                "stop_sequence": self.stop_sequence if stop else None,
                "usage": usage or {"input_tokens": self.n_prompt, "output_tokens": 0}}

    def _open(self, block, out):
        self._close(out)
        self.content.append(block)
        self.open = True
        start = dict(block, input={}) if block["type"] == "tool_use" else dict(block)
        out.append({"type": "content_block_start", "index": len(self.content) - 1, "content_block": start})

    def _close(self, out):
        if not self.open:
            return
        self.open = False
        b = self.content[-1]
        if b["type"] == "tool_use":
            args = b.pop("arguments")
            try:
                b["input"] = json.loads(args) if args else {}
            except ValueError:
                b["input"] = {}
        out.append({"type": "content_block_stop", "index": len(self.content) - 1})

    def _add(self, kind, key, text, out):
        if not (self.open and self.content[-1]["type"] == kind):
            self._open({"type": kind, key: "", **({"signature": ""} if kind == "thinking" else {})}, out)
        self.content[-1][key] += text
        out.append({"type": "content_block_delta", "index": len(self.content) - 1,
                    "delta": {"type": f"{kind}_delta", key: text}})

    def chunks(self, events):
        out = []
        for ev in events:
            if isinstance(ev, Finish) and ev.stop in self.stop_sequences:
                self.stop_sequence = ev.stop
        for c in self.chat.chunks(events):
            if not c["choices"]:
                continue
            ch = c["choices"][0]
            d = ch["delta"]
            if d.get("role"):
                out.append({"type": "message_start", "message": self.message()})
            if d.get("reasoning_content"):
                self._add("thinking", "thinking", d["reasoning_content"], out)
            if d.get("content"):
                self._add("text", "text", d["content"], out)
            for frag in d.get("tool_calls") or ():
                if "id" in frag:
                    self._open({"type": "tool_use", "id": frag["id"], "name": frag["function"]["name"],
                                "arguments": ""}, out)
                args = frag.get("function", {}).get("arguments", "")
                if args:
                    self.content[-1]["arguments"] += args
                    out.append({"type": "content_block_delta", "index": len(self.content) - 1,
                                "delta": {"type": "input_json_delta", "partial_json": args}})
            if ch["finish_reason"] is not None:
                self.stop = "stop_sequence" if self.stop_sequence else _STOP.get(ch["finish_reason"], "end_turn")
                self._close(out)
        if self.usage is not None and not self.completed:
            self.completed = True
            out.append({"type": "message_delta", "delta": {"stop_reason": self.stop,
                                                           "stop_sequence": self.stop_sequence},
                        "usage": {"output_tokens": self.usage["completion_tokens"]}})
            out.append({"type": "message_stop"})
        return out

    def feed(self, events):
        self.chunks(events)

    def final(self):
        return self.message(self.stop, _usage(self.usage))

    def error_chunk(self, exc):
        """The stream's `error` event of an exception raised after the stream began."""
        status, body, _ = error_body(exc)
        return error_dict(status, body)
