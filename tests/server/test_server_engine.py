"""The Engine alone (no HTTP): chunked prefill of a long prompt beside decoding sequences, prefix reuse, cancel,
errors of one request not touching the others. Outputs equal model.generate run alone."""
import queue
import threading

import pytest

from fastgguf.engine.params import SamplingParams
from fastgguf.server.engine import Engine, QueueFull, Request


def run(engine, prompt_ids, params, **kw):
    q = queue.SimpleQueue()
    req = Request([prompt_ids], params, q.put, **kw)
    engine.submit(req)
    texts, finish, usage = {}, {}, None
    while usage is None:
        for ev in q.get():
            if ev[0] == "delta":
                texts[ev[1]] = texts.get(ev[1], "") + ev[2]
            elif ev[0] == "finish":
                finish[ev[1]] = ev[2]
            elif ev[0] == "done":
                usage = ev[1]
            elif ev[0] == "error":
                raise ev[1]
    return texts, finish, usage


@pytest.fixture(scope="module")
def engine(model):
    e = Engine(model, parallel=3, n_ctx=512, chunk=16).start()  # small chunks: long prompts span many steps
    yield e
    e.stop()


def test_long_prompt_chunked_beside_decoders(engine, model):
    long_ids = list(model.tokenize("The history of the city began long ago. " * 15))
    assert len(long_ids) > 100
    jobs = [(long_ids, SamplingParams(max_tokens=8, temperature=0)),
            (list(model.tokenize("Hi")), SamplingParams(max_tokens=12, temperature=0.7, seed=3)),
            (list(model.tokenize("Once")), SamplingParams(max_tokens=12, temperature=0.7, seed=4,
                                                          repeat_penalty=1.3, stop=("\n",)))]
    out = [None] * len(jobs)

    def work(i):
        out[i] = run(engine, *jobs[i])
    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    [t.start() for t in ts]
    [t.join(120) for t in ts]
    for (ids, params), (texts, finish, usage) in zip(jobs, out):
        solo = model.generate(ids, params)
        assert texts.get(0, "") == solo.text and finish[0] == solo.finish_reason
        assert usage["completion_tokens"] == solo.usage.completion_tokens


def test_prefix_reuse_and_cancel(engine, model):
    ids = list(model.tokenize("A long shared prefix for the cache to keep, then a question:"))
    p = SamplingParams(max_tokens=4, temperature=0)
    run(engine, ids, p)
    texts, _, usage = run(engine, ids + list(model.tokenize(" why?", add_special=False)), p)
    assert usage["cached_tokens"] >= len(ids) - 1
    assert texts[0] == model.generate(ids + list(model.tokenize(" why?", add_special=False)), p).text
    q = queue.SimpleQueue()
    req = Request([ids], SamplingParams(max_tokens=400, temperature=0), q.put)
    engine.submit(req)
    q.get()
    req.cancel()
    for _ in range(100):
        if engine.live_sequences() == 0:
            break
        threading.Event().wait(0.05)
    assert engine.live_sequences() == 0


def test_one_failing_request_and_queue_full(model):
    e = Engine(model, parallel=1, n_ctx=128, max_queue=0)
    with pytest.raises(QueueFull):
        e.submit(Request([[1, 2]], SamplingParams(max_tokens=1), lambda evs: None))
    e = Engine(model, parallel=2, n_ctx=128).start()
    try:
        banned = {i: float("-inf") for i in range(model.n_vocab)}
        with pytest.raises(ValueError, match="no token can be sampled"):
            run(e, [1, 2, 3], SamplingParams(max_tokens=2, logit_bias=banned))
        texts, _, _ = run(e, [1, 2, 3], SamplingParams(max_tokens=3, temperature=0))
        assert texts[0] == model.generate([1, 2, 3], max_tokens=3, temperature=0).text
    finally:
        e.stop()
