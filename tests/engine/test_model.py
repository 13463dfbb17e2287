"""The forward pass (fastgguf.engine.model, fastgguf._native.Runner, csrc/fg_forward.c): fidelity against llama.cpp's reference
logits and a float64 numpy oracle, KV-cache consistency, threads, errors."""
import json
import os
import threading

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from fastgguf.gguf import GGUFError  # noqa: E402
from fastgguf.engine.model import Context, Model  # noqa: E402
from fastgguf.kernels import available as kernels_available, build_info  # noqa: E402
import models  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
REF = os.path.join(HERE, "data", "smollm2-q4_1-logits.json")        # llama.cpp (see its README in shared/reference)
ORACLE = os.path.join(HERE, "data", "smollm2-q4_1-oracle.json")     # tests/oracle.py at the same positions
# the default model, the Q8_0 / Q4_0 files our quantizer makes from it, and its llama.cpp recipes (our quantizer's
# output is byte-identical to llama-quantize's: tests/gguf/test_quantize_kquants.py)
VARIANTS = ("q4_1", "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k", "q3_k_m", "q2_k")
# Reference data per variant: smollm2-<v>-logits.json (llama.cpp via llama-cpp-python 0.3.36, flash attention on,
# tools/make_reference.py) and smollm2-<v>-oracle.json (python tests/oracle.py <v>).

# The fidelity rule (the issue's goal: top-1 equal wherever the reference's top two are > 0.3 apart, median
# |logit diff| over its top-10 ids <= 0.15). Measured, teacher-forced, the 4 prompts x 33 positions x top-10 ids:
#                               median |diff| (p99)                         ref-gap>0.3 flips
#   llama.cpp flash on vs off   q4_1 0.129 (0.65)  q8_0 0.144 (0.67)  q4_0 0.146 (0.82)  q4_1: 1 (prompt 3 pos 22)
#   llama.cpp vs f64 oracle     q4_1 0.137 (0.56)  q8_0 0.162 (0.70)  q4_0 0.144 (0.67)
#   fastgguf vs llama.cpp  scalar    0.125 (0.61)       0.162 (0.66)       0.145 (0.70)
#                          avx2      0.153 (0.63)       0.148 (0.68)       0.126 (0.61)
#                          avx512    0.130 (0.53)       0.151 (0.55)       0.135 (0.66)
#   fastgguf vs f64 oracle scalar    0.129 (0.64)       0.159 (0.80)       0.135 (0.71)
#                          avx2      0.152 (0.62)       0.151 (0.68)       0.140 (0.63)
#                          avx512    0.139 (0.62)       0.151 (0.70)       0.139 (0.66)
# These numbers are draws from one distribution, not properties of a kernel: both engines quantize every matmul
# input to Q8 and the rounding cascades through 30 layers, so ANY change of float rounding redraws them. Scaling
# fastgguf's embeddings by 1 +- 2^-22 (4 ulp, random signs; 18 seeds over the 3 ISAs, Q4_1) moved its own logits by
# 0.13 median (0.6-0.8 p99) and its median vs llama.cpp over 0.118..0.153 (q8_0: 0.144..0.164, q4_0: 0.126..0.156).
# Matching llama.cpp more closely than that needs bit-identical arithmetic, including its F16 accumulation of V in
# flash attention (it takes that path for batches under 64 tokens): a precision loss we do not copy. So the median
# bound is the issue's 0.15 where the draws allow it with a margin, a little above otherwise (and p99 likewise).
#
# The recipes' references (llama-cpp-python 0.3.36's bindings over a native build of its llama.cpp on this
# machine; it gives 0.1-0.5 different logits from the build that made the q4_1 reference: the same noise again):
#                               median |diff| (p99) vs llama.cpp flash on            ref-gap>0.3 flips
#                           llama.cpp flash off   fastgguf scalar   fastgguf avx2
#   q4_k_m                        0.181 (0.79)      0.198 (0.82)     0.194 (0.92)   avx2: 1 (prompt 1 pos 27)
#   q5_k_m                        0.200 (1.30)      0.211 (0.94)     0.206 (0.98)   flash off, avx2: prompt 2 pos 18
#   q6_k                          0.164 (0.68)      0.183 (0.83)     0.164 (0.95)   avx2: prompt 2 pos 14
#   q3_k_m                        0.183 (0.98)      0.195 (0.90)     0.187 (0.97)   flash off: prompt 2 pos 37
#   q2_k                          0.187 (0.86)      0.178 (0.97)     0.198 (1.15)   flash off, scalar: prompt 2 pos 12
# (SmolLM2's 576-wide matrices take the Q5_0 / Q5_1 / Q4_0 / Q8_0 fallbacks; the K formats are its ffn_down, and
# tests/engine/test_model_kquants.py runs every format on every matrix against the oracle.) Bounds: the flash
# on/off spread's worst median plus 15 %, and its worst p99.
MEDIAN_TOL = {"q4_1": 0.16, "q8_0": 0.175, "q4_0": 0.165, "q4_k_m": 0.23, "q5_k_m": 0.23, "q6_k": 0.23,
              "q3_k_m": 0.23, "q2_k": 0.23}
P99_TOL = {"q4_1": 1.0, "q8_0": 1.0, "q4_0": 1.1, "q4_k_m": 1.3, "q5_k_m": 1.3, "q6_k": 1.3, "q3_k_m": 1.3,
           "q2_k": 1.3}
TOP1_GAP = 0.3       # top-1 must agree wherever the reference's top two are further apart than this, except ...
ORACLE_NOISE = 0.45  # ... where the float64 oracle puts the two tokens less than this apart (or prefers ours): each
                     # engine's per-logit distance to the oracle has a p99 of 0.6-0.8, so such a flip is noise. Seen:
                     # q4_1/q8_0 prompt 3 pos 22 (oracle prefers our token by 0.15; llama.cpp flash off flips too),
                     # q4_1/q8_0 prompt 2 pos 19 (oracle margin 0.40/0.36), q8_0 prompt 2 pos 25 (0.09).
# fastgguf against the float64 oracle: median, p99 bounds. llama.cpp's own distance to the oracle (its top-10 ids):
# q4_1 0.138 (0.59), q8_0 0.164 (0.71), q4_0 0.148 (0.65); q4_k_m 0.196 (0.93), q5_k_m 0.219 (1.01), q6_k 0.176
# (0.89), q3_k_m 0.190 (0.82), q2_k 0.184 (0.97). llama.cpp and the oracle disagree on the top-1 where the oracle's
# top two are 0.43 and 0.64 apart (q4_k_m prompt 1 pos 10, prompt 3 pos 21) and 0.72 (q3_k_m prompt 3 pos 21).
ORACLE_TOL = {"q4_k_m": (0.25, 1.3), "q5_k_m": (0.25, 1.3), "q6_k": (0.25, 1.3), "q3_k_m": (0.25, 1.5),
              "q2_k": (0.25, 1.3)}
# q3_k_m's p99 is 1.5: its 576-wide matrices run Q4_0 (and its lm_head Q8_0), and the row-lane Q4_0/Q8_0 tiles
# (one fma chain per row and activation, each block's integer dot exact) round differently from the earlier
# lane-partial sums: the same kernel-level error against float64 (2-4e-6 max on its matrices), yet avx2 went from
# 0.189 (1.17) to 0.207 (1.44) against the oracle; scalar 0.211 (1.09). The largest per-position differences are
# the same positions in both (prompt 0 pos 13: 2.8 before, 2.5 after; pos 4, 24), so it is the draw, not a trend.
# The recipes' per-logit distances to the oracle are ~1.35x those of q4_1/q8_0/q4_0 (p99 0.82-1.01 against
# 0.59-0.71), so their flip noise bound is too. Seen: q2_k scalar prompt 1 pos 27 (reference gap 0.37, oracle margin
# 0.51; avx2 and llama.cpp keep the reference token there).
ORACLE_NOISE_K = 0.6
HARD_GAP = 0.75      # greedy decoding may part from the reference only where llama.cpp's logit of its own token
                     # exceeds its logit of ours by less than this (test_greedy_generation_matches_reference)


def _data(variant, kind):
    with open(os.path.join(HERE, "data", f"smollm2-{variant}-{kind}.json")) as f:
        return json.load(f)["results"]


def _oracle_margin(o, lp, want, got):
    """The float64 oracle's logit of token `want` minus that of `got` at one position: o the oracle's entry (its
    top-10 and its logits at llama.cpp's top-10 ids), lp llama.cpp's entry; inf if either token is not stored."""
    known = dict(zip(o["top_ids"], o["top_logits"]))
    known.update(zip(lp["top_ids"], o["ref_ids_logits"]))
    return known[want] - known[got] if want in known and got in known else float("inf")


def fidelity(logits, refs, llama, oracle):
    """|diff| over each reference position's top-10 ids (all prompts), and the top-1 flips where the reference's
    top-two gap > TOP1_GAP as (prompt index, pos, reference gap, oracle margin of the reference's token over ours,
    whether llama.cpp's top-1 is ours).
    refs: llama or oracle (per prompt, "positions" with "top_ids", "top_logits")."""
    diffs, flips = [], []
    for i, (lg, r, l, o) in enumerate(zip(logits, refs, llama, oracle)):
        for p, lp, op in zip(r["positions"], l["positions"], o["positions"]):
            assert p["pos"] == lp["pos"] == op["pos"]
            row, ids, top = lg[p["pos"]], p["top_ids"], np.array(p["top_logits"])
            diffs.append(np.abs(row[ids] - top))
            got = int(np.argmax(row))
            if top[0] - top[1] > TOP1_GAP and got != ids[0]:
                flips.append((i, p["pos"], round(float(top[0] - top[1]), 3), round(_oracle_margin(op, lp, ids[0], got), 3),
                              lp["top_ids"][0] == got))
    return np.concatenate(diffs), flips


@pytest.fixture(scope="module")
def model(default_model_path):
    return Model(default_model_path, n_threads=2)


@pytest.fixture(scope="module")
def reference():
    with open(REF) as f:
        return json.load(f)["results"]


@pytest.fixture(scope="module")
def oracle_ref():
    with open(ORACLE) as f:
        return json.load(f)["results"]


@pytest.fixture(scope="module")
def teacher_forced(model, reference):
    """fastgguf's logits over prompt + greedy ids, in one batch, per reference prompt."""
    out = []
    for r in reference:
        ctx = model.context(64)
        out.append(ctx.eval(r["prompt_ids"] + r["greedy_ids"], all_logits=True))
    return out


def test_hparams(model):
    hp = model.hparams
    assert (hp.arch, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff, hp.n_vocab) == \
        ("llama", 576, 30, 9, 3, 64, 1536, 49152)
    assert hp.rope_base == 100000.0 and not hp.rope_neox and hp.n_ctx_train == 8192


@pytest.fixture(scope="module")
def variant_model(default_model_path):
    """variant -> Model of the default model quantized to it by our quantizer (made once in the model cache)."""
    from fastgguf.gguf.quantize import quantized_variant
    models = {}

    def get(variant):
        if variant not in models:
            path = default_model_path if variant == "q4_1" else quantized_variant(default_model_path, variant)
            models[variant] = Model(path, n_threads=2)
        return models[variant]
    return get


@pytest.mark.parametrize("isa", kernels_available())
@pytest.mark.parametrize("variant", VARIANTS)
def test_fidelity(variant_model, variant, isa):
    """Teacher-forced logits against llama.cpp's and against the float64 oracle's, on every available ISA."""
    from fastgguf import kernels
    refs, oracle = _data(variant, "logits"), _data(variant, "oracle")
    m = variant_model(variant)
    old = kernels.active()
    kernels.set_isa(isa)
    try:
        logits = [m.context(64).eval(r["prompt_ids"] + r["greedy_ids"], all_logits=True) for r in refs]
    finally:
        kernels.set_isa(old)
    for lg, r in zip(logits, refs):
        assert lg.shape == (len(r["prompt_ids"]) + len(r["greedy_ids"]), 49152)
    d, flips = fidelity(logits, refs, refs, oracle)
    noise = ORACLE_NOISE_K if variant in ORACLE_TOL else ORACLE_NOISE
    assert all(f[3] < noise for f in flips), flips
    assert np.median(d) <= MEDIAN_TOL[variant] and np.percentile(d, 99) <= P99_TOL[variant], \
        (np.median(d), np.percentile(d, 99))
    # the oracle as the reference (its own top two > TOP1_GAP apart and we differ: the same noise bound, or
    # llama.cpp picks our token too: both engines round activations to 8 bits, the oracle does not)
    d, flips = fidelity(logits, oracle, refs, oracle)
    assert all(f[3] < noise or f[4] for f in flips), flips
    med, p99 = ORACLE_TOL.get(variant, (0.2, 1.2))
    assert np.median(d) <= med and np.percentile(d, 99) <= p99, (np.median(d), np.percentile(d, 99))


def test_oracle_reproduces(default_model_path, reference, oracle_ref, teacher_forced):
    """The stored oracle numbers come from tests/oracle.py (run live on the shortest prompt)."""
    from oracle import Oracle
    i = min(range(len(reference)), key=lambda j: len(reference[j]["prompt_ids"]))
    r, o = reference[i], oracle_ref[i]
    lo = Oracle(default_model_path).forward(r["prompt_ids"] + r["greedy_ids"])
    for p in o["positions"]:
        np.testing.assert_allclose(lo[p["pos"], p["top_ids"]], p["top_logits"], atol=2e-4)
    lg = teacher_forced[i]
    d = np.abs(lg[r["positions"][0]["pos"]:] - lo[r["positions"][0]["pos"]:])  # every vocab entry
    assert np.median(d) < 0.25 and np.percentile(d, 99) < 1.5


def test_decode_equals_full_recompute(model, reference, teacher_forced):
    r = reference[1]
    ids = r["prompt_ids"] + r["greedy_ids"][:12]
    ctx = model.context(64)
    steps = [ctx.runner.step_py(t) for t in ids]
    full = teacher_forced[1][:len(ids)]
    assert ctx.n_past == len(ids)
    np.testing.assert_allclose(np.array(steps), full, atol=2e-3, rtol=0)


def test_batched_prompt_equals_chunks(model, reference):
    r = reference[2]
    ids = r["prompt_ids"] + r["greedy_ids"][:10]
    a = model.context(32).eval(ids, all_logits=True)
    c = model.context(32)
    parts = [c.eval(ids[:7], all_logits=True), c.eval(ids[7:8], all_logits=True), c.eval(ids[8:], all_logits=True)]
    np.testing.assert_allclose(np.concatenate(parts), a, atol=2e-3, rtol=0)
    # the internal chunking of long prompts (n_batch) gives the same logits
    from fastgguf._native import Runner
    small = Runner(model.weights, 32, 2, 5)
    np.testing.assert_allclose(small.eval(np.array(ids), True), a, atol=2e-3, rtol=0)
    # last-token logits equal the last row of all_logits
    np.testing.assert_array_equal(model.context(32).eval(ids), a[-1])


def test_threads_give_same_logits(model, reference):
    ids = reference[0]["prompt_ids"] + reference[0]["greedy_ids"][:6]
    res = []
    for nth in (1, 2, 3):
        ctx = model.context(32, n_threads=nth)
        res.append((ctx.eval(ids[:-2], all_logits=True), ctx.runner.step_py(ids[-2]), ctx.runner.step_py(ids[-1])))
    for other in res[1:]:
        for x, y in zip(res[0], other):
            np.testing.assert_array_equal(x, y)


def test_two_threads_really_run_two(model, reference):
    """The C team counts the threads that ran each pass (fg_parallel's own tally, not the number asked), so a
    build or a pool that quietly ran one thread fails here; and 2 threads give 1 thread's logits bit for bit."""
    if not build_info()["threads"]:
        pytest.skip("a FASTGGUF_NO_THREADS build (tests/engine/test_threads.py checks its warning)")
    ids = reference[0]["prompt_ids"] + reference[0]["greedy_ids"][:4]
    one, two = model.context(32, n_threads=1), model.context(32, n_threads=2)
    assert two.runner.last_threads == 0  # no pass yet
    a = one.eval(ids[:-1], all_logits=True), one.runner.step_py(ids[-1])
    b = two.eval(ids[:-1], all_logits=True)
    assert (one.runner.last_threads, two.runner.last_threads) == (1, 2)
    b = b, two.runner.step_py(ids[-1])  # decode: the team's workers are reused
    assert two.runner.last_threads == 2
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    two.rewind(0)
    two.n_threads = 1  # fewer than the team has: the extra worker stays asleep
    np.testing.assert_array_equal(two.eval(ids[:-1], all_logits=True), a[0])
    assert two.runner.last_threads == 1


def test_two_contexts_in_two_threads(model, reference):
    seqs = [r["prompt_ids"] + r["greedy_ids"][:8] for r in reference[:2]]
    expected = [model.context(32).eval(s, all_logits=True) for s in seqs]
    got = [None, None]

    def work(i):
        ctx = model.context(32, n_threads=1)
        out = [ctx.eval(seqs[i][:4], all_logits=True)]
        out += [ctx.eval([t], all_logits=True) for t in seqs[i][4:]]
        got[i] = np.concatenate(out)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, atol=2e-3, rtol=0)


def test_context_used_by_two_threads_is_an_error(model):
    ctx = model.context(16)
    ctx._lock.acquire()   # as if another thread were inside eval
    try:
        with pytest.raises(RuntimeError, match="another thread"):
            ctx.eval([1, 2])
    finally:
        ctx._lock.release()
    ctx.eval([1, 2])


def test_context_limits_and_errors(model):
    ctx = model.context(8)
    with pytest.raises(ValueError, match=r"9 tokens at position 0 .*n_ctx=8"):
        ctx.eval(list(range(1, 10)))
    assert ctx.n_past == 0
    ctx.eval([1, 2, 3, 4, 5, 6])
    with pytest.raises(ValueError, match=r"3 tokens at position 6"):
        ctx.eval([1, 2, 3])
    assert ctx.runner.step_py(7) is not None and ctx.runner.step_py(8) is not None
    assert ctx.runner.step_py(9) is None and ctx.n_past == 8        # full: step reports -1, nothing changes
    for bad in ([49152], [-1], [3, 1 << 40]):
        with pytest.raises(ValueError, match="out of range"):
            model.context(8).eval(bad)
    with pytest.raises(ValueError):
        ctx.eval([])
    with pytest.raises(ValueError, match="integers"):
        ctx.eval([1.5])
    ctx.rewind(2)
    assert ctx.n_past == 2
    ctx.reset()
    assert ctx.n_past == 0
    with pytest.raises(ValueError):
        model.context(0)
    with pytest.warns(RuntimeWarning, match="training context 8192"):
        big = Context(model, n_ctx=8193)
    assert big.n_ctx == 8193


def test_rewind_then_continue_matches(model, reference):
    ids = reference[0]["prompt_ids"] + reference[0]["greedy_ids"][:6]
    ctx = model.context(32)
    full = ctx.eval(ids, all_logits=True)
    ctx.rewind(5)
    np.testing.assert_allclose(ctx.eval(ids[5:], all_logits=True), full[5:], atol=2e-3, rtol=0)


# ---- tiny synthetic models (tests/models.py; F32 weights: fastgguf must match the float64 oracle almost exactly) ----

LINEAR = {"rope.scaling.type": "linear"}
GEMMA_TINY = [
    {"arch": "gemma"},
    {"arch": "gemma2", "n_layer": 3,
     "meta": {"attention.sliding_window": 5, "attn_logit_softcapping": 0.5, "final_logit_softcapping": 2.0}},
    {"arch": "gemma3", "n_layer": 4,
     "meta": {"attention.sliding_window": 4, "attention.sliding_window_pattern": 3, "rope.freq_base_swa": 100.0}},
    {"arch": "gemma3", "n_layer": 3, "meta": {**LINEAR, "rope.scaling.factor": 8.0, "attention.sliding_window": 3,
                                              "final_logit_softcapping": 3.0}},
]


@pytest.mark.parametrize("opts", [{}, {"tied": False, "bias": True}, {"rope_freqs": True},
                                  {"meta": {**LINEAR, "rope.scaling.factor": 4.0}}, {"arch": "qwen2"},
                                  {"arch": "qwen3"}, {"arch": "phi3", "tied": False},
                                  {"arch": "smollm3", "n_layer": 5},   # layer 3 NoPE
                                  {"arch": "lfm2", "n_layer": 4, "conv_layers": (0, 1, 3)}]   # layer 2 attention
                         + GEMMA_TINY)
def test_tiny_model_matches_oracle(tmp_path, opts):
    from oracle import Oracle
    path = models.build(tmp_path / "tiny.gguf", **opts)
    ids = [5, 17, 99, 0, 42, 42, 7, 63, 1, 2, 88, 31]
    want = Oracle(path).forward(ids, kv_f16=True)      # fastgguf's KV cache is F16
    m = Model(path, n_threads=2)
    # F16 rounding of K/V computed in float32 vs float64 can land on the other side of a half-ulp: 1e-3
    np.testing.assert_allclose(m.context(16).eval(ids, all_logits=True), want, atol=1e-3, rtol=1e-3)
    ctx = m.context(16)
    steps = np.array([ctx.runner.step_py(t) for t in ids])
    np.testing.assert_allclose(steps, want, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("opts", [{}, {"arch": "phi3"}, {"arch": "qwen3"}])
def test_tiny_quantized_model_close_to_oracle(tmp_path, opts):
    """Q8_0 weights (phi3: its attn_output and ffn_down; its fused matrices stay F32 in tests/models.py)."""
    from oracle import Oracle
    path = models.build(tmp_path / "tiny.gguf", wtype="Q8_0", **opts)
    ids = [5, 17, 99, 0, 42, 42, 7]
    want = Oracle(path).forward(ids)
    got = Model(path, n_threads=1).context(8).eval(ids, all_logits=True)
    assert np.max(np.abs(got - want)) < 0.05 * np.max(np.abs(want))


def test_unsupported_architecture(tmp_path):
    path = models.build(tmp_path / "m.gguf", arch="mamba9")
    with pytest.raises(GGUFError, match="architecture 'mamba9' is not supported"):
        Model(path)


def test_unsupported_tensor_type(tmp_path):
    # Q8_1 is an activation type only: a weight of that type (two blocks of 32 a row of 64) cannot run
    q8_1 = (np.zeros((100, 2 * gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1][1]), np.uint8), "Q8_1")
    path = models.build(tmp_path / "m.gguf", tied=True, extra={"output.weight": q8_1})
    with pytest.raises(GGUFError, match="type Q8_1"):
        Model(path)


def test_unknown_tensor(tmp_path):
    path = models.build(tmp_path / "m.gguf", extra={"blk.0.mystery.weight": np.zeros(4, np.float32)})
    with pytest.raises(GGUFError, match="blk.0.mystery.weight"):
        Model(path)


# Greedy decoding, teacher-forced: at each of the 4 prompts x 32 positions fastgguf picks its argmax from the KV
# cache, then is fed llama.cpp's token (so one near-tie flip does not end the comparison, and every position is
# compared in llama.cpp's own context). A flip may only fall where llama.cpp's logit of its token minus its logit of
# ours is under HARD_GAP (our token its runner-up, near-tied), and at most MAX_FLIPS such flips in all. Measured,
# agreement of 128, and the flips as (prompt, step, llama.cpp's margin):
#   scalar  124  (2, 10, 0.53) (2, 22, 0.09) (2, 23, 0.10) (3, 20, 0.27)
#   avx2    123  (0, 5, 0.26) (0, 14, 0.005) (1, 13, 0.15) (1, 24, 0.13) (2, 16, 0.08)
#   avx512  127  (2, 10, 0.53)
# (Ending each prompt at its first flip instead gave 94 / 66 / 106 and on NEON 84, with dotprod 58: where the first
# near-tie fell, not how good the kernels are.) 38 of the 128 positions have llama.cpp margins under HARD_GAP; our
# margin minus llama.cpp's is noise of sd 0.17 (all three ISAs), so a redraw of rounding expects 3.1 flips there,
# and more than 8 with probability ~1e-3. A real regression flips where llama.cpp's margin is large: it fails at once.
MAX_FLIPS = 8


def test_greedy_generation_matches_reference(model, reference):
    """Text -> ids -> greedy decode with the KV cache -> text, against llama.cpp's greedy ids: the same token at every
    position, teacher-forced, except a few where llama.cpp's own choice was a near tie."""
    eog = sorted(model.tokenizer.eog_ids)       # the reference suppressed end-of-generation tokens
    flips = []
    for i, r in enumerate(reference):
        ids = model.tokenize(r["prompt"], parse_special=r["parse_special"])
        assert ids == r["prompt_ids"]
        assert model.detokenize(r["greedy_ids"]) == r["greedy_text"]
        ctx = model.context(64)
        lg = ctx.eval(ids)
        for k, (p, want) in enumerate(zip(r["positions"], r["greedy_ids"])):
            lg[eog] = -np.inf
            tok = int(np.argmax(lg))
            if tok != want:
                top = dict(zip(p["top_ids"], p["top_logits"]))   # llama.cpp's top-10, teacher-forced
                margin = top[want] - top[tok] if tok in top else float("inf")
                flips.append((i, k, tok, want, round(margin, 3)))
            lg = ctx.runner.step_py(want)
    assert all(f[4] < HARD_GAP for f in flips), flips
    assert len(flips) <= MAX_FLIPS, flips


def test_scalar_isa_matches_simd(tmp_path):
    """The forward pass's twins (attention, softmax, swiglu, F16 store) on every available ISA agree."""
    from fastgguf import kernels
    path = models.build(tmp_path / "tiny.gguf", arch="qwen3")
    m = Model(path, n_threads=2)
    ids = [5, 17, 99, 0, 42, 42, 7, 63, 1, 2, 88, 31]
    isa = kernels.active()
    a = m.context(16).eval(ids, all_logits=True)
    try:
        for other in kernels_available():
            kernels.set_isa(other)
            b = m.context(16).eval(ids, all_logits=True)
            c = m.context(16)
            steps = np.array([c.runner.step_py(t) for t in ids])
            np.testing.assert_allclose(b, a, atol=1e-3, rtol=1e-3, err_msg=other)
            np.testing.assert_allclose(steps, a, atol=1e-3, rtol=1e-3, err_msg=other)
    finally:
        kernels.set_isa(isa)
