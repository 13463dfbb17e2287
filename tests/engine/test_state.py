"""Context.save_state / load_state and pickling (fastgguf.engine.state): a restored context continues bit for bit as
an uninterrupted one; a state for another model or cache shape, a damaged or truncated file, a failed write each
fail cleanly; version 1 files still load. The hybrid models' states (short-convolution rings, DeltaNet and Mamba-2
states) likewise, and are loaded whole only. Sampler.get_state / set_state and pickling."""
import os
import re
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

    def fail_midway(f, ids, kv, rec):
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
    check_hostile(tiny, tmp_path)


def test_hybrid_hostile_files_random(tmp_path):
    """The same on a model with Mamba-2 states after its K/V (flips in the states too)."""
    preset, kw = HYBRIDS["granitehybrid"]
    check_hostile(Model(models.build(tmp_path / "h.gguf", preset, seed=9, **kw)), tmp_path)


def check_hostile(tiny, tmp_path):
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
    assert head["magic"] == b"FGSTATE\0" and head["version"] == 2 and head["sha256"].hex() == tiny.sha256()
    assert head["dtype"].rstrip(b"\0") == b"f16,f32" and head["n_ctx"] == 128 and head["n_past"] == 9
    assert (head["n_layer"], head["n_head_kv"], head["head_dim"]) == (hp.n_layer, hp.n_head_kv, hp.head_dim)
    assert head["n_rec"] == 0 and fstate._HEAD.size == 108
    assert len(raw) == fstate._HEAD.size + 9 * 4 + 9 * hp.n_layer * 2 * hp.n_head_kv * hp.head_dim * 2
    path = tmp_path / "v"
    path.write_bytes(raw[:8] + (3).to_bytes(4, "little") + raw[12:])
    with pytest.raises(StateError, match="version 3"):
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


def v1_file(raw):
    """A version 1 file of the same state as the version 2 file raw of an attention-only model (as fastgguf wrote
    before format 2: no n_rec, dtype "f16", the same CRC-32 of ids and K/V)."""
    head = dict(zip(fstate._FIELDS, fstate._HEAD.unpack(raw[:fstate._HEAD.size])))
    assert head["n_rec"] == 0
    v1, fields, dtype = fstate._FORMATS[1]
    head.update(version=1, header_size=v1.size, dtype=dtype.ljust(8, b"\0"))
    return v1.pack(*(head[k] for k in fields)) + raw[fstate._HEAD.size:]


def test_version_1_still_loads(tiny, tmp_path):
    def restore(ctx):
        ctx.save_state(tmp_path / "s")
        (tmp_path / "v1").write_bytes(v1_file((tmp_path / "s").read_bytes()))
        other = tiny.context(n_ctx=256)
        other.load_state(tmp_path / "v1")
        return other
    check_continues(tiny, prompt(30, seed=7), restore)
    head, ids = fstate.read_ids(tmp_path / "v1")
    assert head["version"] == 1 and len(ids) == 29
    ctx = tiny.context(n_ctx=256)
    fstate.load(ctx, tmp_path / "v1", 20)  # a prefix of a version 1 file, as the prompt cache loads one
    assert ctx.tokens == ids[:20].tolist()
    raw = (tmp_path / "v1").read_bytes()
    (tmp_path / "v1").write_bytes(raw[:-1])
    with pytest.raises(StateError, match="truncated"):
        ctx.load_state(tmp_path / "v1")


# the hybrid layouts of test_lfm2, test_lfm2moe, test_qwen35 (and its qwen35moe), test_qwen3next, test_granitehybrid
HYBRIDS = {
    "lfm2": ("tiny", dict(arch="lfm2", n_layer=4, conv_layers=(0, 1, 3))),
    "lfm2moe": ("moe", dict(arch="lfm2moe", n_layer=4, conv_layers=(0, 1, 3), n_dense_lead=2)),
    "qwen35": ("qwen35", {}),
    "qwen35moe": ("qwen35", dict(arch="qwen35moe", n_expert=4, shared=32)),
    "qwen3next": ("qwen35", dict(arch="qwen3next", n_expert=4, shared=32)),
    "granitehybrid": ("tiny", dict(arch="granitehybrid", n_layer=3, ssm_layers=(0, 2))),
}


@pytest.fixture(scope="module", params=sorted(HYBRIDS))
def hybrid(request, tmp_path_factory):
    preset, kw = HYBRIDS[request.param]
    return Model(models.build(tmp_path_factory.mktemp("hybrid") / "h.gguf", preset, seed=9, **kw))


@pytest.mark.filterwarnings("ignore:n_ctx=.*exceeds the model's training context:RuntimeWarning")
@pytest.mark.parametrize("n, n_ctx, load_ctx", [(40, 512, 64), (2, 64, 64), (300, 320, 1024)])
def test_hybrid_round_trip_file(hybrid, tmp_path, n, n_ctx, load_ctx):
    """The recurrent states at n_past: next logits and a greedy continuation bit for bit; 300 positions wrap a
    short-convolution ring (258 rows); 2 positions fill less than its window of inputs."""
    check_continues(hybrid, prompt(n, seed=n), via_file(tmp_path, load_ctx), n_ctx=n_ctx, steps=6)


def test_hybrid_round_trip_pickle(hybrid):
    other = check_continues(hybrid, prompt(25, seed=3), lambda ctx: pickle.loads(pickle.dumps(ctx)), n_ctx=128,
                            steps=6)
    assert other.model.path == hybrid.path


def test_hybrid_layout(hybrid, tmp_path):
    """The header's sizes: K/V of the attention layers only, the states as float32 (the cache's own bits)."""
    ctx = hybrid.context(n_ctx=64)
    ctx.eval(prompt(10))
    ctx.save_state(tmp_path / "s")
    raw = (tmp_path / "s").read_bytes()
    head = dict(zip(fstate._FIELDS, fstate._HEAD.unpack(raw[:fstate._HEAD.size])))
    hp = hybrid.hparams
    n_attn = hp.n_layer - len(set(hp.conv_layers) | set(hp.dn_layers) | set(hp.ssm_layers))
    assert head["n_kv"] == n_attn * 2 * 10 * hp.n_head_kv * hp.head_dim and head["n_rec"] > 0
    assert len(raw) == fstate._HEAD.size + 4 * 10 + 2 * head["n_kv"] + 4 * head["n_rec"]
    _, _, rec = ctx.runner.save_kv()
    assert rec.dtype == np.float32 and rec.tobytes() == raw[-4 * head["n_rec"]:]


def test_hybrid_state_loads_whole_only(hybrid, tmp_path):
    """A recurrent state is that of its last position: no prefix of it loads (the prompt cache's checkpoints)."""
    ctx = hybrid.context(n_ctx=64)
    ctx.eval(prompt(12))
    ctx.save_state(tmp_path / "s")
    assert not fstate.prefix_loadable(hybrid.hparams, 12, 11) and fstate.prefix_loadable(hybrid.hparams, 12, 12)
    other = hybrid.context(n_ctx=64)
    other.eval([1, 2])
    with pytest.raises(StateError, match="first 11 of the state's 12 positions: its .* layers' state is that of"):
        fstate.load(other, tmp_path / "s", 11)
    assert other.tokens == [1, 2]
    fstate.load(other, tmp_path / "s", 12)
    assert other.tokens == ctx.tokens


def field_at(name):
    """The byte offset and size of a header field of the written format."""
    import struct
    at = 0
    for field, code in zip(fstate._FIELDS, [c for c in re.findall(r"\d*[sIQ]", fstate._HEAD.format[1:])]):
        size = struct.calcsize("<" + code)
        if field == name:
            return at, size
        at += size
    raise KeyError(name)


@pytest.mark.parametrize("arch", ["lfm2", "qwen35", "granitehybrid"])
def test_hybrid_hostile_files(tmp_path, arch):
    """A truncated file, a flipped byte in the states, hostile sizes in the header, another model's state: each a
    StateError naming it, the context unchanged."""
    preset, kw = HYBRIDS[arch]
    model = Model(models.build(tmp_path / "h.gguf", preset, seed=9, **kw))
    ctx = model.context(n_ctx=64)
    ctx.eval(prompt(20))
    path = tmp_path / "s"
    ctx.save_state(path)
    good = path.read_bytes()
    flipped = bytearray(good)
    flipped[-5] ^= 0x40  # a float of the last layer's state
    cases = [(good[:-4], "truncated"), (good[:fstate._HEAD.size + 3], "truncated"), (bytes(flipped), "CRC-32")]
    for name, value, message in (("n_rec", 2**64 - 1, "recurrent-state values"), ("n_rec", 0, "recurrent-state"),
                                 ("n_kv", 2**40, "K/V values"), ("n_past", 2**32 - 1, "more than this context"),
                                 ("n_past", 21, "K/V values")):
        at, size = field_at(name)
        b = bytearray(good)
        b[at:at + size] = value.to_bytes(size, "little")
        cases.append((bytes(b), message))
    target = model.context(n_ctx=64)
    for data, message in cases:
        target.reset()
        target.eval([1, 2, 3])
        target.eval([4])
        path.write_bytes(data)
        with pytest.raises(StateError, match=message):
            target.load_state(path)
        assert target.tokens == [1, 2, 3, 4]
    other = Model(models.build(tmp_path / "o.gguf", preset, seed=10, **kw)).context(n_ctx=64)
    path.write_bytes(good)
    with pytest.raises(StateError, match="sha256"):
        other.load_state(path)
    with pytest.raises(StateError, match="another model or cache"):
        tiny_ctx = Model(models.build(tmp_path / "t.gguf", n_ctx=1024, seed=11)).context(n_ctx=64)
        tiny_ctx.load_state(path)
    assert other.n_past == 0 and tiny_ctx.n_past == 0


def test_version_1_file_refused_by_a_hybrid(tiny, hybrid, tmp_path):
    """A version 1 file holds no states: for a hybrid model it is another model's (its n_layer, or its sizes)."""
    ctx = tiny.context(n_ctx=64)
    ctx.eval(prompt(5))
    ctx.save_state(tmp_path / "s")
    (tmp_path / "v1").write_bytes(v1_file((tmp_path / "s").read_bytes()))
    with pytest.raises(StateError, match="another model or cache"):
        hybrid.context(n_ctx=64).load_state(tmp_path / "v1")


def test_runner_load_kv_lengths(tmp_path):
    """fg_kv_load itself refuses lengths other than n's sizes and n past n_ctx (C never reads past a buffer):
    ValueError, the cache unchanged."""
    preset, kw = HYBRIDS["lfm2"]
    model = Model(models.build(tmp_path / "h.gguf", preset, seed=9, **kw))
    ctx = model.context(n_ctx=32)
    ctx.eval(prompt(10))
    ids, kv, rec = ctx.runner.save_kv()
    other = model.context(n_ctx=32)
    other.eval([5, 6])
    for args in ((ids, kv[:-1], rec), (ids, kv, rec[:-1]), (ids, np.append(kv, kv[:1]), rec),
                 (ids[:9], kv, rec), (np.zeros(33, np.int32), kv, rec)):
        with pytest.raises(ValueError, match="expected"):
            other.runner.load_kv(*args)
        assert other.tokens == [5, 6]
    other.runner.load_kv(ids, kv, rec)
    assert other.tokens == ctx.tokens
