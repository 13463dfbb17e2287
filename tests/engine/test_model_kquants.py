"""The forward pass on the K-quants and the other llama.cpp formats (Q2_K..Q6_K, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4):

- a small random llama (tests/models.py "kq": every dimension a multiple of 256) with every matrix, token embedding
  and output included, in one format, against the float64 oracle (weights dequantized by gguf-py), on every ISA:
  each format's dequantize / vec_dot / gemv / gemm runs inside a real forward pass;
- the default model requantized by our quantizer (byte-identical to llama-quantize's, tests/gguf/
  test_quantize_kquants.py) to Q4_K_M, Q5_K_M, Q6_K, Q3_K_M and Q2_K, teacher-forced against llama.cpp's logits
  (tests/data/smollm2-<recipe>-logits.json, tools/make_reference.py) with the rule of test_model.py."""
import numpy as np
import pytest

from fastgguf import kernels
from fastgguf.engine.model import Model
import models

FORMATS = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS", "MXFP4"]
IDS = [5, 17, 99, 0, 42, 42, 7, 63, 1, 2, 88, 31, 300, 511]
# Measured (8 layers, 14 positions, logits up to ~4): max |ours - oracle| 1.0-2.0 % of max |oracle|, median
# |diff| 0.007-0.010, on scalar and avx2 alike. The oracle keeps activations in float64 while both llama.cpp and
# fastgguf quantize them to 8 bits (Q8_K / Q8_0) before every product: that rounding, not the weight format, is
# the whole difference. A wrong scale, sub-block or bit in any kernel moves logits by tens of percent.
MAX_REL, MEDIAN = 0.035, 0.02


@pytest.fixture(scope="module")
def kq_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("kqf")
    return {t: models.build(d / f"{t}.gguf", "kq", wtype=t) for t in FORMATS}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_matrix_in_format_matches_oracle(kq_models, fmt):
    from oracle import Oracle
    path = kq_models[fmt]
    want = Oracle(path).forward(IDS)
    m = Model(path, n_threads=2)
    assert {w.tensor_type.name for w in _tensors(path) if len(w.shape) == 2} == {fmt}
    scale = np.max(np.abs(want))
    old = kernels.active()
    try:
        for isa in kernels.available():
            kernels.set_isa(isa)
            got = m.context(16).eval(IDS, all_logits=True)
            ctx = m.context(16)
            steps = np.array([ctx.runner.step_py(t) for t in IDS])
            for name, x in (("batch", got), ("decode", steps)):
                d = np.abs(x - want)
                assert np.max(d) < MAX_REL * scale and np.median(d) < MEDIAN, (isa, name, np.max(d) / scale,
                                                                                np.median(d))
    finally:
        kernels.set_isa(old)


def _tensors(path):
    from gguf import GGUFReader
    return GGUFReader(path).tensors


def test_repacked_decode_equals_plain_decode(kq_models, repack_copies):
    """Model(repack=True): decode steps read the Q4_K matrices from row-interleaved copies made at load, where the
    kernels have a packed gemv of their own (AVX2, AVX-512 VNNI; elsewhere none is made and memory() says 0), with logits
    bit for bit the plain model's, at 1 and 2 threads (rows split between threads in groups of 16, attention's
    per-head slices); prompts read the mapped file either way."""
    path = kq_models["Q4_K"]
    plain, packed = Model(path, n_threads=2, repack=False), Model(path, n_threads=2, repack=True)
    assert plain.memory()["packed"] == 0
    assert (packed.memory()["packed"] > 0) == repack_copies("Q4_K")
    for threads in (1, 2):
        plain.decode_threads = packed.decode_threads = threads
        a, b = plain.context(16), packed.context(16)
        for t in IDS:
            assert np.array_equal(a.runner.step_py(t), b.runner.step_py(t)), (threads, t)
    assert np.array_equal(plain.context(16).eval(IDS, all_logits=True), packed.context(16).eval(IDS, all_logits=True))
    with pytest.raises(TypeError):
        Model(path, repack="yes")
