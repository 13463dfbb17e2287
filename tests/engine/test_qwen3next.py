"""qwen3next (fastgguf/arch/qwen35.py Qwen3Next): qwen35moe's layers with plain RoPE, v head h on q/k head
h // (v heads / q/k heads), and the fused ssm_in / ssm_ba of its files. Here: both paths equal, cached decode
equal to a full recompute, ssm_in equal to its converted attn_qkv / attn_gate form, the Scheduler's n = 2 then 1
equal to plain decoding, hostile keys named. Against llama.cpp: tests/engine/test_tiny_references.py (qwen3next,
qwen3next-qkv)."""
import numpy as np
import pytest

import models
from fastgguf.engine.model import Model
from fastgguf.gguf import GGUFError

pytestmark = pytest.mark.filterwarnings("ignore:n_ctx=.*exceeds the model's training context:RuntimeWarning")
IDS = [int(t) for t in np.random.default_rng(5).integers(0, 100, 40)]
NEXT = dict(arch="qwen3next", n_expert=4, shared=32)   # DeltaNet, attention, DeltaNet; S 16, 2 q/k heads, 4 v heads


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return models.build(tmp_path_factory.mktemp("q3n") / "q.gguf", "qwen35", **NEXT)


@pytest.fixture(scope="module")
def model(path):
    return Model(path, n_threads=2)


@pytest.fixture(scope="module")
def full(model):
    return model.context(64).eval(IDS, all_logits=True)


def test_hparams(model):
    hp = model.hparams
    assert hp.dn_layers == (0, 2) and hp.attn_gate and hp.rope_neox and hp.n_rot == 8 and hp.dn_kv_grouped
    assert (hp.dn_k_heads, hp.dn_v_heads, hp.n_expert, hp.n_ff_shexp) == (2, 4, 4, 32)
    assert model.weights.c_hparams["dn_kv_grouped"] == 1


def test_both_paths_equal(model, full):
    batch, decode = models.both_paths(model, IDS)
    np.testing.assert_array_equal(batch, full)
    np.testing.assert_array_equal(decode, full)


def test_cached_decode_equals_recompute(model, full):
    """A prompt, then one token per call on the cache, then more prompt rows: each row as the full recompute's."""
    ctx = model.context(64)
    got = [ctx.eval(IDS[:9], all_logits=True)]
    got.append([ctx.runner.step_py(t) for t in IDS[9:20]])
    got.append(ctx.eval(IDS[20:], all_logits=True))
    np.testing.assert_array_equal(np.concatenate(got), full)


def _as_converted(src, dst):
    """src (ssm_in, legacy) rewritten as the current converter writes it: per q/k head group q|k|v|z split into
    attn_qkv = all q | all k | all v, and attn_gate = all z (convert_hf_to_gguf's Qwen3NextModel)."""
    from fastgguf import GGUFFile, GGUFWriter
    from fastgguf.gguf.quantize import copy_metadata
    dc, S, hk, hv = models.PRESETS["qwen35"].ssm
    r = hv // hk
    with GGUFFile(src) as f:
        w = GGUFWriter()
        copy_metadata(f, w, skip=("general.alignment",))
        for name, ti in f.tensors.items():
            a = f.tensor(name)
            if name.endswith("ssm_in.weight"):   # rows of any type: F32 values or a quantized type's blocks
                g = np.asarray(a).reshape(hk, 2 * S + 2 * r * S, -1)
                b, cols = name[:-len("ssm_in.weight")], int(ti.shape[1])
                qkv = np.concatenate([g[:, :S].reshape(hk * S, -1), g[:, S:2 * S].reshape(hk * S, -1),
                                      g[:, 2 * S:(2 + r) * S].reshape(hv * S, -1)])
                w.add_tensor(b + "attn_qkv.weight", qkv, ggml_type=ti.type, shape=(qkv.shape[0], cols))
                w.add_tensor(b + "attn_gate.weight", np.ascontiguousarray(g[:, (2 + r) * S:].reshape(hv * S, -1)),
                             ggml_type=ti.type, shape=(hv * S, cols))
            else:
                w.add_tensor(name, a, ggml_type=ti.type, shape=tuple(ti.shape))
        return w.write(str(dst))


def test_ssm_in_equals_attn_qkv_form(tmp_path, path, full):
    p = _as_converted(path, tmp_path / "qkv.gguf")
    np.testing.assert_array_equal(Model(p, n_threads=2).context(64).eval(IDS, all_logits=True), full)


def test_q8_0(tmp_path):
    """Q8_0 matrices (ssm_in and ssm_ba split into rows of blocks): both paths and the converted form equal."""
    p = models.build(tmp_path / "q8.gguf", "qwen35", wtype="Q8_0", **NEXT)
    m = Model(p, n_threads=2)
    batch, decode = models.both_paths(m, IDS)
    np.testing.assert_array_equal(decode, batch)
    q = _as_converted(p, tmp_path / "q8qkv.gguf")
    np.testing.assert_array_equal(Model(q, n_threads=2).context(64).eval(IDS, all_logits=True), batch)


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    keys = {"expert_count": 4, "expert_used_count": 2, "expert_feed_forward_length": 32,
            "expert_shared_feed_forward_length": 32}
    p = models.build(tmp_path_factory.mktemp("q3nv") / "t.gguf", "vocab", vocab="llama-bpe", arch="qwen3next",
                     dn_layers=(0,), n_rot=8, n_expert=4, n_ff_exp=32, shared=32, meta=keys)
    return Model(p, n_threads=2)


def test_scheduler_n2_equals_plain(chat_model):
    prompt, params = "one two three four one two three four one two", dict(temperature=0, max_tokens=8)
    ids = list(chat_model.tokenize(prompt))
    ref = chat_model.generate(prompt, **params)
    first, again, usage = models.scheduler_n2_then_1(chat_model, ids, params, 64)
    assert first == [ref.text, ref.text] and again == ref.text
    assert usage.cached_tokens == 0


def test_mtp_blocks_are_ignored(tmp_path, full):
    p = models.build(tmp_path / "mtp.gguf", "qwen35", n_layer=4, meta={"nextn_predict_layers": 1}, **NEXT)
    m = Model(p, n_threads=2)
    assert m.hparams.n_layer == 3
    np.testing.assert_array_equal(m.context(64).eval(IDS, all_logits=True), full)


def test_shared_expert_width_defaults_to_feed_forward_length(tmp_path, full):
    """Without expert_shared_feed_forward_length the shared expert is feed_forward_length wide (llama.cpp's
    n_ff_shexp default), and required."""
    p = models.build(tmp_path / "s.gguf", "qwen35", n_ff=32, meta={"expert_shared_feed_forward_length": None}, **NEXT)
    m = Model(p, n_threads=2)
    assert m.hparams.n_ff_shexp == 32
    np.testing.assert_array_equal(m.context(64).eval(IDS, all_logits=True), full)


@pytest.mark.parametrize("kw, match", [
    (dict(meta={"expert_count": 0}), r"qwen3next\.expert_count must be > 0"),
    (dict(meta={"expert_count": 2**31 - 1}), r"qwen3next\.expert_count = 2147483647 is out of range"),
    (dict(meta={"ssm.group_count": 4}),
     r"'blk\.0\.ssm_in\.weight' has 192 rows, expected 256 \(qwen3next\.ssm\.group_count 4"),
    (dict(meta={"ssm.group_count": 4}, fused=True),
     r"'blk\.0\.ssm_conv1d\.weight' has shape \(128, 4\), expected \(192, 4\)"),
    (dict(meta={"ssm.group_count": 3}), r"qwen3next\.ssm\.time_step_rank 4 \(v heads\) is not a multiple"),
    (dict(meta={"ssm.time_step_rank": 8, "ssm.inner_size": 128}), r"ssm_in\.weight' has 192 rows, expected 320"),
    (dict(meta={"ssm.time_step_rank": 8, "ssm.inner_size": 128}, fused=True),
     r"ssm_ba\.weight' has 8 rows, expected 16"),
    (dict(meta={"ssm.conv_kernel": 1}), r"qwen3next\.ssm\.conv_kernel = 1 is out of range"),
    (dict(meta={"expert_shared_feed_forward_length": 48}), r"blk\.0\.ffn_gate: expected shape \(48, 64\)"),
])
def test_hostile_keys_are_named(tmp_path, kw, match):
    kw = {**NEXT, **kw}
    p = models.build(tmp_path / "h.gguf", "qwen35", **kw)
    with pytest.raises(GGUFError, match=match):
        Model(p)
