"""Limits applied before any route runs: the Host header, CORS (server/cors.py), the API key, and the request body's
size and time."""
import asyncio
import hmac

from fastgguf.openai.protocol import APIError
from fastgguf.server.errors import error_response

__all__ = ["Guard", "OPEN_PATHS", "default_hosts"]

OPEN_PATHS = ("/health", "/v1/health")  # answered without the API key
DRAIN_LIMIT = 64 << 20  # a body over the limit is read and dropped up to twice the limit, at most this, before the
#                         413 (a client still sending when the answer comes and the connection closes sees a reset,
#                         not the 413); past that (an endless chunked body) the 413 is sent and the connection closed


def default_hosts(bound):
    """The Host names a server bound to address `bound` answers by default: that address and the loopback names
    (a DNS-rebinding page's requests carry its own host name, and are refused)."""
    return [bound, "localhost", "127.0.0.1", "[::1]"]


def _host_name(value):
    """A Host header's name without its port, lower case ('[::1]:8080' -> '[::1]')."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[:value.find("]") + 1]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """ASGI middleware, before any route runs: the Host header (allowed_hosts, None or "*" in it: any; 400), the API
    key (the Authorization header's Bearer token, else the x-api-key header, against the key's UTF-8 bytes,
    hmac.compare_digest; 401), the body size limit (413) and the time to receive the body (body_timeout seconds;
    408). The body is read here, counted, and replayed to the app. `cors` (a cors.Cors, or None: no CORS headers)
    runs after the Host check and before the key: a browser's preflight carries no key. Errors take the shape of
    the API the path belongs to (errors.error_response)."""

    def __init__(self, app, api_key, max_body, *, allowed_hosts=None, body_timeout=60.0, cors=None):
        self.app, self.max_body, self.body_timeout, self.cors = app, max_body or float("inf"), body_timeout, cors
        self.key = api_key.encode("utf-8") if api_key else None
        hosts = {_host_name(h) for h in allowed_hosts or ()}
        self.hosts = None if not hosts or "*" in hosts else hosts | {h.strip("[]") for h in hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers, path = dict(scope["headers"]), scope["path"]
        host = headers.get(b"host")
        if self.hosts is not None and host is not None and _host_name(host.decode("latin-1")) not in self.hosts:
            return await error_response(APIError(
                f"The Host header {host.decode('latin-1')!r} is not one this server answers to (allowed: "
                f"{', '.join(sorted(self.hosts))}); start it with --allowed-hosts NAME (or '*' for any).",
                code="invalid_host"), path)(scope, receive, send)
        if self.cors is not None:
            return await self.cors(scope, receive, send, headers, self._checked)
        return await self._checked(scope, receive, send)

    async def _checked(self, scope, receive, send):
        """The API key, then the body's limits, then the app."""
        headers, path = dict(scope["headers"]), scope["path"]
        if self.key and path not in OPEN_PATHS:
            auth = headers.get(b"authorization", b"")
            # Bearer (OpenAI's clients) or x-api-key (Anthropic's)
            given = auth[7:].strip() if auth[:7].lower() == b"bearer " else headers.get(b"x-api-key", b"").strip()
            if not hmac.compare_digest(given, self.key):
                return await error_response(APIError(
                    "Invalid API key. Give it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'.", status=401,
                    code="invalid_api_key"), path)(scope, receive, send)
        try:
            body = await asyncio.wait_for(self._read_body(scope, receive, send, headers), self.body_timeout)
        except asyncio.TimeoutError:
            return await error_response(APIError(
                f"The request body was not received within {self.body_timeout:g} s.", status=408,
                code="request_timeout", headers={"Connection": "close"}), path)(scope, receive, send)
        if body is None:  # answered (413) or the client left
            return None
        if scope["method"] in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        return await self.app(scope, replay, send)

    async def _read_body(self, scope, receive, send, headers):
        """The body (bytes), or None once the 413 is sent or the client has left."""
        too_big = error_response(APIError(f"The request body is larger than the limit of {self.max_body} bytes.",
                                          status=413, code="request_too_large", headers={"Connection": "close"}),
                                 scope["path"])
        length = headers.get(b"content-length")
        drain = min(2 * self.max_body, DRAIN_LIMIT)
        if length is not None and length.isdigit() and int(length) > self.max_body:
            if int(length) <= drain:
                await _drain(receive, drain)
            await too_big(scope, receive, send)
            return None
        if scope["method"] in ("GET", "HEAD"):
            return b""
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            size += len(msg.get("body", b""))
            if size > self.max_body:
                if msg.get("more_body"):
                    await _drain(receive, drain - size)
                await too_big(scope, receive, send)
                return None
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                return b"".join(chunks)


async def _drain(receive, limit):
    """Read and drop at most `limit` more bytes of the body (an endless chunked body is not read to its end)."""
    while limit > 0:
        msg = await receive()
        if msg["type"] == "http.disconnect" or not msg.get("more_body"):
            return
        limit -= len(msg.get("body", b""))
