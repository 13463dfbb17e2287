"""lfm2moe (fastgguf/arch/lfm2moe.py): lfm2's short-convolution and attention layers, a dense FFN in the leading
layers and experts after them, chosen with a selection bias (exp_probs_b) that does not weigh them. Its logits
against llama.cpp (both paths) are in test_tiny_references.py; here against the float64 oracle (both paths, each
gating function, no or only dense layers), the bias's effect, cached decode equal to recomputing, batched rows equal
to each alone, and hostile hyperparameters."""
import numpy as np
import pytest

import models
from fastgguf.engine.model import Model
from fastgguf.gguf import GGUFError
from oracle import Oracle
from test_batch import check_same, decode_schedules

pytestmark = pytest.mark.filterwarnings("ignore:n_ctx=.*exceeds the model's training context:RuntimeWarning")
# conv, conv (both dense FFN), attention, conv (experts): 8 experts, 2 used, sigmoid gating
LAYOUT = dict(arch="lfm2moe", n_layer=4, conv_layers=(0, 1, 3), n_dense_lead=2)
IDS = [int(t) for t in np.random.default_rng(5).integers(0, 100, 20)]


def build(path, **kw):
    return models.build(path, "moe", seed=4, **{**LAYOUT, **kw})


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return build(tmp_path_factory.mktemp("lfm2moe") / "m.gguf")


@pytest.fixture(scope="module")
def model(path):
    return Model(path, n_threads=2)


def test_hparams_and_layers(model):
    hp = model.hparams
    assert (hp.n_dense_lead, hp.n_expert, hp.n_expert_used, hp.n_ff, hp.n_ff_exp) == (2, 8, 2, 96, 32)
    assert hp.moe_gating == "sigmoid" and hp.moe_norm_w and hp.conv_layers == (0, 1, 3) and hp.swa_layers == ()
    assert [hp.moe_layer(i) for i in range(4)] == [False, False, True, True]
    c = model.weights.c_hparams
    assert c["n_ff"] == 96 and c["n_expert"] == 8 and c["moe_gating"] == 1 and c["n_conv"] == 3


def test_matches_the_oracle_and_the_bias_chooses(path, model):
    """Both paths against the oracle; the same oracle without the selection bias picks other experts (so the bias
    is used, and used to choose only: with it also in the weights the logits move by far more than 1e-3)."""
    o = Oracle(path)
    want = o.forward(IDS, kv_f16=True)
    chosen = list(o.selected)
    for got in models.both_paths(model, IDS):
        np.testing.assert_allclose(got, want, atol=1e-3, rtol=1e-3)
    for name in [n for n in o.w if n.endswith("exp_probs_b.bias")]:
        o.w[name] = np.zeros_like(o.w[name])
    unbiased = o.forward(IDS, kv_f16=True)
    assert o.selected != chosen and np.max(np.abs(unbiased - want)) > 0.01


@pytest.mark.parametrize("kw", [
    {"meta": {"expert_gating_func": 1}},    # softmax
    {"meta": {"expert_gating_func": 3}},    # the chosen logits' softmax
    {"n_dense_lead": 0, "n_expert": 4, "n_used": 3},
    {"n_dense_lead": 4},                    # all dense: no expert tensors, the expert keys unread
], ids=["softmax", "softmax-weight", "no-dense", "all-dense"])
def test_variants_match_the_oracle(tmp_path, kw):
    p = build(tmp_path / "v.gguf", **kw)
    m = Model(p, n_threads=2)
    want = Oracle(p).forward(IDS, kv_f16=True)
    for got in models.both_paths(m, IDS):
        np.testing.assert_allclose(got, want, atol=1e-3, rtol=1e-3)
    assert m.hparams.n_expert == (0 if kw.get("n_dense_lead") == 4 else kw.get("n_expert", 8))


def test_cached_decode_equals_recompute(model):
    """Decoding on the cache (conv rings, K/V) gives the logits of recomputing each prefix from scratch; a rewind
    within the ring and the same tokens again give them bit for bit."""
    ctx = model.context(64)
    cached = [ctx.eval(IDS[:6])] + [ctx.eval([t]) for t in IDS[6:]]
    recomputed = [model.context(64).eval(IDS[:k]) for k in range(6, len(IDS) + 1)]
    np.testing.assert_allclose(cached, recomputed, atol=1e-4, rtol=1e-4)
    ctx.rewind(len(IDS) - 5)
    again = [ctx.eval([t]) for t in IDS[-5:]]
    np.testing.assert_array_equal(again, cached[-5:])


@pytest.mark.parametrize("n_threads", [1, 2])
def test_batched_rows_equal_each_alone(model, n_threads):
    """Several sequences' prompts and decode steps in one pass: every row bit for bit as its sequence alone."""
    check_same(model, decode_schedules(np.random.default_rng(1), 100, [1, 5, 17], 4), [32, 32, 48], n_threads)


@pytest.mark.parametrize("meta, match", [
    ({"leading_dense_block_count": 5}, r"lfm2moe\.leading_dense_block_count = 5 is out of range \[0, 4\]"),
    ({"leading_dense_block_count": 2**31 - 1}, r"lfm2moe\.leading_dense_block_count = 2147483647 is out of range"),
    ({"leading_dense_block_count": 1.0}, r"lfm2moe\.leading_dense_block_count must be an integer"),
    ({"leading_dense_block_count": 1}, r"missing tensor 'blk\.1\.ffn_gate_inp\.weight'"),
    ({"leading_dense_block_count": 3}, r"missing tensor 'blk\.2\.ffn_gate\.weight'"),
    ({"expert_gating_func": 0}, r"lfm2moe\.expert_gating_func = 0 is not supported"),
    ({"expert_gating_func": 4}, r"lfm2moe\.expert_gating_func = 4 is not supported"),
    ({"expert_gating_func": 2**31 - 1}, r"lfm2moe\.expert_gating_func = 2147483647 is not supported"),
    ({"expert_gating_func": "sigmoid"}, r"lfm2moe\.expert_gating_func must be an integer"),
    ({"expert_group_count": 2}, r"lfm2moe\.expert_group_count > 1"),
    ({"expert_used_count": 9}, r"lfm2moe\.expert_used_count = 9 is out of range \[1, 8\]"),
    ({"expert_feed_forward_length": 0}, r"lfm2moe\.expert_feed_forward_length = 0 is out of range"),
    ({"expert_feed_forward_length": 16}, r"blk\.2\.ffn_gate_exps\.weight' has shape"),
])
def test_hostile_hyperparameters_are_named(tmp_path, meta, match):
    p = build(tmp_path / "h.gguf", meta=meta)
    with pytest.raises(GGUFError, match=match):
        Model(p)


@pytest.mark.parametrize("drop", ["lfm2moe.expert_gating_func", "lfm2moe.expert_feed_forward_length",
                                  "lfm2moe.expert_count", "blk.3.exp_probs_b.bias", "blk.1.ffn_up.weight"])
def test_missing_key_or_tensor_is_named(tmp_path, path, drop):
    from fastgguf import GGUFFile, GGUFWriter
    from fastgguf.gguf.quantize import copy_metadata
    with GGUFFile(path) as f:
        w = GGUFWriter()
        copy_metadata(f, w, skip=("general.alignment", drop))
        for name, ti in f.tensors.items():
            if name != drop:
                w.add_tensor(name, f.tensor(name), ggml_type=ti.type, shape=tuple(ti.shape))
        out = w.write(str(tmp_path / "d.gguf"))
    with pytest.raises(GGUFError, match=f"missing (metadata key|tensor) '{drop}'"):
        Model(out)


def test_wrong_bias_shape_is_named(tmp_path):
    p = build(tmp_path / "b.gguf")
    from fastgguf import GGUFFile, GGUFWriter
    from fastgguf.gguf.quantize import copy_metadata
    with GGUFFile(p) as f:
        w = GGUFWriter()
        copy_metadata(f, w, skip=("general.alignment",))
        for name, ti in f.tensors.items():
            a = f.tensor(name)
            w.add_tensor(name, a[:5] if name == "blk.2.exp_probs_b.bias" else a, ggml_type=ti.type,
                         shape=(5,) if name == "blk.2.exp_probs_b.bias" else tuple(ti.shape))
        out = w.write(str(tmp_path / "s.gguf"))
    with pytest.raises(GGUFError, match=r"blk\.2\.exp_probs_b\.bias: expected shape \(8,\)"):
        Model(out)
