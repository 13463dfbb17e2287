"""NaN contracts (issue 24, defect 5): a model that produces NaN is a broken model, reported as FloatingPointError
on every path (generate, the batching engine behind create_*, embeddings, logprobs) and never as a client error or
as silently wrong numbers. 0.2 blamed logit_bias (ValueError), returned NaN vectors and gave -9999 logprobs."""
import threading

import numpy as np
import pytest

import fastgguf
from fastgguf import kernels
from fastgguf.engine.scheduler import Scheduler
from fastgguf.api.openai.client import create_completion, create_embedding
import models

BAD = 1000       # its embedding row is NaN: a sequence that holds it goes NaN from there on
GOOD = [300, 301, 302]


@pytest.fixture(scope="module")
def nan_model(tmp_path_factory):
    path = models.build(tmp_path_factory.mktemp("nan") / "m.gguf", "vocab", vocab="llama-bpe", nan_embd=[BAD])
    return fastgguf.Model(path, n_threads=1)


@pytest.fixture(scope="module")
def engine(nan_model):
    eng = Scheduler(nan_model, parallel=2, n_ctx=64, n_threads=1).start()
    yield eng
    eng.stop()


def test_generate_nan_mid_decode(nan_model):
    """The prompt is fine; the forced token BAD makes the next step NaN: 0.2 raised the sampler's 'every token
    banned by logit_bias?' ValueError."""
    ctx = nan_model.context(64)
    stream = nan_model.generate(GOOD, max_tokens=4, logit_bias={BAD: 100.0}, temperature=0, context=ctx, stream=True)
    with pytest.raises(FloatingPointError, match="NaN"):
        list(stream)
    assert BAD not in ctx.tokens  # the NaN row is not kept in the cache
    assert np.isfinite(ctx.eval([5])).all()


def test_eval_of_nan_prompt(nan_model):
    ctx = nan_model.context(64)
    ctx.eval(GOOD)
    with pytest.raises(FloatingPointError, match="NaN"):
        ctx.eval([BAD, 5])
    assert ctx.tokens == GOOD


def test_batch_nan_sequence_fails_alone(nan_model, engine):
    """Two prompts in one batch: the NaN one is FloatingPointError, the other completes as it does alone."""
    alone = create_completion(nan_model, GOOD, max_tokens=4, temperature=0, engine=engine)
    with pytest.raises(FloatingPointError, match="NaN"):
        create_completion(nan_model, [GOOD, GOOD + [BAD]], max_tokens=4, temperature=0, engine=engine)
    got = {}

    def good():
        got["r"] = create_completion(nan_model, GOOD, max_tokens=4, temperature=0, engine=engine)
    t = threading.Thread(target=good)
    t.start()
    with pytest.raises(FloatingPointError):
        create_completion(nan_model, GOOD + [BAD], max_tokens=4, temperature=0, engine=engine)
    t.join()
    assert got["r"]["choices"][0]["text"] == alone["choices"][0]["text"]


@pytest.mark.parametrize("echo", [False, True])
def test_logprobs_nan(tmp_path, echo):
    """Four NaN logits: 0.2 returned -9999 for every logprob."""
    path = models.build(tmp_path / "m.gguf", "vocab", vocab="llama-bpe", nan_logits=[7, 8, 9, 10])
    m = fastgguf.Model(path, n_threads=1)
    eng = Scheduler(m, parallel=1, n_ctx=64, n_threads=1).start()
    try:
        with pytest.raises(FloatingPointError, match="NaN"):
            create_completion(m, GOOD, max_tokens=2, logprobs=2, echo=echo, engine=eng)
    finally:
        eng.stop()


def test_embedding_nan(nan_model, engine):
    ok = create_embedding(nan_model, GOOD, engine=engine)["data"][0]["embedding"]
    assert np.isfinite(ok).all()
    with pytest.raises(FloatingPointError, match="NaN"):
        create_embedding(nan_model, [GOOD, GOOD + [BAD]], engine=engine)


def test_inf_weight_scale_is_an_error(tmp_path):
    """An inf block scale in ffn_down (what `fastgguf quantize` wrote for a weight of 6e5): 0.2's activation
    quantizer turned the inf activations it gave into zeros, and every logit came out 0.0 with no error."""
    from fastgguf.gguf.quantize import quantize_file
    src, dst = models.build(tmp_path / "f32.gguf", wtype="F32"), str(tmp_path / "q8.gguf")
    quantize_file(src, dst, "q8_0", pure=True)
    with fastgguf.GGUFFile(dst) as f:
        off = f.tensors["blk.0.ffn_down.weight"].offset
    data = bytearray(open(dst, "rb").read())
    data[off:off + 2] = np.float16(np.inf).tobytes()  # block 0's scale
    open(dst, "wb").write(bytes(data))
    model = fastgguf.Model(dst, n_threads=1)
    for isa in kernels.available():  # 0.2: 0.0 logits on scalar and avx2, NaN on avx512
        prev = kernels.set_isa(isa)
        try:
            with pytest.raises(FloatingPointError, match="NaN"):
                model.context(16).eval([1, 2, 3])
        finally:
            kernels.set_isa(prev)
