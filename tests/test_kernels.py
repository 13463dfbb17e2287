"""The C kernels (fastgguf.kernels) on every instruction set this CPU runs, against the scalar reference and
against gguf-py (an independent implementation of the same formats)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT
from gguf import quants as gq

from fastgguf import kernels

ISAS = kernels.available()
WEIGHT_TYPES = ["Q4_0", "Q4_1", "Q8_0", "F16", "BF16", "F32"]
BLOCK_LENGTHS = [32, 96, 544, 576, 608, 1536 + 32]
FLOAT_ONLY_LENGTHS = [1, 7, 33, 100]
ROW_COUNTS = [1, 3, 17, 33]

# Dot products differ between ISAs only by float summation order (block integer sums are exact): bound the
# difference by DOT_RTOL * sum_i |w_i x_i|.
DOT_RTOL = 2e-5
# Against float64 numpy on the same dequantized operands, the float32 accumulation error is of the same kind.
MATMUL_RTOL = 5e-5
# Q4_1 . Q8_1 uses the activation block sum s = fp16(d * sum q) (as ggml does): each block's m * s term carries
# up to half an fp16 ulp of relative error against the exact sum.
FP16_RTOL = 2.0 ** -11


def _variants():
    """(isa, use_extension) pairs: every ISA, and its VNNI/dotprod(+i8mm) variant separately where the CPU has one."""
    out = []
    for isa in ISAS:
        out.append((isa, False))
        if kernels.ext_available(isa):
            out.append((isa, True))
    return out


@pytest.fixture(params=_variants(), ids=lambda v: v[0] + ("+" + kernels.ext_name(v[0]) if v[1] else ""))
def isa(request):
    name, ext = request.param
    prev_ext = kernels.ext_enabled()
    kernels.set_ext(ext)
    yield name
    kernels.set_ext(prev_ext)


def _data(shape, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    flat = x.reshape(-1)
    if flat.size >= 64:  # an all-zero block (d = 0) and a block of exact rounding ties (d = 1, x = k + 0.5)
        flat[-32:] = 0
        flat[:32] = np.round(rng.uniform(-100, 100, 32)) + 0.5
        flat[5] = 127.0
    return x


def _lengths(t):
    return BLOCK_LENGTHS + (FLOAT_ONLY_LENGTHS if kernels.block_size(t) == 1 else [])


def _gguf_bytes(x, t):
    return np.ascontiguousarray(gq.quantize(x, GT[t])).view(np.uint8).reshape(x.shape[0], -1)


def _roundf(v):
    """C roundf: half away from zero."""
    t = np.trunc(v)
    return np.where(np.abs(v - t) >= 0.5, t + np.sign(v), t)


def _q8_1_reference(x):
    """Q8_1 blocks from numpy (gguf-py has no Q8_1 quantizer): d = amax / 127, q = roundf(x / d), s = d * sum q."""
    b = x.reshape(-1, 32)
    d = (np.abs(b).max(axis=1) / np.float32(127)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    q = _roundf(b * inv[:, None]).astype(np.int8)
    s = (q.astype(np.int32).sum(axis=1).astype(np.float32) * d).astype(np.float16)
    out = np.zeros((b.shape[0], 36), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = s.view(np.uint8).reshape(-1, 2)
    out[:, 4:] = q.view(np.uint8)
    return out.reshape(-1)


# ---------------------------------------------------------------- quantize / dequantize: exact


@pytest.mark.parametrize("t", WEIGHT_TYPES + ["Q8_1"])
def test_quantize_exact(isa, t):
    for n in _lengths(t):
        x = _data((3, n), n)
        got = kernels.quantize(x, t, isa=isa)
        assert np.array_equal(got, kernels.quantize(x, t, isa="scalar")), (t, n)
        if t == "Q8_1":
            for row in range(3):
                assert np.array_equal(got[row], _q8_1_reference(x[row])), (t, n, row)
        else:
            assert np.array_equal(got, _gguf_bytes(x, t)), (t, n)


@pytest.mark.parametrize("t", WEIGHT_TYPES + ["Q8_1"])
def test_dequantize_exact(isa, t):
    for n in _lengths(t):
        raw = kernels.quantize(_data((3, n), n + 1, scale=3.0), t, isa="scalar")
        got = kernels.dequantize(raw, t, n, isa=isa)
        ref = kernels.dequantize(raw, t, n, isa="scalar")
        assert got.dtype == np.float32 and got.shape == (3, n)
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), (t, n)
        if t != "Q8_1":
            assert np.array_equal(got, gq.dequantize(raw.view(np.uint8), GT[t]).reshape(3, n)), (t, n)


def test_quantize_shapes():
    x = _data((2, 3, 64), 0)
    raw = kernels.quantize(x, "Q4_0")
    assert raw.shape == (2, 3, 36) and raw.dtype == np.uint8
    assert kernels.dequantize(raw, "Q4_0", 64).shape == (2, 3, 64)


# ---------------------------------------------------------------- dot products


def _q4_1_sum_term(w, xq):
    """sum over blocks of |m_w * s_x| per weight row (the term FP16_RTOL applies to); 0 for other types."""
    m = np.ascontiguousarray(w.reshape(w.shape[0], -1, 20)[:, :, 2:4]).view(np.float16)[..., 0].astype(np.float64)
    sx = np.ascontiguousarray(xq.reshape(-1, 36)[:, 2:4]).view(np.float16)[:, 0].astype(np.float64)
    return np.abs(m) @ np.abs(sx)


def _oracle_bound(t, w, xq, wf, xf):
    bound = MATMUL_RTOL * (np.abs(wf) @ np.abs(xf)) + 1e-30
    return bound + FP16_RTOL * _q4_1_sum_term(w, xq) if t == "Q4_1" else bound


def _operands(t, n, rows, seed):
    w = kernels.quantize(_data((rows, n), seed), t, isa="scalar")
    xt = kernels.vec_dot_type(t)
    xq = kernels.quantize(_data((n,), seed + 1), xt, isa="scalar")
    wf = kernels.dequantize(w, t, n, isa="scalar").astype(np.float64)
    xf = kernels.dequantize(xq, xt, n, isa="scalar").astype(np.float64)
    return w, xq, wf, xf


@pytest.mark.parametrize("t", WEIGHT_TYPES)
def test_gemv_and_vec_dot(isa, t):
    for n in _lengths(t):
        for rows in ROW_COUNTS:
            w, xq, wf, xf = _operands(t, n, rows, seed=n * 100 + rows)
            bound = DOT_RTOL * (np.abs(wf) @ np.abs(xf)) + 1e-30
            ref = kernels.gemv(w, t, xq, isa="scalar")
            got = kernels.gemv(w, t, xq, isa=isa)
            assert np.all(np.abs(got - ref) <= bound), (t, n, rows)
            assert np.all(np.abs(got - wf @ xf) <= _oracle_bound(t, w, xq, wf, xf)), (t, n, rows)
            for r in (0, rows - 1):
                assert abs(kernels.vec_dot(w[r], t, xq, isa=isa) - ref[r]) <= bound[r], (t, n, r)


@pytest.mark.parametrize("t", WEIGHT_TYPES)
def test_matmul_vs_numpy(isa, t):
    prev = kernels.set_isa(isa)
    try:
        for n, rows, m in [(32, 1, 1), (576, 33, 1), (544, 17, 3), (1536 + 32, 3, 2)]:
            w = kernels.quantize(_data((rows, n), n), t)
            x = _data((m, n), n + 7)
            xt = kernels.vec_dot_type(t)
            xq = kernels.quantize(x, xt)
            xf = kernels.dequantize(xq, xt, n).astype(np.float64)
            wf = kernels.dequantize(w, t, n).astype(np.float64)
            got = kernels.matmul(w, t, x)
            assert got.shape == (m, rows) and got.dtype == np.float32
            for i in range(m):
                bound = _oracle_bound(t, w, xq[i], wf, xf[i])
                assert np.all(np.abs(got[i] - wf @ xf[i]) <= bound), (t, n, rows, m, i)
            assert np.array_equal(kernels.matmul(w, t, x[0]), got[0])  # 1-D activation
            assert np.array_equal(kernels.matmul(w, t, x, n_threads=2), kernels.matmul(w, t, x, n_threads=1))
    finally:
        kernels.set_isa(prev)


@pytest.mark.parametrize("t", WEIGHT_TYPES)
def test_matmul_many_rows_equals_gemv_per_row(isa, t):
    """Batched products (the gemm kernels, which tile weight rows x activation rows) give exactly the gemv result
    of each activation row: same arithmetic per (row, activation) pair, only the loop order differs."""
    prev = kernels.set_isa(isa)
    try:
        float_type = t in ("F16", "BF16", "F32")
        for n in (32, 160, 576) + ((37, 45) if float_type else ()):  # 1, 5, 18 blocks; float rows of odd length
            if float_type and n > 160:
                continue
            for rows in (1, 3, 17, 43):  # 43: 16-row tiles and a remainder of 11 (both 8-row halves)
                w = kernels.quantize(_data((rows, n), n + rows), t)
                for m in (1, 2, 3, 4, 5, 9, 17):
                    x = _data((m, n), n + 100 * m + rows)
                    xq = kernels.quantize(x, kernels.vec_dot_type(t))
                    got = kernels.matmul(w, t, x, n_threads=1)
                    ref = np.stack([kernels.gemv(w, t, xq[i], isa=isa) for i in range(m)])
                    assert np.array_equal(got, ref), (t, n, rows, m)
                    assert np.array_equal(kernels.matmul(w, t, x, n_threads=2), got), (t, n, rows, m)
    finally:
        kernels.set_isa(prev)


def test_f16_panel_gemm_equals_gemv_and_scalar(isa):
    """F16's AVX-512 gemm converts a panel of weight rows to F32 once (32 KB under 128 activations, else 64 KB: that
    // n16 rows, a multiple of 4) and runs every activation over it, from 4 activations up: bit for bit the gemv of
    each activation, and within DOT_RTOL of the scalar vec_dot. Rows of odd length (a masked tail), several panels and
    a short last one (389: 20 rows a panel, 43 rows; 1541: 4 a panel), and a length past the buffer (4100: the F16
    tiles)."""
    prev = kernels.set_isa(isa)
    try:
        for n, rows in ((389, 43), (1541, 19), (4100, 5)):
            w = kernels.quantize(_data((rows, n), n + rows), "F16")
            wf = kernels.dequantize(w, "F16", n).astype(np.float64)
            for m in (3, 4, 7):
                x = _data((m, n), n + m)
                got = kernels.matmul(w, "F16", x, n_threads=1)
                for i in range(m):
                    assert np.array_equal(got[i], kernels.gemv(w, "F16", x[i], isa=isa)), (n, rows, m, i)
                    ref = kernels.gemv(w, "F16", x[i], isa="scalar")
                    bound = DOT_RTOL * (np.abs(wf) @ np.abs(x[i].astype(np.float64))) + 1e-30
                    assert np.all(np.abs(got[i] - ref) <= bound), (n, rows, m, i)
                assert np.array_equal(kernels.matmul(w, "F16", x, n_threads=2), got), (n, rows, m)
    finally:
        kernels.set_isa(prev)


def test_q8_0_weights_at_minus_128(isa):
    """Q8_0 weights may hold -128 (a file's bytes, though our quantizer stops at -127): the dot stays exact and the
    gemm (8-row tiles sharing a transpose) still equals the gemv (8 rows reduced in registers) bit for bit."""
    prev = kernels.set_isa(isa)
    try:
        n, rows, m = 96, 11, 5
        w = kernels.quantize(_data((rows, n), 5), "Q8_0").copy()
        qs = w.reshape(rows, n // 32, 34)[:, :, 2:]
        qs[:, :, ::3] = 0x80  # -128 in every third weight
        x = _data((m, n), 6)
        xq = kernels.quantize(x, "Q8_0")
        got = kernels.matmul(w, "Q8_0", x, n_threads=1)
        ref = np.stack([kernels.gemv(w, "Q8_0", xq[i], isa=isa) for i in range(m)])
        assert np.array_equal(got, ref)
        exact = kernels.dequantize(w, "Q8_0", n).astype(np.float64) @ kernels.dequantize(xq, "Q8_0", n).astype(np.float64).T
        assert np.allclose(ref, exact.T, rtol=1e-5, atol=1e-4)
    finally:
        kernels.set_isa(prev)


# The row-lane tiles that take the scalar reference's float step: x86's (AVX2, and its AVX-512 / VNNI twins) and NEON's
# with dotprod (base NEON has none; tests/c/test_kernels.c checks the NEON tiles too, under qemu in .ci/kernels.sh)
_X86_EXACT = ("Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "MXFP4")
ROW_LANE_EXACT = {"avx2": _X86_EXACT, "avx512": _X86_EXACT, "neon": ("Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "MXFP4")}
# ... and those only an ISA's extension has (IQ4_XS's VNNI tile: its AVX2 rows sum in float lanes, fused)
ROW_LANE_EXACT_EXT = {"vnni": ("IQ4_XS",)}


@pytest.mark.parametrize("t", ["Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "MXFP4", "IQ4_XS"])
def test_row_lane_kernels_equal_scalar_exactly(isa, t):
    """The row-lane kernels take the scalar reference's float step per (row, activation) pair, block by block
    (Q4_1, Q5_1: sum += (float)sumi * (dw * dx) + mw * sx; Q5_0, IQ4_NL, MXFP4: without the m term; IQ4_XS: sum +=
    (dw * dx) * (float)sumi per super-block), so gemm, gemv and vec_dot all equal the scalar vec_dot bit for bit; n
    past 128 blocks crosses the tiles' chunk of activation scales, m = 1..9 every activation tile size (and, from 32,
    the panel gemms)."""
    prev = kernels.set_isa(isa)
    ext = kernels.active_ext()
    if t not in ROW_LANE_EXACT.get(isa, ()) + ROW_LANE_EXACT_EXT.get(ext, ()):
        kernels.set_isa(prev)
        pytest.skip(f"no exact row-lane {t} tile on {isa}")
    if isa == "neon" and ext not in ("dotprod", "i8mm"):
        kernels.set_isa(prev)
        pytest.skip("NEON without dotprod has no row-lane tiles")
    sizes = ((256, 9), (256 * 129, 11)) if t == "IQ4_XS" else ((64, 9), (4096 + 96, 11), (96, 37))
    try:
        for n, rows in sizes:
            w = kernels.quantize(_data((rows, n), n + rows), t)
            x = _data((9, n), n + 1)
            xq = kernels.quantize(x, kernels.vec_dot_type(t))
            ref = np.array([[kernels.vec_dot(w[r], t, xq[i], isa="scalar") for r in range(rows)] for i in range(9)],
                           np.float32)
            for m in range(1, 10):
                assert np.array_equal(kernels.matmul(w, t, x[:m], n_threads=1), ref[:m]), (n, m)
            if n <= 4096:  # the panel gemms (32 activations and up), 1-3 blocks, rows not a multiple of 16
                xm = _data((35, n), n + 2)
                xmq = kernels.quantize(xm, kernels.vec_dot_type(t))
                refm = np.array([[kernels.vec_dot(w[r], t, xmq[i], isa="scalar") for r in range(rows)]
                                 for i in range(35)], np.float32)
                assert np.array_equal(kernels.matmul(w, t, xm, n_threads=1), refm), (n, 35)
            assert np.array_equal(np.stack([kernels.gemv(w, t, xq[i]) for i in range(9)]), ref), n
            assert np.array_equal(np.array([kernels.vec_dot(w[r], t, xq[0]) for r in range(rows)], np.float32),
                                  ref[0]), n
    finally:
        kernels.set_isa(prev)


@pytest.mark.parametrize("t", ["Q4_0", "Q8_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "MXFP4"])
def test_stream_gemv_equals_vec_dot_exactly(isa, t):
    """The x86 gemv of Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 reads the rows as 8 ascending streams
    (FG_GEMV_STREAMS: tile t takes rows t, t + q, ..., t + 7q, then the nrows % 8 left) with the per-row float steps
    of the gemm's tiles, so every row equals its vec_dot bit for bit: rows with and without a remainder, n within one
    chunk of activation scales, across chunks (4096 + 96) and past the streams' 1024 blocks (the gemm's path)."""
    for n, rows in ((64, 8), (2048 + 32, 29), (4096 + 96, 21), (1024 * 32 + 64, 10)):
        w = kernels.quantize(_data((rows, n), n + rows), t, isa="scalar")
        xq = kernels.quantize(_data((n,), n + 3), kernels.vec_dot_type(t), isa="scalar")
        got = kernels.gemv(w, t, xq, isa=isa)
        dots = np.array([kernels.vec_dot(w[r], t, xq, isa=isa) for r in range(rows)], np.float32)
        assert np.array_equal(got, dots), (t, n, rows)


# ---------------------------------------------------------------- API and errors


def test_available_and_active():
    assert ISAS[0] == "scalar" and kernels.active() in ISAS
    assert set(ISAS) <= set(kernels.ISAS)
    prev = kernels.set_isa("scalar")
    try:
        assert kernels.active() == "scalar" and kernels.active_ext() == ""
    finally:
        kernels.set_isa(prev)
    assert kernels.active() == prev


def test_bad_arguments():
    x = np.zeros((2, 64), np.float32)
    with pytest.raises(ValueError, match="unknown instruction set"):
        kernels.set_isa("sse9")
    with pytest.raises(ValueError, match="not available"):
        kernels.set_isa([i for i in kernels.ISAS if i not in ISAS][0])
    with pytest.raises(ValueError, match="unsupported type"):
        kernels.quantize(x, "IQ2_XXS")  # not (yet) implemented
    with pytest.raises(ValueError, match="unsupported ggml type id"):
        kernels.quantize(x, 12345)
    with pytest.raises(ValueError, match="multiple of the block size"):
        kernels.quantize(np.zeros(40, np.float32), "Q4_0")
    with pytest.raises(ValueError, match="expected 36"):
        kernels.dequantize(np.zeros((1, 35), np.uint8), "Q4_0", 64)
    w = kernels.quantize(x, "Q4_1")
    with pytest.raises(ValueError, match="expected"):
        kernels.matmul(w, "Q4_1", np.zeros(96, np.float32))
    with pytest.raises(ValueError, match="activation-only"):
        kernels.gemv(w, "Q8_1", kernels.quantize(x[0], "Q8_1"))
    with pytest.raises(ValueError, match="activation"):
        kernels.gemv(w, "Q4_1", np.zeros(35, np.uint8))
    with pytest.raises(ValueError, match="unknown instruction set"):
        kernels.quantize(x, "Q8_0", isa="bogus")


@pytest.mark.parametrize("t, value", [("Q4_0", 6e5), ("Q4_1", 1e6), ("Q8_0", 1e7), ("Q5_0", 1e7), ("IQ4_NL", 1e7),
                                      ("Q2_K", 1e7), ("Q3_K", 1e7), ("Q4_K", 1e8), ("Q6_K", 1e9), ("IQ4_XS", 1e9),
                                      ("F16", 7e4)])
def test_quantize_refuses_a_block_its_format_cannot_hold(t, value):
    """A finite weight too large for the format's scale (0.4 wrote an inf scale, silently) or a NaN: QuantizeError
    naming the row and block, from quantize() on every ISA and quantize_as_llama_file() alike (the check
    fastgguf.gguf.quantize makes: kernels.first_unfit_block); one a tenth as large is written."""
    from fastgguf.errors import QuantizeError
    blk = kernels.block_size(t)
    n = 2 * max(blk, 32)
    x = _data((3, n), n, scale=1.0)
    col = blk + 3 if blk > 1 else 5  # in block 1 of row 2
    block = col // blk
    for bad, says in ((value, "overflows"), (np.nan, "not finite")):
        x[2, col] = bad
        for quantize in [lambda a: kernels.quantize_as_llama_file(a, t)] + [
                lambda a, isa=isa: kernels.quantize(a, t, isa=isa) for isa in ISAS]:
            with pytest.raises(QuantizeError, match=rf"^row 2, block {block} \(.*{t}.*{says}"):
                quantize(x)
    x[2, col] = value / 10
    raw = kernels.quantize(x, t)
    assert kernels.first_unfit_block(x, raw, t) is None and np.isfinite(kernels.dequantize(raw, t, n)).all()


def _run_env(env_extra, code):
    """Run code in a fresh interpreter that imports the same fastgguf as this test run (installed or in place)."""
    import fastgguf
    env = dict(os.environ, **env_extra)
    where = os.path.dirname(os.path.dirname(os.path.abspath(fastgguf.__file__)))
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=where, capture_output=True, text=True,
                          timeout=60)


def test_env_forces_scalar():
    r = _run_env({"FASTGGUF_ISA": "scalar"}, "from fastgguf import kernels; print(kernels.active())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "scalar"


def test_env_bogus_isa_fails_at_import():
    r = _run_env({"FASTGGUF_ISA": "bogus"}, "import fastgguf.kernels")
    assert r.returncode != 0
    assert "FASTGGUF_ISA='bogus'" in r.stderr and "not a known instruction set" in r.stderr


def test_env_no_ext():
    r = _run_env({"FASTGGUF_NO_EXT": "1"}, "from fastgguf import kernels; print(repr(kernels.active_ext()))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "''"


def test_read_bandwidth_positive():
    assert kernels.read_bandwidth(1 << 22, repeats=1) > 0.1


def test_read_bandwidth_of_threads_reading_at_once():
    """Two threads of one team, one timed window (a positive figure; its size is the benchmarks' business)."""
    if not kernels.build_info()["threads"]:
        pytest.skip("a build without threads")
    assert kernels.read_bandwidth(1 << 22, repeats=1, n_threads=2) > 0.1


@pytest.mark.parametrize("args", [(100, 1, 1), (1 << 20, 0, 1), (1 << 20, 1, 0)])
def test_read_bandwidth_refuses_bad_arguments(args):
    with pytest.raises(ValueError, match="required"):
        kernels.read_bandwidth(*args)


def test_misaligned_float_input():
    """Float rows at an odd address (a view into a file, e.g. a safetensors tensor at an odd offset: numpy marks it
    unaligned) are read as copies, not misaligned loads (UBSan's 'load of misaligned address' under the ASan leg)."""
    x = _data((3, 64), 7)
    buf = np.zeros(x.nbytes + 1, np.uint8)
    buf[1:] = x.view(np.uint8).reshape(-1)
    odd = np.frombuffer(buf, dtype=np.float32, offset=1).reshape(3, 64)
    assert not odd.flags.aligned
    for t in ("Q8_0", "F16"):
        assert np.array_equal(kernels.quantize(odd, t), kernels.quantize(x, t))
        assert np.array_equal(kernels.quantize_as_llama_file(odd, t), kernels.quantize_as_llama_file(x, t))
    w = kernels.quantize(_data((5, 64), 8), "Q8_0")
    assert np.array_equal(kernels.matmul(w, "Q8_0", odd), kernels.matmul(w, "Q8_0", x))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_activation_gives_nonfinite_rows(isa, bad):
    """Issue 24: the activation quantizers dropped NaN (a NaN in x gave finite products) and turned inf into zeros.
    A non-finite entry now makes its whole output row non-finite (NaN through a quantized activation: its block's
    scale is NaN), for every weight type, while the batch's other rows are unchanged."""
    prev = kernels.set_isa(isa)
    try:
        for t in kernels.WEIGHT_TYPES:
            n = 768 if kernels.block_size(t) == 256 else 96
            w = kernels.quantize(_data((5, n), n), t)
            x = _data((3, n), n + 1)
            clean = kernels.matmul(w, t, x)
            x[1, n // 2 + 3] = bad
            got = kernels.matmul(w, t, x)
            assert np.array_equal(got[[0, 2]], clean[[0, 2]]), t
            ok = np.isnan(got[1]) if kernels.vec_dot_type(t) != kernels.vec_dot_type("F32") else ~np.isfinite(got[1])
            assert ok.all(), (t, got[1])
    finally:
        kernels.set_isa(prev)
