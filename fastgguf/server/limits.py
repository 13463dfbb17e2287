"""Limits applied before any route runs: the API key and the request body's size."""
import hmac

from fastgguf.openai.protocol import APIError
from fastgguf.server.errors import error_response

__all__ = ["Guard", "OPEN_PATHS"]

OPEN_PATHS = ("/health", "/v1/health")  # answered without the API key
DRAIN_LIMIT = 64 << 20  # a declared body above the limit but below this is read and dropped before the 413


async def _drain(receive):
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect" or not msg.get("more_body"):
            return


class Guard:
    """ASGI middleware: API key (hmac.compare_digest) and body size limit (413), before any route runs. The body is
    read here, counted, and replayed to the app."""

    def __init__(self, app, api_key, max_body):
        self.app, self.api_key, self.max_body = app, api_key, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.api_key and scope["path"] not in OPEN_PATHS:
            auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(given.encode(), self.api_key.encode()):
                return await error_response(APIError("Invalid API key. Give it as 'Authorization: Bearer KEY'.",
                                                     status=401, code="invalid_api_key"))(scope, receive, send)
        too_big = error_response(APIError(f"The request body is larger than the limit of {self.max_body} bytes.",
                                          status=413, code="request_too_large"))
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            if int(length) <= DRAIN_LIMIT:  # read (and drop) a moderate body first: a client still sending when
                await _drain(receive)       # the answer comes and the connection closes sees a reset, not the 413
            return await too_big(scope, receive, send)
        if scope["method"] in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            size += len(msg.get("body", b""))
            if size > self.max_body:
                if msg.get("more_body") and size <= DRAIN_LIMIT:
                    await _drain(receive)
                return await too_big(scope, receive, send)
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        return await self.app(scope, replay, send)
