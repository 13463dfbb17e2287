"""Context.save_state / load_state and pickling (fastgguf.engine.state): a restored context continues bit for bit as
an uninterrupted one; a state for another model or cache shape, a damaged or truncated file, a failed write each
fail cleanly. Sampler.get_state / set_state and pickling."""
import os
import pickle

import numpy as np
import pytest

import models
from fastgguf.engine import state as fstate
from fastgguf.engine.model import Context, Model
from fastgguf.engine.sampler import Sampler
from fastgguf.errors import StateError

SWA = {"arch": "gemma3", "n_layer": 4, "n_ctx": 4096,
       "meta": {"attention.sliding_window": 7, "attention.sliding_window_pattern": 3}}


def greedy(ctx, logits, n):
    """The next n greedy tokens and the logits of each step (eval one token at a time)."""
    toks, all_logits = [], [logits]
    for _ in range(n):
        toks.append(int(np.argmax(logits)))
        logits = ctx.eval([toks[-1]])
        all_logits.append(logits)
    return toks, np.stack(all_logits)


def check_continues(model, prompt, restore, n_ctx=512, steps=8):
    """Eval prompt (all but its last token) in a context, restore(ctx) -> a context holding the same; then the
    last prompt token's logits and a greedy continuation equal, bit for bit, those of the first context."""
    ctx = model.context(n_ctx=n_ctx)
    ctx.eval(prompt[:-1])
    other = restore(ctx)
    assert other.tokens == ctx.tokens and other.n_past == ctx.n_past
    want = greedy(ctx, ctx.eval(prompt[-1:]), steps)
    got = greedy(other, other.eval(prompt[-1:]), steps)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
    return other


def via_file(tmp_path, n_ctx=None):
    def restore(ctx):
        path = tmp_path / "s.fgstate"
        ctx.save_state(path)
        other = ctx.model.context(n_ctx=n_ctx or ctx.n_ctx)
        other.load_state(path)
        return other
    return restore


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return Model(models.build(tmp_path_factory.mktemp("state") / "t.gguf", n_ctx=1024, seed=11))


def prompt(n, n_vocab=100, seed=0):
    return np.random.default_rng(seed).integers(0, n_vocab, n).tolist()


@pytest.mark.parametrize("n_ctx", [512, 64, 1024])  # the saver's n_ctx is 512
def test_round_trip_file(tiny, tmp_path, n_ctx):
    check_continues(tiny, prompt(40), via_file(tmp_path, n_ctx))


def test_round_trip_pickle(tiny):
    other = check_continues(tiny, prompt(40, seed=1), lambda ctx: pickle.loads(pickle.dumps(ctx)))
    assert isinstance(other, Context) and other.model is not tiny and other.model.path == tiny.path


def test_empty_state(tiny, tmp_path):
    ctx = tiny.context(n_ctx=64)
    ctx.save_state(tmp_path / "e")
    other = tiny.context(n_ctx=64)
    other.eval([1, 2, 3])
    other.load_state(tmp_path / "e")
    assert other.n_past == 0 and other.tokens == []


def test_default_model(default_model_path, tmp_path):
    model = Model(default_model_path)
    ids = model.tokenize("The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away,")
    check_continues(model, ids, via_file(tmp_path, 256), n_ctx=128, steps=6)
    assert len(model.sha256()) == 64


@pytest.mark.parametrize("n, n_ctx, load_ctx", [(300, 1024, 320), (150, 200, 1024), (5, 64, 64)])
def test_sliding_window(tmp_path, n, n_ctx, load_ctx):
    """gemma3 with a window of 7: rings of min(n_ctx, 7 + 256) rows, wrapped at 300 positions; loaded into a cache
    with a ring of another size."""
    model = Model(models.build(tmp_path / "g.gguf", **SWA))
    check_continues(model, prompt(n, seed=n), via_file(tmp_path, load_ctx), n_ctx=n_ctx)


def test_no_rewind_before_the_restored_window(tmp_path):
    """copy_prefix and load_state fill a ring with the last 7 positions only: no rewind before them (can_rewind
    knew only the ring's size before), and a second rewind sees what the first one's positions overwrote."""
    model = Model(models.build(tmp_path / "g.gguf", **SWA))
    src, dst = model.context(n_ctx=1024), model.context(n_ctx=1024)
    src.eval(prompt(100))
    src.save_state(tmp_path / "s")
    dst.copy_prefix(src, 100)
    assert not dst.runner.can_rewind(99) and dst.runner.can_rewind(100)
    dst.reset()
    dst.load_state(tmp_path / "s")
    assert dst.reusable(99) == 0
    dst.eval(prompt(3, seed=4))
    assert dst.reusable(100) == 100 and dst.reusable(99) == 0
    src.eval(prompt(250, seed=5))            # 350 positions, a ring of 263: positions 87.. held
    assert src.runner.can_rewind(94) and not src.runner.can_rewind(93)
    src.rewind(300)
    assert not src.runner.can_rewind(93)  # 300 - 263 = 37 would pass, but 37..86 were overwritten


def test_other_model_refused(tiny, tmp_path):
    ctx = tiny.context(n_ctx=128)
    ctx.eval(prompt(20))
    ctx.save_state(tmp_path / "s")
    cases = [(models.build(tmp_path / "b.gguf", n_ctx=1024, seed=12), "sha256"),
             (models.build(tmp_path / "c.gguf", n_ctx=1024, seed=11, n_layer=3), "n_layer is 2, this context's 3"),
             (models.build(tmp_path / "d.gguf", n_ctx=1024, seed=11, n_head_kv=4), "n_head_kv is 2")]
    for path, message in cases:
        other = Model(path).context(n_ctx=128)
        other.eval([1, 2])
        with pytest.raises(StateError, match=message):
            other.load_state(tmp_path / "s")
        assert other.tokens == [1, 2]
    with pytest.raises(StateError, match="20 positions, more than this context's n_ctx=16"):
        tiny.context(n_ctx=16).load_state(tmp_path / "s")
    assert issubclass(StateError, ValueError)


def test_failed_write_keeps_old_state(tiny, tmp_path, monkeypatch):
    ctx = tiny.context(n_ctx=128)
    ctx.eval(prompt(20))
    ctx.save_state(tmp_path / "s")
    before = (tmp_path / "s").read_bytes()

    def fail_midway(f, ids, kv):
        f.write(memoryview(ids).cast("B")[:10])
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(fstate, "_write_body", fail_midway)
    ctx.eval(prompt(5, seed=3))
    with pytest.raises(OSError, match="No space"):
        ctx.save_state(tmp_path / "s")
    assert (tmp_path / "s").read_bytes() == before
    assert os.listdir(tmp_path) == ["s"]  # no temporary file left


def test_hostile_files(tiny, tmp_path):
    """Random truncations and byte flips: a StateError and an unchanged context, or (a flip in a field loading
    does not need: the saver's n_ctx) the same state."""
    ctx = tiny.context(n_ctx=128)
    ctx.eval(prompt(30))
    path = tmp_path / "s"
    ctx.save_state(path)
    good = path.read_bytes()
    want = ctx.eval([7])
    rng = np.random.default_rng(0)
    target = tiny.context(n_ctx=128)
    bad = [good[:n] for n in [0, 7, 8, fstate._HEAD.size - 1, fstate._HEAD.size, *rng.integers(0, len(good), 30)]]
    bad += [good + b"\0"]
    for _ in range(150):
        b = bytearray(good)
        at = int(rng.integers(0, fstate._HEAD.size)) if rng.random() < 0.5 else int(rng.integers(0, len(good)))
        b[at] ^= 1 << int(rng.integers(0, 8))
        bad.append(bytes(b))
    loaded = 0
    for data in bad:
        target.reset()
        target.eval([1, 2, 3])
        path.write_bytes(data)
        try:
            target.load_state(path)
        except StateError:
            assert target.tokens == [1, 2, 3]
            continue
        loaded += 1
        np.testing.assert_array_equal(target.eval([7]), want)
    assert loaded < 20


def test_header_fields(tiny, tmp_path):
    ctx = tiny.context(n_ctx=128)
    ctx.eval(prompt(9))
    ctx.save_state(tmp_path / "s")
    raw = (tmp_path / "s").read_bytes()
    head = dict(zip(fstate._FIELDS, fstate._HEAD.unpack(raw[:fstate._HEAD.size])))
    hp = tiny.hparams
    assert head["magic"] == b"FGSTATE\0" and head["version"] == 1 and head["sha256"].hex() == tiny.sha256()
    assert head["dtype"].rstrip(b"\0") == b"f16" and head["n_ctx"] == 128 and head["n_past"] == 9
    assert (head["n_layer"], head["n_head_kv"], head["head_dim"]) == (hp.n_layer, hp.n_head_kv, hp.head_dim)
    assert len(raw) == fstate._HEAD.size + 9 * 4 + 9 * hp.n_layer * 2 * hp.n_head_kv * hp.head_dim * 2
    path = tmp_path / "v"
    path.write_bytes(raw[:8] + (2).to_bytes(4, "little") + raw[12:])
    with pytest.raises(StateError, match="version 2"):
        ctx.load_state(path)
    path.write_bytes(b"GGUF" + raw[4:])
    with pytest.raises(StateError, match="not a fastgguf state"):
        ctx.load_state(path)


def test_sampler_state():
    logits = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    s = Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5, repeat_penalty=1.3,
                frequency_penalty=0.5, n_vocab=100)
    s.accept_many([1, 2, 3])
    for _ in range(5):
        s.accept(s.sample(logits))
    copies = [pickle.loads(pickle.dumps(s)), Sampler(s.params, n_vocab=100)]
    copies[1].set_state(s.get_state())
    want = []
    for _ in range(20):
        want.append(s.sample(logits))
        s.accept(want[-1])
    for c in copies:
        assert c.history == s.history[:-20] and c.get_state()["rng"] != s.get_state()["rng"]
        got = []
        for _ in range(20):
            got.append(c.sample(logits))
            c.accept(got[-1])
        assert got == want and c.get_state() == s.get_state()
    with pytest.raises(ValueError, match="counts >= 1"):
        copies[0].set_state(dict(s.get_state(), generated=[(1, 10**12)]))


def test_longrope_side_of_the_original_context(tmp_path):
    """LongRoPE (original context 16): keys of a 16-position cache use the short factors, of a longer one the
    long factors, so a state loads only on its own side."""
    from test_rope_scaling import LONGROPE, longrope_tensors
    model = Model(models.build(tmp_path / "lr.gguf", meta=LONGROPE, extra=longrope_tensors()))
    check_continues(model, prompt(6), via_file(tmp_path, 12), n_ctx=16, steps=4)
    check_continues(model, prompt(10), via_file(tmp_path, 64), n_ctx=17, steps=4)
    ctx = model.context(n_ctx=16)
    ctx.eval(prompt(10))
    ctx.save_state(tmp_path / "s")
    with pytest.raises(StateError, match="long_rope is 0, this context's 1"):
        model.context(n_ctx=17).load_state(tmp_path / "s")
