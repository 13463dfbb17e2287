"""CORS (server/cors.py) on real servers, as llama-server does it: with an API key any page (reflected, with
credentials); without one, or with --cors-origins localhost, pages on this machine only; --cors-origins with a list.
Preflights are answered 200 without the API key, refused origins' without CORS headers and their real requests
refused; real requests still need the key and an allowed Host."""
import http.client

import pytest

from conftest import API_KEY, Server

from fastgguf.server.cors import Cors

LOCAL_PAGE = "http://localhost:5173"
APP = "https://app.example.com"


def request(server, method, path, headers, body=None):
    """(status, lower-case header dict, body) of one request with exactly these headers (Host included)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        headers = {"Host": f"127.0.0.1:{server.port}", **headers}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_header_names_title_cased(server):
    """On the wire as llama-server sends them (transport.title_case_head): some clients read them case-sensitively."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request("OPTIONS", "/v1/models", headers={"Origin": APP, "Access-Control-Request-Method": "GET"})
        names = [k for k, _ in conn.getresponse().getheaders()]
    finally:
        conn.close()
    assert "Access-Control-Allow-Origin" in names and "Access-Control-Allow-Credentials" in names
    assert "Content-Length" in names and not any(n.islower() for n in names)


def preflight(server, origin, **extra):
    return request(server, "OPTIONS", "/v1/chat/completions",
                   {"Origin": origin, "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os", **extra})


@pytest.fixture(scope="module")
def listed(default_model_path):
    s = Server(default_model_path, "--parallel", "1", "--ctx-size", "128", "--cors-origins", APP)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def keyless(default_model_path):
    s = Server(default_model_path, "--parallel", "1", "--ctx-size", "128", api_key=None)
    yield s
    s.stop()


def test_keyed_default_reflects_any_page_with_credentials(server):
    for origin in (APP, "https://evil.example", "localhost", "null"):
        status, h, body = preflight(server, origin)
        assert status == 200 and body == b"", origin
        assert h["access-control-allow-origin"] == origin and h["access-control-allow-credentials"] == "true"
        assert h["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
        allowed = {x.strip() for x in h["access-control-allow-headers"].split(",")}
        assert {"authorization", "content-type", "x-api-key", "x-stainless-os"} <= allowed
    # the real request still needs the key
    status, h, _ = request(server, "GET", "/v1/models", {"Origin": APP})
    assert status == 401 and h["access-control-allow-origin"] == APP  # the page can read why
    status, h, _ = request(server, "GET", "/v1/models", {"Origin": APP, "Authorization": f"Bearer {API_KEY}"})
    assert status == 200 and h["access-control-allow-origin"] == APP and h["vary"] == "Origin"


def test_keyless_default_is_localhost(keyless):
    for origin in (LOCAL_PAGE, "http://127.0.0.1:8000", "http://[::1]", "http://localhost", "https://localhost:8443"):
        status, h, _ = preflight(keyless, origin)
        assert status == 200 and h["access-control-allow-origin"] == origin, origin
        assert "access-control-allow-credentials" not in h
    status, h, _ = request(keyless, "GET", "/v1/models", {"Origin": LOCAL_PAGE})
    assert status == 200 and h["access-control-allow-origin"] == LOCAL_PAGE


def test_refused_origins(keyless):
    for origin in ("https://evil.example", "http://localhost.evil.example", "http://notlocalhost", "null"):
        status, h, _ = preflight(keyless, origin)
        assert status == 200 and not any(k.startswith("access-control-") for k in h), origin
        # a real request from it is refused (a "simple" POST needs no preflight)
        status, h, body = request(keyless, "POST", "/v1/completions", {"Origin": origin, "Content-Type": "text/plain"},
                                  b'{"prompt": "hi", "max_tokens": 1}')
        assert status == 403 and b"--cors-origins" in body and "access-control-allow-origin" not in h


def test_no_origin_no_cors_headers(server):
    status, h, _ = request(server, "GET", "/v1/models", {"Authorization": f"Bearer {API_KEY}"})
    assert status == 200 and "access-control-allow-origin" not in h


def test_host_check_still_refuses(server):
    status, h, _ = preflight(server, LOCAL_PAGE, Host="rebind.example")
    assert status == 400 and "access-control-allow-origin" not in h
    status, _, _ = request(server, "GET", "/v1/models", {"Origin": LOCAL_PAGE, "Host": "rebind.example",
                                                         "Authorization": f"Bearer {API_KEY}"})
    assert status == 400


def test_listed_origins_get_credentials_and_replace_the_default(listed):
    status, h, _ = preflight(listed, APP)
    assert status == 200 and h["access-control-allow-origin"] == APP
    assert h["access-control-allow-credentials"] == "true"
    assert "access-control-allow-origin" not in preflight(listed, LOCAL_PAGE)[1]
    own = f"http://127.0.0.1:{listed.port}"  # the server's own pages (/docs) are always allowed
    assert preflight(listed, own)[1]["access-control-allow-origin"] == own


def test_origin_lists():
    assert Cors("*").headers("https://anything.example", "h") == [(b"access-control-allow-origin", b"*")]
    both = Cors(f"*,{APP}").headers(APP, "h")
    assert (b"access-control-allow-credentials", b"true") in both
    assert (b"access-control-allow-origin", APP.encode()) in both
    assert Cors("").headers(LOCAL_PAGE, "h") is None and Cors("", keyed=True).headers(APP, "h") is None
    local = Cors("localhost", keyed=True)  # the keyword, as llama-server's --cors-origins localhost
    assert local.headers("http://[::1]:3000", "h")[0] == (b"access-control-allow-origin", b"http://[::1]:3000")
    assert local.headers("http://localhost.evil.com", "h") is None and local.headers(APP, "h") is None
    mixed = Cors(f"localhost,{APP}")
    assert mixed.headers(LOCAL_PAGE, "h") and mixed.headers(APP, "h")
    assert mixed.headers("https://x.example", "h") is None
