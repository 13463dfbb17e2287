"""CORS for browser clients, applied by limits.Guard after the Host check and before the API key.

Which origins a page may call from (`--cors-origins`):
- default (None): pages on this machine, http://localhost, http://127.0.0.1 and http://[::1] on any port: the
  origin is reflected, without credentials;
- a list of origins ("https://app.example.com,http://localhost:3000"): those, reflected, with credentials;
- "*": any page (Access-Control-Allow-Origin: *, never with credentials);
- "" (an empty list): none.
A page of the server itself (its /docs: Origin = the Host header) is always allowed.

A preflight (OPTIONS with Origin and Access-Control-Request-Method) carries no API key: an allowed origin's is
answered 204 with the methods and headers (Authorization, Content-Type, x-api-key and those asked for), a refused
origin's 403. A real request from a refused origin is refused too (403), so a page cannot make the server work
for it even when it cannot read the answer; the real request still needs the API key and an allowed Host. Requests
without an Origin header (every non-browser client) are untouched.
"""
import re

from fastgguf.api.openai.protocol import APIError
from fastgguf.server.errors import error_response

__all__ = ["Cors"]

LOCAL = re.compile(r"^http://(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?$")
METHODS = "GET, POST, OPTIONS"
HEADERS = ("authorization", "content-type", "x-api-key")
MAX_AGE = "600"


class Cors:
    """`Cors(origins)` (see the module's docstring); `origin_of(scope)`, then `preflight` / `send` around the app."""

    def __init__(self, origins=None):
        if isinstance(origins, str):
            origins = [o for o in (x.strip() for x in origins.split(",")) if o]
        self.any = origins is not None and "*" in origins
        self.listed = None if origins is None else {o.rstrip("/").lower() for o in origins if o != "*"}

    def _allowed(self, origin, host):
        """(allowed, with credentials) for a request's Origin (lower case) and Host header."""
        if origin in (f"http://{host}", f"https://{host}"):
            return True, False  # the server's own pages
        if self.listed is None:
            return bool(LOCAL.match(origin)), False
        if origin in self.listed:
            return True, True
        return self.any, False

    def headers(self, origin, host):
        """The response headers for `origin` (a list of (bytes, bytes)), or None when it is refused."""
        ok, credentials = self._allowed(origin, host)
        if not ok:
            return None
        if self.any and not credentials:
            return [(b"access-control-allow-origin", b"*")]
        out = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
        if credentials:
            out.append((b"access-control-allow-credentials", b"true"))
        return out

    async def __call__(self, scope, receive, send, headers, next_app):
        """Answer a preflight, refuse a refused origin, or run next_app with the CORS headers added to its
        response. `headers`: the request's headers (a dict of lower-case bytes)."""
        origin = headers.get(b"origin")
        if origin is None:
            return await next_app(scope, receive, send)
        origin = origin.decode("latin-1").strip().lower()
        cors = self.headers(origin, headers.get(b"host", b"").decode("latin-1").strip().lower())
        if cors is None:
            return await error_response(APIError(
                f"Cross-origin requests from {origin!r} are not allowed; start the server with --cors-origins "
                f"{origin} to allow them.", status=403, code="origin_not_allowed"), scope["path"])(scope, receive, send)
        if scope["method"] == "OPTIONS" and b"access-control-request-method" in headers:
            asked = headers.get(b"access-control-request-headers", b"").decode("latin-1").lower()
            allow = list(HEADERS) + [h for h in (x.strip() for x in asked.split(",")) if h and h not in HEADERS]
            await send({"type": "http.response.start", "status": 204, "headers": cors + [
                (b"access-control-allow-methods", METHODS.encode()),
                (b"access-control-allow-headers", ", ".join(allow).encode("latin-1")),
                (b"access-control-max-age", MAX_AGE.encode())]})
            return await send({"type": "http.response.body", "body": b""})

        async def send_with_cors(msg):
            if msg["type"] == "http.response.start":
                msg = dict(msg, headers=list(msg.get("headers", [])) + cors)
            await send(msg)
        return await next_app(scope, receive, send_with_cors)
