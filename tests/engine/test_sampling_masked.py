"""The allowed-token mask of the sampler (csrc/fg_sample.c fg_sampler_sample_masked through Sampler.sample(mask=)
and generate_ids(constraint=)): a masked-out token is -inf for every stage, so a masked draw equals the unmasked
sampler run on logits whose masked entries are -inf (same seed, same token), and the tokens that can be drawn are
exactly numpy's truncation of the allowed tokens."""
import itertools

import numpy as np
import pytest

from fastgguf._native import generate_ids
from fastgguf.engine.sampler import Sampler
import models

NEG_INF = np.float32(-np.inf)
SIZES = [1, 7, 33, 1000, 49152 + 5]
PARAMS = [
    dict(temperature=0.0),
    dict(temperature=1.5, top_k=1),
    dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    dict(temperature=0.7, top_k=5, top_p=1.0, min_p=0.0),
    dict(temperature=1.0, top_k=200, top_p=1.0, min_p=0.0),  # sparse masks allow fewer than top_k: still top-k
    dict(temperature=1.0, top_k=40, top_p=0.9, min_p=0.05),
    dict(temperature=0.8, top_k=0, top_p=0.9, min_p=0.0),
    dict(temperature=1.2, top_k=0, top_p=1.0, min_p=0.1),
    dict(temperature=1.0, top_k=100000, top_p=0.95, min_p=0.02),
]


def pack(allowed):
    """bool (n,) -> uint32 mask (ceil(n / 32),): bit i of word i // 32 = token i allowed."""
    allowed = np.asarray(allowed, dtype=bool)
    padded = np.zeros(-(-len(allowed) // 32) * 32, dtype=bool)
    padded[:len(allowed)] = allowed
    return np.packbits(padded, bitorder="little").view("<u4").astype(np.uint32)


def random_allowed(rng, n, density):
    """A random allowed set of the given density (at least one token), or every token (density 1)."""
    allowed = rng.random(n) < density
    allowed[rng.integers(n)] = True
    return allowed


def truncation_set(x, allowed, top_k, top_p, min_p):
    """numpy reference: the tokens a sampled (not greedy) draw can return, over the allowed tokens only, and the
    smallest distance of a threshold decision from its boundary (to skip cases rounding could flip)."""
    ids = np.flatnonzero(allowed & np.isfinite(x))
    ids = ids[np.lexsort((ids, -x[ids].astype(np.float64)))]  # logit descending, id ascending
    if top_k > 0:
        ids = ids[:top_k]
    v = x[ids].astype(np.float64)
    p = np.exp(v - v[0])
    p /= p.sum()
    keep, margin = len(ids), np.inf
    if top_p < 1.0:
        cum = np.cumsum(p)
        keep = int(np.searchsorted(cum, top_p)) + 1  # smallest prefix with cum >= top_p
        margin = np.min(np.abs(cum - top_p))
    if min_p > 0.0:
        thr = v[0] + np.log(min_p)
        keep = min(keep, max(1, int(np.sum(v >= thr))))
        margin = min(margin, np.min(np.abs(v - thr)))
    return set(ids[:min(keep, len(ids))].tolist()), margin


@pytest.mark.parametrize("n", SIZES)
def test_masked_draw_equals_unmasked_on_neg_inf_logits(n):
    rng = np.random.default_rng(n)
    for kw, density in itertools.product(PARAMS, (0.002, 0.02, 0.5, 0.97, 1.0)):
        x = (rng.standard_normal(n) * 2).astype(np.float32)
        allowed = random_allowed(rng, n, density)
        mask = pack(allowed)
        y = np.where(allowed, x, NEG_INF).astype(np.float32)
        before = x.copy()
        bias = {int(i): float(b) for i, b in zip(rng.integers(0, n, 3), (3.0, -1.0, 0.5))}
        extra = dict(logit_bias=bias, repeat_penalty=1.2, repeat_last_n=16, frequency_penalty=0.1)
        for seed in range(3):
            a, b = Sampler(seed=seed, **kw, **extra), Sampler(seed=seed, **kw, **extra)
            for step in range(4):
                ta, tb = a.sample(x, mask), b.sample(y)
                assert ta == tb, (n, kw, density, seed, step)
                assert allowed[ta]
                a.accept(ta)
                b.accept(tb)
        assert np.array_equal(x, before)  # the caller's logits are restored bit for bit


def test_huge_odd_vocabulary():
    n = 1000003
    rng = np.random.default_rng(3)
    x = rng.standard_normal(n).astype(np.float32)
    for density in (0.001, 0.6, 0.99):
        allowed = random_allowed(rng, n, density)
        mask, y = pack(allowed), np.where(allowed, x, NEG_INF).astype(np.float32)
        assert Sampler(temperature=0).sample(x, mask) == int(np.argmax(y))
        for kw in (dict(top_k=0, top_p=0.9, min_p=0.05), dict(top_k=40)):
            a, b = Sampler(seed=5, **kw), Sampler(seed=5, **kw)
            assert [a.sample(x, mask) for _ in range(3)] == [b.sample(y) for _ in range(3)]


@pytest.mark.parametrize("n", [33, 1000, 49152 + 5])
@pytest.mark.parametrize("kw", [dict(top_k=5, top_p=1.0, min_p=0.0), dict(top_k=0, top_p=0.8, min_p=0.0),
                                dict(top_k=0, top_p=1.0, min_p=0.2), dict(top_k=8, top_p=0.7, min_p=0.1),
                                dict(top_k=0, top_p=0.95, min_p=0.05)])
def test_support_is_numpy_truncation_over_allowed_tokens(n, kw):
    rng = np.random.default_rng(n + 1)
    for _ in range(3):
        while True:  # a case no threshold decision lies within rounding of
            x = rng.standard_normal(n).astype(np.float32)
            allowed = np.zeros(n, dtype=bool)
            allowed[rng.choice(n, size=min(n - 1, 14), replace=False)] = True
            x[~allowed] += 6.0  # banned tokens would dominate every stage if the mask leaked anywhere
            want, margin = truncation_set(x, allowed, kw["top_k"], kw["top_p"], kw["min_p"])
            if margin > 1e-4:
                break
        s = Sampler(temperature=2.0, seed=int(rng.integers(1 << 30)), **kw)
        got = {s.sample(x, pack(allowed)) for _ in range(3000)}
        assert got == want


def test_frequencies_follow_the_allowed_softmax():
    n = 1000
    x = np.full(n, 5.0, dtype=np.float32)  # banned tokens, far likelier than the allowed ones
    ids = np.array([3, 64, 65, 999])
    p = np.array([0.5, 0.3, 0.15, 0.05])
    x[ids] = np.log(p).astype(np.float32)
    allowed = np.zeros(n, dtype=bool)
    allowed[ids] = True
    for kw in (dict(top_k=0), dict(top_k=4), dict(top_k=100)):
        s = Sampler(temperature=1.0, top_p=1.0, min_p=0.0, seed=11, **kw)
        draws = np.array([s.sample(x, pack(allowed)) for _ in range(8000)])
        assert set(draws.tolist()) <= set(ids.tolist())
        freq = np.array([(draws == i).mean() for i in ids])
        assert np.allclose(freq, p, atol=0.025), freq


def test_mask_bits_past_the_vocabulary_are_ignored():
    x = np.array([1.0, 9.0, 3.0, 2.0, 0.0, 5.0, 4.0], dtype=np.float32)
    full = np.array([0xFFFFFFFF, 0xFFFFFFFF], dtype=np.uint32)  # longer than needed, every bit set
    for seed in range(20):
        assert Sampler(seed=seed).sample(x, full) == Sampler(seed=seed).sample(x)
    only_past = np.array([1 << 7 | 1 << 20], dtype=np.uint32)  # tokens 7 and 20 do not exist
    with pytest.raises(ValueError, match="grammar mask"):
        Sampler().sample(x, only_past)
    assert Sampler(temperature=0).sample(x, np.array([1 << 7 | 1 << 2], dtype=np.uint32)) == 2


def test_nothing_allowed_is_an_error_naming_mask_and_logit_bias():
    x = np.arange(100, dtype=np.float32)
    for kw in (dict(temperature=0), dict(temperature=1.0, top_k=0), dict(top_k=10)):
        with pytest.raises(ValueError, match="grammar mask.*logit_bias"):
            Sampler(**kw).sample(x, np.zeros(4, dtype=np.uint32))
        allowed = np.zeros(100, dtype=bool)
        allowed[[5, 40, 41]] = True
        s = Sampler(logit_bias={5: float("-inf"), 40: float("-inf"), 41: float("-inf")}, **kw)
        with pytest.raises(ValueError, match="grammar mask.*logit_bias"):
            s.sample(x, pack(allowed))
        t = s.sample(x)  # unmasked, the other tokens remain
        assert t not in (5, 40, 41) and (t == 99 or kw.get("temperature") != 0)
        allowed[7] = True
        assert s.sample(x, pack(allowed)) == 7  # the one allowed token bias leaves


def test_mask_validation():
    s = Sampler(temperature=0)
    x = np.zeros(70, dtype=np.float32)  # 3 words
    with pytest.raises(TypeError, match="uint32"):
        s.sample(x, [0xFFFFFFFF] * 3)
    with pytest.raises(TypeError, match="uint32"):
        s.sample(x, np.full(3, 0xFFFFFFFF, dtype=np.int64))
    with pytest.raises(TypeError, match="uint32"):
        s.sample(x, np.full(3, 0xFFFFFFFF, dtype=np.uint32).astype(">u4"))
    with pytest.raises(ValueError, match="3"):
        s.sample(x, np.full(2, 0xFFFFFFFF, dtype=np.uint32))
    with pytest.raises(ValueError, match="1-D"):
        s.sample(x, np.full((3, 1), 0xFFFFFFFF, dtype=np.uint32))
    with pytest.raises(ValueError, match="contiguous"):
        s.sample(x, np.full(6, 0xFFFFFFFF, dtype=np.uint32)[::2])
    ro = np.array([0, 0, 1 << 5], dtype=np.uint32)
    ro.flags.writeable = False
    assert s.sample(x, ro) == 69  # read-only masks are fine
    assert s.sample(x, None) == 0


# ---- generate_ids with a constraint, on a tiny random model ----

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from fastgguf.engine.model import Model
    return Model(models.build(tmp_path_factory.mktemp("masked") / "tiny.gguf", "kq", n_layer=1), n_threads=1)


class Allow:
    """A constraint allowing the ids `allowed(step)` returns at each step; records every call."""

    def __init__(self, n_vocab, allowed, fail_at=None):
        self.n_vocab, self.allowed, self.fail_at = n_vocab, allowed, fail_at
        self.fills, self.consumed = 0, []

    def fill_mask(self):
        ok = np.zeros(self.n_vocab, dtype=bool)
        ok[list(self.allowed(len(self.consumed)))] = True
        self.fills += 1
        return pack(ok)

    def consume(self, tok):
        if len(self.consumed) == self.fail_at:
            raise RuntimeError(f"grammar refuses {tok}")
        self.consumed.append(tok)


def run(model, constraint, n=12, eog=(), **kw):
    ctx = model.context(n_ctx=64)
    logits = ctx.eval([1, 2, 3])
    return list(generate_ids(ctx.runner, Sampler(seed=4, **kw), n, list(eog), logits=logits, constraint=constraint))


def test_generate_ids_every_token_obeys_the_mask(tiny):
    v = tiny.n_vocab
    for kw in (dict(temperature=0), dict(temperature=1.0, top_k=0), dict(temperature=0.9, top_k=40, top_p=0.9)):
        even = Allow(v, lambda i: range(0, v, 2))
        out = run(tiny, even, **kw)
        assert len(out) == 12 and all(t % 2 == 0 for t in out)
        assert even.consumed == out and even.fills == 12  # once per token
        free = run(tiny, None, **kw)
        assert run(tiny, Allow(v, lambda i: range(v)), **kw) == free  # an all-allowing constraint changes nothing
    script = [7, 300, 7, 45, 511, 0]
    fixed = Allow(v, lambda i: [script[i]])
    assert run(tiny, fixed, eog=[511], temperature=1.0) == script[:5]  # ends after yielding the eog id
    assert fixed.consumed == script[:5] and fixed.fills == 5


def test_generate_ids_constraint_errors_propagate(tiny):
    v = tiny.n_vocab
    c = Allow(v, lambda i: range(v), fail_at=2)
    ctx = tiny.context(n_ctx=64)
    it = generate_ids(ctx.runner, Sampler(seed=1), 10, [], logits=ctx.eval([1, 2]), constraint=c)
    assert [next(it), next(it)] == c.consumed
    with pytest.raises(RuntimeError, match="refuses"):
        next(it)
    with pytest.raises(ValueError, match="grammar mask"):
        run(tiny, Allow(v, lambda i: [] if i == 3 else range(v)))
    with pytest.raises(ValueError, match="grammar mask"):
        run(tiny, Allow(v, lambda i: [9]), logit_bias={9: float("-inf")})

    class WrongMask:
        def fill_mask(self):
            return np.ones(v, dtype=np.uint8)

        def consume(self, tok):
            pass

    with pytest.raises(TypeError, match="uint32"):
        run(tiny, WrongMask())
    with pytest.raises(TypeError, match="fill_mask"):
        run(tiny, object())
