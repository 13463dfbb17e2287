"""One client must not slow, starve or fool the others (issue 24): a request's fan-out is bounded (prompts per request,
queued sequences, not requests, against --max-queue), a non-streamed request whose client hung up frees its slot
within about a step, /metrics reads the queue under the engine's lock, and stop lists are bounded. The server ones
run against a real uvicorn subprocess with one slot and a queue of 2 sequences."""
import json
import queue
import socket
import sys
import threading
import time

import pytest

from fastgguf.engine.params import SamplingParams
from fastgguf.engine.scheduler import Engine, QueueFull, Request, _Seq
from fastgguf.engine.stops import MAX_STOP_CHARS, MAX_STOPS
from fastgguf.api.openai.protocol import MAX_PROMPTS

from conftest import Server, http  # noqa: E402


# -- the engine alone ----------------------------------------------------------------------------------------------

def unstarted(model, **kw):
    """An Engine whose thread never starts: what is submitted stays queued."""
    e = Engine(model, parallel=1, n_ctx=128, **kw)
    e.start = lambda: e
    return e


def request(prompts, n=1):
    return Request(prompts, SamplingParams(max_tokens=1), lambda evs: None, n=n)


def test_the_queue_counts_sequences_not_requests(model):
    e = unstarted(model, max_queue=8)
    first = e.submit(request([[1, 2], [3], [4]], n=2))  # 3 prompts x n=2: 6 sequences
    assert (e.queued_sequences(), e.queued_requests()) == (6, 1)
    with pytest.raises(QueueFull, match=r"6 sequences are queued and this request adds 3; at most 8"):
        e.submit(request([[1], [2], [3]]))
    e.submit(request([[1]], n=2))
    assert e.queued_sequences() == 8
    first.cancel()  # a cancelled request's sequences no longer count
    assert (e.queued_sequences(), e.queued_requests()) == (2, 1)
    with pytest.raises(ValueError, match=r"9 sequences \(prompts x n\); at most 8 may be queued"):
        e.submit(request([[1]] * 3, n=3))  # larger than the queue: never fits, not a retry later


def test_queue_gauges_read_under_the_lock(model):
    """/metrics read the engine's deque while its thread mutated it: `deque mutated during iteration`, a 500."""
    e = unstarted(model, max_queue=1 << 20)
    req = request([[1]])
    e._queue.extend(_Seq(req, i, [1]) for i in range(20000))
    stop = threading.Event()

    def churn():  # as the engine thread does: every mutation under its lock
        while not stop.is_set():
            with e._cond:
                e._queue.append(e._queue.popleft())
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(100):
            assert e.queued_requests() == 1 and e.queued_sequences() == 20000
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)


def test_in_process_fan_out_errors(model):
    with pytest.raises(ValueError, match=f"at most {MAX_PROMPTS} are allowed"):
        model.create_completion(["a"] * (MAX_PROMPTS + 1), max_tokens=1)
    with pytest.raises(ValueError, match=f"at most {MAX_STOPS} are allowed"):
        model.create_completion("a", max_tokens=1, stop=["x"] * (MAX_STOPS + 1))


# -- over HTTP -----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small(default_model_path):
    s = Server(default_model_path, "--parallel", "1", "--max-queue", "2", "--ctx-size", "2048", api_key=None)
    yield s
    s.stop()


def metric(server, name):
    text = http(server, "GET", "/metrics", key=None)[1]
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def wait_for(cond, seconds):
    """Poll cond every 20 ms; True as soon as it holds, False after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def send(server, body):
    """A raw connection that has sent the POST of body and not read anything."""
    s = socket.create_connection(("127.0.0.1", server.port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return s


@pytest.fixture(scope="module")
def endless(model):
    """A completion body that runs to max_tokens: every end-of-generation token banned."""
    return {"prompt": "Once upon a time", "max_tokens": 1800, "temperature": 0,
            "logit_bias": {str(t): -100 for t in model.tokenizer.eog_ids}}


def test_fan_out_is_refused_with_the_limit_named(small):
    status, body, _ = http(small, "POST", "/v1/completions", {"prompt": ["a"] * (MAX_PROMPTS + 1), "max_tokens": 1},
                           key=None)
    assert status == 400 and body["error"]["param"] == "prompt" and str(MAX_PROMPTS) in body["error"]["message"]
    status, body, _ = http(small, "POST", "/v1/completions", {"prompt": ["a", "b"], "n": 2, "max_tokens": 1},
                           key=None)
    assert status == 400 and "4 sequences (prompts x n); at most 2" in body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error"


def test_stop_lists_are_bounded(small):
    for stop, limit in ((["x"] * (MAX_STOPS + 1), MAX_STOPS), (["x" * (MAX_STOP_CHARS + 1)], MAX_STOP_CHARS)):
        status, body, _ = http(small, "POST", "/v1/completions", {"prompt": "a", "stop": stop, "max_tokens": 1},
                               key=None)
        assert status == 400 and body["error"]["param"] == "stop"
        assert f"at most {limit} are allowed" in body["error"]["message"]


def test_queued_sequences_against_max_queue(small, endless):
    """The slot busy, a request of 2 prompts fills the queue (2 sequences): a third sequence is a 429 naming the
    limit, and the queue gauge counts sequences."""
    running = send(small, endless)
    queued = None
    try:
        assert wait_for(lambda: metric(small, "fastgguf_requests_running") == 1, 30)
        queued = send(small, {**endless, "prompt": ["a", "b"], "max_tokens": 1})
        assert wait_for(lambda: metric(small, "fastgguf_sequences_queued") == 2, 30)
        assert metric(small, "fastgguf_requests_queued") == 1
        status, body, hdrs = http(small, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1}, key=None)
        assert status == 429 and body["error"]["type"] == "rate_limit_error" and hdrs["Retry-After"]
        assert "at most 2 may be queued" in body["error"]["message"]
    finally:
        for s in (running, queued):
            if s is not None:
                s.close()
    assert wait_for(lambda: metric(small, "fastgguf_sequences_queued") == 0, 30)


def test_hung_up_non_streamed_request_frees_its_slot(small, endless):
    """A non-streamed request whose client closes the socket frees its slot within about a step (here: within a
    generous 3 s; before the fix it generated all 1800 tokens for nobody)."""
    assert wait_for(lambda: metric(small, "fastgguf_requests_running") == 0, 30)
    s = send(small, endless)
    try:
        assert wait_for(lambda: metric(small, "fastgguf_requests_running") == 1, 30)
        start = metric(small, "fastgguf_completion_tokens_total")
        assert wait_for(lambda: metric(small, "fastgguf_completion_tokens_total") > start + 2, 30)  # generating
    finally:
        s.close()
    assert wait_for(lambda: metric(small, "fastgguf_requests_running") == 0, 3)
    done = metric(small, "fastgguf_completion_tokens_total")
    time.sleep(0.3)
    assert metric(small, "fastgguf_completion_tokens_total") == done  # nothing more generated for nobody
    q = queue.SimpleQueue()  # and the slot serves a fresh request
    threading.Thread(target=lambda: q.put(http(small, "POST", "/v1/completions",
                                               {"prompt": "Hi", "max_tokens": 2}, key=None))).start()
    assert q.get(timeout=60)[0] == 200
