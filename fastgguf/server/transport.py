"""Serving the app over HTTP with uvicorn, and the connection limits uvicorn does not have.

uvicorn closes a keep-alive connection that stays idle `timeout_keep_alive` seconds after a response, but it has no
limit on the time a client may take to send a request's headers: a connection that never sends a byte, or sends
one header byte every few seconds (slowloris), is kept forever, and enough of them exhaust the file descriptors.
`protocol()` wraps uvicorn's own HTTP protocol (httptools, or h11 without it) with:
- a header deadline: a request's headers must be complete within `header_timeout` seconds of the connection
  opening or of the previous response's end; a connection with no request in flight at the deadline is closed.
  A deadline, not an idle timer: dribbling bytes does not extend it.
- a connection limit: past `max_connections` open connections a new one is closed at once (a reset for the client,
  not a 503: answering would need its headers, which is what the attacker withholds).
A request's body has its own deadline in limits.Guard (body_timeout).
And header names go out Title-Cased (Content-Type, Access-Control-Allow-Origin), as llama-server and most servers
send them: uvicorn lower-cases them, which HTTP allows, but some clients look them up case-sensitively (llama.cpp's
own server tests do, from a plain dict).
"""
import re
import socket

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from fastgguf.server.limits import bind_hosts

__all__ = ["protocol", "serve"]


_HEAD = re.compile(rb"HTTP/1\.[01] \d{3} ")
_NAME = re.compile(rb"\r\n([!#$%&'*+.^_`|~0-9a-z-]+):")


def title_case_head(data):
    """A response head's header names Title-Cased (b"content-type:" -> b"Content-Type:"); other data as it is."""
    if not _HEAD.match(data):
        return data
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return data
    head = _NAME.sub(lambda m: b"\r\n" + b"-".join(w.capitalize() for w in m[1].split(b"-")) + b":", data[:end])
    return head + data[end:]


class _TitleCaseWrites:
    """A transport whose write() Title-Cases response heads (title_case_head); everything else is the transport's."""

    def __init__(self, transport):
        self._transport = transport

    def write(self, data):
        self._transport.write(title_case_head(bytes(data)))

    def __getattr__(self, name):
        return getattr(self._transport, name)


def protocol(header_timeout, max_connections, base=AutoHTTPProtocol):
    """uvicorn's HTTP protocol class `base` with a header deadline (seconds) and a connection limit."""

    class Guarded(base):
        def connection_made(self, transport):
            super().connection_made(_TitleCaseWrites(transport))
            if len(self.connections) > max_connections:
                transport.close()
                return
            self._deadline = None
            self._arm()

        def _arm(self):
            """Start the header deadline: the next request's headers are due within header_timeout."""
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(header_timeout, self._expire)

        def _expire(self):
            self._deadline = None
            if self.cycle is None or self.cycle.response_complete:  # no request in flight: headers not complete
                self.transport.close()

        def on_response_complete(self):
            super().on_response_complete()
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                self._arm()  # (a pipelined request already in flight re-arms when its own response ends)

        def connection_lost(self, exc):
            if getattr(self, "_deadline", None) is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded


def serve(app, host, port, *, header_timeout=10.0, keep_alive=5.0, max_connections=1024, log_level="warning"):
    """Run `app` with uvicorn until interrupted (see the module's docstring for the limits). `host`: an address, or
    several comma-separated (llama-server's --host 127.0.0.1,::1): one server listens on each."""
    hosts = bind_hosts(host)
    kw = dict(port=port, log_level=log_level, timeout_keep_alive=keep_alive,
              http=protocol(header_timeout, max_connections))
    if len(hosts) == 1:
        return uvicorn.run(app, host=hosts[0], **kw)
    server = uvicorn.Server(uvicorn.Config(app, host=hosts[0], **kw))
    server.run(sockets=[_listen(h, port) for h in hosts])
    if not server.started:
        raise SystemExit(3)  # as uvicorn.run: it could not start


def _listen(host, port):
    """A listening socket on host (IPv4 or IPv6, IPv6 only: its IPv4 twin may be bound too) and port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind((host.strip("[]"), port))
    sock.set_inheritable(True)
    return sock
