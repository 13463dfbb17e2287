"""One client must never slow, starve or fool the others (issue 24): a request's CPU work runs off the event loop
and is bounded by the context before it is paid for; connections time out; the Host header, the key's bytes and
an endless body are checked before any route runs."""
import json
import threading
import time
import urllib.request

import pytest

from fastgguf.openai import protocol
from fastgguf.openai.protocol import APIError


def _post(server, path, body, timeout=120):
    req = urllib.request.Request(server.base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {server.api_key}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


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
