"""The persistent prompt cache (fastgguf.engine.prompt_cache, issue 37): a prompt's stored prefix is restored instead
of recomputed, with the logits and greedy tokens of a cold run and a truthful cached_tokens, across Models (a
restart), through generate() and the Scheduler; the folder stays within its size (least recently used removed);
damaged, truncated and foreign files are skipped and removed; two models share a folder; short prompts are not
stored; models with recurrent layers store checkpoints and restore only a whole one. Tiny random models, prompts
of token ids, a threshold of 16 tokens."""
import os
import warnings

import numpy as np
import pytest

import models
import fastgguf
from fastgguf.engine import prompt_cache as pc
from fastgguf.engine import state as fstate
from fastgguf.engine.generate import generate
from fastgguf.engine.model import Model

MIN = 16
SWA = {"arch": "gemma3", "n_layer": 4, "meta": {"attention.sliding_window": 7, "attention.sliding_window_pattern": 3}}


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("pcache")
    a = models.build(d / "a.gguf", "vocab", vocab="gpt-2", n_ctx=1024, seed=21)
    return {"a": a, "b": models.build(d / "b.gguf", "vocab", vocab=a, n_ctx=1024, seed=22),
            "swa": models.build(d / "swa.gguf", "vocab", vocab=a, n_ctx=1024, seed=23, **SWA)}


def prompt(n, seed=0):
    return np.random.default_rng(seed).integers(0, 100, n).tolist()


def cached(path, folder, **kw):
    return Model(path, prompt_cache=folder, prompt_cache_min_tokens=MIN, **kw)


def files(folder):
    return sorted(n for n in os.listdir(folder) if n.endswith(".fgstate"))


def flushed(model, result):
    """result, once model's prompt cache (if any) has written what it queued (a writer thread does)."""
    if model.prompt_cache is not None:
        model.prompt_cache.flush()
    return result


def greedy(model, ids):
    return flushed(model, generate(model, ids, max_tokens=6, temperature=0))


def test_hit_equals_cold_and_survives_a_restart(paths, tmp_path):
    p = prompt(40)
    longer = p + prompt(5, seed=1)
    cold = Model(paths["a"])
    m = cached(paths["a"], tmp_path)
    first = greedy(m, p)
    assert first.usage.cached_tokens == 0 and len(files(tmp_path)) == 1
    want = greedy(cold, longer)
    # the same Model, then a new one on the folder (a restart), which finds the longer prompt stored meanwhile
    for model, n in ((m, 40), (cached(paths["a"], tmp_path), 44)):
        got = greedy(model, longer)
        assert got.usage.cached_tokens == n and got.token_ids == want.token_ids
    # the logits after a restore, bit for bit those of a context that evaluated the same tokens
    ctx = m.context(n_ctx=256)
    assert pc.reuse_prefix(ctx, longer, 0) == 44 and ctx.tokens == longer[:44]
    ref = cold.context(n_ctx=256)
    ref.eval(longer[:44])
    np.testing.assert_array_equal(ctx.eval(longer[44:]), ref.eval(longer[44:]))


def test_partial_prefix_and_swa(paths, tmp_path):
    p = prompt(40)
    m = cached(paths["a"], tmp_path)
    greedy(m, p)
    other = p[:30] + prompt(10, seed=2)  # shares 30 tokens with the stored 40: their K/V is restored
    got = greedy(m, other)
    assert got.usage.cached_tokens == 30 and got.token_ids == greedy(Model(paths["a"]), other).token_ids
    s = cached(paths["swa"], tmp_path / "swa")
    greedy(s, p)
    assert greedy(s, other).usage.cached_tokens == 0  # a sliding-window ring holds only the last window
    want = greedy(Model(paths["swa"]), p + [7, 8])
    got = greedy(s, p + [7, 8])
    assert got.usage.cached_tokens == 40 and got.token_ids == want.token_ids
    assert len(files(tmp_path / "swa")) == 3  # p, other and the longer prompt


def test_scheduler_hits_after_restart(paths, tmp_path):
    p = prompt(50, seed=3)
    m1, m2 = (fastgguf.Model(paths["a"], prompt_cache=tmp_path, prompt_cache_min_tokens=MIN) for _ in range(2))
    r1 = flushed(m1, m1.create_completion(p, max_tokens=4, temperature=0))
    r2 = m2.create_completion(p + [1, 2, 3], max_tokens=4, temperature=0)
    assert r1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == 50
    cold = fastgguf.Model(paths["a"]).create_completion(p + [1, 2, 3], max_tokens=4, temperature=0)
    assert r2["choices"][0]["text"] == cold["choices"][0]["text"]


def store(model, ids):
    ctx = model.context(n_ctx=256)
    ctx.eval(ids)
    pc.prompt_evaluated(ctx, ids)
    flushed(model, None)


def restored(model, ids):
    return pc.reuse_prefix(model.context(n_ctx=256), ids, 0)


def test_lru_eviction_under_the_size_bound(paths, tmp_path):
    m = Model(paths["a"])
    size = fstate.file_size(m.context(n_ctx=32), 20)
    m = cached(paths["a"], tmp_path, prompt_cache_size=2.5 * size / (1 << 20))
    a, b, c = (prompt(20, seed=s) for s in (10, 11, 12))
    store(m, a)
    store(m, b)
    assert restored(m, a + [1]) == 20  # a hit: a is now the most recently used
    store(m, c)  # three do not fit: b goes
    assert len(files(tmp_path)) == 2
    assert sum(os.path.getsize(tmp_path / n) for n in files(tmp_path)) <= 2.5 * size
    assert restored(m, a + [1]) == 20 and restored(m, c + [1]) == 20 and restored(m, b + [1]) == 0


def test_below_threshold_not_stored(paths, tmp_path):
    m = cached(paths["a"], tmp_path)
    assert greedy(m, prompt(MIN - 1)).usage.cached_tokens == 0
    assert files(tmp_path) == []
    store(m, prompt(MIN))
    assert len(files(tmp_path)) == 1
    assert restored(m, prompt(MIN) + [5]) == MIN


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign", "junk"])
def test_bad_files_are_skipped_and_removed(paths, tmp_path, damage):
    p = prompt(30, seed=4)
    m = cached(paths["a"], tmp_path)
    store(m, p)
    name, = files(tmp_path)
    path = tmp_path / name
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-3] ^= 0xFF
    elif damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "foreign":  # another model's state under this model's name
        os.unlink(path)
        store(cached(paths["b"], tmp_path / "b"), p)
        data = (tmp_path / "b" / files(tmp_path / "b")[0]).read_bytes()
    else:
        data = b"not a state at all"
    path.write_bytes(data)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "0123456789abcdef-x.fgstate").write_bytes(b"another model's, damaged")
    m2 = cached(paths["a"], tmp_path)
    ctx = m2.context(n_ctx=256)
    ctx.eval([1, 2, 3])
    assert pc.reuse_prefix(ctx, p + [1], 0) == 0 and ctx.n_past == 0  # nothing restored, the context reset
    assert not path.exists()
    assert (tmp_path / "notes.txt").exists() and (tmp_path / "0123456789abcdef-x.fgstate").exists()
    assert greedy(m2, p + [1]).usage.cached_tokens == 0  # recomputed, and stored again
    assert restored(m2, p + [2]) == 30


def test_two_models_one_folder(paths, tmp_path):
    p = prompt(30, seed=5)
    ma, mb = cached(paths["a"], tmp_path), cached(paths["b"], tmp_path)
    greedy(ma, p)
    assert greedy(mb, p + [1]).usage.cached_tokens == 0  # a's file is not b's
    greedy(mb, p)  # not stored: b's file of p + [1] holds it
    assert len(files(tmp_path)) == 2 and len({n.split("-")[0] for n in files(tmp_path)}) == 2
    for path, model in ((paths["a"], ma), (paths["b"], mb)):
        got = greedy(model, p + [9])
        assert got.usage.cached_tokens == 30 and got.token_ids == greedy(Model(path), p + [9]).token_ids


def test_unusable_folder_or_model_warns(paths, tmp_path):
    (tmp_path / "f").write_text("a file")
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        m = Model(paths["a"], prompt_cache=tmp_path / "f" / "sub")
    assert m.prompt_cache is None and greedy(m, prompt(40)).usage.cached_tokens == 0
    enc = models.build(tmp_path / "bert.gguf", "encoder")
    with pytest.warns(RuntimeWarning, match="encoder"):
        assert Model(enc, prompt_cache=tmp_path / "c").prompt_cache is None
    with pytest.raises(ValueError):
        Model(paths["a"], prompt_cache=tmp_path, prompt_cache_size=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Model(paths["a"], prompt_cache=tmp_path).prompt_cache.min_tokens == pc.MIN_TOKENS


def test_a_failed_write_leaves_the_cache_working(paths, tmp_path, monkeypatch):
    m = cached(paths["a"], tmp_path)
    a, b = prompt(20, seed=13), prompt(20, seed=14)
    store(m, a)

    def full_disk(snap, path, durable=True):
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as mp:
        mp.setattr(fstate, "save_snapshot", full_disk)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            store(m, b)
    assert len(files(tmp_path)) == 1 and restored(m, b + [1]) == 0 and restored(m, a + [1]) == 20
    store(m, b)  # the writer thread lives on
    assert restored(m, b + [1]) == 20


# the hybrid layouts (test_state.HYBRIDS), each with the "a" file's vocabulary
HYBRIDS = {"lfm2": dict(arch="lfm2", n_layer=4, conv_layers=(0, 1, 3)),
           "qwen35": dict(arch="qwen35", n_layer=3, dn_layers=(0, 2), n_rot=8),
           "granitehybrid": dict(arch="granitehybrid", n_layer=3, ssm_layers=(0, 2))}


@pytest.mark.parametrize("arch", sorted(HYBRIDS))
def test_hybrid_checkpoints(paths, tmp_path, arch):
    """A model with recurrent layers: the prompt's end is a checkpoint, restored whole after a restart when it is a
    prefix of the next prompt (cached_tokens its length, the output a cold run's); never a part of one."""
    path = models.build(tmp_path / "h.gguf", "vocab", vocab=paths["a"], n_ctx=1024, seed=24, **HYBRIDS[arch])
    p = prompt(40, seed=5)
    turn2 = p + prompt(6, seed=6)
    m = cached(path, tmp_path / "c")
    assert greedy(m, p).usage.cached_tokens == 0 and len(files(tmp_path / "c")) == 1
    cold = Model(path)
    for model in (cached(path, tmp_path / "c"), m):  # a restart, then the same Model
        got = greedy(model, turn2)
        assert got.usage.cached_tokens == 40 and got.token_ids == greedy(cold, turn2).token_ids
    assert len(files(tmp_path / "c")) == 2  # turn2 is a checkpoint too
    ctx = m.context(n_ctx=256)
    assert pc.reuse_prefix(ctx, turn2 + [3], 0) == 46 and ctx.tokens == turn2
    ref = cold.context(n_ctx=256)
    ref.eval(turn2)
    np.testing.assert_array_equal(ctx.eval([3]), ref.eval([3]))
    # a prompt sharing 30 of p's tokens, and p itself (its logits need its last token evaluated): nothing restored
    other = p[:30] + prompt(10, seed=7)
    for ids in (other, p):
        got = greedy(cached(path, tmp_path / "c"), ids)
        assert got.usage.cached_tokens == 0 and got.token_ids == greedy(cold, ids).token_ids
    assert len(files(tmp_path / "c")) == 3  # other stored; p (already a checkpoint) not again


def test_hybrid_scheduler_hits_after_restart(paths, tmp_path):
    path = models.build(tmp_path / "h.gguf", "vocab", vocab=paths["a"], n_ctx=1024, seed=25, **HYBRIDS["qwen35"])
    p = prompt(50, seed=8)
    m1, m2 = (fastgguf.Model(path, prompt_cache=tmp_path / "c", prompt_cache_min_tokens=MIN) for _ in range(2))
    flushed(m1, m1.create_completion(p, max_tokens=4, temperature=0))
    r2 = m2.create_completion(p + [1, 2, 3], max_tokens=4, temperature=0)
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == 50
    cold = fastgguf.Model(path).create_completion(p + [1, 2, 3], max_tokens=4, temperature=0)
    assert r2["choices"][0]["text"] == cold["choices"][0]["text"]
