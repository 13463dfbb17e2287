"""Samplers (csrc/fg_sample.c through fastgguf._native.Sampler, built by fastgguf.engine.sampler.Sampler)."""
import math

import numpy as np
import pytest

from fastgguf._native import argmax, top_k
from fastgguf.engine.sampler import Sampler

NEG_INF = float("-inf")


def probs_logits(p):
    return np.log(np.asarray(p, dtype=np.float64)).astype(np.float32)


def support(sampler, logits, n=400):
    return {sampler.sample(logits) for _ in range(n)}


def test_argmax_and_top_k_building_blocks():
    rng = np.random.default_rng(0)
    for n in (1, 7, 63, 64, 65, 1000, 49152):
        x = rng.standard_normal(n).astype(np.float32)
        assert argmax(x) == int(np.argmax(x))
        for k in (1, 5, 40, n):
            ids, vals = top_k(x, k)
            want = np.argsort(-x, kind="stable")[:k]
            assert ids.tolist() == want.tolist()
            assert np.array_equal(vals, x[want])
    x = np.array([1, 3, 3, NEG_INF, np.nan, 3, 2], dtype=np.float32)
    assert argmax(x) == 1  # first of the ties, NaN ignored
    assert top_k(x, 4)[0].tolist() == [1, 2, 5, 6]
    assert top_k(x, 10)[0].tolist() == [1, 2, 5, 6, 0]  # -inf and NaN never selected
    assert argmax(np.array([NEG_INF, np.nan], dtype=np.float32)) == -1


def test_argmax_long_vectors_ties_nan_and_inf():
    """The SIMD blocks of 16 (x86): NaN ignored in every lane, the first of tied maxima wherever the blocks split
    them, -1 when nothing is above -inf, +0 and -0 equal."""
    rng = np.random.default_rng(2)
    for n in (16, 17, 31, 48, 100, 49152):
        for _ in range(20):
            x = rng.integers(-3, 4, n).astype(np.float32)  # many ties
            x[rng.random(n) < 0.2] = np.nan
            x[rng.random(n) < 0.2] = NEG_INF
            finite = np.where(np.isnan(x), NEG_INF, x)
            want = int(np.argmax(finite)) if finite.max() > NEG_INF else -1
            assert argmax(x) == want
        x = np.full(n, np.nan, dtype=np.float32)
        x[::3] = NEG_INF
        assert argmax(x) == -1
        x = np.full(n, -1.0, dtype=np.float32)
        x[n - 1], x[n // 2] = 0.0, -0.0
        assert argmax(x) == n // 2


def test_greedy_is_argmax_and_top_k_1_is_greedy():
    rng = np.random.default_rng(1)
    g = Sampler(temperature=0.0, seed=0)
    k1 = Sampler(temperature=1.5, top_k=1, top_p=1.0, min_p=0.0, seed=0)
    for _ in range(50):
        x = rng.standard_normal(49152).astype(np.float32)
        assert g.sample(x) == int(np.argmax(x)) == k1.sample(x)


def test_seed_determinism():
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(5000).astype(np.float32) for _ in range(30)]
    for kw in (dict(), dict(top_k=0), dict(top_k=0, top_p=1.0, min_p=0.0), dict(top_k=0, min_p=0.0)):
        a = [Sampler(seed=7, **kw).sample(x) for x in xs]
        s1, s2, s3 = Sampler(seed=7, **kw), Sampler(seed=7, **kw), Sampler(seed=8, **kw)
        seq1, seq2, seq3 = [s1.sample(x) for x in xs], [s2.sample(x) for x in xs], [s3.sample(x) for x in xs]
        assert seq1 == seq2 and seq1 != seq3
        assert a[0] == seq1[0]
    s = Sampler()
    assert isinstance(s.seed, int)  # drawn at random, reported


def test_distribution_follows_softmax_at_temperature():
    p = np.array([0.5, 0.3, 0.15, 0.05])
    x = probs_logits(p)
    for top_k_ in (0, 4):  # full-vocabulary path and top-k path
        s = Sampler(temperature=1.0, top_k=top_k_, top_p=1.0, min_p=0.0, seed=3)
        counts = np.bincount([s.sample(x) for _ in range(8000)], minlength=4) / 8000
        assert np.allclose(counts, p, atol=0.025), counts
    # temperature 0.5 squares the probabilities (renormalized)
    q = p ** 2 / (p ** 2).sum()
    s = Sampler(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0, seed=4)
    counts = np.bincount([s.sample(x) for _ in range(8000)], minlength=4) / 8000
    assert np.allclose(counts, q, atol=0.025), counts


@pytest.mark.parametrize("top_k_", [0, 3, 1000])
def test_top_p_support(top_k_):
    x = np.full(1000, -30.0, dtype=np.float32)  # 996 tokens of negligible mass
    x[[10, 20, 30, 40]] = probs_logits([0.5, 0.3, 0.15, 0.05])
    base = dict(temperature=1.0, top_k=top_k_, min_p=0.0, seed=5)
    assert support(Sampler(top_p=0.45, **base), x) == {10}
    assert support(Sampler(top_p=0.75, **base), x) == {10, 20}
    want = {10, 20, 30}
    assert support(Sampler(top_p=0.85, **base), x) == want
    if top_k_ == 3:  # top-p measures mass within the top-k: 0.5/0.95 + 0.3/0.95 = 0.84 >= 0.82
        assert support(Sampler(top_p=0.82, **base), x) == {10, 20}


@pytest.mark.parametrize("top_k_", [0, 10])
def test_min_p_support(top_k_):
    x = np.full(1000, -30.0, dtype=np.float32)
    x[[10, 20, 30, 40]] = probs_logits([0.5, 0.3, 0.15, 0.05])
    base = dict(temperature=1.0, top_k=top_k_, top_p=1.0, seed=6)
    assert support(Sampler(min_p=0.25, **base), x) == {10, 20, 30}  # p >= 0.125
    assert support(Sampler(min_p=0.5, **base), x) == {10, 20}       # p >= 0.25
    assert support(Sampler(min_p=1.0, **base), x) == {10}
    # min-p and top-p together keep the shorter prefix
    assert support(Sampler(min_p=0.25, top_p=0.75, temperature=1.0, top_k=top_k_, seed=6), x) == {10, 20}


def test_top_k_support():
    x = probs_logits([0.3, 0.25, 0.2, 0.15, 0.1])
    assert support(Sampler(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0, seed=7), x) == {0, 1}
    assert support(Sampler(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0, seed=7), x) == {0, 1, 2, 3}


def test_repeat_penalty_changes_exactly_the_window():
    x = np.array([2.0, -2.0, 1.0, -1.0, 0.5, 0.0], dtype=np.float32)
    s = Sampler(repeat_penalty=2.0, repeat_last_n=3)
    for t in (4, 0, 1, 1, 3):  # window (last 3): 1, 1, 3
        s.accept(t, generated=False)
    y = s.apply(x)
    want = x.copy()
    want[1] = -4.0  # negative: multiplied, once although it appears twice
    want[3] = -2.0
    assert np.array_equal(y, want)
    s = Sampler(repeat_penalty=2.0, repeat_last_n=-1)  # -1: the whole history
    s.accept_many([0, 4, 5])
    assert np.array_equal(s.apply(x), np.array([1.0, -2.0, 1.0, -1.0, 0.25, 0.0], dtype=np.float32))
    s = Sampler(repeat_penalty=2.0, repeat_last_n=0)
    s.accept_many([0, 1])
    assert np.array_equal(s.apply(x), x)


def test_frequency_presence_penalties_openai():
    x = np.array([2.0, -2.0, 1.0, -1.0, 0.5, 0.0], dtype=np.float32)
    s = Sampler(frequency_penalty=0.5, presence_penalty=0.25)
    s.accept(0, generated=False)  # prompt tokens do not count
    for t in (2, 2, 2, 3):
        s.accept(t)
    want = x.copy()
    want[2] -= 3 * 0.5 + 0.25
    want[3] -= 1 * 0.5 + 0.25
    assert np.allclose(s.apply(x), want)
    s.reset()
    assert np.array_equal(s.apply(x), x) and s.history == []


def test_logit_bias_and_ban():
    x = np.array([3.0, 2.0, 1.0], dtype=np.float32)
    s = Sampler(temperature=0.0, logit_bias={0: NEG_INF})
    assert s.sample(x) == 1
    assert np.array_equal(s.apply(x), np.array([NEG_INF, 2.0, 1.0], dtype=np.float32))
    s = Sampler(temperature=0.0, logit_bias={"2": 5.0, 1: -0.5})  # string keys as in OpenAI JSON
    assert s.sample(x) == 2 and s.logit_bias == {2: 5.0, 1: -0.5}
    s = Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, logit_bias={0: NEG_INF, 2: NEG_INF}, seed=1)
    assert support(s, x, 100) == {1}
    with pytest.raises(ValueError, match="every logit"):
        Sampler(logit_bias={0: NEG_INF, 1: NEG_INF, 2: NEG_INF}).sample(x)


def test_sample_leaves_logits_unchanged():
    rng = np.random.default_rng(9)
    x = rng.standard_normal(300).astype(np.float32)
    before = x.copy()
    s = Sampler(repeat_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.1, logit_bias={5: 2.0, 7: NEG_INF})
    s.accept_many(range(0, 300, 3))
    for t in (1, 1, 2):
        s.accept(t)
    for _ in range(10):
        s.sample(x)
    assert np.array_equal(x, before)
    ro = before.copy()
    ro.flags.writeable = False
    s.sample(ro)  # read-only input is fine


def test_non_float32_input_and_shapes():
    s = Sampler(temperature=0.0)
    assert s.sample([0.0, 5.0, 1.0]) == 1
    assert s.sample(np.array([0.0, 1.0, 9.0], dtype=np.float64)) == 2
    with pytest.raises(ValueError):
        s.sample(np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError):
        s.sample(np.zeros(0, dtype=np.float32))
    s = Sampler(n_vocab=4)
    with pytest.raises(ValueError, match="4"):
        s.sample(np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="out of range"):
        s.accept(4)


@pytest.mark.parametrize("kw", [
    dict(temperature=-0.1), dict(temperature=math.nan), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.01),
    dict(min_p=-0.1), dict(min_p=1.1), dict(repeat_penalty=0.0), dict(repeat_last_n=-2),
    dict(frequency_penalty=math.inf), dict(logit_bias={-1: 1.0}), dict(logit_bias={10: 1.0}, n_vocab=10),
    dict(logit_bias={1: math.inf}), dict(logit_bias={1: math.nan}), dict(logit_bias={"x": 1.0}),
])
def test_parameter_validation_value_errors(kw):
    with pytest.raises(ValueError):
        Sampler(**kw)


@pytest.mark.parametrize("kw", [dict(top_k=2.5), dict(temperature="hot"), dict(seed=1.5), dict(logit_bias=[1, 2]),
                                dict(top_k=True)])
def test_parameter_validation_type_errors(kw):
    with pytest.raises(TypeError):
        Sampler(**kw)


def test_repr_and_properties():
    s = Sampler(temperature=0.7, top_k=20, top_p=0.9, min_p=0.1, seed=3)
    assert (s.top_k, s.seed) == (20, 3) and abs(s.temperature - 0.7) < 1e-6
    assert "top_k=20" in repr(s)


def test_infinite_and_nan_logits():
    x = np.array([0.0, np.inf, 1.0, np.nan, np.inf], dtype=np.float32)
    for kw in (dict(), dict(top_k=0), dict(top_k=0, top_p=1.0, min_p=0.0), dict(top_k=0, min_p=0.0)):
        assert Sampler(seed=1, **kw).sample(x) == 1
    x = np.array([np.nan, 1.0, np.nan, 1.0], dtype=np.float32)
    for kw in (dict(), dict(top_k=0), dict(top_k=0, top_p=1.0, min_p=0.0), dict(temperature=0)):
        assert support(Sampler(seed=1, **{"temperature": 1.0, **kw}), x, 100) <= {1, 3}


def test_huge_token_id_needs_n_vocab():
    with pytest.raises(ValueError, match="too large"):
        Sampler().accept(1 << 30)
    Sampler(n_vocab=1 << 25).accept((1 << 25) - 1)


def test_tiny_temperature_is_greedy():
    rng = np.random.default_rng(11)
    x = rng.standard_normal(5000).astype(np.float32)
    for t in (1e-45, 1e-30, 1e-6):
        for kw in (dict(), dict(top_k=0), dict(top_k=0, top_p=1.0, min_p=0.0)):
            assert Sampler(temperature=t, seed=1, **kw).sample(x) == int(np.argmax(x))
