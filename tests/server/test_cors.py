"""CORS (server/cors.py) on real servers: the default (pages on localhost / 127.0.0.1 / [::1] only) and
--cors-origins with a list; preflights answered without the API key, refused origins refused, real requests still
needing the key and an allowed Host."""
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


def preflight(server, origin, **extra):
    return request(server, "OPTIONS", "/v1/chat/completions",
                   {"Origin": origin, "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os", **extra})


@pytest.fixture(scope="module")
def listed(default_model_path):
    s = Server(default_model_path, "--parallel", "1", "--ctx-size", "128", "--cors-origins", APP)
    yield s
    s.stop()


def test_preflight_from_a_local_page_needs_no_key(server):
    status, h, _ = preflight(server, LOCAL_PAGE)
    assert status == 204
    assert h["access-control-allow-origin"] == LOCAL_PAGE and "access-control-allow-credentials" not in h
    assert "POST" in h["access-control-allow-methods"] and "OPTIONS" in h["access-control-allow-methods"]
    allowed = {x.strip() for x in h["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "x-api-key", "x-stainless-os"} <= allowed
    for origin in ("http://127.0.0.1:8000", "http://[::1]", "http://localhost"):
        assert preflight(server, origin)[1]["access-control-allow-origin"] == origin


def test_refused_origins(server):
    for origin in ("https://evil.example", "http://localhost.evil.example", "https://localhost:5173", "null"):
        status, h, _ = preflight(server, origin)
        assert status == 403 and "access-control-allow-origin" not in h, origin
        # a real request from it is refused too, even with the key
        status, h, _ = request(server, "GET", "/v1/models", {"Origin": origin, "Authorization": f"Bearer {API_KEY}"})
        assert status == 403 and b"--cors-origins" in _ and "access-control-allow-origin" not in h


def test_real_request_headers_and_the_key_still_required(server):
    status, h, _ = request(server, "GET", "/v1/models", {"Origin": LOCAL_PAGE, "Authorization": f"Bearer {API_KEY}"})
    assert status == 200 and h["access-control-allow-origin"] == LOCAL_PAGE and h["vary"] == "Origin"
    status, h, _ = request(server, "GET", "/v1/models", {"Origin": LOCAL_PAGE})
    assert status == 401 and h["access-control-allow-origin"] == LOCAL_PAGE  # the page can read why
    status, h, _ = request(server, "POST", "/v1/completions", {"Origin": LOCAL_PAGE, "Content-Type": "text/plain"},
                           b'{"prompt": "hi", "max_tokens": 1}')
    assert status == 401
    status, h, _ = request(server, "GET", "/v1/models", {"Authorization": f"Bearer {API_KEY}"})
    assert status == 200 and "access-control-allow-origin" not in h  # no Origin: no CORS headers


def test_host_check_still_refuses(server):
    status, h, _ = preflight(server, LOCAL_PAGE, Host="rebind.example")
    assert status == 400 and "access-control-allow-origin" not in h
    status, _, _ = request(server, "GET", "/v1/models", {"Origin": LOCAL_PAGE, "Host": "rebind.example",
                                                         "Authorization": f"Bearer {API_KEY}"})
    assert status == 400


def test_listed_origins_get_credentials_and_replace_the_default(listed):
    status, h, _ = preflight(listed, APP)
    assert status == 204 and h["access-control-allow-origin"] == APP
    assert h["access-control-allow-credentials"] == "true"
    assert preflight(listed, LOCAL_PAGE)[0] == 403
    own = f"http://127.0.0.1:{listed.port}"  # the server's own pages (/docs) are always allowed
    assert preflight(listed, own)[0] == 204


def test_star_allows_any_page_without_credentials():
    assert Cors("*").headers("https://anything.example", "127.0.0.1:8080") == [(b"access-control-allow-origin",
                                                                               b"*")]
    both = Cors(f"*,{APP}").headers(APP, "h")
    assert (b"access-control-allow-credentials", b"true") in both and (b"access-control-allow-origin",
                                                                      APP.encode()) in both
    assert Cors("").headers(LOCAL_PAGE, "h") is None
