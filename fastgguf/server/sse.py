"""Server-sent events: the one place that frames a stream (`data: <json>\n\n`, `: ping` comments, `data: [DONE]`;
Ollama's NDJSON: one JSON object a line)."""
import json

from fastapi.responses import StreamingResponse

__all__ = ["data", "typed", "line", "PING", "DONE", "NDJSON", "EventStream"]

PING = ": ping\n\n"       # a comment: keeps a queued request's connection alive, ignored by clients
DONE = "data: [DONE]\n\n"  # OpenAI's end of a stream
NDJSON = "application/x-ndjson"


def data(obj):
    """One event carrying obj as JSON (UTF-8 text as is)."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def line(obj):
    """One line of an NDJSON stream carrying obj (UTF-8 text as is)."""
    return json.dumps(obj, ensure_ascii=False) + "\n"


def typed(obj):
    """One event named by obj's "type" (the Responses and Anthropic streams: `event: <type>` then its data)."""
    return f"event: {obj['type']}\n{data(obj)}"


class EventStream(StreamingResponse):
    """A text/event-stream response (or `media_type`: Ollama's NDJSON) of the strings `content` yields; runs
    `on_close` however it ends (client gone included)."""

    def __init__(self, content, on_close, media_type="text/event-stream", **kw):
        super().__init__(content, media_type=media_type, **kw)
        self.on_close = on_close

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()
