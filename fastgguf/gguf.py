"""GGUF reader and writer (pure Python + numpy).

Reading
-------
``GGUFFile(path)`` parses GGUF v2 and v3 little-endian files. v1 files, unknown versions and big-endian
(byte-swapped) files raise :class:`GGUFError` with a message saying so. Parsing reads only the header,
the metadata and the tensor descriptors; no tensor data is touched. The file is mapped once (read-only
``mmap``); :meth:`GGUFFile.tensor` returns zero-copy, read-only numpy views into that mapping.

Lifetime: ``close()`` (or leaving the ``with`` block) drops the file's own references to the mapping and
closes it when nothing else uses it. Arrays the caller kept (tensor views, numeric metadata arrays) hold a
buffer export on the mapping; while any exists the mapping cannot be closed, so ``close()`` catches that
``BufferError`` and leaves the mapping to be closed by the garbage collector when the last view dies. Kept
views therefore stay valid (never a dangling pointer); ``tensor()`` after ``close()`` raises ``GGUFError``.

Metadata values: integers -> ``int``, floats -> ``float``, bool -> ``bool``, string -> ``str``; numeric
arrays -> read-only 1-D numpy views (bool arrays as ``numpy.bool_``); string arrays -> ``list[str]``.
Nested arrays (arrays of arrays) are rejected with ``GGUFError``: llama.cpp does not read them either
and no model uses them.

Text policy: metadata keys and tensor names must be valid UTF-8 (else ``GGUFError``). String values are
decoded with ``errors="surrogateescape"``, so no file fails because of one bad token, and
``s.encode("utf-8", "surrogateescape")`` gives back the exact bytes. :meth:`GGUFFile.metadata_raw`
returns the undecoded ``bytes`` (or ``list[bytes]``) of any string value, e.g. for tokenizers.

Validation: every malformed file raises ``GGUFError`` (a ``ValueError``) naming the field or tensor at
fault. Counts and lengths are checked against the bytes left in the file before anything is allocated;
tensor shapes, types, byte sizes, alignment and offsets (aligned, in order, non-overlapping, inside the
file) are checked. Zero-sized dimensions are accepted (a tensor of 0 elements and 0 bytes). Bytes after
the last tensor's data are accepted.

Writing
-------
``GGUFWriter`` writes GGUF v3 (see its docstring).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

__all__ = [
    "GGUFFile", "GGUFError", "GGUFWriter", "GGMLType", "GGUFValueType", "TensorInfo", "GGML_TYPE_INFO",
    "REMOVED_TYPES", "GGUF_MAGIC", "GGUF_DEFAULT_ALIGNMENT",
]

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64          # including the terminating NUL in ggml: names are at most 63 bytes
MAX_ALIGNMENT = 1 << 24     # anything above 16 MiB is treated as a corrupt file
INT64_MAX = (1 << 63) - 1


class GGUFError(ValueError):
    """A GGUF file is malformed or unsupported, or a GGUFFile is used after close()."""


class GGMLType(IntEnum):
    """ggml tensor type ids (ggml.h, enum ggml_type)."""
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    # 4 (Q4_2) and 5 (Q4_3) were removed
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    # 31..33 (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) were removed
    TQ1_0 = 34
    TQ2_0 = 35
    # 36..38 (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) were removed
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


REMOVED_TYPES = {4: "Q4_2", 5: "Q4_3", 31: "Q4_0_4_4", 32: "Q4_0_4_8", 33: "Q4_0_8_8",
                 36: "IQ4_NL_4_4", 37: "IQ4_NL_4_8", 38: "IQ4_NL_8_8"}

QK_K = 256
_T = GGMLType
# type -> (block_size in elements, type_size in bytes per block)
GGML_TYPE_INFO: dict[GGMLType, tuple[int, int]] = {
    _T.F32: (1, 4),
    _T.F16: (1, 2),
    _T.Q4_0: (32, 2 + 16),
    _T.Q4_1: (32, 2 + 2 + 16),
    _T.Q5_0: (32, 2 + 4 + 16),
    _T.Q5_1: (32, 2 + 2 + 4 + 16),
    _T.Q8_0: (32, 2 + 32),
    _T.Q8_1: (32, 4 + 4 + 32),
    _T.Q2_K: (QK_K, 2 + 2 + QK_K // 16 + QK_K // 4),
    _T.Q3_K: (QK_K, 2 + QK_K // 4 + QK_K // 8 + 12),
    _T.Q4_K: (QK_K, 2 + 2 + QK_K // 2 + 12),
    _T.Q5_K: (QK_K, 2 + 2 + QK_K // 2 + QK_K // 8 + 12),
    _T.Q6_K: (QK_K, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    _T.Q8_K: (QK_K, 4 + QK_K + QK_K // 8),
    _T.IQ2_XXS: (QK_K, 2 + QK_K // 4),
    _T.IQ2_XS: (QK_K, 2 + QK_K // 4 + QK_K // 32),
    _T.IQ3_XXS: (QK_K, 2 + QK_K // 4 + QK_K // 8),
    _T.IQ1_S: (QK_K, 2 + QK_K // 8 + QK_K // 16),
    _T.IQ4_NL: (32, 2 + 16),
    _T.IQ3_S: (QK_K, 2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    _T.IQ2_S: (QK_K, 2 + QK_K // 4 + QK_K // 16),
    _T.IQ4_XS: (QK_K, 2 + 2 + QK_K // 2 + QK_K // 64),
    _T.I8: (1, 1),
    _T.I16: (1, 2),
    _T.I32: (1, 4),
    _T.I64: (1, 8),
    _T.F64: (1, 8),
    _T.IQ1_M: (QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32),
    _T.BF16: (1, 2),
    _T.TQ1_0: (QK_K, 2 + 4 * 13),
    _T.TQ2_0: (QK_K, 2 + 64),
    _T.MXFP4: (32, 1 + 16),
    _T.NVFP4: (64, 4 + 32),
    _T.Q1_0: (128, 2 + 16),
}

# numpy dtype of a tensor() view for the unquantized types; everything else is a uint8 row of blocks
_TENSOR_DTYPES = {
    _T.F32: np.dtype("<f4"), _T.F16: np.dtype("<f2"), _T.BF16: np.dtype("<u2"), _T.F64: np.dtype("<f8"),
    _T.I8: np.dtype("i1"), _T.I16: np.dtype("<i2"), _T.I32: np.dtype("<i4"), _T.I64: np.dtype("<i8"),
}


class GGUFValueType(IntEnum):
    """Metadata value type ids (gguf.h, enum gguf_type)."""
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_V = GGUFValueType
# scalar value type -> (struct format, numpy dtype)
_SCALAR = {
    _V.UINT8: ("<B", np.dtype("u1")), _V.INT8: ("<b", np.dtype("i1")),
    _V.UINT16: ("<H", np.dtype("<u2")), _V.INT16: ("<h", np.dtype("<i2")),
    _V.UINT32: ("<I", np.dtype("<u4")), _V.INT32: ("<i", np.dtype("<i4")),
    _V.UINT64: ("<Q", np.dtype("<u8")), _V.INT64: ("<q", np.dtype("<i8")),
    _V.FLOAT32: ("<f", np.dtype("<f4")), _V.FLOAT64: ("<d", np.dtype("<f8")),
    _V.BOOL: ("<B", np.dtype("u1")),
}
_STRUCTS = {t: struct.Struct(fmt) for t, (fmt, _) in _SCALAR.items()}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor descriptor. shape is in numpy order (ggml ne reversed): (rows, cols) for a 2-D weight."""
    name: str
    shape: tuple
    type: GGMLType
    offset: int         # absolute byte offset of the data in the file
    nbytes: int
    n_elements: int

    @property
    def ne(self) -> tuple:
        """Dimensions in ggml order (ne[0] is the contiguous one)."""
        return tuple(reversed(self.shape))

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (the last numpy dimension)."""
        bs, ts = GGML_TYPE_INFO[self.type]
        return self.shape[-1] // bs * ts


def _check_type(type_id: int, what: str) -> GGMLType:
    if type_id in REMOVED_TYPES:
        raise GGUFError(f"{what}: removed type {REMOVED_TYPES[type_id]} (id {type_id}) is no longer supported")
    try:
        return GGMLType(type_id)
    except ValueError:
        raise GGUFError(f"{what}: unknown ggml type id {type_id}") from None


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class _Cursor:
    """Bounds-checked little-endian reads from a buffer (the mmap)."""
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int, end: int):
        self.buf, self.pos, self.end = buf, pos, end

    def need(self, n: int, what: str) -> None:
        if n > self.end - self.pos:
            raise GGUFError(f"{what}: needs {n} bytes at offset {self.pos}, but the file ends at {self.end} "
                            f"(truncated or corrupt file)")

    def unpack(self, st: struct.Struct, what: str):
        self.need(st.size, what)
        v = st.unpack_from(self.buf, self.pos)[0]
        self.pos += st.size
        return v

    def u32(self, what: str) -> int:
        return self.unpack(_U32, what)

    def u64(self, what: str) -> int:
        return self.unpack(_U64, what)

    def raw_string(self, what: str) -> bytes:
        n = self.u64(f"{what} (string length)")
        self.need(n, f"{what} (string of {n} bytes)")
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s

    def name(self, what: str) -> str:
        raw = self.raw_string(what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{what} {raw[:64]!r} is not valid UTF-8") from None


def _scan_string_array(buf, pos: int, count: int, end: int, what: str) -> tuple[list, int]:
    """Walk `count` length-prefixed strings from pos; returns (start offsets of the string bytes, end pos)."""
    unpack = _U64.unpack_from
    starts = []
    push = starts.append
    try:
        for _ in range(count):
            n, = unpack(buf, pos)
            pos += 8
            push(pos)
            pos += n
    except struct.error:
        pos = end + 1
    if pos > end:
        raise GGUFError(f"{what}: string array of {count} elements runs past the end of the file "
                        f"(element {len(starts) - 1} has a bad length)")
    return starts, pos


def _decode_strings(buf, starts: list, stop: int) -> list:
    """Decode strings whose bytes start at starts[i] and end 8 bytes before starts[i+1] (the last at stop)."""
    if not starts:
        return []
    ends = starts[1:]
    ends = [e - 8 for e in ends]
    ends.append(stop)
    return [buf[a:b].decode("utf-8", "surrogateescape") for a, b in zip(starts, ends)]


class GGUFFile:
    """A parsed GGUF file (see the module docstring). Use as a context manager or call close()."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._mm = None
        self._u8 = None
        try:
            with open(self.path, "rb") as fh:
                try:
                    mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                except ValueError as e:     # empty file
                    raise GGUFError(f"{self.path}: empty file, not a GGUF file ({e})") from None
        except OSError as e:
            raise GGUFError(f"{self.path}: cannot open/map file: {e}") from e
        self._mm = mm
        self._u8 = np.frombuffer(mm, dtype=np.uint8)    # the one buffer export every array view shares
        try:
            self._parse(mm)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- parsing
    def _parse(self, mm) -> None:
        size = len(mm)
        self.file_size = size
        c = _Cursor(mm, 0, size)
        c.need(4, "magic")
        magic = mm[0:4]
        if magic != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: bad magic {magic!r}, expected {GGUF_MAGIC!r} (not a GGUF file)")
        c.pos = 4
        version = c.u32("version")
        if version in (2, 3):
            pass
        elif version == 1:
            raise GGUFError("version: GGUF v1 files are not supported (re-convert the model to v3)")
        elif version & 0xFFFF == 0 and (version >> 24) in (1, 2, 3):
            raise GGUFError(f"version: big-endian (byte-swapped) GGUF file (version field 0x{version:08x}); "
                            f"only little-endian files are supported")
        else:
            raise GGUFError(f"version: unsupported GGUF version {version} (supported: 2, 3)")
        self.version = version
        n_tensors = c.u64("tensor count")
        n_kv = c.u64("metadata key count")
        # each metadata entry needs at least 8 (key length) + 4 (type) + 1 bytes, each tensor info 24
        if n_kv > (size - c.pos) // 13:
            raise GGUFError(f"metadata key count {n_kv} is larger than the file can hold")
        if n_tensors > (size - c.pos) // 24:
            raise GGUFError(f"tensor count {n_tensors} is larger than the file can hold")

        # ---- metadata
        metadata = {}
        types = {}      # key -> (value type, element type or None, value offset, count)
        for i in range(n_kv):
            key = c.name(f"metadata key #{i}")
            if key in metadata:
                raise GGUFError(f"metadata key {key!r}: duplicate key")
            vtype = c.u32(f"metadata {key!r}: value type")
            metadata[key], types[key] = self._read_value(c, key, vtype)
        self.metadata = metadata
        self._types = types

        alignment = GGUF_DEFAULT_ALIGNMENT
        if "general.alignment" in metadata:
            if types["general.alignment"][0] != _V.UINT32:
                raise GGUFError(f"general.alignment: must be a uint32, "
                                f"got {types['general.alignment'][0].name}")
            alignment = metadata["general.alignment"]
            if alignment == 0 or alignment & (alignment - 1):
                raise GGUFError(f"general.alignment: {alignment} is not a power of two")
            if alignment > MAX_ALIGNMENT:
                raise GGUFError(f"general.alignment: {alignment} is absurdly large (max {MAX_ALIGNMENT})")
        self.alignment = alignment

        # ---- tensor descriptors
        infos = []      # (name, ne, type, relative offset)
        seen = set()
        for i in range(n_tensors):
            what = f"tensor #{i}"
            name = c.name(f"{what} name")
            what = f"tensor {name!r}"
            if len(name.encode("utf-8")) >= GGML_MAX_NAME:
                raise GGUFError(f"{what}: name is {len(name.encode())} bytes, the limit is {GGML_MAX_NAME - 1}")
            if name in seen:
                raise GGUFError(f"{what}: duplicate tensor name")
            seen.add(name)
            n_dims = c.u32(f"{what} n_dims")
            if not 1 <= n_dims <= GGML_MAX_DIMS:
                raise GGUFError(f"{what}: n_dims is {n_dims}, must be 1..{GGML_MAX_DIMS}")
            c.need(8 * n_dims, f"{what} dimensions")
            ne = struct.unpack_from(f"<{n_dims}q", mm, c.pos)
            c.pos += 8 * n_dims
            ttype = _check_type(c.u32(f"{what} type"), f"{what} type")
            offset = c.u64(f"{what} offset")
            infos.append((name, ne, ttype, offset))

        self.data_offset = _align(c.pos, alignment)
        if self.data_offset > size:
            raise GGUFError(f"data section: starts at {self.data_offset}, past the end of the file ({size})")

        tensors = {}
        prev_end, prev_name = 0, None
        for name, ne, ttype, offset in infos:
            what = f"tensor {name!r}"
            n = 1
            for d in ne:
                if d < 0:
                    raise GGUFError(f"{what}: negative dimension {d} in shape {ne}")
                n *= d
            if n > INT64_MAX:
                raise GGUFError(f"{what}: element count of shape {ne} overflows int64")
            bs, ts = GGML_TYPE_INFO[ttype]
            if ne[0] % bs:
                raise GGUFError(f"{what}: first dimension {ne[0]} is not a multiple of the block size {bs} "
                                f"of type {ttype.name}")
            nbytes = n // bs * ts
            if nbytes > INT64_MAX:
                raise GGUFError(f"{what}: byte size overflows int64")
            if offset % alignment:
                raise GGUFError(f"{what}: data offset {offset} is not a multiple of the alignment {alignment}")
            if offset < prev_end:
                raise GGUFError(f"{what}: data offset {offset} overlaps or precedes tensor {prev_name!r} "
                                f"(which ends at {prev_end}); tensors must be in order and disjoint")
            if self.data_offset + offset + nbytes > size:
                raise GGUFError(f"{what}: data [{offset}, {offset + nbytes}) of the data section at "
                                f"{self.data_offset} runs past the end of the file ({size} bytes)")
            prev_end, prev_name = offset + nbytes, name
            tensors[name] = TensorInfo(name, tuple(reversed(ne)), ttype, self.data_offset + offset, nbytes, n)
        self.tensors = tensors

    def _read_value(self, c: _Cursor, key: str, vtype: int):
        what = f"metadata {key!r}"
        if vtype in _STRUCTS:
            vt = _V(vtype)
            v = c.unpack(_STRUCTS[vt], what)
            if vt == _V.BOOL:
                if v > 1:
                    raise GGUFError(f"{what}: bool value {v} is not 0 or 1")
                v = bool(v)
            return v, (vt, None, c.pos, 1)
        if vtype == _V.STRING:
            raw = c.raw_string(what)
            return raw.decode("utf-8", "surrogateescape"), (_V.STRING, None, c.pos - len(raw) - 8, 1)
        if vtype == _V.ARRAY:
            etype = c.u32(f"{what}: array element type")
            count = c.u64(f"{what}: array count")
            start = c.pos
            if etype in _SCALAR:
                et = _V(etype)
                dt = _SCALAR[et][1]
                if count > (c.end - c.pos) // dt.itemsize:
                    raise GGUFError(f"{what}: array of {count} {et.name} runs past the end of the file")
                arr = self._u8[c.pos:c.pos + count * dt.itemsize].view(dt)
                c.pos += count * dt.itemsize
                if et == _V.BOOL:
                    if count and arr.max() > 1:
                        raise GGUFError(f"{what}: bool array holds a value other than 0 or 1")
                    arr = arr.view(np.bool_)
                return arr, (_V.ARRAY, et, start, count)
            if etype == _V.STRING:
                if count > (c.end - c.pos) // 8:
                    raise GGUFError(f"{what}: string array of {count} elements runs past the end of the file")
                starts, stop = _scan_string_array(c.buf, c.pos, count, c.end, what)
                c.pos = stop
                return _decode_strings(c.buf, starts, stop), (_V.ARRAY, _V.STRING, start, count)
            if etype == _V.ARRAY:
                raise GGUFError(f"{what}: arrays of arrays are not supported")
            raise GGUFError(f"{what}: unknown array element type {etype}")
        raise GGUFError(f"{what}: unknown value type {vtype}")

    # ---------------------------------------------------------------- access
    @property
    def architecture(self) -> str | None:
        return self.metadata.get("general.architecture")

    def value_type(self, key: str) -> tuple:
        """(GGUFValueType, element GGUFValueType or None) of a metadata key, as stored in the file."""
        t = self._types[key]
        return t[0], t[1]

    def metadata_raw(self, key: str):
        """Undecoded bytes of a string value (bytes) or string array (list[bytes])."""
        vt, et, off, count = self._types[key]
        mm = self._live()
        if vt == _V.STRING:
            return _Cursor(mm, off, len(mm)).raw_string(key)
        if vt == _V.ARRAY and et == _V.STRING:
            starts, stop = _scan_string_array(mm, off, count, len(mm), key)
            ends = [s - 8 for s in starts[1:]] + [stop]
            return [mm[a:b] for a, b in zip(starts, ends)]
        raise GGUFError(f"metadata {key!r} is not a string or string array")

    def _live(self):
        if self._mm is None:
            raise GGUFError(f"{self.path}: GGUFFile is closed")
        return self._mm

    def tensor(self, name: str) -> np.ndarray:
        """Zero-copy read-only view of a tensor's data (see the module docstring for dtypes and shapes)."""
        mm = self._live()
        try:
            ti = self.tensors[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r} in {self.path}") from None
        raw = self._u8[ti.offset:ti.offset + ti.nbytes]
        dt = _TENSOR_DTYPES.get(ti.type)
        if dt is not None:
            return raw.view(dt).reshape(ti.shape)
        return raw.reshape(ti.shape[:-1] + (ti.row_bytes,))

    def close(self) -> None:
        """Release the mapping; views still alive keep it mapped until they are garbage-collected."""
        mm, self._mm, self._u8 = self._mm, None, None
        md = getattr(self, "metadata", {})
        for k, v in md.items():         # metadata stays usable after close: numeric arrays become copies
            if isinstance(v, np.ndarray):
                md[k] = v.copy()
                md[k].flags.writeable = False
        v = None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass    # exported views exist: the mmap closes itself when the last one is collected

    @property
    def closed(self) -> bool:
        return self._mm is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self.tensors)} tensors, {len(self.metadata)} keys"
        return f"<GGUFFile {self.path!r} v{getattr(self, 'version', '?')} {state}>"


class GGUFWriter:  # placeholder, full implementation follows
    def __init__(self, *a, **k):
        raise NotImplementedError("GGUFWriter is not implemented yet")
