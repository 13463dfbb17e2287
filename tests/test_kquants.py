"""K-quants and the other llama.cpp weight formats (Q5_0, Q5_1, Q2_K..Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4) in the C
kernels, on every instruction set this CPU runs:

- dequantize is bit-exact against gguf-py (an independent implementation) on random blocks and on our own
  quantization of random data;
- quantize is byte-identical to llama.cpp's quantize_row_<fmt>_ref (fixture tests/data/kquants_ref.npz, made by
  tools/gen_kquant_fixtures.py from a llama.cpp build);
- vec_dot / gemv / matmul agree with a float64 dot of the dequantized operands within a named bound;
- forcing each instruction set (kernels.set_isa) agrees with scalar."""
import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT
from gguf import quants as gq

from fastgguf import kernels

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "data", "kquants_ref.npz")

# name: byte offsets of the fp16 scales inside one block (to build random blocks without inf/nan)
FP16_FIELDS = {
    "Q5_0": [0], "Q5_1": [0, 2], "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2],
    "Q6_K": [208], "IQ4_NL": [0], "IQ4_XS": [0],
}
# MXFP4's one scale is an E8M0 byte (a power of two): any byte is finite; 0..135 keeps the random dots in range.
E8M0_FIELDS = {"MXFP4": [0]}
ALL = ["Q8_K", "Q4_K", "Q6_K", "Q5_0", "Q5_1", "Q5_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS", "MXFP4"]
FORMATS = [t for t in ALL if t in kernels.SUPPORTED_TYPES]
WEIGHTS = [t for t in FORMATS if t != "Q8_K"]  # Q8_K is an activation type only
ISAS = kernels.available()
NAMES = {v: k for k, v in kernels.SUPPORTED_TYPES.items()}

# Integer block sums are exact; what remains is float32 rounding of the per-block scale products and of the
# accumulation (and, against float64, of the dequantized weights' own two-term formula d*sc*q - dmin*m): bound
# |dot - exact| by DOT_RTOL * sum_i |w_i x_i|.
DOT_RTOL = 5e-5
# Q5_1 . Q8_1 uses the activation block sum s = fp16(d * sum q) as ggml does, with d the float scale before its
# own rounding to fp16: against the dequantized activation (fp16 d) each block's m * s term carries up to two
# halves of an fp16 ulp of relative error.
FP16_RTOL = 2 * 2.0 ** -11


def _lengths(t):
    b = kernels.block_size(t)
    return [b, 3 * b, 9 * b] if b == 256 else [b, 5 * b, 17 * b, 96 * b]


def _data(shape, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    flat = x.reshape(-1)
    if flat.size >= 512:
        flat[-256:] = 0  # an all-zero (super-)block
        flat[:32] = np.round(rng.uniform(-20, 20, 32)) + 0.5  # ties
    return x


def _random_blocks(t, nblocks, seed):
    """Random bytes with every fp16 scale replaced by a finite value (and Q8_K's float d likewise)."""
    rng = np.random.default_rng(seed)
    bs = kernels.row_size(t, kernels.block_size(t))
    raw = rng.integers(0, 256, (nblocks, bs), dtype=np.uint8)
    if t == "Q8_K":
        raw[:, 0:4] = (rng.uniform(-0.1, 0.1, nblocks).astype(np.float32)).view(np.uint8).reshape(nblocks, 4)
        return raw
    for off in E8M0_FIELDS.get(t, []):
        raw[:, off] = rng.integers(0, 136, nblocks)
    for off in FP16_FIELDS.get(t, []):
        h = (rng.uniform(0.5, 2, nblocks) * 10.0 ** rng.uniform(-4, 0, nblocks) * rng.choice([-1, 1], nblocks))
        raw[:, off:off + 2] = h.astype(np.float16).view(np.uint8).reshape(nblocks, 2)
    return raw


def _gguf_dequantize(raw, t, n):
    if t == "Q8_K":  # gguf-py has no Q8_K: d (float32) * qs
        b = raw.reshape(-1, 292)
        d = b[:, :4].copy().view(np.float32)
        return (d * b[:, 4:260].view(np.int8).astype(np.float32)).reshape(-1, n)
    return gq.dequantize(raw, GT[t]).reshape(-1, n)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("t", FORMATS)
def test_dequantize_random_blocks_vs_gguf(isa, t):
    b = kernels.block_size(t)
    nblocks = 24 if b == 256 else 96
    raw = _random_blocks(t, nblocks, seed=ALL.index(t))
    if t == "MXFP4":  # the scale's edges: ggml's two subnormal scales (e < 2), the first normal one, a huge one
        raw[:4, 0] = [0, 1, 2, 250]
    n = nblocks * b // 4
    rows = raw.reshape(4, -1)
    got = kernels.dequantize(rows, t, n, isa=isa)
    want = _gguf_dequantize(rows.reshape(-1), t, n)
    assert np.all(np.isfinite(want))
    assert np.array_equal(got, want)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("t", FORMATS)
def test_dequantize_of_quantized_vs_gguf(isa, t):
    for n in _lengths(t):
        x = _data((3, n), seed=n, scale=2.0)
        raw = kernels.quantize(x, t, isa=isa)
        assert raw.shape == (3, kernels.row_size(t, n))
        assert np.array_equal(kernels.dequantize(raw, t, n, isa=isa), _gguf_dequantize(raw.reshape(-1), t, n)), n


def _fixture():
    if not os.path.exists(FIXTURE):
        pytest.skip("tests/data/kquants_ref.npz missing (tools/gen_kquant_fixtures.py makes it)")
    return np.load(FIXTURE)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("t", FORMATS)
def test_quantize_byte_identical_to_llama_cpp(isa, t):
    fx = _fixture()
    x, want = fx["x"], fx[t].copy()
    got = kernels.quantize(x, t, isa=isa)
    if t == "IQ4_NL":
        # ggml leaves the nibbles of an all-zero block (max |x| < 1e-15, so d = 0) as whatever its scratch held
        # (uninitialized or the previous block's): compare those blocks' d only.
        zero = np.abs(x.reshape(x.shape[0], -1, 32)).max(axis=2) < 1e-15
        g, w = got.reshape(x.shape[0], -1, 18), want.reshape(x.shape[0], -1, 18)
        assert np.all(w[zero][:, :2] == 0)
        g[zero], w[zero] = 0, 0
        got, want = g.reshape(got.shape), w.reshape(want.shape)
    bad = [r for r in range(x.shape[0]) if not np.array_equal(got[r], want[r])]
    assert not bad, f"{t}: rows {bad} differ from llama.cpp"


@pytest.mark.parametrize("t", [t for t in ("Q5_0", "Q5_1", "MXFP4") if t in FORMATS])
def test_quantize_matches_gguf_py(t):
    """gguf-py can quantize these itself: a second, independent oracle."""
    for n in _lengths(t):
        x = _data((3, n), seed=7 * n)
        want = np.asarray(gq.quantize(x, GT[t])).view(np.uint8).reshape(3, -1)
        assert np.array_equal(kernels.quantize(x, t), want), n


def _operands(t, n, rows, seed):
    w = kernels.quantize(_data((rows, n), seed), t)
    x = _data((n,), seed + 1, scale=3.0)
    at = NAMES[kernels.vec_dot_type(t)]
    xq = kernels.quantize(x, at)
    wd = kernels.dequantize(w, t, n).astype(np.float64)
    xd = kernels.dequantize(xq, at, n).astype(np.float64)
    exact = wd @ xd
    bound = DOT_RTOL * (np.abs(wd) @ np.abs(xd)) + 1e-30
    if t == "Q5_1":  # the m * s terms: |m| * |s| per block, s within half an fp16 ulp
        mb = w.reshape(rows, -1, 24)[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
        sb = np.abs(xd.reshape(-1, 32).sum(axis=1))
        bound += FP16_RTOL * (np.abs(mb) @ sb)
    return w, xq, exact, bound


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("t", WEIGHTS)
def test_vec_dot_and_gemv_vs_float64(isa, t):
    for n in _lengths(t):
        rows = 7
        w, xq, exact, bound = _operands(t, n, rows, seed=3 * n)
        dots = np.array([kernels.vec_dot(w[r], t, xq, isa=isa) for r in range(rows)])
        assert np.all(np.abs(dots - exact) <= bound), (n, dots - exact, bound)
        y = kernels.gemv(w, t, xq, isa=isa)
        assert np.all(np.abs(y - exact) <= bound), (n, y - exact, bound)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("t", WEIGHTS)
def test_vec_dot_random_blocks_vs_float64(isa, t):
    """Random weight bytes reach the extremes quantize rarely makes (largest scales and quants together):
    nothing saturates or overflows in the integer sums."""
    b = kernels.block_size(t)
    nb = 8 if b == 256 else 64
    rows = 5
    w = _random_blocks(t, rows * nb, seed=100 + ALL.index(t)).reshape(rows, -1)
    at = NAMES[kernels.vec_dot_type(t)]
    x = np.random.default_rng(5).standard_normal(nb * b).astype(np.float32)
    x[::7] = np.where(x[::7] > 0, 8.0, -8.0)  # many activations at +-127 after quantization
    xq = kernels.quantize(x, at)
    wd = kernels.dequantize(w, t, nb * b).astype(np.float64)
    xd = kernels.dequantize(xq, at, nb * b).astype(np.float64)
    bound = DOT_RTOL * (np.abs(wd) @ np.abs(xd))
    if t == "Q5_1":
        mb = w.reshape(rows, -1, 24)[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
        bound += FP16_RTOL * (np.abs(mb) @ np.abs(xd.reshape(-1, 32).sum(axis=1)))
    y = kernels.gemv(w, t, xq, isa=isa)
    assert np.all(np.abs(y - wd @ xd) <= bound), (y - wd @ xd, bound)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("t", WEIGHTS)
def test_gemm_equals_gemv_exactly(isa, t):
    """Batched products (the gemm tiles: up to 8 activation rows per weight row) equal the gemv of each activation
    row bit for bit, at odd row counts (tails of the 8-row gemv tile) and m = 1..9 (tails of the 8-activation
    tile). On x86 and NEON with dotprod (or i8mm) the Q4_K/Q5_K/Q6_K kernels also equal the scalar vec_dot bit for
    bit: each super-block's sums are exact integers and every (row, activation) lane takes the scalar reference's
    float step in its order."""
    prev = kernels.set_isa(isa)
    exact_scalar = t in ("Q4_K", "Q5_K", "Q6_K") and (
        isa in ("avx2", "avx512") or (isa == "neon" and kernels.active_ext() in ("dotprod", "i8mm")))
    try:
        for n in (256, 768):
            for rows in (1, 7, 9, 17):
                w = kernels.quantize(_data((rows, n), n + rows), t)
                x = _data((9, n), n + 7 * rows)
                xq = kernels.quantize(x, kernels.vec_dot_type(t))
                for m in range(1, 10):
                    got = kernels.matmul(w, t, x[:m], n_threads=1)
                    ref = np.stack([kernels.gemv(w, t, xq[i], isa=isa) for i in range(m)])
                    assert np.array_equal(got, ref), (t, n, rows, m)
                if exact_scalar:
                    dots = np.array([[kernels.vec_dot(w[r], t, xq[i], isa="scalar") for r in range(rows)]
                                     for i in range(9)], np.float32)
                    assert np.array_equal(ref, dots), (t, n, rows)  # ref: the m = 9 gemvs
    finally:
        kernels.set_isa(prev)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("t", WEIGHTS)
def test_gemm_random_blocks_at_the_extremes_equals_gemv(isa, t):
    """The batched kernels (the rows-in-lanes gemm from 8 activations on) at the integer extremes: random weight
    bytes (largest scales and quants) against activations quantized to all -128 (a constant row), to -128 then
    +127 (a row whose largest magnitude is its first value), and with many +-127: bit for bit the gemv of each
    row, so no int16 chunk sum saturates."""
    b = kernels.block_size(t)
    nb = 3 if b == 256 else 24
    n, rows, m = nb * b, 11, 19
    w = _random_blocks(t, rows * nb, seed=200 + ALL.index(t)).reshape(rows, -1)
    x = _data((m, n), 31)
    x[::3, ::5] = np.where(x[::3, ::5] > 0, 8.0, -8.0)
    x[1] = 1.0                        # every quant -128
    x[2] = 1.0
    x[2, ::b] = -1.0                  # -128 at each block's first element, +127 (clamped) after it
    x[4] = -np.abs(x[4])
    prev = kernels.set_isa(isa)
    try:
        got = kernels.matmul(w, t, x, n_threads=1)
        xq = kernels.quantize(x, kernels.vec_dot_type(t))
        ref = np.stack([kernels.gemv(w, t, xq[i], isa=isa) for i in range(m)])
        assert np.array_equal(got, ref), (t, np.argwhere(got != ref)[:5])
    finally:
        kernels.set_isa(prev)


@pytest.mark.parametrize("t", WEIGHTS)
def test_set_isa_matmul_agrees_with_scalar(t):
    n = 4 * kernels.block_size(t) if kernels.block_size(t) == 256 else 40 * kernels.block_size(t)
    w, _, _, _ = _operands(t, n, 19, seed=11)
    x = _data((3, n), 12)
    prev = kernels.active()
    try:
        kernels.set_isa("scalar")
        ref = kernels.matmul(w, t, x, n_threads=2)
        wd = kernels.dequantize(w, t, n).astype(np.float64)
        xd = np.abs(x.astype(np.float64))
        bound = 2 * DOT_RTOL * (xd @ np.abs(wd).T) + 1e-30
        if t == "Q5_1":
            bound += FP16_RTOL * (xd @ np.abs(wd).T)
        for isa in ISAS:
            kernels.set_isa(isa)
            assert kernels.active() == isa
            y = kernels.matmul(w, t, x, n_threads=2)
            assert np.all(np.abs(y - ref) <= bound), (isa, np.max(np.abs(y - ref) - bound))
    finally:
        kernels.set_isa(prev)


def test_types_and_sizes():
    want = {"Q5_0": (32, 22), "Q5_1": (32, 24), "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144),
            "Q5_K": (256, 176), "Q6_K": (256, 210), "Q8_K": (256, 292), "IQ4_NL": (32, 18), "IQ4_XS": (256, 136),
            "MXFP4": (32, 17)}
    ids = {"Q5_0": 6, "Q5_1": 7, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "Q8_K": 15,
           "IQ4_NL": 20, "IQ4_XS": 23, "MXFP4": 39}
    for t in FORMATS:
        assert kernels.SUPPORTED_TYPES[t] == ids[t] == int(GT[t])
        blk, size = want[t]
        assert kernels.block_size(t) == blk and kernels.row_size(t, blk) == size
    for t in WEIGHTS:
        act = NAMES[kernels.vec_dot_type(t)]
        assert act == {"Q5_0": "Q8_0", "Q5_1": "Q8_1", "IQ4_NL": "Q8_0", "MXFP4": "Q8_0"}.get(t, "Q8_K")
    with pytest.raises(ValueError):
        kernels.quantize(np.zeros(32, np.float32), "Q4_K")  # not a multiple of 256


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("rows,nb", [(16, 1), (37, 3), (64, 2), (5, 1), (33, 9)])
def test_gemv_packed_equals_gemv(isa, rows, nb):
    """repack=True's decode kernel (csrc/fg_quant_q4_k.c gemv_packed_*, block_q4_K_r16) on random blocks (largest
    scales and mins included) at odd sizes: each ISA's own kernel over the copy's whole groups bit for bit its gemv
    (an ISA without one, NEON, runs the scalar one: the scalar gemv's rows), and the dispatched one over slices
    that start and end inside a group the same on the slice's whole groups, the gemv's rows around them from W."""
    n = nb * 256
    w = _random_blocks("Q4_K", rows * nb, seed=300 + rows).reshape(rows, -1)
    x = _data((3, n), 41 + nb)
    x[1] = 1.0  # every activation quant -128 after the scale
    p = kernels.pack_rows(w, "Q4_K")
    assert p.nbytes == rows // kernels.PACK_ROWS * nb * 2368
    own = "gemv_packed" in next(t for t in kernels.type_table() if t["name"] == "Q4_K")["kernels"].get(isa, [])
    G = kernels.PACK_ROWS
    prev = kernels.set_isa(isa)
    try:
        for xq in kernels.quantize(x, "Q8_K"):
            ref = kernels.gemv(w, "Q4_K", xq, isa=isa)
            packed_ref = ref if own else kernels.gemv(w, "Q4_K", xq, isa="scalar")
            got = kernels.gemv_packed(w, "Q4_K", p, xq, isa=isa)
            assert np.array_equal(got, packed_ref[:len(got)])
            for r0, r1 in ((0, rows), (3, rows), (1, min(rows, 31)), (min(rows, 17), rows), (2, 2)):
                part = kernels.gemv_packed(w, "Q4_K", p, xq, r0=r0, r1=r1)
                p0, p1 = -(-r0 // G) * G, r1 // G * G  # the slice's whole groups
                want = ref.copy()
                if p1 > p0:
                    want[p0:p1] = packed_ref[p0:p1]
                assert np.array_equal(part[r0:r1], want[r0:r1]), (r0, r1)
    finally:
        kernels.set_isa(prev)


def test_packed_layout_facts():
    """The type table owns the packed layout: Q4_K's block of 16 rows (2,368 bytes), none for the other formats
    (pack_rows gives None); an ISA lists gemv_packed where it has a packed kernel of its own."""
    table = {t["name"]: t for t in kernels.type_table()}
    assert table["Q4_K"]["packed_size"] == 2368
    assert all(t["packed_size"] == 0 for name, t in table.items() if name != "Q4_K")
    assert kernels.pack_rows(np.zeros((16, 34), np.uint8), "Q8_0") is None
    assert "gemv_packed" in table["Q4_K"]["kernels"]["scalar"]
    if "avx2" in table["Q4_K"]["kernels"]:  # AVX2's own, which AVX-512 without VNNI runs too
        assert "gemv_packed" in table["Q4_K"]["kernels"]["avx2"]
    if "avx512" in table["Q4_K"]["kernels"]:
        assert "gemv_packed" in table["Q4_K"]["kernels"]["avx512"]
