"""One client must never slow, starve or fool the others (issue 24): a request's CPU work runs off the event loop
and is bounded by the context before it is paid for; connections time out; the Host header, the key's bytes and
an endless body are checked before any route runs."""
import json
import threading
import time
import urllib.request

import pytest

from conftest import http
from fastgguf.api.openai import protocol
from fastgguf.api.openai.protocol import APIError


def _post(server, path, body, timeout=120):
    return http(server, "POST", path, body, key=server.api_key, timeout=timeout)[:2]


def test_health_answers_while_a_huge_body_is_tokenized(server):
    """/tokenize of ~1.9 MB of one letter (seconds of CPU) runs in a worker thread whose merge lets go of the GIL:
    /health meanwhile answers in a small fraction of that time (on the event loop: only once it is done)."""
    done, out = threading.Event(), {}

    def big():
        t0 = time.perf_counter()
        out["status"], out["body"] = _post(server, "/tokenize", {"content": "a" * 1_900_000})
        out["seconds"] = time.perf_counter() - t0
        done.set()
    th = threading.Thread(target=big)
    th.start()
    time.sleep(0.3)  # the body is sent and being tokenized
    lat = []
    while not done.is_set():
        t0 = time.perf_counter()
        with urllib.request.urlopen(server.base + "/health", timeout=60) as r:
            assert r.status == 200
        lat.append(time.perf_counter() - t0)
        time.sleep(0.05)
    th.join()
    assert out["status"] == 200 and len(out["body"]["tokens"]) >= 1_900_000 // 4
    assert lat and max(lat) < out["seconds"] / 4, (lat, out["seconds"])


class _Spy:
    """A model whose tokenize is counted: the bound must refuse before it runs."""

    def __init__(self, model):
        self._model, self.calls = model, 0

    def __getattr__(self, name):
        return getattr(self._model, name)

    def tokenize(self, *a, **kw):
        self.calls += 1
        return self._model.tokenize(*a, **kw)


def test_a_prompt_longer_than_the_context_can_spell_is_refused_before_tokenizing(model):
    spy, n_ctx = _Spy(model), 64
    limit = model.tokenizer.max_chars(n_ctx)
    assert limit is not None and limit >= n_ctx
    with pytest.raises(APIError) as e:
        protocol.prepare_completion(spy, {"prompt": "a" * (limit + 1)}, n_ctx)
    assert e.value.code == "context_length_exceeded" and e.value.param == "prompt" and spy.calls == 0
    assert str(limit) in e.value.message
    with pytest.raises(APIError) as e:
        protocol.prepare_embedding(spy, {"input": ["hi", "a" * (limit + 1)]}, n_ctx)
    assert e.value.code == "context_length_exceeded" and "input[1]" in e.value.message
    with pytest.raises(APIError) as e:
        protocol.prepare_chat(model, {"messages": [{"role": "user", "content": "a" * limit}]}, n_ctx)
    assert e.value.code == "context_length_exceeded" and "rendered chat prompt" in e.value.message
    # at the bound: tokenized, then refused (or not) by its token count, as before
    spy.calls = 0
    with pytest.raises(APIError) as e:
        protocol.prepare_completion(spy, {"prompt": "a" * limit}, n_ctx)
    assert spy.calls == 1 and "tokens" in e.value.message
    assert protocol.prepare_completion(spy, {"prompt": "a" * 8, "max_tokens": 4}, n_ctx).prompts


# -- connections: timeouts, the connection limit, the Host header, the key's bytes, an endless body ------------------

KEY = "clé-ü"  # not ASCII: compared as UTF-8 bytes


@pytest.fixture(scope="module")
def strict(default_model_path):
    from conftest import Server
    s = Server(default_model_path, "--parallel", "1", "--ctx-size", "256", "--max-body", "100000",
               "--timeout-header", "1", "--timeout-keep-alive", "1", "--timeout-body", "1", "--max-connections", "6",
               api_key=KEY)
    yield s
    s.stop()


def _connect(server):
    import socket
    sock = socket.create_connection((server.host, server.port), timeout=15)
    return sock


def _closed_within(sock, seconds):
    """True if the server closes sock (EOF or reset) within `seconds`; the time it took."""
    sock.settimeout(seconds)
    t0 = time.perf_counter()
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False, seconds
    except ConnectionError:
        pass
    return True, time.perf_counter() - t0


def _raw(server, head, body=b""):
    """One request over a fresh connection, closed after the answer: (status, the answer's text)."""
    first, rest = head.split("\r\n", 1)
    sock = _connect(server)
    try:
        sock.sendall(f"{first}\r\nConnection: close\r\n{rest}".encode("utf-8") + body)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return int(data.split(b" ", 2)[1]), data.decode("utf-8", "replace")
    finally:
        sock.close()


def test_an_idle_connection_is_closed_after_the_header_timeout(strict):
    sock = _connect(strict)
    try:
        closed, took = _closed_within(sock, 10)
    finally:
        sock.close()
    assert closed, "a connection that sends nothing must not be kept"


def test_a_slowloris_sender_is_cut_off(strict):
    sock = _connect(strict)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        cut = False
        for i in range(40):  # 40 header bytes at 0.25 s: 10 s of dribble, each byte "activity"
            try:
                sock.sendall(b"X-a: b\r\n"[i % 8:i % 8 + 1])
            except ConnectionError:
                cut = True
                break
            sock.settimeout(0.25)
            try:
                if sock.recv(1) == b"":
                    cut = True
                    break
            except TimeoutError:
                pass
            except ConnectionError:
                cut = True
                break
    finally:
        sock.close()
    assert cut, "headers dribbled byte by byte must not keep the connection"


def test_keep_alive_then_idle_is_closed(strict):
    sock = _connect(strict)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        closed, _ = _closed_within(sock, 10)
    finally:
        sock.close()
    assert closed


def test_connections_past_the_limit_are_closed_at_once(strict):
    held = [_connect(strict) for _ in range(6)]
    try:
        time.sleep(0.2)
        extra = _connect(strict)
        try:
            closed, took = _closed_within(extra, 0.9)  # before the held ones' 1 s header timeout
        finally:
            extra.close()
        assert closed
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    assert _raw(strict, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")[0] == 200


def test_a_slow_body_gets_408(strict):
    sock = _connect(strict)
    try:
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\"".encode())
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 408")
    finally:
        sock.close()


def test_host_header_is_checked(strict):
    head = "GET /health HTTP/1.1\r\nHost: {}\r\n\r\n"
    for host in (f"127.0.0.1:{strict.port}", "localhost", f"localhost:{strict.port}", "[::1]:1", "[::1]",
                 f"[::1]:{strict.port}", "LOCALHOST", "[0:0:0:0:0:0:0:1]:80"):
        assert _raw(strict, head.format(host))[0] == 200, host
    status, text = _raw(strict, head.format("attacker.example:80"))
    assert status == 400 and "invalid_host" in text and "--allowed-hosts" in text


@pytest.mark.parametrize("host", ["[::1].evil.example", "[::1]evil.example", "[::1]@evil.example", "[::1]:80:90",
                                  "[::1]:80.evil.example", "localhost:x", "localhost.evil.example", "127.0.0.1.nip.io",
                                  "::1", "[::1", "[evil.example]", "localhost@evil.example", ""])
def test_host_header_is_parsed_as_an_authority(strict, host):
    """A Host header is a bracketed IPv6 literal or a host name / IPv4 address, then only an optional :port: a
    value that starts like an allowed name and goes on (0.4 took anything starting with '[::1]') is refused."""
    status, text = _raw(strict, f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n")
    assert status == 400 and "invalid_host" in text, (host, text)


def test_no_host_header_on_loopback_and_two_host_headers(strict):
    """An HTTP/1.0 client on this machine may leave Host out (a DNS-rebinding page cannot: browsers send it);
    two Host headers are refused (by uvicorn's parser already; limits.Guard too, behind another server)."""
    assert _raw(strict, "GET /health HTTP/1.0\r\n\r\n")[0] == 200
    assert _raw(strict, "GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n")[0] == 400


def _non_loopback_address():
    """This machine's IPv4 address on its default route (None without one)."""
    import ipaddress
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this picks the route's source address
        except OSError:
            return None
        addr = s.getsockname()[0]
    return None if ipaddress.ip_address(addr).is_loopback or addr == "0.0.0.0" else addr


def test_no_host_header_is_refused_off_loopback(default_model_path):
    """A server listening on an address other than loopback refuses a request without a Host header (400 in the
    route's shape: it skipped the check before), and still answers its own address and refuses hostile ones."""
    from conftest import Server
    addr = _non_loopback_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    s = Server(default_model_path, "--parallel", "1", "--ctx-size", "64", host=addr, api_key=KEY)
    try:
        for path, shape in (("/health", "error"), ("/api/tags", "error")):
            status, text = _raw(s, f"GET {path} HTTP/1.0\r\n\r\n")
            body = json.loads(text.split("\r\n\r\n", 1)[1])
            assert status == 400 and "no Host header" in str(body[shape]), (path, text)
        assert isinstance(body["error"], str)  # /api/...: Ollama's shape
        assert _raw(s, f"GET /health HTTP/1.1\r\nHost: {addr}:{s.port}\r\n\r\n")[0] == 200
        assert _raw(s, f"GET /health HTTP/1.1\r\nHost: [::1].{addr}\r\n\r\n")[0] == 400
    finally:
        s.stop()


def test_a_non_ascii_key_is_compared_as_utf8_bytes(strict):
    head = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\r\n"
    assert _raw(strict, head.format(KEY))[0] == 200
    assert _raw(strict, head.format("cle-u"))[0] == 401
    assert _raw(strict, head.format(KEY.encode().decode("latin-1")))[0] == 401  # its latin-1 reading is not it


def test_an_endless_chunked_body_is_cut_at_the_limit(strict):
    sock = _connect(strict)
    chunk = b"1000\r\n" + b"a" * 0x1000 + b"\r\n"
    sent, stop = [0], threading.Event()

    def feed():  # chunks without end, until the server answers or drops the connection (at most 64 MB)
        try:
            while not stop.is_set() and sent[0] < 64 << 20:
                sock.sendall(chunk)
                sent[0] += len(chunk)
        except OSError:
            pass
    try:
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                     "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        th = threading.Thread(target=feed)
        th.start()
        sock.settimeout(30)
        try:
            answer = sock.recv(65536)
        except (TimeoutError, ConnectionError):
            answer = b""
        stop.set()
        th.join(30)
    finally:
        sock.close()
    # the limit is 100 kB: the server reads ~200 kB, the rest sits in the sockets' buffers (MBs on loopback)
    assert answer.startswith(b"HTTP/1.1 413") and sent[0] < 32 << 20, (sent[0], answer[:100])


def test_title_case_head():
    from fastgguf.server.transport import title_case_head
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-api-key: a-b\r\naccess-control-allow-origin: x\r\n\r\n"
    assert title_case_head(head + b"content-type: body") == (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Api-Key: a-b\r\nAccess-Control-Allow-Origin: x\r\n\r\n"
        b"content-type: body")
    body = b'{"a": "\r\ncontent-type: x"}'
    assert title_case_head(body) == body and title_case_head(b"HTTP/1.1 200 OK\r\nhalf") == b"HTTP/1.1 200 OK\r\nhalf"
