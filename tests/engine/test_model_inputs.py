"""Reliability of the engine (issue: no crash, hang or silent corruption from any input): thread counts, views of
native memory, files changing under a model, streams owning their context, hostile hyperparameters, token-id
input. Each test pins a defect reproduced on 0.1.0."""
import gc
import math
import os
import shutil
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import fastgguf
from fastgguf import GGUFError, GGUFWriter, SamplingParams, kernels
from fastgguf.engine.threads import MAX_THREADS_PER_CPU, usable_cpus
from fastgguf.gguf import GGUFValueType as V

E, L, H, KVH, F, NV, HD = 64, 2, 4, 2, 96, 100, 16

BASE_KV = {
    "general.architecture": ("llama", V.STRING),
    "llama.block_count": (L, V.UINT32),
    "llama.context_length": (128, V.UINT32),
    "llama.embedding_length": (E, V.UINT32),
    "llama.feed_forward_length": (F, V.UINT32),
    "llama.attention.head_count": (H, V.UINT32),
    "llama.attention.head_count_kv": (KVH, V.UINT32),
    "llama.rope.freq_base": (10000.0, V.FLOAT32),
    "llama.attention.layer_norm_rms_epsilon": (1e-5, V.FLOAT32),
    "llama.rope.dimension_count": (HD, V.UINT32),
}


def tiny(path, kv=None, drop=(), tensors=None, drop_tensors=(), n_tokens=None, qk=None):
    """A tiny random llama file; kv overrides/adds metadata {key: (value, vtype)}, drop removes keys."""
    rng = np.random.default_rng(0)
    w = GGUFWriter()
    for k, (v, vt) in {**BASE_KV, **(kv or {})}.items():
        if k in drop:
            continue
        if vt == V.ARRAY:
            w.add_array(k, v)
        else:
            w.add_value(k, v, vt)
    if n_tokens is not None:
        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(n_tokens)])
    ts = {"token_embd.weight": (NV, E), "output_norm.weight": (E,)}
    for i in range(L):
        p = f"blk.{i}."
        ts.update({p + "attn_norm.weight": (E,), p + "attn_q.weight": (H * HD, E), p + "attn_k.weight": (KVH * HD, E),
                   p + "attn_v.weight": (KVH * HD, E), p + "attn_output.weight": (E, H * HD),
                   p + "ffn_norm.weight": (E,), p + "ffn_gate.weight": (F, E), p + "ffn_up.weight": (F, E),
                   p + "ffn_down.weight": (E, F)})
        if qk:
            for name in qk:
                ts[p + name] = (HD,)
    ts.update(tensors or {})
    for name, shape in ts.items():
        if name not in drop_tensors:
            w.add_tensor(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))
    w.write(str(path))
    return str(path)


@pytest.fixture
def tiny_path(tmp_path):
    return tiny(tmp_path / "tiny.gguf")


# ---------------------------------------------------------------------------------------------- thread counts

LIMIT = MAX_THREADS_PER_CPU * max(os.cpu_count() or 1, usable_cpus())


def test_n_threads_is_bounded_everywhere(tiny_path):
    """0.1.0: 100000 threads segfaulted inside the OpenMP runtime (Model, ctx.n_threads, kernels.matmul)."""
    with pytest.raises(ValueError, match="threads per CPU"):
        fastgguf.Model(tiny_path, n_threads=100000)
    m = fastgguf.Model(tiny_path, n_threads=1)
    ctx = m.context(16)
    with pytest.raises(ValueError, match="threads per CPU"):
        ctx.n_threads = 100000
    with pytest.raises(ValueError, match="threads per CPU"):
        m.context(16, n_threads=LIMIT + 1)
    w = kernels.quantize(np.ones((4, 32), np.float32), "Q8_0")
    with pytest.raises(ValueError, match="threads per CPU"):
        kernels.matmul(w, "Q8_0", np.ones(32, np.float32), n_threads=100000)
    assert ctx.n_threads == 1


@pytest.mark.parametrize("bad", [2.7, "2", True, None.__class__])
def test_n_threads_type(tiny_path, bad):
    """0.1.0: n_threads=2.7 was silently 2."""
    with pytest.raises(TypeError, match="n_threads"):
        fastgguf.Model(tiny_path, n_threads=bad)


def test_n_threads_zero_or_negative(tiny_path):
    for bad in (0, -1):
        with pytest.raises(ValueError, match="n_threads"):
            fastgguf.Model(tiny_path, n_threads=bad)


def test_more_threads_than_cpus_warns(tiny_path):
    n = usable_cpus() + 1
    with pytest.warns(RuntimeWarning, match="more than the"):
        m = fastgguf.Model(tiny_path, n_threads=n)
    assert m.n_threads == n
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fastgguf.Model(tiny_path, n_threads=1)


# ---------------------------------------------------------------------------------------- views of native memory

def test_logits_view_keeps_the_runner_alive(tiny_path):
    """0.1.0: the view did not hold its Runner; after `del ctx` it read freed memory."""
    m = fastgguf.Model(tiny_path, n_threads=1)
    ctx = m.context(16)
    want = ctx.eval([1, 2, 3])
    v = ctx.runner.logits_view()
    del ctx
    gc.collect()
    junk = [np.full(NV, 7.0, np.float32) for _ in range(100)]  # would reuse the freed buffer
    assert np.array_equal(v, want)
    del junk


def test_logits_view_after_context_is_gone_in_a_subprocess(tiny_path, tmp_path):
    code = ("import gc, numpy as np, fastgguf\n"
            f"m = fastgguf.Model({tiny_path!r}, n_threads=1)\n"
            "ctx = m.context(16); want = ctx.eval([1, 2, 3]); v = ctx.runner.logits_view()\n"
            "del ctx; gc.collect(); bufs = [np.ones(1 << 16) for _ in range(50)]\n"
            "assert np.array_equal(v, want); print('ok')\n")
    where = os.path.dirname(os.path.dirname(os.path.abspath(fastgguf.__file__)))  # the fastgguf under test
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_PERTURB_="165",
               PYTHONPATH=where + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# --------------------------------------------------------------------------------- files changing under a model

def test_mmap_false_survives_truncation_and_rewrite(tmp_path, tiny_path):
    """With mmap=True a truncated file is SIGBUS and a rewritten one silently changes the output (as in llama.cpp);
    mmap=False reads the weights into private memory."""
    p = str(tmp_path / "copy.gguf")
    shutil.copy(tiny_path, p)
    m = fastgguf.Model(p, n_threads=1, mmap=False)
    want = m.context(16).eval([1, 2, 3])
    with open(p, "r+b") as f:  # rewritten in place with other weights, then truncated
        f.seek(os.path.getsize(p) // 2)
        f.write(os.urandom(4096))
        f.truncate(os.path.getsize(p) // 3)
    assert np.array_equal(m.context(16).eval([1, 2, 3]), want)
    with pytest.raises(TypeError):
        fastgguf.Model(tiny_path, mmap="no")


def test_mmap_true_is_the_default_and_shares_the_file(tiny_path):
    m = fastgguf.Model(tiny_path)
    import mmap as mmap_module
    assert isinstance(m.file._mm, mmap_module.mmap)
    m2 = fastgguf.Model(tiny_path, mmap=False)
    assert np.array_equal(m.context(8).eval([5]), m2.context(8).eval([5]))


# ------------------------------------------------------------------------------------- streams own the context

def test_live_stream_owns_its_context(default_model_path):
    """0.1.0 locked the context only during each step: between pieces another generate() on the same thread or
    ctx.eval from another thread ran, and the stream resumed with wrong tokens."""
    m = fastgguf.Model(default_model_path, n_threads=1)
    ctx = m.context(64)
    params = SamplingParams(temperature=0, max_tokens=6)
    alone = m.generate("Once upon a time", params).token_ids
    s = m.generate("Once upon a time", params, stream=True, context=ctx)
    with pytest.raises(RuntimeError, match="stream"):  # even before the first piece
        ctx.eval([1])
    next(s)
    with pytest.raises(RuntimeError, match="stream"):
        m.generate("Hello", params, context=ctx)
    with pytest.raises(RuntimeError, match="stream"):
        ctx.reset()
    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeError, ctx.eval, [1])))
    t.start()
    t.join()
    assert errors
    rest = list(s)
    assert s.token_ids == alone and rest is not None
    ctx.eval([1])  # finished: the context is free again


def test_closed_or_dropped_stream_frees_its_context(default_model_path):
    m = fastgguf.Model(default_model_path, n_threads=1)
    ctx = m.context(64)
    s = m.generate("Hi", max_tokens=8, stream=True, context=ctx)
    next(s)
    s.close()
    ctx.eval([1])
    s = m.generate("Hi", max_tokens=8, stream=True, context=ctx)
    del s
    gc.collect()
    ctx.eval([1])
    with m.generate("Hi", max_tokens=8, stream=True, context=ctx) as s:
        next(s)
    ctx.eval([1])


def test_context_argument_type(tiny_path):
    m = fastgguf.Model(tiny_path, n_threads=1)
    with pytest.raises(TypeError, match="context"):
        fastgguf.engine.generate.generate(m, [1, 2], context="str")


# ------------------------------------------------------------------------------------- hostile hyperparameters

HOSTILE = {
    "freq_base 0": ({"llama.rope.freq_base": (0.0, V.FLOAT32)}, "rope.freq_base"),
    "freq_base negative": ({"llama.rope.freq_base": (-5.0, V.FLOAT32)}, "rope.freq_base"),
    "freq_base nan": ({"llama.rope.freq_base": (math.nan, V.FLOAT32)}, "rope.freq_base"),
    "freq_base inf": ({"llama.rope.freq_base": (math.inf, V.FLOAT32)}, "rope.freq_base"),
    "eps nan": ({"llama.attention.layer_norm_rms_epsilon": (math.nan, V.FLOAT32)}, "layer_norm_rms_epsilon"),
    "eps negative": ({"llama.attention.layer_norm_rms_epsilon": (-1e-5, V.FLOAT32)}, "layer_norm_rms_epsilon"),
    "rope dim negative": ({"llama.rope.dimension_count": (-2, V.INT32)}, "rope.dimension_count"),
    "rope dim odd": ({"llama.rope.dimension_count": (5, V.UINT32)}, "rope.dimension_count"),
    "embedding float": ({"llama.embedding_length": (64.0, V.FLOAT32)}, "embedding_length"),
    "embedding string": ({"llama.embedding_length": ("64", V.STRING)}, "embedding_length"),
    "embedding 0": ({"llama.embedding_length": (0, V.UINT32)}, "embedding_length"),
    "embedding 2^40": ({"llama.embedding_length": (1 << 40, V.UINT64)}, "embedding_length"),
    "head_count 0": ({"llama.attention.head_count": (0, V.UINT32)}, "head_count"),
    "head_count_kv 0": ({"llama.attention.head_count_kv": (0, V.UINT32)}, "head_count_kv"),
    "key_length 0": ({"llama.attention.key_length": (0, V.UINT32)}, "key_length"),
    "block_count bool": ({"llama.block_count": (True, V.BOOL)}, "block_count"),
    "arch as array": ({"general.architecture": (["llama"], V.ARRAY)}, "general.architecture"),
    "arch as uint32": ({"general.architecture": (7, V.UINT32)}, "general.architecture"),
    "scaling nan": ({"llama.rope.scaling.type": ("linear", V.STRING),
                     "llama.rope.scaling.factor": (math.nan, V.FLOAT32)}, "rope.scaling.factor"),
    "scaling negative": ({"llama.rope.scaling.type": ("linear", V.STRING),
                          "llama.rope.scaling.factor": (-2.0, V.FLOAT32)}, "rope.scaling.factor"),
    "scaling type uint": ({"llama.rope.scaling.type": (1, V.UINT32)}, "rope.scaling.type"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_hyperparameters_are_gguf_errors(tmp_path, case):
    """0.1.0 loaded these, or raised ZeroDivisionError / OverflowError / TypeError."""
    kv, key = HOSTILE[case]
    p = tiny(tmp_path / "h.gguf", kv=kv)
    with pytest.raises(GGUFError, match=key.replace(".", r"\.")):
        fastgguf.Model(p, n_threads=1)


def test_missing_token_embd_is_a_gguf_error(tmp_path):
    p = tiny(tmp_path / "h.gguf", drop_tensors=("token_embd.weight",))
    with pytest.raises(GGUFError, match="token_embd"):
        fastgguf.Model(p, n_threads=1)


def test_token_embd_with_no_rows(tmp_path):
    p = tiny(tmp_path / "h.gguf", drop_tensors=("token_embd.weight",), tensors={"token_embd.weight": (0, E)})
    with pytest.raises(GGUFError, match="token_embd"):
        fastgguf.Model(p, n_threads=1)


def test_vocabulary_larger_than_the_embedding(tmp_path):
    """0.1.0 loaded it and failed mid-generation; llama.cpp rejects it at load."""
    p = tiny(tmp_path / "h.gguf", n_tokens=NV + 5)
    with pytest.raises(GGUFError, match="tokenizer.ggml.tokens"):
        fastgguf.Model(p, n_threads=1)
    fastgguf.Model(tiny(tmp_path / "ok.gguf", n_tokens=NV), n_threads=1)


def test_q_norm_without_k_norm(tmp_path):
    kv = {"general.architecture": ("qwen3", V.STRING)}
    kv.update({k.replace("llama.", "qwen3."): v for k, v in BASE_KV.items() if k.startswith("llama.")})
    drop = tuple(k for k in BASE_KV if k.startswith("llama."))
    p = tiny(tmp_path / "h.gguf", kv=kv, drop=drop, qk=("attn_q_norm.weight",))
    with pytest.raises(GGUFError, match="attn_k_norm"):
        fastgguf.Model(p, n_threads=1)
    fastgguf.Model(tiny(tmp_path / "ok.gguf", kv=kv, drop=drop, qk=("attn_q_norm.weight", "attn_k_norm.weight")),
                   n_threads=1)


def test_a_wrongly_shaped_tensor_is_a_gguf_error(tmp_path):
    p = tiny(tmp_path / "h.gguf", drop_tensors=("blk.0.ffn_up.weight",), tensors={"blk.0.ffn_up.weight": (F + 1, E)})
    with pytest.raises(GGUFError, match="ffn_up"):
        fastgguf.Model(p, n_threads=1)


@pytest.mark.parametrize("key", ["llama.rope.scaling.factor", "llama.rope.scale_linear"])
def test_scaling_factor_without_type_is_linear(tmp_path, key):
    """0.1.0 ignored a factor stored without rope.scaling.type (older converters); llama.cpp reads it as linear."""
    plain = fastgguf.Model(tiny(tmp_path / "a.gguf"), n_threads=1)
    typed = fastgguf.Model(tiny(tmp_path / "b.gguf", kv={"llama.rope.scaling.type": ("linear", V.STRING),
                                                         "llama.rope.scaling.factor": (4.0, V.FLOAT32)}), n_threads=1)
    untyped = fastgguf.Model(tiny(tmp_path / "c.gguf", kv={key: (4.0, V.FLOAT32)}), n_threads=1)
    assert untyped.hparams.rope_freq_scale == typed.hparams.rope_freq_scale == 0.25
    ids = list(range(1, 20))
    assert np.array_equal(untyped.context(32).eval(ids), typed.context(32).eval(ids))
    assert not np.array_equal(untyped.context(32).eval(ids), plain.context(32).eval(ids))


def test_all_nan_logits_raise(tmp_path):
    """A model whose output norm is NaN gives all-NaN logits: 0.1.0 returned them."""
    p = tiny(tmp_path / "nan.gguf")
    with fastgguf.GGUFFile(p) as f:
        ti = f.tensors["output_norm.weight"]
    data = bytearray(open(p, "rb").read())
    data[ti.offset:ti.offset + ti.nbytes] = np.full(E, np.nan, np.float32).tobytes()
    open(p, "wb").write(bytes(data))
    ctx = fastgguf.Model(p, n_threads=1).context(16)
    with pytest.raises(FloatingPointError, match="NaN"):
        ctx.eval([1, 2])
    assert ctx.n_past == 0


# ------------------------------------------------------------------------------------------ token-id input

@pytest.mark.parametrize("bad", [[1.7, 2.2], ["5", "6"], {1: 2}, [True, 2], np.array([1.0, 2.0])])
def test_token_ids_are_validated_once(tiny_path, bad):
    """0.1.0: generate() truncated floats to ids and parsed strings, while ctx.eval rejected them."""
    m = fastgguf.Model(tiny_path, n_threads=1)
    m._tokenizer = type("T", (), {"eog_ids": (), "n_vocab": NV})()  # no vocabulary in this file: ids only
    for call in (lambda: m.context(16).eval(bad), lambda: fastgguf.engine.generate.generate(m, bad, max_tokens=1)):
        with pytest.raises((TypeError, ValueError), match="token ids|sequence of int"):
            call()


@pytest.mark.parametrize("big", [2 ** 70, -2 ** 70, 2 ** 63])
def test_huge_token_ids_are_value_errors(tiny_path, big):
    """0.2: ctx.eval([2**70]) raised OverflowError (the int64 conversion came before the range check)."""
    m = fastgguf.Model(tiny_path, n_threads=1)
    m._tokenizer = type("T", (), {"eog_ids": (), "n_vocab": NV})()
    for call in (lambda: m.context(16).eval([1, big]), lambda: fastgguf.engine.generate.generate(m, [big], max_tokens=1),
                 lambda: m.generate([1], max_tokens=1, logit_bias={big: 1.0})):
        with pytest.raises(ValueError, match=str(big)):
            call()


@pytest.mark.parametrize("key, value", [("tokenizer.ggml.tokens", (5, V.UINT32)),
                                        ("tokenizer.ggml.tokens", ("t0", V.STRING)),
                                        ("tokenizer.ggml.eos_token_id", (1.5, V.FLOAT32))])
def test_tokenizer_metadata_of_a_wrong_type(tmp_path, key, value):
    """0.2: tokens given as an int raised TypeError at load; a float token id was truncated."""
    kv = {"tokenizer.ggml.model": ("gpt2", V.STRING), "tokenizer.ggml.tokens": ([f"t{i}" for i in range(NV)], V.ARRAY),
          "tokenizer.ggml.merges": (["t 0"], V.ARRAY), key: value}
    with pytest.raises(fastgguf.FastGGUFError, match=key.replace(".", r"\.")):
        fastgguf.Model(tiny(tmp_path / "t.gguf", kv=kv), n_threads=1).tokenizer


def test_max_tokens_too_large_fails_at_the_call():
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=10 ** 12)


def test_matmul_on_an_activation_only_type():
    """0.1.0: kernels.matmul(w, 'q8_1', x) raised MemoryError."""
    with pytest.raises(ValueError, match="activation-only"):
        kernels.matmul(np.zeros((2, 36), np.uint8), "Q8_1", np.ones(32, np.float32))
