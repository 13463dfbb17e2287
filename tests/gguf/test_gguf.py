"""GGUF reader and writer: against gguf-py (an independent implementation) on the default model and on
files the writer builds."""

import gc
import json
import random

import numpy as np
import pytest

from fastgguf import GGUFError, GGUFFile, GGUFWriter
from fastgguf.gguf import GGML_TYPE_INFO, REMOVED_TYPES, GGMLType, GGUFValueType, TensorInfo

gguf = pytest.importorskip("gguf")


def _ref_value(field):
    """gguf-py's value of a field, in our representation."""
    if field.types[-1] == gguf.GGUFValueType.STRING:
        dec = [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
        return dec if field.types[0] == gguf.GGUFValueType.ARRAY else dec[0]
    v = field.contents()
    if field.types[0] == gguf.GGUFValueType.ARRAY and field.types[-1] != gguf.GGUFValueType.STRING:
        return np.asarray(v)
    return v


def _same(ours, ref):
    if isinstance(ours, np.ndarray):
        return ours.shape == np.asarray(ref).shape and np.array_equal(ours, np.asarray(ref))
    if isinstance(ours, float):
        return ours == ref or (np.isnan(ours) and np.isnan(ref))
    return type(ours) is type(ref) and ours == ref


def _compare_with_gguf_py(path, ref=None):
    ref = ref or gguf.GGUFReader(path)
    with GGUFFile(path) as f:
        keys = [k for k in ref.fields if not k.startswith("GGUF.")]
        assert list(f.metadata.keys()) == keys
        for k in keys:
            field = ref.fields[k]
            vt, et = f.value_type(k)
            assert vt == field.types[0], k
            if vt == GGUFValueType.ARRAY and len(field.types) > 1:
                assert et == field.types[1], k
            assert _same(f.metadata[k], _ref_value(field)), k
        assert list(f.tensors) == [t.name for t in ref.tensors]
        for t in ref.tensors:
            ti = f.tensors[t.name]
            assert ti.type == t.tensor_type
            assert ti.shape == tuple(int(d) for d in reversed(t.shape))
            assert ti.n_elements == t.n_elements
            assert ti.nbytes == t.n_bytes
            assert ti.offset == t.data_offset
        return f.version, f.alignment, f.data_offset


# ------------------------------------------------------------------------------------ the default model

@pytest.fixture(scope="module")
def ref_model(default_model_path):
    """gguf-py's reading of the default model (slow: read once)."""
    return gguf.GGUFReader(default_model_path)


def test_default_model_matches_gguf_py(default_model_path, ref_model):
    version, alignment, data_offset = _compare_with_gguf_py(default_model_path, ref_model)
    assert (version, alignment, data_offset) == (3, 32, 1785664)


def test_default_model_facts(default_model_path):
    with GGUFFile(default_model_path) as f:
        md = f.metadata
        assert f.architecture == "llama"
        assert md["llama.block_count"] == 30 and md["llama.embedding_length"] == 576
        assert isinstance(md["tokenizer.ggml.tokens"], list)
        assert len(md["tokenizer.ggml.tokens"]) == 49152 and len(md["tokenizer.ggml.merges"]) == 48900
        assert md["tokenizer.ggml.tokens"][:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        assert md["tokenizer.ggml.token_type"].dtype == np.int32
        assert not md["tokenizer.ggml.token_type"].flags.writeable
        assert len(f.tensors) == 272
        ti = f.tensors["token_embd.weight"]
        assert (ti.type, ti.shape, ti.row_bytes) == (GGMLType.Q8_0, (49152, 576), 612)
        assert ti.ne == (576, 49152)


def test_default_model_tensor_data_matches_gguf_py(default_model_path, ref_model):
    ref = {t.name: t for t in ref_model.tensors}
    with GGUFFile(default_model_path) as f:
        for name in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.3.ffn_down.weight",
                     "blk.29.attn_v.weight", "token_embd.weight"):
            ours = f.tensor(name)
            theirs = np.asarray(ref[name].data)
            ti = f.tensors[name]
            assert not ours.flags.writeable and not ours.flags.owndata
            if ti.type == GGMLType.F32:
                assert ours.dtype == np.float32 and ours.shape == ti.shape
            else:
                assert ours.dtype == np.uint8 and ours.shape == ti.shape[:-1] + (ti.row_bytes,)
            assert np.array_equal(ours.reshape(-1).view(np.uint8), theirs.reshape(-1).view(np.uint8)), name


def test_default_model_raw_strings(default_model_path, ref_model):
    ref = ref_model.fields["tokenizer.ggml.tokens"]
    with GGUFFile(default_model_path) as f:
        raw = f.metadata_raw("tokenizer.ggml.tokens")
        assert raw == [bytes(ref.parts[i]) for i in ref.data]
        assert f.metadata_raw("general.architecture") == b"llama"
        with pytest.raises(GGUFError):
            f.metadata_raw("llama.block_count")


def test_metadata_is_a_plain_dict_to_callers(default_model_path):
    with GGUFFile(default_model_path) as f:
        md = f.metadata
        assert isinstance(md, dict)
        assert md.array_len("tokenizer.ggml.merges") == 48900
        d = dict(md)
        assert type(d["tokenizer.ggml.merges"]) is list and d["tokenizer.ggml.merges"][0] == "Ġ t"
        s = json.dumps({k: v for k, v in md.items() if not isinstance(v, np.ndarray)})
        assert '"Ġ t"' in s or '"\\u0120 t"' in s


def test_close_and_lifetime(default_model_path):
    f = GGUFFile(default_model_path)
    kept = f.tensor("output_norm.weight")
    expect = kept.copy()
    assert not f.closed
    f.close()
    assert f.closed
    f.close()   # twice is fine
    with pytest.raises(GGUFError, match="closed"):
        f.tensor("output_norm.weight")
    gc.collect()
    assert np.array_equal(kept, expect)        # the view still reads valid memory
    # metadata stays usable after close, including undecoded string arrays
    assert len(f.metadata["tokenizer.ggml.tokens"]) == 49152
    assert f.metadata["tokenizer.ggml.token_type"][0] == 3
    del kept
    gc.collect()


def test_context_manager(default_model_path):
    with GGUFFile(default_model_path) as f:
        assert f.tensor("output_norm.weight").shape == (576,)
    assert f.closed
    with pytest.raises(KeyError, match="no tensor"):
        GGUFFile(default_model_path).tensor("nope")


# ------------------------------------------------------------------------------------ type tables

def test_type_table_matches_gguf_py():
    for t in gguf.GGMLQuantizationType:
        assert GGMLType(int(t)).name == t.name
        assert GGML_TYPE_INFO[GGMLType(int(t))] == gguf.GGML_QUANT_SIZES[t]
    for t in GGMLType:
        assert t in GGML_TYPE_INFO
    assert set(REMOVED_TYPES) == {4, 5, 31, 32, 33, 36, 37, 38}
    assert not set(REMOVED_TYPES) & {int(t) for t in GGMLType}
    assert (GGMLType.F32, GGMLType.F16, GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q8_0, GGMLType.BF16) == \
           (0, 1, 2, 3, 8, 30)
    assert GGML_TYPE_INFO[GGMLType.Q4_K] == (256, 144) and GGML_TYPE_INFO[GGMLType.MXFP4] == (32, 17)


def test_errors_are_value_errors():
    assert issubclass(GGUFError, ValueError)
    assert TensorInfo._fields == ("name", "shape", "type", "offset", "nbytes", "n_elements")


# ------------------------------------------------------------------------------------ writer

def _write(tmp_path, w, name="t.gguf"):
    p = tmp_path / name
    w.write(p)
    return str(p)


EVERY_SCALAR = [
    ("add_uint8", GGUFValueType.UINT8, [0, 255]),
    ("add_int8", GGUFValueType.INT8, [-128, 127]),
    ("add_uint16", GGUFValueType.UINT16, [0, 65535]),
    ("add_int16", GGUFValueType.INT16, [-32768, 32767]),
    ("add_uint32", GGUFValueType.UINT32, [0, 2**32 - 1]),
    ("add_int32", GGUFValueType.INT32, [-2**31, 2**31 - 1]),
    ("add_uint64", GGUFValueType.UINT64, [0, 2**64 - 1]),
    ("add_int64", GGUFValueType.INT64, [-2**63, 2**63 - 1]),
    ("add_float32", GGUFValueType.FLOAT32, [0.5, -3.25, float("inf")]),
    ("add_float64", GGUFValueType.FLOAT64, [1 / 3, -1e300]),
    ("add_bool", GGUFValueType.BOOL, [True, False]),
    ("add_string", GGUFValueType.STRING, ["", "llama", "ünïcödé ✓", "x" * 70000]),
]


@pytest.mark.parametrize("method,vtype,values", EVERY_SCALAR, ids=[m for m, _, _ in EVERY_SCALAR])
def test_writer_roundtrip_scalar(tmp_path, method, vtype, values):
    w = GGUFWriter()
    for i, v in enumerate(values):
        getattr(w, method)(f"k{i}", v)
    p = _write(tmp_path, w)
    _compare_with_gguf_py(p)
    with GGUFFile(p) as f:
        for i, v in enumerate(values):
            assert f.value_type(f"k{i}") == (vtype, None)
            assert f.metadata[f"k{i}"] == v and type(f.metadata[f"k{i}"]) is type(v)


ARRAYS = [
    (GGUFValueType.UINT8, [0, 1, 255]), (GGUFValueType.INT8, [-128, 0, 127]),
    (GGUFValueType.UINT16, [0, 65535]), (GGUFValueType.INT16, [-32768, 5]),
    (GGUFValueType.UINT32, [1, 2**32 - 1]), (GGUFValueType.INT32, [-2**31, 7]),
    (GGUFValueType.UINT64, [0, 2**64 - 1]), (GGUFValueType.INT64, [-2**63, 2**63 - 1]),
    (GGUFValueType.FLOAT32, [0.5, -2.0]), (GGUFValueType.FLOAT64, [1 / 3, 2.5]),
    (GGUFValueType.BOOL, [True, False, True]), (GGUFValueType.STRING, ["a", "", "ßü", "x" * 300]),
    (GGUFValueType.UINT8, []), (GGUFValueType.STRING, []),
]


@pytest.mark.parametrize("etype,values", ARRAYS, ids=[f"{e.name}-{len(v)}" for e, v in ARRAYS])
def test_writer_roundtrip_array(tmp_path, etype, values):
    w = GGUFWriter()
    w.add_array("a", values, etype)
    p = _write(tmp_path, w)
    if values:
        _compare_with_gguf_py(p)
    with GGUFFile(p) as f:
        got = f.metadata["a"]
        assert f.value_type("a") == (GGUFValueType.ARRAY, etype)
        if etype == GGUFValueType.STRING:
            assert got == values
        else:
            assert isinstance(got, np.ndarray) and got.tolist() == values
            assert not got.flags.writeable


def test_writer_type_inference(tmp_path):
    w = GGUFWriter()
    w.add("i", 5)
    w.add("big", 2**40)
    w.add("huge", 2**64 - 1)
    w.add("f", 0.25)
    w.add("b", True)
    w.add("s", "text")
    w.add("bs", b"\xff\xfe raw")
    w.add("np", np.uint16(7))
    w.add("li", [1, 2, 3])
    w.add("lf", [1.5, 2])
    w.add("ls", ["x", "y"])
    w.add("arr", np.arange(3, dtype=np.int64))
    w.add("explicit", 3, GGUFValueType.UINT64)
    p = _write(tmp_path, w)
    _compare_with_gguf_py(p)
    V = GGUFValueType
    with GGUFFile(p) as f:
        types = {k: f.value_type(k) for k in f.metadata}
        assert types == {"i": (V.INT32, None), "big": (V.INT64, None), "huge": (V.UINT64, None),
                         "f": (V.FLOAT32, None), "b": (V.BOOL, None), "s": (V.STRING, None),
                         "bs": (V.STRING, None), "np": (V.UINT16, None), "li": (V.ARRAY, V.INT32),
                         "lf": (V.ARRAY, V.FLOAT32), "ls": (V.ARRAY, V.STRING), "arr": (V.ARRAY, V.INT64),
                         "explicit": (V.UINT64, None)}
        assert f.metadata_raw("bs") == b"\xff\xfe raw"
        assert f.metadata["bs"].encode("utf-8", "surrogateescape") == b"\xff\xfe raw"


def test_writer_rejects_bad_values():
    w = GGUFWriter()
    w.add_uint8("k", 1)
    with pytest.raises(ValueError, match="duplicate"):
        w.add_uint8("k", 2)
    with pytest.raises(OverflowError):
        w.add_uint8("a", 256)
    with pytest.raises(OverflowError):
        w.add_int64("b", 2**63)
    with pytest.raises(TypeError):
        w.add_uint32("c", 1.5)
    with pytest.raises(TypeError, match="nested"):
        w.add_array("d", [[1], [2]])
    with pytest.raises(TypeError, match="nested"):
        w.add_array("d", [1], GGUFValueType.ARRAY)
    with pytest.raises(ValueError, match="empty"):
        w.add_array("e", [])
    with pytest.raises(OverflowError):
        w.add_array("f", [1, 300], GGUFValueType.UINT8)
    with pytest.raises(TypeError):
        w.add_array("g", [1, "x"])
    with pytest.raises(ValueError, match="power of two"):
        GGUFWriter(alignment=24)


def test_writer_tensors_roundtrip(tmp_path):
    rng = np.random.default_rng(0)
    w = GGUFWriter()
    w.add_string("general.architecture", "test")
    tensors = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal((2, 4, 8)).astype(np.float16),
        "f64": rng.standard_normal(7),
        "i8": rng.integers(-128, 127, (4, 4), dtype=np.int8),
        "i16": rng.integers(-999, 999, 9, dtype=np.int16),
        "i32": rng.integers(-999, 999, (1, 1, 2, 3), dtype=np.int32),
        "i64": rng.integers(-999, 999, 3, dtype=np.int64),
        "empty": np.zeros((0, 4), np.float32),
    }
    for name, a in tensors.items():
        w.add_tensor(name, a)
    bf16 = rng.integers(0, 65535, (2, 3), dtype=np.uint16)
    w.add_tensor("bf16", bf16, ggml_type=GGMLType.BF16)
    q41 = rng.integers(0, 255, (3, 2 * 20), dtype=np.uint8)        # 3 rows of 64 Q4_1 values
    w.add_tensor("q4_1", q41, ggml_type=GGMLType.Q4_1, shape=(3, 64))
    q4k = rng.integers(0, 255, 144 * 2, dtype=np.uint8)            # flat blocks, logical shape (2, 256)
    w.add_tensor("q4_k", q4k, ggml_type=GGMLType.Q4_K, shape=(2, 256))
    p = _write(tmp_path, w)
    _compare_with_gguf_py(p)
    ref = {t.name: t for t in gguf.GGUFReader(p).tensors}
    with GGUFFile(p) as f:
        for name, a in tensors.items():
            got = f.tensor(name)
            assert got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a), name
            assert f.tensors[name].offset % 32 == 0
        assert np.array_equal(f.tensor("bf16"), bf16) and f.tensor("bf16").dtype == np.uint16
        assert f.tensors["q4_1"].shape == (3, 64) and np.array_equal(f.tensor("q4_1"), q41)
        assert f.tensor("q4_k").shape == (2, 144)
        assert np.array_equal(f.tensor("q4_k").reshape(-1), q4k)
        for name in f.tensors:
            assert f.tensor(name).tobytes() == np.asarray(ref[name].data).tobytes(), name


def test_writer_rejects_bad_tensors():
    w = GGUFWriter()
    w.add_tensor("a", np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="duplicate"):
        w.add_tensor("a", np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="longer"):
        w.add_tensor("x" * 64, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="block size"):
        w.add_tensor("q", np.zeros(20, np.uint8), ggml_type=GGMLType.Q4_1, shape=(1, 48))
    with pytest.raises(ValueError, match="needs"):
        w.add_tensor("q", np.zeros(21, np.uint8), ggml_type=GGMLType.Q4_1, shape=(1, 32))
    with pytest.raises(TypeError, match="ggml_type"):
        w.add_tensor("u", np.zeros(4, np.uint32))
    with pytest.raises(GGUFError, match="removed"):
        w.add_tensor("r", np.zeros(18, np.uint8), ggml_type=4, shape=(32,))
    with pytest.raises(ValueError, match="dimensions"):
        w.add_tensor("d", np.zeros((1, 1, 1, 1, 2), np.float32))


def test_writer_alignment(tmp_path):
    w = GGUFWriter(alignment=256)
    w.add_tensor("a", np.ones(3, np.float32))
    w.add_tensor("b", np.ones(5, np.float32))
    p = _write(tmp_path, w)
    _compare_with_gguf_py(p)
    with GGUFFile(p) as f:
        assert f.alignment == 256 and f.metadata["general.alignment"] == 256
        assert f.data_offset % 256 == 0
        assert f.tensors["b"].offset - f.tensors["a"].offset == 256


def test_writer_bytes_identical_to_gguf_py(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(64, dtype=np.float16).reshape(2, 32)
    ref_path = str(tmp_path / "ref.gguf")
    r = gguf.GGUFWriter(ref_path, "llama")
    r.add_uint32("llama.block_count", 3)
    r.add_string("s", "hi")
    r.add_array("a", [1, 2, 3])
    r.add_array("t", ["a", "bc"])
    r.add_float32("f", 0.5)
    r.add_tensor("a", a)
    r.add_tensor("b", b)
    r.write_header_to_file()
    r.write_kv_data_to_file()
    r.write_tensors_to_file()
    r.close()
    w = GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_uint32("llama.block_count", 3)
    w.add_string("s", "hi")
    w.add_array("a", [1, 2, 3])
    w.add_array("t", ["a", "bc"])
    w.add_float32("f", 0.5)
    w.add_tensor("a", a)
    w.add_tensor("b", b)
    with open(ref_path, "rb") as fh:
        assert w.tobytes() == fh.read()


# ------------------------------------------------------------------------------------ string arrays

def _strings(rng, n, kind):
    if kind == "tokens":
        alphabet = "abcdefghijklmnopqrstuvwxyzĠĊ<>|_0123456789ßü✓"
        return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(n)]
    if kind == "with_empty":
        return ["" if rng.random() < 0.2 else "t" * rng.randint(1, 5) for _ in range(n)]
    if kind == "nul":
        return ["\x00" * rng.randint(0, 9) + "x" if rng.random() < 0.3 else "abc" for _ in range(n)]
    if kind == "long":
        return ["L" * rng.choice([1, 255, 256, 257, 65536, 70000]) for _ in range(n)]
    if kind == "ctrl":
        return ["a\x01b" if rng.random() < 0.1 else "\x01" * rng.randint(1, 3) for _ in range(n)]
    if kind == "len256":
        return ["y" * (256 * rng.randint(0, 2)) for _ in range(n)]
    raise ValueError(kind)


@pytest.mark.parametrize("kind,n", [("tokens", 3000), ("with_empty", 2000), ("nul", 1500), ("long", 600),
                                    ("len256", 700), ("ctrl", 900), ("tokens", 5)])
def test_string_arrays(tmp_path, kind, n):
    """The vectorised scan of big string arrays against gguf-py on awkward contents."""
    rng = random.Random(n)
    values = _strings(rng, n, kind)
    w = GGUFWriter()
    w.add_uint32("before", 1)
    w.add_array("strings", values)
    w.add_array("more", values[: n // 2] + ["end"])
    w.add_uint32("after", 2)
    w.add_tensor("t", np.ones(8, np.float32))
    p = _write(tmp_path, w)
    _compare_with_gguf_py(p)
    with GGUFFile(p) as f:
        assert f.metadata["strings"] == values
        assert f.metadata["after"] == 2
        assert f.metadata_raw("strings") == [v.encode() for v in values]


def test_non_utf8_string_values(tmp_path):
    bad = [b"\xff", b"ok", b"\xc3", b"\xe2\x82", b"caf\xc3\xa9"] * 300
    w = GGUFWriter()
    w.add_array("tokens", bad, GGUFValueType.STRING)
    w.add_string("s", b"a\xffb")
    p = _write(tmp_path, w)
    with GGUFFile(p) as f:
        assert f.metadata_raw("tokens") == bad
        assert [s.encode("utf-8", "surrogateescape") for s in f.metadata["tokens"]] == bad
        assert f.metadata["tokens"][4] == "café"
        assert f.metadata["s"] == "a\udcffb"
