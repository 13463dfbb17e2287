"""One forward pass over several sequences (fastgguf.engine.batch, fastgguf._native.forward_batch,
csrc/fg_forward.c fg_forward_multi): logits bit-identical to each sequence run alone (eval of the prompt, then
step by step), with any mix of prompt chunks and decode steps, on 1 or 2 threads; errors leave contexts unchanged;
the C entry point's own checks."""
import threading

import numpy as np
import pytest

from fastgguf._native import Workspace, _forward_rows
from fastgguf.engine.batch import forward_batch
from fastgguf.engine.model import Model
import models

V = 100  # the tiny model's vocabulary


def make_tiny_gqa(path, wtype=None):
    """A random llama model (tests/models.py): 3 layers, 6 query heads over 2 KV heads (GQA), head_dim 16, vocab V."""
    return models.build(path, wtype=wtype, seed=1, tied=False, n_layer=3, n_embd=96, n_head=6, n_ff=128, n_ctx=256)


@pytest.fixture(scope="module", params=["f32", "q4_0", "q8_0"])
def tiny(request, tmp_path_factory):
    wtype = None if request.param == "f32" else request.param.upper()
    path = make_tiny_gqa(tmp_path_factory.mktemp("batch") / f"tiny-{request.param}.gguf", wtype)
    return Model(path, n_threads=2)


@pytest.fixture(scope="module")
def real(default_model_path):
    return Model(default_model_path, n_threads=2)


def alone(model, steps, n_ctx=64, n_threads=2):
    """Logits of one sequence run alone: steps is a list of id lists; a list of one id is a decode step
    (runner.step), longer lists are evaluated with ctx.eval. Returns (logits per step, context)."""
    ctx = model.context(n_ctx, n_threads=n_threads)
    out = []
    for ids in steps:
        out.append(ctx.runner.step_py(ids[0]) if len(ids) == 1 else ctx.eval(ids))
    return out, ctx


def together(model, schedules, n_ctx, n_threads):
    """Run several sequences' steps together: schedules[i] is sequence i's list of id lists, or None entries for
    steps where it sits out. Returns (per sequence, its logits per step it took) and the contexts."""
    ctxs = [model.context(n, n_threads=1) for n in n_ctx]
    out = [[] for _ in schedules]
    for k in range(max(len(s) for s in schedules)):
        idx = [i for i, s in enumerate(schedules) if k < len(s) and s[k] is not None]
        res = forward_batch(model, [(ctxs[i], schedules[i][k]) for i in idx], n_threads=n_threads)
        for i, lg in zip(idx, res):
            assert lg.dtype == np.float32 and lg.shape == (model.n_vocab,)
            out[i].append(lg)
    return out, ctxs


def check_same(model, schedules, n_ctx, n_threads):
    got, ctxs = together(model, schedules, n_ctx, n_threads)
    for i, sched in enumerate(schedules):
        steps = [s for s in sched if s is not None]
        want, ref = alone(model, steps, n_ctx[i])
        assert len(got[i]) == len(want)
        for k, (g, w) in enumerate(zip(got[i], want)):
            assert np.array_equal(g, w), f"sequence {i}, step {k}: max diff {np.abs(g - w).max()}"
        assert ctxs[i].n_past == ref.n_past and ctxs[i].tokens == ref.tokens
        assert np.array_equal(ctxs[i].runner.logits_view(), ref.runner.logits_view())
    return ctxs


def decode_schedules(rng, vocab, prompt_lens, n_steps):
    return [[list(map(int, rng.integers(0, vocab, n)))] + [[int(rng.integers(0, vocab))] for _ in range(n_steps)]
            for n in prompt_lens]


@pytest.mark.parametrize("n_threads", [1, 2])
def test_tiny_decode_together_equals_alone(tiny, n_threads):
    """Prompts of different lengths in one pass, then decode steps of all sequences together."""
    rng = np.random.default_rng(0)
    scheds = decode_schedules(rng, V, [1, 3, 9, 20, 2], 6)
    check_same(tiny, scheds, [32, 40, 48, 64, 200], n_threads)


def test_tiny_mixed_steps(tiny):
    """A sequence's prompt chunks arrive while others decode; sequences join late and sit out steps."""
    rng = np.random.default_rng(1)
    r = lambda n: list(map(int, rng.integers(0, V, n)))  # noqa: E731
    scheds = [
        [r(5), r(1), r(1), r(1), r(1), r(1), r(1)],
        [None, r(11), r(7), r(1), r(4), r(1), r(1)],         # prompt in chunks beside decode steps
        [None, None, None, r(2), None, r(1), r(1)],          # joins late, sits out a step
        [r(1), r(1), r(30), None, None, r(1), r(3)],
    ]
    check_same(tiny, scheds, [64, 64, 16, 64], 2)


def test_tiny_threads_identical(tiny):
    rng = np.random.default_rng(2)
    scheds = decode_schedules(rng, V, [4, 13, 1], 4)
    res = [together(tiny, scheds, [32] * 3, nth)[0] for nth in (1, 2, 3)]
    for other in res[1:]:
        for a, b in zip(res[0], other):
            assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_long_step_crosses_chunks(tiny):
    """More rows than one internal chunk (256): sequences' later rows see their earlier chunks' cache."""
    rng = np.random.default_rng(3)
    scheds = [[list(map(int, rng.integers(0, V, n)))] + [[int(rng.integers(0, V))]] * 2 for n in (150, 140, 1)]
    check_same(tiny, scheds, [160, 160, 8], 2)


def test_contexts_usable_afterwards(tiny):
    """After batched steps a context goes on with ordinary eval (all_logits too), as if it had run alone."""
    rng = np.random.default_rng(4)
    scheds = decode_schedules(rng, V, [6, 2], 3)
    ctxs = check_same(tiny, scheds, [40, 40], 2)
    more = list(map(int, rng.integers(0, V, 5)))
    for ctx, sched in zip(ctxs, scheds):
        _, ref = alone(tiny, sched, 40)
        assert np.array_equal(ctx.eval(more, all_logits=True), ref.eval(more, all_logits=True))
        assert np.array_equal(ctx.runner.step_py(7), ref.runner.step_py(7))
        ctx.rewind(2)
        ref.rewind(2)
        assert np.array_equal(ctx.eval([1, 2]), ref.eval([1, 2]))


def test_bad_inputs_raise_and_change_nothing(tiny):
    other = Model(tiny.path, n_threads=1)
    a, b = tiny.context(8), tiny.context(16)
    forward_batch(tiny, [(a, [1, 2, 3]), (b, [4])])
    state = lambda: (a.n_past, a.tokens, b.n_past, b.tokens)  # noqa: E731
    before = state()
    with pytest.raises(ValueError, match="at least one"):
        forward_batch(tiny, [])
    with pytest.raises(ValueError, match="sequence 1: the same context"):
        forward_batch(tiny, [(a, [1]), (a, [2])])
    with pytest.raises(ValueError, match="sequence 1: token id 100 out of range"):
        forward_batch(tiny, [(a, [1]), (b, [5, 100])])
    with pytest.raises(ValueError, match="sequence 0: token id -1 out of range"):
        forward_batch(tiny, [(a, [-1]), (b, [5])])
    with pytest.raises(ValueError, match="sequence 0: 6 tokens at position 3 exceed the context size n_ctx=8"):
        forward_batch(tiny, [(a, [1] * 6), (b, [5])])
    with pytest.raises(ValueError, match="sequence 1: expected a non-empty"):
        forward_batch(tiny, [(a, [1]), (b, [])])
    with pytest.raises(ValueError, match="must be integers"):
        forward_batch(tiny, [(a, [1.5])])
    with pytest.raises(ValueError, match="sequence 0: not a Context of this model"):
        forward_batch(tiny, [(other.context(8), [1])])
    with pytest.raises(ValueError, match="sequence 1: expected a"):
        forward_batch(tiny, [(a, [1]), a])
    with pytest.raises(ValueError, match="n_threads"):
        forward_batch(tiny, [(a, [1])], n_threads=0)
    with b._lock:  # b in use by another thread
        with pytest.raises(RuntimeError, match="another thread"):
            forward_batch(tiny, [(a, [1]), (b, [2])])
    assert state() == before
    # the native layer's own checks
    from fastgguf._native import forward_batch as native
    ws = Workspace(tiny.weights)
    with pytest.raises(TypeError, match="sequence 1: expected a Runner"):
        native(tiny.weights, ws, [a.runner, "x"], [[1], [2]], 1)
    with pytest.raises(ValueError, match="runners but"):
        native(tiny.weights, ws, [a.runner], [[1], [2]], 1)
    with pytest.raises(ValueError, match="sequence 0: its Runner runs other weights"):
        native(tiny.weights, ws, [other.context(8).runner], [[1]], 1)
    with pytest.raises(ValueError, match="workspace belongs to other weights"):
        native(other.weights, ws, [other.context(8).runner], [[1]], 1)
    assert state() == before
    # and the contexts still give what they would have alone
    _, ref_a = alone(tiny, [[1, 2, 3]], 8)
    assert np.array_equal(forward_batch(tiny, [(a, [9, 9])])[0], ref_a.eval([9, 9]))


def test_native_rows_interleaved_and_logit_rows(tiny):
    """fg_forward_multi on raw rows: rows of two sequences interleaved, a 3-row chunk workspace (chunks split a
    sequence), logits of several rows (gathered when not contiguous) equal to all_logits of each run alone."""
    rng = np.random.default_rng(5)
    p0, p1 = list(map(int, rng.integers(0, V, 7))), list(map(int, rng.integers(0, V, 4)))
    want0 = tiny.context(16).eval(p0, all_logits=True)
    want1 = tiny.context(16).eval(p1, all_logits=True)
    c0, c1 = tiny.context(16), tiny.context(16)
    # row order: p0[0], p1[0], p0[1], p1[1], ... then the rest of p0
    rows = [(0, k) for k in range(7)] + [(1, k) for k in range(4)]
    rows.sort(key=lambda r: (r[1], r[0]))
    tokens = [(p0, p1)[s][k] for s, k in rows]
    seq = [s for s, _ in rows]
    pos = [k for _, k in rows]
    ws = Workspace(tiny.weights, 3, 16, 2)
    rc, lg = _forward_rows(tiny.weights, ws, [c0.runner, c1.runner], tokens, seq, pos, list(range(len(rows))), 2)[:2]
    assert rc == 0 and ws.n_rows == 3
    for r, (s, k) in enumerate(rows):
        assert np.array_equal(lg[r], (want0, want1)[s][k])
    some = [0, 2, 4, 9, 10]  # rows 0 and 2 share a chunk but are not contiguous: gathered
    rc, lg = _forward_rows(tiny.weights, ws, [c0.runner, c1.runner], tokens, seq, pos, some, 1)[:2]
    assert rc == 0 and lg.shape == (5, V)
    assert all(np.array_equal(lg[j], (want0, want1)[rows[r][0]][rows[r][1]]) for j, r in enumerate(some))


def test_native_rows_rejects_bad_rows(tiny):
    """The C entry point checks its inputs and then does nothing (return -1)."""
    c0, c1 = tiny.context(8), tiny.context(16)
    ws = Workspace(tiny.weights, 4, 16, 2)
    W = tiny.weights

    def call(runners, tokens, seq, pos, logit_rows):
        return _forward_rows(W, ws, runners, tokens, seq, pos, logit_rows, 2)[0]

    r0, r1 = c0.runner, c1.runner
    assert call([r0, r1], [1, 2], [0, 1], [8, 0], [1]) == -1           # beyond seq 0's n_ctx=8
    assert call([r0, r1], [1, 2], [0, 1], [0, 16], [1]) == -1          # beyond seq 1's n_ctx
    assert call([r0, r1], [1, 2], [0, 1], [-1, 0], [1]) == -1          # negative position
    assert call([r0, r1], [1, V], [0, 1], [0, 0], [1]) == -1           # token out of range
    assert call([r0, r1], [1, -2], [0, 1], [0, 0], [1]) == -1
    assert call([r0, r1], [1, 2], [0, 2], [0, 0], [1]) == -1           # sequence index out of range
    assert call([r0, r0], [1, 2], [0, 1], [0, 0], [1]) == -1           # one cache twice
    assert call([r0, r1], [1, 2, 3], [0, 1, 0], [0, 0, 2], [2]) == -1  # seq 0 skips position 1
    assert call([r0, r1], [1, 2, 3], [0, 1, 0], [1, 0, 1], [2]) == -1  # seq 0 repeats a position
    assert call([r0, r1], [1, 2], [0, 1], [0, 0], [1, 0]) == -1        # logit rows not increasing
    assert call([r0, r1], [1, 2], [0, 1], [0, 0], [2]) == -1           # logit row out of range
    assert call([r0, r1], [1, 2], [0, 1], [0, 0], []) == 0             # no logits is fine
    # nothing was written by the failed calls: the caches give what fresh ones would
    want = tiny.context(8).eval([5, 6, 7])
    assert np.array_equal(c0.eval([5, 6, 7]), want)


def test_two_threads_batch_one_model(tiny):
    """Threads batching their own contexts over one shared Model (each thread has its workspace)."""
    rng = np.random.default_rng(6)
    scheds = [decode_schedules(rng, V, [3, 8], 5) for _ in range(2)]
    want = [together(tiny, s, [32, 32], 1)[0] for s in scheds]
    got, errors = [None, None], []

    def work(j):
        try:
            got[j] = together(tiny, scheds[j], [32, 32], 1)[0]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(j,)) for j in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for g, w in zip(got, want):
        assert all(np.array_equal(x, y) for a, b in zip(g, w) for x, y in zip(a, b))


# ---- the real default model (SmolLM2-135M, 30 layers, 9 heads over 3 KV heads) ----

@pytest.mark.parametrize("n_threads", [1, 2])
def test_real_decode_together_equals_alone(real, n_threads):
    rng = np.random.default_rng(10)
    scheds = decode_schedules(rng, real.n_vocab, [1, 6, 23, 11], 4)
    check_same(real, scheds, [64, 64, 64, 128], n_threads)


def test_real_mixed_steps(real):
    rng = np.random.default_rng(11)
    r = lambda n: list(map(int, rng.integers(0, real.n_vocab, n)))  # noqa: E731
    scheds = [
        [r(9), r(1), r(1), r(1), r(1)],
        [None, r(17), r(1), r(5), r(1)],
        [None, None, r(3), r(1), r(1)],
    ]
    ctxs = check_same(real, scheds, [64, 64, 64], 2)
    # and the real prompt path: a tokenized prompt continues with ordinary eval as if alone
    ids = real.tokenize("The quick brown fox")
    _, ref = alone(real, [s for s in scheds[0] if s is not None], 64)
    assert np.array_equal(ctxs[0].eval(ids, all_logits=True), ref.eval(ids, all_logits=True))


# ---- outputs other than the last logits: every row's logits, hidden states (embeddings); KV prefix copies ----

def test_tiny_hidden_and_all_outputs_equal_alone(tiny):
    """"hidden" rows (the lm_head skipped) and "all" rows beside ordinary sequences equal the same sequences run
    alone, bit for bit; "all" equals eval(all_logits=True)."""
    rng = np.random.default_rng(12)
    r = lambda n: list(map(int, rng.integers(0, V, n)))  # noqa: E731
    a, b, c = r(11), r(7), r(5)
    hid_alone = forward_batch(tiny, [(tiny.context(32), a)], outputs=["hidden"])[0]
    all_alone = tiny.context(32).eval(b, all_logits=True)
    ctxs = [tiny.context(32) for _ in range(3)]
    ctxs[2].eval(c)
    got = forward_batch(tiny, [(ctxs[0], a), (ctxs[1], b), (ctxs[2], [3])], n_threads=2,
                        outputs=["hidden", "all", "last"])
    assert got[0].shape == (len(a), 96) and got[0].dtype == np.float32
    assert np.array_equal(got[0], hid_alone)
    assert np.array_equal(got[1], all_alone)
    ref = tiny.context(32)
    ref.eval(c)
    assert np.array_equal(got[2], ref.eval([3]))
    assert ctxs[0].n_past == len(a) and ctxs[0].tokens == a  # the hidden sequence's cache advanced too
    assert np.array_equal(ctxs[0].eval([4]), tiny.context(32).eval(a + [4]))
    with pytest.raises(ValueError, match="outputs must be"):
        forward_batch(tiny, [(tiny.context(8), [1])], outputs=["logits"])


def test_tiny_hidden_matches_oracle(tmp_path):
    """Hidden states of an F32 model against the float64 oracle's output_norm(x) (an independent forward pass);
    and hidden . output^T gives the logits."""
    from oracle import Oracle
    path = make_tiny_gqa(tmp_path / "tiny-f32.gguf")
    model, ids = Model(path, n_threads=2), [5, 17, 3, 99, 42, 8, 0, 61]
    got = forward_batch(model, [(model.context(16), ids)], outputs=["hidden"])[0].astype(np.float64)
    o = Oracle(path)
    o.forward(ids, kv_f16=True)
    want = o.last_hidden
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()
    logits = model.context(16).eval(ids, all_logits=True)
    assert np.abs(got @ o.w["output.weight"].T - logits).max() < 1e-4 * np.abs(logits).max()


def test_native_hidden_rows_checked(tiny):
    c0 = tiny.context(8)
    ws = Workspace(tiny.weights, 4, 16, 2)
    call = lambda hr: _forward_rows(tiny.weights, ws, [c0.runner], [1, 2], [0, 0], [0, 1], [], 2, hr)[0]  # noqa
    assert call([1, 0]) == -1 and call([2]) == -1 and call([-1]) == -1
    rc, lg, hid = _forward_rows(tiny.weights, ws, [c0.runner], [1, 2], [0, 0], [0, 1], [1], 2, [0, 1])
    assert rc == 0 and lg.shape == (1, V) and hid.shape == (2, 96)


def test_tiny_copy_prefix_continues_like_the_source(tiny):
    rng = np.random.default_rng(13)
    prompt = list(map(int, rng.integers(0, V, 9)))
    src = tiny.context(32)
    src.eval(prompt + [1, 2, 3])  # the source has moved on: only the first 9 positions are copied
    dst = tiny.context(24)
    dst.eval([7, 7])  # overwritten
    dst.copy_prefix(src, len(prompt))
    assert dst.n_past == len(prompt) and dst.tokens == prompt
    ref = tiny.context(32)
    ref.eval(prompt)
    assert np.array_equal(dst.eval([4, 5], all_logits=True), ref.eval([4, 5], all_logits=True))
    with pytest.raises(ValueError):
        dst.copy_prefix(src, 13)  # more than the source holds
    with pytest.raises(ValueError):
        dst.copy_prefix(dst, 1)
    with pytest.raises(ValueError):
        tiny.context(4).copy_prefix(src, 9)  # over the destination's n_ctx


def test_copy_prefix_sliding_window_ring(tmp_path):
    """A gemma3 model with a window of 7: the ring (7 + 256 rows) has wrapped at 300 positions; the copy (into a
    context of another n_ctx, whose ring row of a position is the same since both rings hold 263 rows) continues
    exactly like the source."""
    path = models.build(tmp_path / "g3.gguf", arch="gemma3", n_layer=4,
                        meta={"attention.sliding_window": 7, "attention.sliding_window_pattern": 3,
                           "rope.freq_base_swa": 100.0})
    model = Model(path, n_threads=2)
    ids = list(map(int, np.random.default_rng(14).integers(0, 100, 300)))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # n_ctx past the tiny model's training context
        src, dst, ref = model.context(320), model.context(400), model.context(320)
    src.eval(ids + [1])
    ref.eval(ids)
    dst.copy_prefix(src, len(ids))
    assert np.array_equal(dst.eval([9, 8, 7], all_logits=True), ref.eval([9, 8, 7], all_logits=True))
