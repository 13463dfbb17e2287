"""A stream abandoned by its consumer (issue 24, defect 13): `break`, or an exception in the consumer's loop, must
release what the stream holds at once, when its last reference goes, not at the next garbage collection. Every test
runs with the cyclic collector off: a reference cycle through the stream would keep its context locked."""
import gc

import pytest

import fastgguf


@pytest.fixture(scope="module")
def model(default_model_path):
    return fastgguf.Model(default_model_path, n_threads=1)


@pytest.fixture
def no_gc():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def test_break_releases_the_context(model, no_gc):
    ctx = model.context(64)
    for _ in model.generate("Once upon a time", max_tokens=8, stream=True, context=ctx):
        break
    ctx.eval([1])  # RuntimeError ("... stream ...") while a stream still owns it


def test_an_exception_in_the_consumer_releases_the_context(model, no_gc):
    ctx = model.context(64)
    with pytest.raises(KeyError):
        for _ in model.generate("Once upon a time", max_tokens=8, stream=True, context=ctx):
            raise KeyError("consumer")
    ctx.eval([1])


def test_a_dropped_stream_releases_the_context(model, no_gc):
    ctx = model.context(64)
    s = model.generate("Once upon a time", max_tokens=8, stream=True, context=ctx)
    next(s)
    del s
    ctx.eval([1])


def test_break_out_of_a_chat_stream_releases_the_context(model, no_gc):
    ctx = model.context(128)
    for _ in model.chat([{"role": "user", "content": "Hi"}], max_tokens=8, stream=True, context=ctx):
        break
    ctx.eval([1])


def test_abandoned_chat_stream_cancels_its_request(model, no_gc):
    """create_chat_completion(stream=True) abandoned by break: its request is cancelled at once (the engine frees
    its slot at its next step), without a garbage collection."""
    eng = fastgguf.api.openai.client.default_engine(model)
    before = set(map(id, _requests(eng)))
    for _ in model.create_chat_completion([{"role": "user", "content": "Tell me a story."}], max_tokens=64,
                                          stream=True):
        break
    live = [r for r in _requests(eng) if id(r) not in before]
    assert live and all(r.cancelled for r in live)


def _requests(eng):
    with eng._cond:
        return [s.seq.req for s in eng._slots if s.seq is not None] + [s.req for s in eng._queue]
