"""fastgguf.convert.safetensors: the reader gives numpy's arrays back, and refuses every kind of corrupt file with a
ConvertError that names what is wrong (never another exception, never garbage data)."""
import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastgguf.convert.safetensors import SafetensorsFile
from fastgguf.errors import ConvertError

DT = {np.float32: "F32", np.float16: "F16", np.int64: "I64", np.int8: "I8"}


def pack(tensors: dict, header_edit=None, tail: bytes = b"") -> bytes:
    """A safetensors file of {name: array}; header_edit(header) may corrupt the header before it is packed."""
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": DT[a.dtype.type], "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    if header_edit:
        header_edit(header)
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + b"".join(blobs) + tail


def sample():
    rng = np.random.default_rng(0)
    return {"a.weight": rng.standard_normal((3, 5)).astype(np.float32), "b": np.arange(7, dtype=np.int64),
            "c": rng.standard_normal(4).astype(np.float16), "empty": np.zeros((0, 3), np.float32),
            "d": np.arange(-3, 3, dtype=np.int8).reshape(2, 3)}


def test_reads_back_every_array(tmp_path):
    p = tmp_path / "m.safetensors"
    arrays = sample()
    p.write_bytes(pack(arrays))
    with SafetensorsFile(p) as f:
        assert f.metadata == {"format": "pt"}
        assert set(f.names) == set(arrays)
        for name, a in arrays.items():
            got = f.array(name)
            assert got.dtype == a.dtype and got.shape == a.shape and f.shape(name) == a.shape
            np.testing.assert_array_equal(got, a)
        with pytest.raises(ConvertError, match="no tensor 'nope'"):
            f.array("nope")


def _set(name, key, value):
    def edit(h):
        h[name][key] = value
    return edit


@pytest.mark.parametrize("edit, tail, match", [
    (_set("a.weight", "dtype", "F8"), b"", "unknown dtype 'F8'"),
    (_set("a.weight", "shape", [3, -5]), b"", "shape"),
    (_set("a.weight", "shape", [3, 5.0]), b"", "shape"),
    (_set("a.weight", "shape", [3, 6]), b"", "needs 72 bytes"),
    (_set("a.weight", "shape", [2 ** 62, 2 ** 62]), b"", "needs"),
    (_set("a.weight", "data_offsets", [0]), b"", "data_offsets"),
    (_set("a.weight", "data_offsets", [8, 4]), b"", "data_offsets"),
    (_set("b", "data_offsets", [60, 10 ** 9]), b"", "past the end"),
    (_set("b", "data_offsets", [56, 112]), b"", "overlap"),
    (lambda h: h.__setitem__("a.weight", [1, 2]), b"", "not an object"),
    (lambda h: h.__setitem__("__metadata__", [1]), b"", "__metadata__"),
    (lambda h: h.pop("b"), b"", "a hole"),
    (None, b"extra", "cover"),
])
def test_corrupt_headers_are_named(tmp_path, edit, tail, match):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(pack(sample(), edit, tail))
    with pytest.raises(ConvertError, match=match) as e:
        SafetensorsFile(p)
    assert str(p) in str(e.value)


def test_truncated_and_garbage_files(tmp_path):
    p = tmp_path / "t.safetensors"
    good = pack(sample())
    for data, match in [(b"", "too short"), (good[:5], "too short"), (struct.pack("<Q", 10 ** 6) + b"{}",
                        "does not fit"), (good[:-3], "past the end|cover"),
                        (struct.pack("<Q", 4) + b"\xff\xfe{}", "not valid UTF-8 JSON"),
                        (struct.pack("<Q", 2) + b"[]", "not an object")]:
        p.write_bytes(data)
        with pytest.raises(ConvertError, match=match):
            SafetensorsFile(p)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pos=st.integers(0, 10 ** 6), byte=st.integers(0, 255))
def test_any_corrupted_byte_gives_a_convert_error_or_the_right_arrays(tmp_path, pos, byte):
    """One byte of the file changed anywhere: either it still reads (a changed data byte, or a header edit that
    means the same) with every array of the right shape and size, or a ConvertError; nothing else."""
    arrays = sample()
    data = bytearray(pack(arrays))
    data[pos % len(data)] = byte
    p = tmp_path / "f.safetensors"
    p.write_bytes(bytes(data))
    try:
        f = SafetensorsFile(p)
    except ConvertError:
        return
    with f:
        for name in f.names:
            a = f.array(name)
            assert a.nbytes == int(np.prod(f.shape(name))) * a.itemsize
