"""The Engine alone (no HTTP): chunked prefill of a long prompt beside decoding sequences, prefix reuse, cancel,
errors of one request not touching the others. Outputs equal model.generate run alone."""
import queue
import threading

import pytest

from fastgguf.engine.params import SamplingParams
from fastgguf.engine.scheduler import Delta, Done, Embedding, Engine, Error, Finish, PromptLogprobs, QueueFull, Request, Start


def run(engine, prompt_ids, params, **kw):
    q = queue.SimpleQueue()
    req = Request([prompt_ids], params, q.put, **kw)
    engine.submit(req)
    texts, finish, usage = {}, {}, None
    while usage is None:
        for ev in q.get():
            if isinstance(ev, Delta):
                texts[ev.index] = texts.get(ev.index, "") + ev.text
            elif isinstance(ev, Finish):
                finish[ev.index] = ev.reason
            elif isinstance(ev, Done):
                usage = ev.usage
            elif isinstance(ev, Error):
                raise ev.error
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
    with pytest.raises(ValueError, match="max_queue"):  # a request of more sequences than may ever be queued
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


def events_of(engine, req):
    """Submit req and collect its events up to "done" (raising its error)."""
    q = queue.SimpleQueue()
    req.sink = q.put
    engine.submit(req)
    evs = []
    while not evs or not isinstance(evs[-1], Done):
        evs += q.get(timeout=120)
        if isinstance(evs[-1], Error):
            raise evs[-1].error
    return evs


@pytest.mark.parametrize("parallel", [3, 1])
def test_n_choices_evaluate_the_prompt_once(model, parallel):
    """n=3 seeded choices: the prompt is evaluated once (the engine's counter of evaluated prompt rows), the later
    choices copy its KV rows (or, with one slot, reuse it after the first choice), and each choice equals the
    solo run with seed + j."""
    e = Engine(model, parallel=parallel, n_ctx=256, chunk=16).start()
    try:
        ids = list(model.tokenize("Write a short list of fruits and vegetables that are green, then say which of "
                                  "them you like best and why:"))
        assert len(ids) > 16  # several prefill steps
        p = SamplingParams(max_tokens=6, temperature=0.9, seed=21)
        before = e.m["prompt_tokens_evaluated"]
        texts, finish, usage = run(e, ids, p, n=3)
        assert e.m["prompt_tokens_evaluated"] - before == len(ids)
        assert e.m["prompt_tokens_copied"] == 2 * len(ids)  # (with one slot: the same cache, rewound)
        assert usage["prompt_tokens"] == len(ids) and usage["cached_tokens"] == 0
        for j in range(3):
            assert texts[j] == model.generate(ids, p.replace(seed=21 + j)).text, j
    finally:
        e.stop()


def test_embedding_under_load_equals_alone(model):
    """An embedding computed while 4 streams decode equals the one computed alone, and the mean-pooled,
    normalized hidden states of a direct forward pass."""
    import numpy as np
    from fastgguf.engine.batch import forward_batch
    text_ids = list(model.tokenize("The weather is lovely today, warm and sunny. " * 4))
    e = Engine(model, parallel=5, n_ctx=256, chunk=16).start()
    try:
        alone = events_of(e, Request([text_ids], None, None, embed=True))
        assert [type(ev) for ev in alone] == [Start, Embedding, Done]
        assert alone[-1].usage["prompt_tokens"] == len(text_ids)
        vec = alone[1].vector
        h = forward_batch(model, [(model.context(256), text_ids)], outputs=["hidden"])[0].mean(0, dtype=np.float64)
        assert vec.dtype == np.float32 and vec.shape == (model.n_embd,)
        assert np.array_equal(vec, (h / np.linalg.norm(h)).astype(np.float32))
        qs = []
        for i in range(4):
            qs.append(queue.SimpleQueue())
            e.submit(Request([list(model.tokenize(f"Story {i}:"))], SamplingParams(max_tokens=40, temperature=0),
                             qs[-1].put))
        while e.live_sequences() < 4:
            threading.Event().wait(0.01)
        loaded = events_of(e, Request([text_ids, text_ids[:5]], None, None, embed=True))
        assert e.live_sequences() > 0  # the streams were still running
        got = {ev.index: ev.vector for ev in loaded if isinstance(ev, Embedding)}
        assert np.array_equal(got[0], vec) and got[1].shape == vec.shape
    finally:
        e.stop()


def test_echo_prompt_logprobs_equal_full_recompute(model):
    """prompt_logprobs: every prompt token scored under the logits of the row before it (the first: None), across
    prefill chunks, equal to a full recompute with all_logits."""
    import numpy as np
    ids = list(model.tokenize("Paris is the capital of France, and Berlin is the capital of Germany."))
    e = Engine(model, parallel=2, n_ctx=256, chunk=8).start()
    try:
        evs = events_of(e, Request([ids], SamplingParams(max_tokens=2, temperature=0), None, logprobs=2,
                                   prompt_logprobs=True))
    finally:
        e.stop()
    (entries,) = [ev.logprobs for ev in evs if isinstance(ev, PromptLogprobs)]
    assert len(entries) == len(ids) and entries[0] == (ids[0], None, None)
    full = model.context(256).eval(ids, all_logits=True).astype(np.float64)
    lp = full - np.log(np.exp(full - full.max(1, keepdims=True)).sum(1, keepdims=True)) - full.max(1, keepdims=True)
    for i in range(1, len(ids)):
        tok, got, top = entries[i]
        assert tok == ids[i] and abs(got - lp[i - 1, ids[i]]) < 1e-9
        assert [t for t, _ in top] == list(np.argsort(-lp[i - 1], kind="stable")[:2])


def test_hold_slot_keeps_new_sequences_out(model):
    """A held slot (POST /slots/{id}?action=...) takes no sequence until released; a second hold, or a hold of a
    busy slot, is refused."""
    e = Engine(model, parallel=1, n_ctx=256).start()
    try:
        q, no_end = queue.SimpleQueue(), {t: -100.0 for t in model.tokenizer.eog_ids}
        with e.hold_slot(0) as ctx:
            assert ctx.n_past == 0
            with pytest.raises(RuntimeError, match="slot 0 is busy"):
                with e.hold_slot(0):
                    pass
            e.submit(Request([[1, 2, 3]], SamplingParams(max_tokens=200, temperature=0, logit_bias=no_end), q.put))
            with pytest.raises(queue.Empty):
                q.get(timeout=0.5)
            assert e.live_sequences() == 0
        assert isinstance(q.get(timeout=60)[0], Start)
        with pytest.raises(RuntimeError, match="busy"):
            with e.hold_slot(0):
                pass
        with pytest.raises(ValueError, match="ids are 0..0"):
            with e.hold_slot(1):
                pass
    finally:
        e.stop()
