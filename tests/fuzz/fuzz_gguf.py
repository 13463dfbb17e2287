"""Fuzz target: the GGUF reader (fastgguf.gguf.GGUFFile) against a naive reference parser.

The reference below is a small, straight-line pure-Python reading of the GGUF format (header, metadata, tensor
descriptors) with the reader's documented rules. Both must agree on accept/reject, and on an accepted file on
every metadata key, type and value and every tensor descriptor. The only exception GGUFFile may raise is GGUFError.

    python tests/fuzz/fuzz_gguf.py -max_total_time=60 tests/fuzz/corpus/gguf
"""
import math
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

with _harness.instrumented():
    _harness.import_fastgguf()
    from fastgguf.gguf import GGML_TYPE_INFO, GGMLType, GGUFError, GGUFFile  # noqa: E402

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY, BOOL = 8, 9, 7
TYPE_IDS = {int(t) for t in GGMLType}


class Reject(Exception):
    pass


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise Reject("truncated")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        return self.take(self.unpack("<Q"))


def scalar(r, vtype):
    v = r.unpack(SCALARS[vtype])
    if vtype == BOOL:
        if v > 1:
            raise Reject("bool not 0/1")
        v = bool(v)
    return v


def reference_parse(data):
    """(metadata [(key, vtype, etype, value)], tensors [(name, shape, type, offset, nbytes, n)]) or Reject."""
    r = Reader(data)
    if r.take(4) != b"GGUF":
        raise Reject("magic")
    if r.unpack("<I") not in (2, 3):
        raise Reject("version")
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    metadata, keys = [], set()
    for _ in range(n_kv):
        try:
            key = r.string().decode("utf-8")
        except UnicodeDecodeError:
            raise Reject("key not UTF-8") from None
        if not key or key in keys:
            raise Reject("empty or duplicate key")
        keys.add(key)
        vtype, etype = r.unpack("<I"), None
        if vtype in SCALARS:
            value = scalar(r, vtype)
        elif vtype == STRING:
            value = r.string().decode("utf-8", "surrogateescape")
        elif vtype == ARRAY:
            etype, count = r.unpack("<I"), r.unpack("<Q")
            if etype in SCALARS:
                if count * struct.calcsize(SCALARS[etype]) > len(data) - r.pos:
                    raise Reject("array too long")
                value = [scalar(r, etype) for _ in range(count)]
            elif etype == STRING:
                if count * 8 > len(data) - r.pos:
                    raise Reject("array too long")
                value = [r.string().decode("utf-8", "surrogateescape") for _ in range(count)]
            else:
                raise Reject("array element type")
        else:
            raise Reject("value type")
        metadata.append((key, vtype, etype, value))
    alignment = 32
    for key, vtype, _, value in metadata:
        if key == "general.alignment":
            if vtype != 4 or value == 0 or value & (value - 1) or value > 1 << 24:
                raise Reject("alignment")
            alignment = value
    infos, names = [], set()
    for _ in range(n_tensors):
        raw = r.string()
        if not 0 < len(raw) < 64:
            raise Reject("tensor name length")
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Reject("tensor name not UTF-8") from None
        n_dims = r.unpack("<I")
        if not 1 <= n_dims <= 4:
            raise Reject("n_dims")
        ne = [r.unpack("<q") for _ in range(n_dims)]
        ttype, offset = r.unpack("<I"), r.unpack("<Q")
        if ttype not in TYPE_IDS:
            raise Reject("tensor type")
        if name in names:
            raise Reject("duplicate tensor")
        names.add(name)
        infos.append((name, ne, ttype, offset))
    data_offset = (r.pos + alignment - 1) // alignment * alignment
    if infos and data_offset > len(data):
        raise Reject("data section past the end")
    tensors, prev_end = [], 0
    for name, ne, ttype, offset in infos:
        if any(d < 0 for d in ne):
            raise Reject("negative dimension")
        n = math.prod(ne)
        bs, ts = GGML_TYPE_INFO[GGMLType(ttype)]
        if n >= 2**63 or ne[0] % bs or n // bs * ts >= 2**63 or offset % alignment or offset < prev_end:
            raise Reject("tensor layout")
        nbytes = n // bs * ts
        if data_offset + offset + nbytes > len(data):
            raise Reject("tensor data past the end")
        prev_end = offset + nbytes
        tensors.append((name, tuple(reversed(ne)), ttype, data_offset + offset, nbytes, n))
    return metadata, tensors


def _norm(v):
    """Comparable form: NaN-safe floats, lists for arrays."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, float):
        return ("float", struct.pack("<d", v)) if not math.isnan(v) else ("nan",)
    return (type(v).__name__, v)


def _norm_f32(v, vtype, etype):
    """Float32 values: the reference unpacked them with struct, numpy widens the same bits: compare as f32."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if vtype == 6 or etype == 6:
        vals = v if isinstance(v, list) else [v]
        vals = [x if math.isnan(x) else struct.unpack("<f", struct.pack("<f", x))[0] for x in vals]
        v = vals if isinstance(v, list) else vals[0]
    return _norm(v)


_TMP = tempfile.mkdtemp(prefix="fuzz_gguf_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
_PATH = os.path.join(_TMP, "input.gguf")


def test_one_input(data):
    with open(_PATH, "wb") as fh:
        fh.write(data)
    try:
        ref = reference_parse(data)
    except Reject as e:
        ref, why = None, str(e)
    try:
        with GGUFFile(_PATH) as f:
            got_md = [(k, int(f.value_type(k)[0]), None if f.value_type(k)[1] is None else int(f.value_type(k)[1]),
                       v) for k, v in f.metadata.items()]
            got_t = [(t.name, tuple(t.shape), int(t.type), t.offset, t.nbytes, t.n_elements)
                     for t in f.tensors.values()]
    except GGUFError as e:
        if ref is not None:
            raise AssertionError(f"reader rejects a file the reference accepts: {e}") from None
        return
    if ref is None:
        raise AssertionError(f"reader accepts a file the reference rejects ({why})")
    ref_md, ref_t = ref
    assert [(k, vt, et) for k, vt, et, _ in got_md] == [(k, vt, et) for k, vt, et, _ in ref_md], "metadata keys"
    for (k, vt, et, a), (_, _, _, b) in zip(got_md, ref_md):
        assert _norm_f32(a, vt, et) == _norm_f32(b, vt, et), f"metadata {k!r}: {a!r} != {b!r}"
    assert got_t == ref_t, f"tensors: {got_t} != {ref_t}"


if __name__ == "__main__":
    _harness.run(test_one_input)
