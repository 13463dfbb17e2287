"""qwen35 / qwen35moe (fastgguf/arch/qwen35.py): gated DeltaNet layers beside gated attention. Here: the float64
oracle on both paths (dense F32, MoE, Q8_0), the layer kinds and memory, the recurrent state's contract (no rewind
mid-cache, whole-cache reuse and copies, a reset starts from zeros), batched rows equal to each alone, speculative
and Scheduler outputs equal to plain decoding, hostile hyperparameters named (saved states: test_state.py)."""
import numpy as np
import pytest

import models
from fastgguf.engine.model import Model
from fastgguf.gguf import GGUFError
from test_batch import check_same, decode_schedules

pytestmark = pytest.mark.filterwarnings("ignore:n_ctx=.*exceeds the model's training context:RuntimeWarning")
IDS = [int(t) for t in np.random.default_rng(5).integers(0, 100, 40)]
MOE = dict(arch="qwen35moe", n_expert=4, shared=32)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return models.build(tmp_path_factory.mktemp("qwen35") / "q.gguf", "qwen35")   # DeltaNet, attention, DeltaNet


@pytest.fixture(scope="module")
def model(path):
    return Model(path, n_threads=2)


@pytest.fixture(scope="module")
def full(model):
    return model.context(64).eval(IDS, all_logits=True)


def test_layer_kinds_and_memory(model):
    hp = model.hparams
    assert hp.dn_layers == (0, 2) and hp.attn_gate and hp.n_rot == 8 and hp.rope_neox
    assert (hp.dn_conv, hp.dn_state, hp.dn_k_heads, hp.dn_v_heads) == (4, 16, 2, 4)
    rec = 2 * (4 * (2 * 2 + 4) * 16 + 4 * 16 * 16) * 4    # 2 layers: conv ring (4, 128) and (4, 16, 16) F32
    for n_ctx in (16, 1000):
        mem = model.memory(n_ctx)
        assert mem["recurrent_state"] == rec and mem["conv_state"] == 0
        assert mem["cache"] == rec + n_ctx * 2 * 2 * 16 * 2     # 1 attention layer: K and V, 2 heads of 16, F16
        assert model.context(n_ctx).runner.kv_bytes == mem["cache"]


@pytest.mark.parametrize("kw, tol", [({}, 1e-3), (MOE, 1e-3), (dict(wtype="Q8_0"), 1.5)])
def test_matches_oracle_on_both_paths(tmp_path, kw, tol):
    """The prompt in one call, in two calls then one token per call, and one token per call from the start, against
    the float64 oracle (Q8_0: fastgguf quantizes activations, the oracle does not: a loose bound)."""
    from oracle import Oracle
    p = models.build(tmp_path / "m.gguf", "qwen35", **kw)
    m = Model(p, n_threads=2)
    want = Oracle(p).forward(IDS, kv_f16=True)
    full = m.context(64).eval(IDS, all_logits=True)
    np.testing.assert_allclose(full, want, atol=tol, rtol=1e-3)
    ctx = m.context(64)
    got = np.concatenate([ctx.eval(IDS[:7], all_logits=True), ctx.eval(IDS[7:30], all_logits=True),
                          [ctx.runner.step_py(t) for t in IDS[30:]]])
    np.testing.assert_array_equal(got, full)   # a row's logits do not depend on its chunk
    ctx = m.context(64)
    np.testing.assert_array_equal([ctx.runner.step_py(t) for t in IDS], full)


def test_recurrent_state_contract(model, full):
    """The state holds only the last position: no rewind mid-cache (reusable gives 0), the whole cache reused or
    copied; a reset (or a rewind to 0) starts from zeros over the stale state, bit for bit as a fresh context."""
    ctx = model.context(64)
    ctx.eval(IDS[:30])
    r = ctx.runner
    assert r.can_rewind(30) and r.can_rewind(0) and not r.can_rewind(29) and not r.can_rewind(1)
    assert ctx.reusable(20) == 0 and ctx.reusable(30) == 30
    with pytest.raises(ValueError, match="cannot rewind"):
        ctx.rewind(20)
    dst = model.context(64)
    dst.eval(IDS[::-1][:25])
    with pytest.raises(ValueError):
        dst.copy_prefix(ctx, 20)
    dst.copy_prefix(ctx, 30)
    np.testing.assert_array_equal(dst.eval(IDS[30:], all_logits=True), full[30:])
    np.testing.assert_array_equal(ctx.eval(IDS[30:], all_logits=True), full[30:])
    ctx.rewind(0)
    np.testing.assert_array_equal(ctx.eval(IDS[:12], all_logits=True), full[:12])
    ctx.reset()
    np.testing.assert_array_equal(ctx.eval(IDS, all_logits=True), full)


def test_snapshot_restore(model, full):
    """A snapshot taken at n_past, then more tokens, then restore: the cache is back at n_past (DeltaNet states
    copied back, the attention rows after it dropped) and continues bit for bit; a snapshot of other tokens or a
    later position is refused."""
    ctx = model.context(64)
    ctx.eval(IDS[:20])
    snap = ctx.runner.snapshot()
    ctx.eval(IDS[::-1][:9])
    ctx.runner.restore(snap)
    assert ctx.n_past == 20 and ctx.tokens == IDS[:20]
    np.testing.assert_array_equal(ctx.eval(IDS[20:], all_logits=True), full[20:])
    other = model.context(64)
    other.eval(IDS[::-1][:25])
    with pytest.raises(ValueError, match="snapshot"):
        other.runner.restore(snap)
    ctx.reset()
    with pytest.raises(ValueError, match="snapshot"):
        ctx.runner.restore(snap)


def test_rejected_drafts_restore_the_snapshot(model, full):
    """Speculation drops rejected rows of a recurrent model by restoring the snapshot taken before the forward and
    evaluating the accepted tokens again (no reset: it would raise here), landing where plain decoding is."""
    from fastgguf.engine.speculative import Speculation
    ctx = model.context(64)
    ctx.eval(IDS[:10])

    def no_reset():
        raise AssertionError("reset")
    ctx.reset = no_reset
    spec = Speculation(None, ctx)
    spec.drafts, spec._snap = [1], ctx.runner.snapshot()
    ctx.eval(IDS[10:15])                      # the next token and 4 drafts
    spec._truncate(12)                        # 2 kept
    assert ctx.n_past == 12 and ctx.tokens == IDS[:12] and spec._snap is None
    np.testing.assert_array_equal(ctx.eval(IDS[12:], all_logits=True), full[12:])


def test_batched_rows_equal_each_alone(model):
    """Several sequences' prompts and decode steps in one pass (each row on its own sequence's state), bit for bit
    as each alone; one prompt longer than a chunk."""
    check_same(model, decode_schedules(np.random.default_rng(0), 100, [1, 7, 20, 300], 4), [32, 32, 64, 320], 2)


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    p = models.build(tmp_path_factory.mktemp("q35v") / "t.gguf", "vocab", vocab="llama-bpe", arch="qwen35",
                     dn_layers=(0,), n_rot=8)
    return Model(p, n_threads=2)


def test_speculative_decoding_equals_plain(chat_model, tmp_path):
    """Drafts rejected (a random draft model: the target restores its snapshot from before the forward and evaluates
    the accepted tokens again), accepted (the model drafting itself) or looked up in the prompt: the greedy output
    stays plain decoding's."""
    noise = Model(models.build(tmp_path / "n.gguf", "vocab", vocab="llama-bpe", seed=3), n_threads=1)
    prompt = "one two three four one two three four one two"
    ref = chat_model.generate(prompt, temperature=0, max_tokens=16)
    for spec in (noise, chat_model, "prompt_lookup"):
        r = chat_model.generate(prompt, temperature=0, max_tokens=16, speculative=spec, draft_max=4)
        assert r.token_ids == ref.token_ids, spec
        if spec is noise:
            assert r.timings.draft_accepted < r.timings.draft_tokens


def test_scheduler_n2_equals_plain(chat_model):
    """An n = 2 request in the Scheduler (the second choice copies the first's whole prompt, or evaluates it) and a
    later request on the same slots: plain generate()'s text; cached_tokens truthful (a mid-cache prefix is not
    reused)."""
    prompt, params = "one two three four one two three four one two", dict(temperature=0, max_tokens=8)
    ids = list(chat_model.tokenize(prompt))
    ref = chat_model.generate(prompt, **params)

    first, again, usage = models.scheduler_n2_then_1(chat_model, ids, params, 64)
    assert first == [ref.text, ref.text] and again == ref.text
    assert usage.cached_tokens == 0


def test_mtp_blocks_are_ignored(tmp_path, path, full):
    """nextn_predict_layers trailing blocks count in block_count but do not run: their tensors are ignored."""
    p = models.build(tmp_path / "mtp.gguf", "qwen35", n_layer=4, meta={"nextn_predict_layers": 1})
    m = Model(p, n_threads=2)
    assert m.hparams.n_layer == 3 and m.hparams.dn_layers == (0, 2)
    np.testing.assert_array_equal(m.context(64).eval(IDS, all_logits=True), full)


@pytest.mark.parametrize("meta, match", [
    ({"ssm.conv_kernel": 1}, r"qwen35\.ssm\.conv_kernel = 1 is out of range"),
    ({"ssm.conv_kernel": 2**31 - 1}, r"qwen35\.ssm\.conv_kernel = 2147483647 is out of range"),
    ({"ssm.state_size": 0}, r"qwen35\.ssm\.state_size = 0 is out of range"),
    ({"ssm.state_size": 2**31 - 1}, r"qwen35\.ssm\.state_size = 2147483647 is out of range"),
    ({"ssm.group_count": 3}, r"qwen35\.ssm\.time_step_rank 4 \(v heads\) is not a multiple"),
    ({"ssm.group_count": 2**31 - 1}, r"qwen35\.ssm\.group_count = 2147483647 is out of range"),
    ({"ssm.time_step_rank": 0}, r"qwen35\.ssm\.time_step_rank = 0 is out of range"),
    ({"ssm.inner_size": 65}, r"qwen35\.ssm\.inner_size 65 != ssm\.time_step_rank"),
    ({"ssm.inner_size": -1.0}, r"qwen35\.ssm\.inner_size must be an integer"),
    ({"ssm.conv_kernel": 3}, r"ssm_conv1d\.weight' has shape \(128, 4\), expected \(128, 3\)"),
    ({"ssm.state_size": 8, "ssm.inner_size": 32}, r"attn_qkv: expected shape|has shape"),
    ({"attention.recurrent_layers": [True, False]}, r"qwen35\.attention\.recurrent_layers: expected 3 booleans"),
    ({"rope.dimension_sections": [1, 0, 1, 0]}, r"rotated pair 1 takes the fourth \(vision\) position"),
    ({"rope.dimension_sections": [0, 0, 0, 0]}, r"rope\.dimension_sections = \[0, 0, 0, 0\]"),
    ({"rope.dimension_sections": [1, 2]}, r"rope\.dimension_sections: expected 4 non-negative integers"),
    ({"nextn_predict_layers": 3}, r"qwen35\.nextn_predict_layers = 3 is out of range"),
])
def test_hostile_hyperparameters_are_named(tmp_path, meta, match):
    p = models.build(tmp_path / "h.gguf", "qwen35", meta=meta)
    with pytest.raises(GGUFError, match=match):
        Model(p)


def test_moe_without_feed_forward_length(tmp_path):
    """qwen35moe's FFNs are the experts and the shared expert: feed_forward_length may be absent (llama.cpp does not
    require it)."""
    from fastgguf import GGUFFile, GGUFWriter
    from fastgguf.gguf.quantize import copy_metadata
    p = models.build(tmp_path / "a.gguf", "qwen35", **MOE)
    with GGUFFile(p) as f:
        w = GGUFWriter()
        copy_metadata(f, w, skip=("general.alignment", "qwen35moe.feed_forward_length"))
        for name, ti in f.tensors.items():
            w.add_tensor(name, f.tensor(name), ggml_type=ti.type, shape=tuple(ti.shape))
        out = w.write(str(tmp_path / "b.gguf"))
    np.testing.assert_array_equal(Model(out).context(16).eval(IDS[:6]), Model(p).context(16).eval(IDS[:6]))


def test_all_deltanet_and_all_attention_layers(tmp_path):
    from oracle import Oracle
    for dn in ((0, 1, 2), ()):
        p = models.build(tmp_path / f"d{len(dn)}.gguf", "qwen35", dn_layers=dn)
        m = Model(p, n_threads=2)
        assert m.hparams.dn_layers == dn
        np.testing.assert_allclose(m.context(32).eval(IDS[:12], all_logits=True),
                                   Oracle(p).forward(IDS[:12], kv_f16=True), atol=1e-3, rtol=1e-3)
