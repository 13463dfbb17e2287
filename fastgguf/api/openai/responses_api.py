"""OpenAI's Responses API (POST /v1/responses) over the chat completion path: a Responses body becomes a chat body
(to_chat), prepared by protocol.prepare_chat, and the chat builder's chunks become the Responses shapes
(ResponsesBuilder: the event stream, or the response object). One path for both APIs: the same request gives the
same tokens.

Stored responses are not kept: `previous_response_id` (and `conversation`) are refused with a 400 naming the field,
and every response says "store": false. llama-server's telemetry: the stream's completed event carries `timings`;
with `timings_per_token` each delta event too, and with `return_progress` a response.in_progress event carries
`prompt_progress` once the prompt is evaluated. No web framework is imported here.
"""
import time
import uuid
from collections.abc import Mapping

from fastgguf.api.llama import Clock, cached_tokens
from fastgguf.api.openai.protocol import PASSED_FIELDS, APIError, UNSUPPORTED, model_id, prepare_chat
from fastgguf.api.openai.responses import ResponseBuilder, error_body

__all__ = ["to_chat", "prepare_responses", "ResponsesBuilder"]

_REFUSED = ("previous_response_id", "conversation", "prompt", "background")
# the chat field an error names -> the Responses field it came from
_PARAMS = {"messages": "input", "max_tokens": "max_output_tokens", "response_format": "text"}
_ROLES = ("user", "assistant", "system", "developer")


def _text_of(content, where):
    """A message's content (a string or a list of input_text / output_text parts) as one string."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(f"{where}.content must be a string or a list of content parts", param="input")
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            out.append(part["text"])
        elif kind in ("input_image", "input_file", "input_audio"):
            raise APIError(f"{where}.content[{j}]: {kind} parts are {UNSUPPORTED}", param="input",
                           code="unsupported_parameter")
        else:
            raise APIError(f"{where}.content[{j}] must be an input_text part {{'type': 'input_text', 'text': ...}}",
                           param="input")
    return "".join(out)


def _messages(inp, instructions):
    """Responses' instructions + input (a string or a list of items) -> chat messages."""
    msgs = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise APIError("instructions must be a string", param="instructions")
        msgs.append({"role": "system", "content": instructions})
    if isinstance(inp, str):
        return msgs + [{"role": "user", "content": inp}]
    if not isinstance(inp, list) or not inp:
        raise APIError("input must be a string or a non-empty list of items", param="input")
    for i, item in enumerate(inp):
        where = f"input[{i}]"
        if not isinstance(item, Mapping):
            raise APIError(f"{where} must be an object", param="input")
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in _ROLES:
                raise APIError(f"{where}.role must be one of {', '.join(_ROLES)}, got {item.get('role')!r}",
                               param="input")
            msgs.append({"role": item["role"], "content": _text_of(item.get("content"), where)})
        elif kind == "function_call":
            if not all(isinstance(item.get(k), str) for k in ("name", "arguments")) or \
                    not all(isinstance(item.get(k), (str, type(None))) for k in ("call_id", "id")):
                raise APIError(f"{where}: a function_call item needs name and arguments (strings; call_id and id "
                               f"strings when given)", param="input")
            call = {"id": item.get("call_id") or item.get("id") or "", "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if msgs and msgs[-1]["role"] == "assistant":  # one assistant turn: its text and its (parallel) calls
                msgs[-1].setdefault("tool_calls", []).append(call)
            else:
                msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out = item.get("output")
            if not isinstance(item.get("call_id"), str):
                raise APIError(f"{where}: a function_call_output item needs call_id (a string: its call's)",
                               param="input")
            msgs.append({"role": "tool", "tool_call_id": item["call_id"],
                         "content": out if isinstance(out, str) else _text_of(out, where)})
        elif kind == "reasoning":
            continue  # earlier thoughts: chat templates drop them from history too
        else:
            raise APIError(f"{where}: items of type {kind!r} are {UNSUPPORTED}", param="input",
                           code="unsupported_parameter")
    return msgs


def _tools(tools):
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise APIError("tools must be a list of function tools", param="tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping) or t.get("type") != "function":
            raise APIError(f"tools[{i}]: only function tools are supported ({{'type': 'function', 'name': ..., "
                           f"'parameters': ...}}); built-in tools are {UNSUPPORTED}", param="tools",
                           code="unsupported_parameter")
        out.append({"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")
                                                      if t.get(k) is not None}})
    return out


def _tool_choice(choice):
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _format(text):
    """text.format -> the chat body's response_format."""
    if text is None:
        return None
    if not isinstance(text, Mapping):
        raise APIError("text must be an object such as {\"format\": {\"type\": \"json_schema\", ...}}", param="text")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, Mapping):
        raise APIError("text.format must be an object such as {\"type\": \"json_schema\", ...}", param="text")
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {k: fmt[k] for k in ("name", "schema", "strict") if k in fmt}}
    return {"type": fmt.get("type")}


def to_chat(body):
    """A Responses request body -> the chat completion body that runs it."""
    if not isinstance(body, Mapping):
        raise APIError("the request body must be a JSON object")
    for f in _REFUSED:
        if body.get(f) is not None:
            raise APIError(f"{f} is {UNSUPPORTED}: this server keeps no stored responses or conversations; send the "
                           f"whole conversation in input", param=f, code="unsupported_parameter")
    chat = {k: body[k] for k in PASSED_FIELDS if body.get(k) is not None}
    chat["messages"] = _messages(body.get("input"), body.get("instructions"))
    for src, dst in (("model", "model"), ("stream", "stream"), ("max_output_tokens", "max_tokens"),
                     ("parallel_tool_calls", "parallel_tool_calls")):
        if body.get(src) is not None:
            chat[dst] = body[src]
    tools = _tools(body.get("tools"))
    if tools is not None:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    rf = _format(body.get("text"))
    if rf is not None:
        chat["response_format"] = rf
    return chat


def prepare_responses(model, body, n_ctx, *, reasoning_format="parsed"):
    """protocol.prepare_chat of to_chat(body); an error names the Responses field."""
    try:
        return prepare_chat(model, to_chat(body), n_ctx, reasoning_format=reasoning_format)
    except APIError as e:
        e.param = _PARAMS.get(e.param, e.param)
        raise


def _usage(u):
    return {"input_tokens": u["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": u["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens": u["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u["total_tokens"]}


class ResponsesBuilder:
    """The Scheduler's events -> Responses shapes, through the chat builder's chunks: `chunks(events)` gives the
    stream's events (dicts whose "type" is the SSE event name, numbered by sequence_number), `feed(events)` then
    `final()` the response object. Output items open as the reply's parts arrive (reasoning, message text, each
    function call) and close when another part starts or the reply ends."""

    def __init__(self, model, prep, body):
        self.chat = ResponseBuilder(model, prep)
        self.body = body
        self.id = "resp_" + uuid.uuid4().hex
        self.created = int(time.time())
        self.model_name = model_id(model)
        self.seq = 0
        self.output = []      # finished items
        self.item = None      # the open item
        self.finish = None
        self.completed = False
        self.clock = Clock()
        self.per_token = body.get("timings_per_token") is True
        self.progress = body.get("return_progress") is True

    @property
    def usage(self):
        return self.chat.usage

    def _timings(self):
        prep = self.chat.prep
        n = self.usage["completion_tokens"] if self.usage else prep.submitted.completion_tokens
        return self.clock.timings(len(prep.prompts[0]), cached_tokens(prep), n)

    def _first_token(self, out):
        """The first token came (its prompt is evaluated): return_progress's in_progress event."""
        self.clock.token()
        if self.progress:
            prep = self.chat.prep
            out.append(self._ev("response.in_progress", response=self.response(),
                                prompt_progress=self.clock.progress(len(prep.prompts[0]), cached_tokens(prep))))

    def _ev(self, kind, **fields):
        ev = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return ev

    def response(self, status="in_progress"):
        b = self.body
        incomplete = status == "incomplete"
        fmt = b.get("text", {}).get("format") if isinstance(b.get("text"), Mapping) else None
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "error": None, "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
                "instructions": b.get("instructions"), "max_output_tokens": b.get("max_output_tokens"),
                "model": self.model_name, "output": list(self.output) if status != "in_progress" else [],
                "parallel_tool_calls": b.get("parallel_tool_calls", True), "previous_response_id": None,
                "reasoning": {"effort": None, "summary": None}, "store": False,
                "temperature": b.get("temperature"), "top_p": b.get("top_p"),
                "text": {"format": fmt or {"type": "text"}}, "tool_choice": b.get("tool_choice", "auto"),
                "tools": b.get("tools") or [], "truncation": "disabled", "metadata": b.get("metadata") or {},
                "user": b.get("user"), "usage": _usage(self.usage) if self.usage and status != "in_progress" else None}

    # -- items ---------------------------------------------------------------------------------------------------

    def _open(self, kind, out, **item):
        self._close(out)
        prefix = {"reasoning": "rs_", "message": "msg_", "function_call": "fc_"}[kind]
        self.item = dict(id=prefix + uuid.uuid4().hex, type=kind, **item)
        idx = len(self.output)
        added = {k: v for k, v in self.item.items() if k != "text"}  # (text: this builder's own sum so far)
        if kind != "reasoning":
            added["status"] = "in_progress"
        if kind == "message":
            added["content"] = []
        out.append(self._ev("response.output_item.added", output_index=idx, item=added))
        if kind == "message":
            out.append(self._ev("response.content_part.added", item_id=self.item["id"], output_index=idx,
                                content_index=0, part={"type": "output_text", "text": "", "annotations": []}))

    def _close(self, out):
        it, self.item = self.item, None
        if it is None:
            return
        idx, iid = len(self.output), it["id"]
        if it["type"] == "message":
            text = it.pop("text")
            part = {"type": "output_text", "text": text, "annotations": []}
            out.append(self._ev("response.output_text.done", item_id=iid, output_index=idx, content_index=0,
                                text=text, logprobs=[]))
            out.append(self._ev("response.content_part.done", item_id=iid, output_index=idx, content_index=0,
                                part=part))
            it.update(status="completed", role="assistant", content=[part])
        elif it["type"] == "reasoning":
            text = it.pop("text")
            out.append(self._ev("response.reasoning_text.done", item_id=iid, output_index=idx, content_index=0,
                                text=text))
            it.update(summary=[], content=[{"type": "reasoning_text", "text": text}])
        else:
            out.append(self._ev("response.function_call_arguments.done", item_id=iid, output_index=idx,
                                name=it["name"], arguments=it["arguments"]))
            it["status"] = "completed"
        out.append(self._ev("response.output_item.done", output_index=idx, item=it))
        self.output.append(it)

    def _delta(self, delta, out):
        idx = len(self.output)
        if delta.get("reasoning_content"):
            if self.item is None or self.item["type"] != "reasoning":
                self._open("reasoning", out, text="", summary=[])
                idx = len(self.output)
            self.item["text"] += delta["reasoning_content"]
            out.append(self._ev("response.reasoning_text.delta", item_id=self.item["id"], output_index=idx,
                                content_index=0, delta=delta["reasoning_content"]))
        if delta.get("content"):
            if self.item is None or self.item["type"] != "message":
                self._open("message", out, text="", role="assistant")
                idx = len(self.output)
            self.item["text"] += delta["content"]
            out.append(self._ev("response.output_text.delta", item_id=self.item["id"], output_index=idx,
                                content_index=0, delta=delta["content"], logprobs=[]))
        for frag in delta.get("tool_calls") or ():
            if "id" in frag:
                self._open("function_call", out, call_id=frag["id"], name=frag["function"]["name"], arguments="")
                idx = len(self.output)
            args = frag.get("function", {}).get("arguments", "")
            if args:
                self.item["arguments"] += args
                out.append(self._ev("response.function_call_arguments.delta", item_id=self.item["id"],
                                    output_index=idx, delta=args))

    # -- the stream and the whole response -----------------------------------------------------------------------

    def chunks(self, events):
        out = []
        for c in self.chat.chunks(events):
            if not c["choices"]:
                continue
            ch = c["choices"][0]
            if ch["delta"].get("role"):
                out.append(self._ev("response.created", response=self.response()))
                out.append(self._ev("response.in_progress", response=self.response()))
            elif self.clock.t_first is None:
                self._first_token(out)
            n = len(out)
            self._delta(ch["delta"], out)
            if self.per_token and len(out) > n:
                out[-1]["timings"] = self._timings()
            if ch["finish_reason"] is not None:
                self.finish = ch["finish_reason"]
                self._close(out)
        if self.usage is not None and not self.completed:
            self.completed = True
            status = "incomplete" if self.finish == "length" else "completed"
            self.clock.end()
            out.append(self._ev("response." + status, response=self.response(status), timings=self._timings()))
        return out

    def feed(self, events):
        self.chunks(events)

    def final(self):
        return self.response("incomplete" if self.finish == "length" else "completed")

    def error_chunk(self, exc):
        """The stream's `error` event of an exception raised after the stream began."""
        e = error_body(exc)[1]["error"]
        return self._ev("error", code=e["code"], message=e["message"], param=e["param"])
