"""Limits applied before any route runs: the Host header, CORS (server/cors.py), the API key, and the request body's
size and time."""
import asyncio
import hmac
import ipaddress
import re

from fastgguf.api.openai.protocol import APIError
from fastgguf.server.errors import error_response

__all__ = ["Guard", "OPEN_PATHS", "bind_hosts", "default_hosts", "host_name", "is_open"]

# answered without the API key: health, and the chat page (server/page.py: "/" and its files under /static/), which
# asks for the key and sends it with the API calls it makes
OPEN_PATHS = ("/health", "/v1/health", "/")
OPEN_PREFIX = "/static/"
DRAIN_LIMIT = 64 << 20  # a body over the limit is read and dropped up to twice the limit, at most this, before the
#                         413 (a client still sending when the answer comes and the connection closes sees a reset,
#                         not the 413); past that (an endless chunked body) the 413 is sent and the connection closed


def default_hosts(bound):
    """The Host names a server bound to address `bound` (several: comma-separated) answers by default: those
    addresses (an IPv6 one in brackets, as a Host header gives it) and the loopback names (a DNS-rebinding page's
    requests carry its own host name, and are refused)."""
    out = [f"[{b}]" if ":" in b and not b.startswith("[") else b for b in bind_hosts(bound)]
    return out + [h for h in ("localhost", "127.0.0.1", "[::1]") if h not in out]


def bind_hosts(host):
    """The addresses of `fastgguf serve --host` (llama-server's: one, or several comma-separated)."""
    return [h.strip() for h in host.split(",") if h.strip()]


# an authority (RFC 3986) as a Host header gives it: a bracketed IPv6 literal, or a host name or IPv4 address (no
# percent-encoding or sub-delimiters: no client needs them), each then only an optional :port
_AUTHORITY = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._~-]+))(?::[0-9]{1,5})?")


def host_name(value):
    """A Host header's name, lower case, without its port ('[::1]:8080' -> '[::1]', 'LocalHost:80' -> 'localhost'),
    or None when the value is not an authority ('[::1].evil.example', 'localhost:x', '::1', '')."""
    m = _AUTHORITY.fullmatch(value.strip().lower())
    if m is None:
        return None
    if m["v6"] is None:
        return m["name"]
    try:
        return f"[{ipaddress.IPv6Address(m['v6']).compressed}]"
    except ValueError:
        return None


def _allowed_name(value):
    """An --allowed-hosts entry's name as host_name gives it (an IPv6 address may come bare: --host ::1)."""
    v = value.strip()
    if v.count(":") > 1 and not v.startswith("["):
        v = f"[{v}]"
    name = host_name(v)
    if name is None:
        raise ValueError(f"allowed host {value!r} is not a host name, an IPv4 address or an [IPv6] address")
    return name


def is_open(path):
    """Whether a request for `path` is answered without the API key."""
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIX)


def _on_loopback(scope):
    """Whether the request's connection arrived on a loopback address or a Unix socket (from this machine):
    scope["server"], the server's end of the connection."""
    server = scope.get("server")
    if not server:
        return False
    if server[1] is None:  # a Unix socket
        return True
    try:
        a = ipaddress.ip_address(str(server[0]).split("%", 1)[0])
    except ValueError:
        return False
    return a.is_loopback or (a.version == 6 and a.ipv4_mapped is not None and a.ipv4_mapped.is_loopback)


class Guard:
    """ASGI middleware, before any route runs: the Host header (allowed_hosts, None or "*" in it: any; 400: a Host
    that is not an allowed name (host_name: an authority, parsed), more than one Host header, or none on a
    connection that did not arrive on a loopback address: an HTTP/1.0 client on this machine may omit it), the API
    key (the Authorization header's Bearer token, else the x-api-key header, against the key's UTF-8 bytes,
    hmac.compare_digest; 401), the body size limit (413) and the time to receive the body (body_timeout seconds;
    408). The body is read here, counted, and replayed to the app. `cors` (a cors.Cors, or None: no CORS headers)
    runs after the Host check and before the key: a browser's preflight carries no key. Errors take the shape of
    the API the path belongs to (errors.error_response)."""

    def __init__(self, app, api_key, max_body, *, allowed_hosts=None, body_timeout=60.0, cors=None):
        self.app, self.max_body, self.body_timeout, self.cors = app, max_body or float("inf"), body_timeout, cors
        self.key = api_key.encode("utf-8") if api_key else None
        hosts = [h.strip() for h in allowed_hosts or ()]
        self.hosts = None if not hosts or "*" in hosts else {_allowed_name(h) for h in hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers, path = dict(scope["headers"]), scope["path"]
        refused = self._host_error(scope) if self.hosts is not None else None
        if refused is not None:
            return await error_response(refused, path)(scope, receive, send)
        if self.cors is not None:
            return await self.cors(scope, receive, send, headers, self._checked)
        return await self._checked(scope, receive, send)

    def _host_error(self, scope):
        """None when the request's Host header is answered, else the APIError (400) that refuses it."""
        given = [v.decode("latin-1") for k, v in scope["headers"] if k == b"host"]
        if len(given) > 1:
            return APIError(f"The request has {len(given)} Host headers; HTTP allows one.", code="invalid_host")
        if not given and _on_loopback(scope):
            return None  # an HTTP/1.0 client on this machine (not a DNS-rebinding page: browsers always send Host)
        if given and host_name(given[0]) in self.hosts:
            return None
        why = (f"The Host header {given[0]!r} is not one this server answers to" if given else
               "The request has no Host header, which a server listening on an address other than loopback needs")
        return APIError(f"{why} (allowed: {', '.join(sorted(self.hosts))}); start it with --allowed-hosts NAME (or "
                        f"'*' for any).", code="invalid_host")

    async def _checked(self, scope, receive, send):
        """The API key, then the body's limits, then the app."""
        headers, path = dict(scope["headers"]), scope["path"]
        if self.key and not is_open(path):
            auth = headers.get(b"authorization", b"")
            # Bearer (OpenAI's clients) or x-api-key (Anthropic's)
            given = auth[7:].strip() if auth[:7].lower() == b"bearer " else headers.get(b"x-api-key", b"").strip()
            if not hmac.compare_digest(given, self.key):
                return await error_response(APIError(
                    "Invalid API key. Give it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'.", status=401,
                    type="authentication_error", code="invalid_api_key"), path)(scope, receive, send)
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
