"""CORS for browser clients, applied by limits.Guard after the Host check and before the API key.

Which origins a page may call from (`--cors-origins`), as llama-server decides it:
- default (None): with an API key, any page, its origin reflected with credentials (llama-server's default: the key
  is what protects the server, and a page must have it); without a key, `localhost` (llama-server's default there
  is any page too, which it warns about: any site the user visits could use the server);
- "localhost": pages on this machine, any scheme and port (http://localhost, https://127.0.0.1:8443,
  http://[::1]): the origin is reflected, without credentials;
- a list of origins ("https://app.example.com,http://localhost:3000"): those, reflected, with credentials
  ("localhost" may be one of them);
- "*": any page (Access-Control-Allow-Origin: *, never with credentials);
- "" (an empty list): none.
A page of the server itself (its /docs: Origin = the Host header) is always allowed.

A preflight (OPTIONS with Origin and Access-Control-Request-Method) carries no API key: it is answered 200 with an
empty body, as by llama-server; an allowed origin's with the methods and headers (Authorization, Content-Type,
x-api-key and those asked for: a wildcard `*` would not cover Authorization, Fetch standard), a refused origin's
without any CORS header (the browser then refuses the real request). A real request from a refused origin is
refused (403), so a page cannot make the server work for it with a "simple" request (one that needs no preflight)
even when it cannot read the answer; the real request still needs the API key and an allowed Host. Requests
without an Origin header (every non-browser client) are untouched.
"""
import re

from fastgguf.api.openai.protocol import APIError
from fastgguf.server.errors import error_response

__all__ = ["Cors", "is_local"]

LOCAL = re.compile(r"^[a-z][a-z0-9+.-]*://(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?$")
METHODS = "GET, POST, DELETE, OPTIONS"
HEADERS = ("authorization", "content-type", "x-api-key")
MAX_AGE = "600"


def is_local(origin):
    """Whether an Origin (lower case) is a page on this machine: localhost, 127.0.0.1 or [::1], any scheme or port."""
    return bool(LOCAL.match(origin))


class Cors:
    """`Cors(origins, keyed)` (see the module's docstring; keyed: the server has an API key), called around the app
    by limits.Guard."""

    def __init__(self, origins=None, keyed=False):
        self.reflect_any = origins is None and keyed
        if origins is None:
            origins = [] if keyed else ["localhost"]
        elif isinstance(origins, str):
            origins = [o for o in (x.strip() for x in origins.split(",")) if o]
        origins = {o.rstrip("/").lower() for o in origins}
        self.any, self.local = "*" in origins, "localhost" in origins
        self.listed = origins - {"*", "localhost"}

    def _allowed(self, origin, host):
        """(allowed, with credentials) for a request's Origin (lower case) and Host header."""
        if origin in (f"http://{host}", f"https://{host}"):
            return True, False  # the server's own pages
        if self.reflect_any or origin in self.listed:
            return True, True
        if self.local and is_local(origin):
            return True, False
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
        if scope["method"] == "OPTIONS" and b"access-control-request-method" in headers:
            return await _preflight(send, cors, headers)
        if cors is None:
            return await error_response(APIError(
                f"Cross-origin requests from {origin!r} are not allowed; start the server with --cors-origins "
                f"{origin} to allow them.", status=403, code="origin_not_allowed"), scope["path"])(scope, receive, send)

        async def send_with_cors(msg):
            if msg["type"] == "http.response.start":
                msg = dict(msg, headers=list(msg.get("headers", [])) + cors)
            await send(msg)
        return await next_app(scope, receive, send_with_cors)


async def _preflight(send, cors, headers):
    """The answer to a preflight: 200, empty; with the CORS headers `cors` (None: a refused origin, none)."""
    out = [(b"content-length", b"0")]
    if cors is not None:
        asked = headers.get(b"access-control-request-headers", b"").decode("latin-1").lower()
        allow = list(HEADERS) + [h for h in (x.strip() for x in asked.split(",")) if h and h not in HEADERS]
        out += cors + [(b"access-control-allow-methods", METHODS.encode()),
                       (b"access-control-allow-headers", ", ".join(allow).encode("latin-1")),
                       (b"access-control-max-age", MAX_AGE.encode())]
    await send({"type": "http.response.start", "status": 200, "headers": out})
    await send({"type": "http.response.body", "body": b""})
