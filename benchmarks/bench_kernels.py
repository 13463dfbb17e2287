"""GEMV throughput per weight format and instruction set, one thread, on the default model's matrices.

    python -m pytest benchmarks/bench_kernels.py --benchmark-only -q -s

Each case times y = W x (x already quantized, as in the forward pass) and records in extra_info the GB/s of
weight bytes read and that figure as a fraction of this machine's single-thread read bandwidth, measured in
the same run (kernels.read_bandwidth over 512 MB). Matrices come from the default model (Q4_1) and its Q8_0
and Q4_0 variants (made once in the cache by fastgguf.gguf.quantize.quantized_variant); float formats use random
weights of the same shapes. Every kernel is first checked against the scalar reference, then timed.
A 576x1536 Q4_1 matrix is 0.55 MB (cache resident); the 30 ffn_up matrices stacked are 16.6 MB and token_embd
(49152x576 Q8_0) is 30 MB: these two stream from outside L2 as a decode step does. "big" (24576x4096, random
weights) is 33-82 MB in the llama.cpp formats (Q2_K..Q6_K, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4), larger than a 32 MB L3:
its GB/s against read_bandwidth is the streaming efficiency of each format's GEMV (target: Q4_K, Q6_K >= 0.85).
Only the big cases: add -k big.
The table of medians is printed at the end of the module (visible with -s or in the terminal summary).
"""
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the numpy baseline on one thread too
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fastgguf import kernels  # noqa: E402

MODEL = os.path.join(os.environ.get("FASTGGUF_CACHE", os.path.expanduser("~/.cache/fastgguf")),
                     "SmolLM2-135M-Instruct.Q4_1.gguf")
SHAPES = {"ffn_up": (1536, 576), "ffn_down": (576, 1536), "token_embd": (49152, 576),
          "ffn_up_x30": (30 * 1536, 576),  # all 30 layers' ffn_up stacked: streams like a decode step does
          "big": (24576, 4096)}  # random weights: 33 MB (Q2_K) to 82 MB (Q6_K), beyond a 32 MB last-level cache
KQ = ["Q4_K", "Q6_K", "Q5_K", "Q3_K", "Q2_K", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS", "MXFP4"]  # the llama.cpp formats
CASES = [("Q4_1", "ffn_up"), ("Q4_1", "ffn_down"), ("Q4_1", "ffn_up_x30"), ("Q4_0", "ffn_up"), ("Q4_0", "ffn_down"),
         ("Q8_0", "ffn_up"), ("Q8_0", "ffn_down"), ("Q8_0", "token_embd"),
         ("F16", "ffn_up"), ("BF16", "ffn_up"), ("F32", "ffn_up"), ("F16", "token_embd")] + \
        [(f, "big") for f in KQ] + [("Q4_0", "big"), ("Q8_0", "big")]
VARIANTS = [(isa, ext) for isa in kernels.available() for ext in ([True, False] if kernels.ext_available(isa)
                                                                   else [False])]
DOT_RTOL = 2e-5
RESULTS = {}  # (fmt, matrix) -> {variant: GB/s}
BEST = {}  # the same from the fastest round, "big" only


def _variant_name(isa, ext):
    return isa + ("+" + kernels.ext_name(isa) if ext else "")


@pytest.fixture(scope="module")
def bandwidth():
    return kernels.read_bandwidth(1 << 29)


@pytest.fixture(scope="module", autouse=True)
def table(request, bandwidth):
    yield
    cols = [_variant_name(*v) for v in VARIANTS] + ["numpy"]
    lines = [f"single-thread read bandwidth: {bandwidth:.1f} GB/s; GEMV GB/s of weight bytes (median), "
             f"fraction of bandwidth in ()",
             f"{'format':6} {'matrix':18} " + " ".join(f"{c:>14}" for c in cols)]
    for (fmt, mat), row in RESULTS.items():
        cells = [f"{row[c]:6.1f} ({row[c] / bandwidth:4.2f})" if c in row else f"{'-':>14}" for c in cols]
        lines.append(f"{fmt:6} {mat + ' ' + 'x'.join(map(str, SHAPES[mat])):18} " + " ".join(cells))
    if BEST:
        lines.append("fastest round (big matrices):")
        for (fmt, mat), row in BEST.items():
            cells = [f"{row[c]:6.1f} ({row[c] / bandwidth:4.2f})" if c in row else f"{'-':>14}" for c in cols]
            lines.append(f"{fmt:6} {mat + ' ' + 'x'.join(map(str, SHAPES[mat])):18} " + " ".join(cells))
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print("\n" + "\n".join(lines))


_cache = {}


def _matrix(fmt, mat):
    """Raw rows (rows, row_bytes) of the named matrix in format fmt."""
    key = (fmt, mat)
    if key in _cache:
        return _cache[key]
    rows, n = SHAPES[mat]
    w = None
    if fmt in ("Q4_1", "Q4_0", "Q8_0") and mat != "big" and os.path.exists(MODEL):
        from fastgguf.gguf import GGUFFile
        from fastgguf.gguf.quantize import quantized_variant
        path = MODEL if fmt == "Q4_1" else quantized_variant(MODEL, fmt)
        names = (["token_embd.weight"] if mat == "token_embd" else
                 [f"blk.{i}.ffn_up.weight" for i in range(30)] if mat == "ffn_up_x30" else [f"blk.0.{mat}.weight"])
        with GGUFFile(path) as f:
            if all(f.tensors[name].type.name == fmt for name in names):
                w = np.concatenate([f.tensor(name) for name in names])
    if w is None:  # random weights of the same shape (in chunks of rows: "big" is 400 MB as float32)
        rng = np.random.default_rng(0)
        step = max(1, (1 << 22) // n)
        w = np.concatenate([kernels.quantize(rng.standard_normal((min(step, rows - r), n), dtype=np.float32) * 0.05,
                                             fmt) for r in range(0, rows, step)])
    assert w.shape[0] == rows
    _cache[key] = w
    return w


def _activation(fmt, n):
    x = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
    return x, kernels.quantize(x, kernels.vec_dot_type(fmt))


@pytest.mark.parametrize("variant", VARIANTS, ids=[_variant_name(*v) for v in VARIANTS])
@pytest.mark.parametrize("fmt,mat", CASES, ids=[f"{f}-{m}" for f, m in CASES])
def test_gemv(benchmark, bandwidth, fmt, mat, variant):
    isa, ext = variant
    if isa == "scalar" and (mat == "big" or mat in ("token_embd", "ffn_up_x30") and fmt != "Q8_0"):
        pytest.skip("slow and uninformative")
    w = _matrix(fmt, mat)
    x, xq = _activation(fmt, SHAPES[mat][1])
    prev = kernels.ext_enabled()
    kernels.set_ext(ext)
    try:
        ref = kernels.gemv(w, fmt, xq, isa="scalar")
        got = kernels.gemv(w, fmt, xq, isa=isa)
        wf = kernels.dequantize(w, fmt, SHAPES[mat][1])
        xf = kernels.dequantize(xq, kernels.vec_dot_type(fmt), SHAPES[mat][1])
        assert np.all(np.abs(got - ref) <= DOT_RTOL * (np.abs(wf) @ np.abs(xf)) + 1e-30)
        benchmark(kernels.gemv, w, fmt, xq, isa)
    finally:
        kernels.set_ext(prev)
    gbs = w.nbytes / benchmark.stats.stats.median / 1e9
    benchmark.extra_info.update(weight_bytes=int(w.nbytes), GBps=round(gbs, 2), bandwidth_GBps=round(bandwidth, 2),
                                fraction_of_bandwidth=round(gbs / bandwidth, 3))
    RESULTS.setdefault((fmt, mat), {})[_variant_name(isa, ext)] = gbs
    if mat == "big":  # on a shared machine the best round shows what the kernel can do, the median what it did
        BEST.setdefault((fmt, mat), {})[_variant_name(isa, ext)] = w.nbytes / benchmark.stats.stats.min / 1e9


@pytest.mark.parametrize("fmt,mat", CASES, ids=[f"{f}-{m}" for f, m in CASES])
def test_numpy_baseline(benchmark, bandwidth, fmt, mat):
    """numpy: dequantize the weights then a float32 matrix-vector product (what a pure-numpy engine does)."""
    if mat == "big":
        pytest.skip("400 MB of float32 per call")
    w = _matrix(fmt, mat)
    n = SHAPES[mat][1]
    x, _ = _activation(fmt, n)
    benchmark(lambda: kernels.dequantize(w, fmt, n) @ x)
    gbs = w.nbytes / benchmark.stats.stats.median / 1e9
    benchmark.extra_info.update(weight_bytes=int(w.nbytes), GBps=round(gbs, 2), bandwidth_GBps=round(bandwidth, 2),
                                fraction_of_bandwidth=round(gbs / bandwidth, 3))
    RESULTS.setdefault((fmt, mat), {})["numpy"] = gbs


@pytest.mark.parametrize("fmt", ["Q4_K", "Q6_K", "Q5_K"])
def test_gemm_kquants(benchmark, fmt):
    """Prompt-processing product of a K-quant ffn_down (576x1536, as in SmolLM2's Q4_K_M/Q6_K files) with 64
    activation rows on one thread: the gemm tiles (8 activation rows per weight row), checked equal to one gemv
    per activation row first. extra_info: GMAC/s (median), and the speed-up over the gemv-per-row loop timed
    alongside (fastest rounds)."""
    rows, n = 576, 1536
    m = 64
    w = kernels.quantize(np.random.default_rng(0).standard_normal((rows, n), dtype=np.float32) * 0.05, fmt)
    x = np.random.default_rng(1).standard_normal((m, n), dtype=np.float32)
    xq = kernels.quantize(x, kernels.vec_dot_type(fmt))
    per_row = lambda: np.stack([kernels.gemv(w, fmt, xq[i]) for i in range(m)])  # noqa: E731
    assert np.array_equal(kernels.matmul(w, fmt, x, n_threads=1), per_row())
    t_rows = 1e9
    for _ in range(5):  # fastest rounds against each other: a shared machine's noise only ever slows a round
        t0 = time.perf_counter()
        per_row()
        t_rows = min(t_rows, time.perf_counter() - t0)
    benchmark(kernels.matmul, w, fmt, x, n_threads=1)
    st = benchmark.stats.stats
    benchmark.extra_info.update(GMACps=round(rows * n * m / st.median / 1e9, 1),
                                speedup_vs_gemv_rows=round(t_rows / st.min, 2))
