"""RoPE scaling and the llama-family variants that only change RoPE or metadata: YaRN, LongRoPE (phi3 128k),
Llama 3.x frequency factors, Mistral's sliding_window key. Tiny F32 models (tests/models.py) against the float64 oracle
(tests/oracle.py, which implements each scaling from its paper / the Hugging Face formula), and the llama.cpp facts
each follows (fastgguf/arch/base.py Arch.rope_scaling)."""
import math

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from fastgguf.engine.model import Model  # noqa: E402
from fastgguf.gguf import GGUFError  # noqa: E402
import models  # noqa: E402

IDS = [5, 17, 99, 0, 42, 42, 7, 63, 1, 2, 88, 31]
HD = 8  # the tiny files' LongRoPE factor count: head_dim 16 / 2

YARN = {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 4096}
LONGROPE = {"rope.scaling.type": "longrope", "rope.scaling.original_context_length": 16,
            "rope.scaling.attn_factor": 1.19}


def longrope_tensors(seed=1):
    rng = np.random.default_rng(seed)
    return {"rope_factors_long.weight": rng.uniform(1.0, 20.0, HD).astype(np.float32),
            "rope_factors_short.weight": rng.uniform(1.0, 1.5, HD).astype(np.float32)}


def yarn(**more):
    return {k: v for k, v in dict(YARN, **more).items() if v is not None}


def llama3_factors(base, dim, factor=8.0, low=1.0, high=4.0, old_ctx=8192):
    """rope_freqs.weight as llama.cpp's converter writes it for rope_scaling llama3 (conversion/llama.py)."""
    out = []
    for freq in 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float32) / dim):
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def check(path, n_ctx=16, ids=IDS):
    """fastgguf at context size n_ctx (prompt and token by token) against the oracle; returns the logits."""
    from oracle import Oracle
    want = Oracle(path).forward(ids, kv_f16=True, n_ctx=n_ctx)
    m = Model(path, n_threads=2)
    got = m.context(n_ctx).eval(ids, all_logits=True)
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=1e-3)
    ctx = m.context(n_ctx)
    np.testing.assert_allclose(np.array([ctx.runner.step_py(t) for t in ids]), want, atol=1e-3, rtol=1e-3)
    return got


@pytest.mark.parametrize("opts", [
    {"meta": yarn()},
    {"meta": yarn(**{"rope.scaling.attn_factor": 0.8})},
    {"meta": yarn(**{"rope.scaling.factor": 0.5})},                 # factor < 1: no magnitude change
    # seed 3: with seed 0 a roped K lies 4e-8 (relative) from an F16 rounding midpoint, under float32's error,
    # so fastgguf's F16 cache rounds it the other way than the float64 oracle does (a 5e-3 logit difference)
    {"arch": "qwen2", "seed": 3, "meta": yarn(**{"rope.scaling.factor": 8.0})},
    {"arch": "qwen3", "meta": yarn(**{"rope.scaling.original_context_length": 2048})},
    {"arch": "phi3", "meta": yarn()},
])
def test_yarn_matches_oracle(tmp_path, opts):
    path = models.build(tmp_path / "yarn.gguf", **opts)
    got = check(path)
    plain = Model(models.build(tmp_path / "plain.gguf", **dict(opts, meta={}))).context(16).eval(IDS, all_logits=True)
    assert np.max(np.abs(got - plain)) > 0.05    # the scaling really changed something


def test_yarn_hparams(tmp_path):
    """llama.cpp's values (llama_context: yarn_attn_factor = mscale(f) / (1 + 0.1 ln f) * attn_factor; ext 1)."""
    hp = Model(models.build(tmp_path / "y.gguf", meta=yarn(**{"rope.scaling.attn_factor": 0.8}))).hparams
    assert (hp.rope_ext_factor, hp.rope_n_ctx_orig, hp.rope_beta_fast, hp.rope_beta_slow) == (1.0, 4096, 32.0, 1.0)
    assert hp.rope_freq_scale == pytest.approx(0.25) and hp.rope_attn_factor == pytest.approx(0.8, rel=1e-6)
    # the yarn_* keys llama.cpp reads only for other architectures are ignored as there
    hp2 = Model(models.build(tmp_path / "y2.gguf", meta=yarn(**{"rope.scaling.yarn_log_multiplier": 0.1,
                                                             "rope.scaling.yarn_beta_fast": 8.0}))).hparams
    assert (hp2.rope_beta_fast, hp2.rope_attn_factor) == (32.0, pytest.approx(1.0))
    # without original_context_length: the training context
    hp3 = Model(models.build(tmp_path / "y3.gguf", meta=yarn(**{"rope.scaling.original_context_length": None}))).hparams
    assert hp3.rope_n_ctx_orig == 128


def test_yarn_batched_equals_solo(tmp_path):
    """The YaRN table is per row: a sequence's logits do not depend on its batch mates."""
    m = Model(models.build(tmp_path / "y.gguf", meta=yarn()), n_threads=2)
    solo = m.context(16).eval(IDS)
    ctx = m.context(16)
    ctx.eval(IDS[:5])
    np.testing.assert_array_equal(ctx.eval(IDS[5:]), solo)


def test_scaling_type_errors(tmp_path):
    path = models.build(tmp_path / "l3.gguf", meta={"rope.scaling.type": "llama3"})
    with pytest.raises(GGUFError, match="'llama3' is not supported.*rope_freqs.weight"):
        Model(path)
    path = models.build(tmp_path / "d.gguf", meta={"rope.scaling.type": "dynamic"})
    with pytest.raises(GGUFError, match="rope.scaling.type 'dynamic' is not supported"):
        Model(path)


def test_scaling_type_none_ignores_factor(tmp_path):
    """llama.cpp: type none never scales, whatever the factor; a factor without a type is linear."""
    a = Model(models.build(tmp_path / "a.gguf", meta={"rope.scaling.type": "none", "rope.scaling.factor": 4.0}))
    b = Model(models.build(tmp_path / "b.gguf", meta={"rope.scaling.factor": 4.0}))
    assert a.hparams.rope_freq_scale == 1.0 and b.hparams.rope_freq_scale == 0.25


def test_llama3_shaped_file_matches_oracle(tmp_path):
    """Llama 3.1/3.2 as llama.cpp's converter writes them: no rope.scaling keys, the llama3 factors as
    rope_freqs.weight, rope base 500000, GQA, untied output."""
    path = models.build(tmp_path / "l3.gguf", tied=False, rope_base=500000.0,
                     extra={"rope_freqs.weight": llama3_factors(500000.0, 16, old_ctx=64)})
    factors = llama3_factors(500000.0, 16, old_ctx=64)
    assert factors.min() == 1.0 and factors.max() == 8.0 and len(set(factors.tolist())) > 2   # all three regimes
    check(path)


def test_mistral_sliding_window_is_ignored(tmp_path):
    """llama.cpp does not read llama.attention.sliding_window (llama_model_llama::load_arch_hparams): a Mistral
    file attends to the whole context, so the window below (4 < 12 tokens) must change nothing."""
    path = models.build(tmp_path / "mistral.gguf", meta={"attention.sliding_window": 4})
    m = Model(path)
    assert m.hparams.n_swa == 0
    got = check(path)
    plain = Model(models.build(tmp_path / "plain.gguf")).context(16).eval(IDS, all_logits=True)
    np.testing.assert_array_equal(got, plain)


@pytest.mark.parametrize("arch", ["phi3", "llama"])
def test_longrope_picks_factors_by_context(tmp_path, arch):
    """LongRoPE (phi3 128k; llama with type longrope): a context longer than original_context_length (16) uses
    rope_factors_long, else rope_factors_short (llama_model::get_rope_factors), cos/sin times attn_factor."""
    opts = {"tied": False} if arch == "phi3" else {}
    path = models.build(tmp_path / "lr.gguf", arch=arch, meta=LONGROPE, extra=longrope_tensors(), **opts)
    short, long = check(path, n_ctx=16), check(path, n_ctx=17)
    assert np.max(np.abs(short - long)) > 0.05
    assert Model(path).hparams.rope_attn_factor == pytest.approx(1.19)


def test_longrope_sequences_of_both_kinds_in_one_batch(tmp_path):
    """The choice is per sequence (its cache's n_ctx), also when sequences share one batched forward pass."""
    from fastgguf.engine.batch import forward_batch
    path = models.build(tmp_path / "lr.gguf", arch="phi3", meta=LONGROPE, extra=longrope_tensors())
    m = Model(path, n_threads=2)
    a, b = m.context(16), m.context(64)
    want = [m.context(16).eval(IDS), m.context(64).eval(IDS)]
    got = forward_batch(m, [(a, IDS), (b, IDS)])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_longrope_tensor_errors(tmp_path):
    t = longrope_tensors()
    path = models.build(tmp_path / "one.gguf", arch="phi3", meta=LONGROPE,
                        extra={"rope_factors_long.weight": t["rope_factors_long.weight"]})
    with pytest.raises(GGUFError, match="rope_factors_long.weight and rope_factors_short.weight come together"):
        Model(path)
    path = models.build(tmp_path / "qwen.gguf", arch="qwen2", bias=False, meta=LONGROPE, extra=t)   # llama.cpp: unknown
    with pytest.raises(GGUFError, match="rope_factors_long.weight"):
        Model(path)
    path = models.build(tmp_path / "llama.gguf", extra=t)        # llama without type longrope: unknown, as there
    with pytest.raises(GGUFError, match="rope_factors_long.weight"):
        Model(path)


@pytest.mark.parametrize("key", ["context_length", "rope.scaling.original_context_length"])
def test_context_lengths_past_c_int_are_refused(tmp_path, key):
    """A context length past a C int is named, not an OverflowError from the native layer (found by the hparams
    fuzz target: context_length 2**31 became the default original context)."""
    with pytest.raises(GGUFError, match=key.replace(".", r"\.")):
        Model(models.build(tmp_path / "big.gguf", meta={key: 1 << 31}))
    Model(models.build(tmp_path / "max.gguf", meta={key: (1 << 31) - 1}))
