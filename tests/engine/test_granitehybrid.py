"""granitehybrid (fastgguf/arch/granitehybrid.py): Mamba-2 layers beside attention layers, granite's scales, a dense
or mixture-of-experts FFN. Its logits against llama.cpp (both paths) are in test_tiny_references.py; here against
the float64 oracle (both paths; NoPE, experts with a shared expert, only Mamba-2 layers), the state that holds the
newest position only (rewinds to 0 alone, cached decode equal to recomputing, prefix copies of a whole sequence,
speculative decoding and the Scheduler's n = 2 still plain decoding's output), batched rows equal to each alone,
memory, and hostile hyperparameters."""
import numpy as np
import pytest

import models
from fastgguf.engine.model import Model
from fastgguf.gguf import GGUFError
from oracle import Oracle
from test_batch import check_same, decode_schedules

pytestmark = pytest.mark.filterwarnings("ignore:n_ctx=.*exceeds the model's training context:RuntimeWarning")
SCALES = {"embedding_scale": 2.0, "attention.scale": 0.2, "residual_scale": 0.5, "logit_scale": 3.0}
# Mamba-2, attention, Mamba-2: inner width 128, 8 heads of 16 in 2 groups, state 16, 4 conv taps
LAYOUT = dict(arch="granitehybrid", n_layer=3, ssm_layers=(0, 2), meta=SCALES)
IDS = [int(t) for t in np.random.default_rng(6).integers(0, 100, 20)]


def build(path, preset="tiny", **kw):
    return models.build(path, preset, seed=5, **{**LAYOUT, **kw})


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return build(tmp_path_factory.mktemp("granitehybrid") / "m.gguf")


@pytest.fixture(scope="module")
def model(path):
    return Model(path, n_threads=2)


def test_hparams_and_memory(model):
    hp = model.hparams
    assert hp.ssm_layers == (0, 2) and hp.n_head_kv == 2 and not hp.rope_neox and hp.nope_layers == ()
    assert (hp.ssm_d_conv, hp.ssm_d_inner, hp.ssm_d_state, hp.ssm_n_head, hp.ssm_n_group) == (4, 128, 16, 8, 2)
    assert hp.residual_scale == 0.5 and hp.embd_scale == 2.0
    state = 2 * (3 * (128 + 2 * 2 * 16) + 128 * 16) * 4   # 2 layers: conv inputs and scan state, F32
    for n_ctx in (16, 1000):
        mem = model.memory(n_ctx)
        assert mem["conv_state"] == 0 and mem["recurrent_state"] == state
        assert mem["cache"] == state + n_ctx * 2 * 16 * 2 * 2   # 1 attention layer: K and V, 2 heads of 16, F16
        assert model.context(n_ctx).runner.kv_bytes == mem["cache"]
    assert model.context(16).runner.snapshot()[2].nbytes == state   # speculative decoding's snapshot holds it all


def test_matches_the_oracle(path, model):
    want = Oracle(path).forward(IDS, kv_f16=True)
    for got in models.both_paths(model, IDS):
        np.testing.assert_allclose(got, want, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("kw", [
    {"meta": {**SCALES, "rope.scaling.finetuned": False}},              # NoPE, as Granite 4.0 H files
    {"preset": "moe", "shared": 40, "ssm_layers": (1,)},                # experts with a shared expert
    {"ssm_layers": (0, 1, 2), "meta": {}},                              # only Mamba-2 layers, no scales
    {"ssm_heads": 4, "ssm_groups": 4, "ssm_state": 8, "ssm_conv": 2},   # a group per head, 2 taps
], ids=["nope", "moe-shared", "all-mamba2", "groups"])
def test_variants_match_the_oracle(tmp_path, kw):
    p = build(tmp_path / "v.gguf", **kw)
    m = Model(p, n_threads=2)
    want = Oracle(p).forward(IDS, kv_f16=True)
    for got in models.both_paths(m, IDS):
        np.testing.assert_allclose(got, want, atol=1e-3, rtol=1e-3)


def test_state_holds_the_newest_position_only(model):
    """Decoding on the state gives the logits of recomputing each prefix; a rewind short of the end is refused
    (reusable says 0: start again), to 0 or to the end is fine, and reset starts from a zero state."""
    ctx = model.context(64)
    cached = [ctx.eval(IDS[:6])] + [ctx.eval([t]) for t in IDS[6:]]
    recomputed = [model.context(64).eval(IDS[:k]) for k in range(6, len(IDS) + 1)]
    np.testing.assert_allclose(cached, recomputed, atol=1e-4, rtol=1e-4)
    n = len(IDS)
    assert ctx.reusable(n) == n and ctx.reusable(n - 1) == 0 and ctx.runner.can_rewind(0)
    with pytest.raises(ValueError, match="Mamba-2"):
        ctx.rewind(n - 1)
    ctx.rewind(n)
    ctx.rewind(0)
    np.testing.assert_array_equal(ctx.eval(IDS[:6]), cached[0])
    ctx.reset()
    np.testing.assert_array_equal(ctx.eval(IDS[:6]), cached[0])


def test_copy_prefix_of_a_whole_sequence(model):
    """A copy of all of another context's positions carries its state; of fewer it is refused."""
    src = model.context(64)
    src.eval(IDS[:10])
    dst = model.context(64)
    dst.eval(IDS[::-1][:15])
    dst.runner.copy_prefix(src.runner, 10)
    want = model.context(64).eval(IDS, all_logits=True)
    np.testing.assert_array_equal(dst.eval(IDS[10:], all_logits=True), want[10:])
    with pytest.raises(ValueError, match="Mamba-2"):
        dst.runner.copy_prefix(src.runner, 5)
    dst.runner.copy_prefix(src.runner, 0)
    np.testing.assert_array_equal(dst.eval(IDS, all_logits=True), want)


@pytest.mark.parametrize("n_threads", [1, 2])
def test_batched_rows_equal_each_alone(model, n_threads):
    """Several sequences' prompts and decode steps in one pass (each row reads its own sequence's state): every
    row bit for bit as its sequence alone; one prompt longer than a chunk."""
    check_same(model, decode_schedules(np.random.default_rng(2), 100, [1, 5, 17, 300], 4), [32, 32, 48, 320],
               n_threads)


def test_speculative_and_scheduler_equal_plain(tmp_path):
    """Rejected drafts cannot be rewound out of the state: the snapshot taken before the forward is restored and the
    kept tokens evaluated again, and the greedy output stays plain decoding's. In the Scheduler the second choice of
    an n = 2 request copies the first's whole prompt state."""
    target = Model(build(tmp_path / "t.gguf", "vocab", vocab="llama-bpe"), n_threads=2)
    noise = Model(models.build(tmp_path / "n.gguf", "vocab", vocab="llama-bpe", seed=3), n_threads=1)
    prompt = "one two three four one two three four one two"
    ref = target.generate(prompt, temperature=0, max_tokens=16)
    for spec in (noise, target, "prompt_lookup"):
        r = target.generate(prompt, temperature=0, max_tokens=16, speculative=spec, draft_max=4)
        assert r.token_ids == ref.token_ids, spec
    _scheduler_n2(target, prompt)


def _scheduler_n2(m, prompt):
    from fastgguf.engine.scheduler import Delta, Done, Request, Scheduler
    import threading
    params = dict(temperature=0, max_tokens=12)
    ids, ref = list(m.tokenize(prompt)), m.generate(prompt, **params)
    done, text = threading.Event(), ["", ""]

    def sink(events):
        for e in events:
            if isinstance(e, Delta):
                text[e.index] += e.text
            elif isinstance(e, Done):
                done.set()
    sch = Scheduler(m, parallel=2, n_ctx=128, n_threads=2).start()
    try:
        sch.submit(Request([ids], params, sink, n=2))
        assert done.wait(120)
    finally:
        sch.stop()
    assert text == [ref.text, ref.text]


@pytest.mark.parametrize("meta, match", [
    ({"ssm.inner_size": 64}, r"granitehybrid\.ssm\.inner_size = 64: only 2 \* embedding_length \(128\)"),
    ({"ssm.conv_kernel": 1}, r"granitehybrid\.ssm\.conv_kernel = 1 is out of range"),
    ({"ssm.conv_kernel": 2**31 - 1}, r"granitehybrid\.ssm\.conv_kernel = 2147483647 is out of range"),
    ({"ssm.conv_kernel": 3}, r"blk\.0\.ssm_conv1d\.weight' has shape \(192, 4\), expected \(192, 3\)"),
    ({"ssm.state_size": 0}, r"granitehybrid\.ssm\.state_size = 0 is out of range"),
    ({"ssm.state_size": 2**20}, r"granitehybrid\.ssm\.state_size = 1048576 is out of range"),
    ({"ssm.state_size": 8}, r"blk\.0\.ssm_conv1d\.weight' has shape \(192, 4\), expected \(160, 4\)"),
    ({"ssm.time_step_rank": 3}, r"granitehybrid\.ssm\.time_step_rank 3 must divide"),
    ({"ssm.time_step_rank": 4}, r"blk\.0\.ssm_a' has shape \(8, 1\), expected \(4, 1\)"),
    ({"ssm.group_count": 3}, r"ssm\.group_count 3 divide it"),
    ({"ssm.group_count": 9}, r"granitehybrid\.ssm\.group_count = 9 is out of range \[1, 8\]"),
    ({"ssm.group_count": 1.5}, r"granitehybrid\.ssm\.group_count must be an integer"),
    ({"logit_scale": float("inf")}, r"granitehybrid\.logit_scale = inf must be finite"),
    ({"attention.head_count_kv": [0, 2]}, r"granitehybrid\.attention\.head_count_kv: expected 3 integers"),
])
def test_hostile_hyperparameters_are_named(tmp_path, meta, match):
    p = build(tmp_path / "h.gguf", meta={**SCALES, **meta})
    with pytest.raises(GGUFError, match=match):
        Model(p)


@pytest.mark.parametrize("drop", ["granitehybrid.ssm.state_size", "granitehybrid.ssm.group_count",
                                  "blk.0.ssm_d", "blk.2.ssm_norm.weight", "blk.0.ssm_dt.bias"])
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
