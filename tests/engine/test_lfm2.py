"""lfm2 (fastgguf/arch/lfm2.py): gated short-convolution layers beside attention layers. Its logits against llama.cpp
(both paths) are in test_tiny_references.py, against the float64 oracle in test_model.py's
test_tiny_model_matches_oracle and here past the conv ring. Here: the layer kinds and memory, the ring of conv
inputs (rewind, copy_prefix, reset, past its size), batched rows equal to each alone, hostile hyperparameters."""
import numpy as np
import pytest

import models
from fastgguf.engine.model import Model
from fastgguf.gguf import GGUFError
from test_batch import check_same, decode_schedules

# the tiny files say context_length 128; these run 300 positions to wrap the conv ring
pytestmark = pytest.mark.filterwarnings("ignore:n_ctx=.*exceeds the model's training context:RuntimeWarning")
LAYOUT = dict(arch="lfm2", n_layer=4, conv_layers=(0, 1, 3))   # conv, conv, attention, conv; l_cache 3
RING = 2 + 256     # a conv layer's ring: l_cache - 1 inputs + FG_MAX_BATCH rows
IDS = [int(t) for t in np.random.default_rng(3).integers(0, 100, 300)]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return models.build(tmp_path_factory.mktemp("lfm2") / "l.gguf", **LAYOUT)


@pytest.fixture(scope="module")
def model(path):
    return Model(path, n_threads=2)


@pytest.fixture(scope="module")
def full(model):
    """IDS teacher-forced in one call (chunks of 256 rows inside): the logits every other path must give."""
    return model.context(400).eval(IDS, all_logits=True)


def test_layer_kinds_and_memory(model):
    hp = model.hparams
    assert hp.conv_layers == (0, 1, 3) and hp.n_conv == 3 and hp.n_head_kv == 2 and hp.rope_neox
    assert hp.swa_layers == () and model.weights.c_hparams["n_conv"] == 3
    for n_ctx, rows in ((64, 64), (1000, RING)):
        mem = model.memory(n_ctx)
        conv = 3 * rows * 64 * 4                       # 3 conv layers, (rows, n_embd) F32
        assert mem["conv_state"] == conv
        assert mem["cache"] == conv + 1 * n_ctx * 2 * 16 * 2 * 2    # 1 attention layer: K and V, 2 heads of 16, F16
        assert model.context(n_ctx).runner.kv_bytes == mem["cache"]
    assert "cache" not in model.memory()


def test_past_the_ring_matches_oracle(path, model, full):
    """300 positions (the 258-row ring wraps): the prompt in one call, then in two calls and decode steps (the
    state carried across calls), and one token per call from the start."""
    from oracle import Oracle
    want = Oracle(path).forward(IDS, kv_f16=True)
    np.testing.assert_allclose(full, want, atol=1e-3, rtol=1e-3)
    ctx = model.context(400)
    got = np.concatenate([ctx.eval(IDS[:7], all_logits=True), ctx.eval(IDS[7:280], all_logits=True),
                          [ctx.runner.step_py(t) for t in IDS[280:]]])
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=1e-3)
    ctx = model.context(400)
    np.testing.assert_allclose([ctx.runner.step_py(t) for t in IDS], want, atol=1e-3, rtol=1e-3)


def test_rewind_within_the_ring(model, full):
    """A rewind keeps the conv state the ring holds: evaluating the rest again gives the same logits, bit for bit;
    past the ring (more than 256 back from 300) it cannot, and reset starts from a zero state over stale rows."""
    ctx = model.context(400)
    ctx.eval(IDS)
    assert ctx.runner.can_rewind(300 - 256) and not ctx.runner.can_rewind(300 - 257)
    assert ctx.reusable(40) == 0 and ctx.reusable(290) == 290 and ctx.runner.can_rewind(0)
    with pytest.raises(ValueError, match="short-convolution"):
        ctx.rewind(20)
    for k in (299, 297, 150, 300 - 256):
        ctx.rewind(k)
        np.testing.assert_array_equal(ctx.eval(IDS[k:], all_logits=True), full[k:])
    ctx.reset()
    np.testing.assert_array_equal(ctx.eval(IDS[:20], all_logits=True), full[:20])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 100, 300 - 256, 298])
def test_copy_prefix(model, full, n):
    """A copied prefix carries the conv state: the copy (over another sequence's stale rings) continues as the
    source did. A source that has moved on more than 256 positions past n cannot give it."""
    src = model.context(400)
    src.eval(IDS[:min(300, n + 200)])
    dst = model.context(400)
    dst.eval(IDS[::-1][:290])
    dst.runner.copy_prefix(src.runner, n)
    np.testing.assert_array_equal(dst.eval(IDS[n:], all_logits=True), full[n:])
    if 0 < n < 40:
        src.eval(IDS[n + 200:])
        with pytest.raises(ValueError, match="short-convolution"):
            dst.runner.copy_prefix(src.runner, n)


def test_batched_rows_equal_each_alone(model):
    """Several sequences' prompts and decode steps in one pass (each row reads its own sequence's ring), bit for
    bit as each alone; one prompt longer than a chunk."""
    check_same(model, decode_schedules(np.random.default_rng(0), 100, [1, 7, 20, 300], 5), [32, 32, 64, 320], 2)


def test_all_conv_and_all_attention_layers(tmp_path):
    from oracle import Oracle
    ids = IDS[:12]
    for conv in ((0, 1), ()):
        p = models.build(tmp_path / f"c{len(conv)}.gguf", arch="lfm2", conv_layers=conv)
        m = Model(p, n_threads=2)
        assert m.hparams.conv_layers == conv
        np.testing.assert_allclose(m.context(16).eval(ids, all_logits=True), Oracle(p).forward(ids, kv_f16=True),
                                   atol=1e-3, rtol=1e-3)


def test_sliding_window_applies_to_the_attention_layers(tmp_path):
    from oracle import Oracle
    p = models.build(tmp_path / "w.gguf", arch="lfm2", n_layer=3, conv_layers=(1,),
                     meta={"attention.sliding_window": 4})
    m = Model(p, n_threads=2)
    assert m.hparams.swa_layers == (0, 2) and m.hparams.n_swa == 4
    ids = IDS[:20]
    np.testing.assert_allclose(m.context(32).eval(ids, all_logits=True), Oracle(p).forward(ids, kv_f16=True),
                               atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("meta, match", [
    ({"shortconv.l_cache": 1}, r"lfm2\.shortconv\.l_cache = 1 is out of range"),
    ({"shortconv.l_cache": 2**31 - 1}, r"lfm2\.shortconv\.l_cache = 2147483647 is out of range"),
    ({"shortconv.l_cache": -3.0}, r"lfm2\.shortconv\.l_cache must be an integer"),
    ({"shortconv.l_cache": 4}, r"blk\.0\.shortconv\.conv\.weight' has shape \(64, 3\), expected \(64, 4\)"),
    ({"attention.head_count_kv": [0, 0, 2]}, r"lfm2\.attention\.head_count_kv: expected 4 integers"),
    ({"attention.head_count_kv": [0, 0, 2, 0, 0]}, r"lfm2\.attention\.head_count_kv: expected 4 integers"),
    ({"attention.head_count_kv": [0.0, 0.0, 2.0, 0.0]}, r"lfm2\.attention\.head_count_kv: expected 4 integers"),
    ({"attention.head_count_kv": [0, 0, -2, 0]}, r"lfm2\.attention\.head_count_kv: values out of range"),
    ({"attention.head_count_kv": [0, 0, 2**31 - 1, 0]}, r"lfm2\.attention\.head_count_kv: values out of range"),
    ({"attention.head_count_kv": [0, 4, 2, 0]}, r"lfm2\.attention\.head_count_kv: attention layers with different"),
    ({"attention.head_count_kv": [0, 0, 3, 0]}, r"head_count 4 is not a multiple of lfm2\.attention\.head_count_kv 3"),
    ({"attention.causal": False}, r"lfm2\.attention\.causal = false"),
])
def test_hostile_hyperparameters_are_named(tmp_path, meta, match):
    p = models.build(tmp_path / "h.gguf", **LAYOUT, meta=meta)
    with pytest.raises(GGUFError, match=match):
        Model(p)


def test_missing_l_cache_or_tensor_is_named(tmp_path):
    from fastgguf import GGUFFile, GGUFWriter
    from fastgguf.gguf.quantize import copy_metadata
    p = models.build(tmp_path / "a.gguf", **LAYOUT)
    with GGUFFile(p) as f:
        for drop_key, drop_tensor in (("lfm2.shortconv.l_cache", None), (None, "blk.1.shortconv.out_proj.weight"),
                                      (None, "blk.2.attn_q_norm.weight")):
            w = GGUFWriter()
            copy_metadata(f, w, skip=("general.alignment", drop_key))
            for name, ti in f.tensors.items():
                if name != drop_tensor:
                    w.add_tensor(name, f.tensor(name), ggml_type=ti.type, shape=tuple(ti.shape))
            out = w.write(str(tmp_path / "b.gguf"))
            with pytest.raises(GGUFError, match=f"missing (metadata key|tensor) '{drop_key or drop_tensor}'"):
                Model(out)


def test_speculative_decoding_equals_plain(tmp_path):
    """Drafts rejected (a random draft model), accepted (the model drafting itself) or looked up in the prompt:
    the target rewinds its conv rings over the rejected tokens and the greedy output stays plain decoding's."""
    target = Model(models.build(tmp_path / "t.gguf", "vocab", vocab="llama-bpe", arch="lfm2", conv_layers=(0,)),
                   n_threads=2)
    noise = Model(models.build(tmp_path / "n.gguf", "vocab", vocab="llama-bpe", seed=3), n_threads=1)
    prompt = "one two three four one two three four one two"
    ref = target.generate(prompt, temperature=0, max_tokens=24)
    for spec in (noise, target, "prompt_lookup"):
        r = target.generate(prompt, temperature=0, max_tokens=24, speculative=spec, draft_max=4)
        assert r.token_ids == ref.token_ids, spec
        if spec is noise:
            assert r.timings.draft_accepted < r.timings.draft_tokens


def test_scheduler_n2_and_prefix_reuse_equal_plain(tmp_path):
    """In the Scheduler the second choice of an n = 2 request copies the first's prefix (copy_prefix: K/V rows and
    conv state), and a later request reuses a slot's cached prefix (a rewind): each gives plain generate()'s text."""
    m = Model(models.build(tmp_path / "t.gguf", "vocab", vocab="llama-bpe", arch="lfm2", conv_layers=(0,)),
              n_threads=2)
    prompt, params = "one two three four one two three four one two", dict(temperature=0, max_tokens=12)
    ids = list(m.tokenize(prompt))
    ref = m.generate(prompt, **params)

    first, again, usage = models.scheduler_n2_then_1(m, ids, params, 128)
    assert first == [ref.text, ref.text] and again == ref.text
    assert usage.cached_tokens > 0


def test_absent_head_count_kv_means_attention_everywhere(tmp_path):
    """As llama.cpp's get_key_or_arr: no attention.head_count_kv is head_count KV heads in every layer."""
    from fastgguf import GGUFFile, GGUFWriter
    from fastgguf.gguf.quantize import copy_metadata
    p = models.build(tmp_path / "a.gguf", arch="lfm2", conv_layers=(), n_head_kv=4)
    with GGUFFile(p) as f:
        w = GGUFWriter()
        copy_metadata(f, w, skip=("general.alignment", "lfm2.attention.head_count_kv"))
        for name, ti in f.tensors.items():
            w.add_tensor(name, f.tensor(name), ggml_type=ti.type, shape=tuple(ti.shape))
        out = w.write(str(tmp_path / "b.gguf"))
    hp = Model(out).hparams
    assert hp.n_head_kv == 4 and hp.conv_layers == () and hp == Model(p).hparams
