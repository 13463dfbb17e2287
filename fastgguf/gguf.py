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
``metadata`` stays usable after ``close()`` (its numeric arrays are replaced by copies).

Metadata values: integers -> ``int``, floats -> ``float``, bool -> ``bool``, string -> ``str``; numeric
arrays -> read-only 1-D numpy views (bool arrays as ``numpy.bool_``); string arrays -> ``list[str]``.
Nested arrays (arrays of arrays) are rejected with ``GGUFError``: llama.cpp does not read them either
and no model uses them.

Speed: parsing validates every string array up front (a vectorised walk of the length prefixes), but
``metadata`` is a ``dict`` subclass (:class:`Metadata`) that decodes big string arrays (>= 1024 strings:
tokens, merges) on first access, in bulk; any Python-level access (``m[k]``, ``get``, ``items``,
``values``, ``dict(m)``, ``json.dumps``) sees a real ``list[str]``. ``m.array_len(k)`` gives a length
without decoding.

Text policy: metadata keys and tensor names must be valid UTF-8 (else ``GGUFError``). String values are
decoded with ``errors="surrogateescape"``, so no file fails because of one bad token, and
``s.encode("utf-8", "surrogateescape")`` gives back the exact bytes. :meth:`GGUFFile.metadata_raw`
returns the undecoded ``bytes`` (or ``list[bytes]``) of any string value, e.g. for tokenizers.

Validation: every malformed file raises ``GGUFError`` (a ``ValueError``) naming the field or tensor at
fault. Counts and lengths are checked against the bytes left in the file before anything is allocated;
tensor shapes (1..4 dims, none negative), types (unknown and removed ids), block multiples, element and
byte counts (int64), names (1..63 bytes, unique), keys (non-empty, unique), general.alignment (uint32,
a power of two, at most 16 MiB) and data offsets (aligned, in order, non-overlapping, inside the file)
are checked. Zero-sized dimensions are accepted (a tensor of 0 elements and 0 bytes). Bytes after the
last tensor's data are accepted.

Writing
-------
``GGUFWriter`` writes GGUF v3 (see its docstring).
"""

from __future__ import annotations

import mmap
import os
import struct
from enum import IntEnum
from typing import NamedTuple

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
_TI_TAIL = struct.Struct("<IQ")                     # tensor info: type, offset
_NE = [None] + [struct.Struct(f"<{n}q") for n in range(1, 5)]


class TensorInfo(NamedTuple):
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


_TYPE_BY_ID = {int(t): t for t in GGMLType}


def _check_type(type_id: int, what: str) -> GGMLType:
    t = _TYPE_BY_ID.get(type_id)
    if t is not None:
        return t
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


_K7 = np.arange(1, 8, dtype=np.int64)


def _scan_scalar(buf, pos: int, count: int, end: int, out: list) -> int:
    """Walk count length-prefixed strings from pos, appending each header position to out.
    Returns the position after the last string, or end + 1 if the array runs past end."""
    unpack = _U64.unpack_from
    push = out.append
    try:
        for _ in range(count):
            n, = unpack(buf, pos)
            push(pos)
            pos += 8 + n
    except (struct.error, OverflowError):       # a header past the end of the buffer
        return end + 1
    return pos


def _scan_fast(u8: np.ndarray, pos: int, count: int, W: int):
    """Vectorised walk of up to count strings in the window u8[pos:pos+W].

    Returns (header positions found (int64 array, absolute), position after the last one); the array is
    empty when the walk cannot start. Candidate headers are offsets whose u64 is < 2^32 (4 high bytes
    zero) followed by a non-zero byte (the first byte of the string), and whose string ends inside the
    window. From pos, runs of candidates whose end is the next candidate are taken whole; at a break the
    walk jumps to the candidate at the end of the last taken string. Every taken link is a length read at
    a real header, so the result is exact; where no candidate continues the walk the caller takes over."""
    a = u8[pos:pos + W]
    z = a == 0
    m = z[4:W - 4] & z[5:W - 3]                 # m[j]: bytes j+4..j+7 are 0 and byte j+8 is not
    m &= z[6:W - 2]
    m &= z[7:W - 1]
    np.greater(m, z[8:W], out=m)
    c = np.flatnonzero(m)                       # candidate header offsets in the window
    # V[j] = u32 at byte pos + j: a zero-copy, unaligned, overlapping view (stride 1 byte)
    V = np.ndarray((W - 3,), dtype="<u4", buffer=u8, offset=pos, strides=(1,))
    nxt = V[c] + c                              # where each candidate's string ends (int64)
    nxt += 8
    ok = nxt <= W
    c, nxt = c[ok], nxt[ok]
    if len(c) == 0 or c[0] != 0:
        return c[:0], pos
    breaks = np.flatnonzero(nxt[:-1] != c[1:]).tolist()
    breaks.append(len(c) - 1)
    segs, need, i, bi = [], count, 0, 0
    while True:
        while breaks[bi] < i:
            bi += 1
        take = min(breaks[bi] - i + 1, need)    # c[i..breaks[bi]] is a chain of verified links
        segs.append(c[i:i + take])
        need -= take
        stop = int(nxt[i + take - 1])
        if need == 0 or len(segs) > 256:
            break
        k = int(np.searchsorted(c, stop))
        if k >= len(c) or c[k] != stop:
            break
        i = k
    hp = np.concatenate(segs) if len(segs) > 1 else segs[0]
    return hp + pos, pos + stop


def _scan_string_array(u8, buf, pos: int, count: int, end: int, what: str):
    """Header positions (int64 array) of count length-prefixed strings from pos, and the end position.

    Large arrays use the vectorised walk (a few ms for 50k strings instead of ~10 ms), with short
    scalar steps over anything it cannot see (empty strings, strings starting with NUL, lengths >= 2^32,
    a window too small) and a full scalar walk after a few tries; the scalar walk names a bad element."""
    parts = []
    need = count
    W = count * 20 + 64
    tries = 0
    while need > 0:
        n = 0
        if need >= 512 and tries < 8:
            tries += 1
            W = min(W, end - pos)
            if W > 8:
                got, nextpos = _scan_fast(u8, pos, need, W)
                n = len(got)
                if n:
                    parts.append(got)
                    need -= n
                    if nextpos - pos > W // 2:
                        W *= 2                  # the walk may have stopped at the window's end
                    pos = nextpos
        if need and n < 512:                     # slow going: scalar steps (all of the rest at the end)
            k = need if (need < 512 or tries >= 8) else 16
            lst = []
            stop = _scan_scalar(buf, pos, k, end, lst)
            if stop > end:
                bad = count - need + len(lst) - 1
                raise GGUFError(f"{what}: string array of {count} elements runs past the end of the file "
                                f"(element {bad} has a bad length)")
            parts.append(np.array(lst, np.int64))
            need -= k
            pos = stop
    hp = np.concatenate(parts) if len(parts) > 1 else parts[0] if parts else np.empty(0, np.int64)
    return hp, pos


def _decode_strings(u8: np.ndarray, buf, hp: np.ndarray, stop: int, raw: bool = False) -> list:
    """Strings whose 8-byte headers are at hp (the last string ends at stop), as str (or bytes if raw).

    Bulk path: replace each 8-byte header by one NUL, decode the region once and split on NUL (taken when
    no string holds a NUL). Short strings without 0x01 bytes (tokens, merges) use bytes.translate to drop
    the header bytes, others a numpy mask. Otherwise (or if the text is not valid UTF-8) each string is
    decoded on its own with errors="surrogateescape"."""
    count = len(hp)
    if count == 0:
        return []
    h0 = int(hp[0])
    reg = u8[h0:stop].copy()                     # (region bytes,) headers and strings
    rel = hp - h0
    reg[rel] = 0
    z = reg == 0
    short = (np.count_nonzero(z) == 8 * count and stop - int(hp[-1]) - 8 < 256
             and (count == 1 or int(np.diff(hp).max()) < 264))
    if short and not np.count_nonzero(reg == 1):
        # every header is 8 NULs and no string holds a NUL or a 0x01: turn header bytes 1..7 into 0x01
        # and delete those with bytes.translate, leaving one NUL before each string
        reg[z] = 1
        reg[rel] = 0
        text = reg.tobytes().translate(None, b"\x01")
    else:
        keep = np.ones(len(reg), bool)
        keep[(rel[:, None] + _K7).ravel()] = False
        out = reg[keep]                          # (count NULs + all string bytes,)
        text = out.tobytes() if np.count_nonzero(out == 0) == count else None
    if text is not None:
        try:
            parts = text.split(b"\x00") if raw else text.decode("utf-8").split("\x00")
        except UnicodeDecodeError:
            parts = None
        if parts is not None and len(parts) == count + 1:
            del parts[0]
            return parts
    starts = (hp + 8).tolist()
    ends = hp[1:].tolist()
    ends.append(stop)
    if raw:
        return [buf[a:b] for a, b in zip(starts, ends)]
    return [buf[a:b].decode("utf-8", "surrogateescape") for a, b in zip(starts, ends)]


class _LazyStrings:
    """A string array decoded on first use (stands in for list[str] inside Metadata)."""
    __slots__ = ("_u8", "_buf", "_hp", "_stop", "_list")

    def __init__(self, u8, buf, hp, stop):
        self._u8, self._buf, self._hp, self._stop, self._list = u8, buf, hp, stop, None

    def materialize(self) -> list:
        if self._list is None:
            self._list = _decode_strings(self._u8, self._buf, self._hp, self._stop)
            self._u8 = self._buf = None
        return self._list

    def detach(self) -> None:
        """Copy the undecoded bytes out of the file mapping (before the mapping is closed)."""
        if self._list is None and len(self._hp):
            h0 = int(self._hp[0])
            region = bytes(self._buf[h0:self._stop])
            self._u8, self._buf = np.frombuffer(region, np.uint8), region
            self._hp, self._stop = self._hp - h0, self._stop - h0

    def __len__(self):
        return len(self._hp)

    def __getitem__(self, i):
        return self.materialize()[i]

    def __iter__(self):
        return iter(self.materialize())

    def __eq__(self, other):
        return self.materialize() == (other.materialize() if isinstance(other, _LazyStrings) else other)

    def __repr__(self):
        return repr(self.materialize())


class Metadata(dict):
    """dict of metadata values whose big string arrays are decoded on first access.

    Behaves as a plain dict[str, value]: every Python-level access (m[k], get, items, values, iteration
    of items, ==, copy, dict(m), json.dumps) yields list[str] for string arrays. len() of an undecoded
    array is free via :meth:`array_len`."""

    def __getitem__(self, key):
        v = dict.__getitem__(self, key)
        if type(v) is _LazyStrings:
            v = v.materialize()
            dict.__setitem__(self, key, v)
        return v

    def get(self, key, default=None):
        return self[key] if key in self else default

    def array_len(self, key) -> int:
        """Length of an array value without decoding it."""
        return len(dict.__getitem__(self, key))

    def _all(self):
        for k, v in dict.items(self):
            if type(v) is _LazyStrings:
                dict.__setitem__(self, k, v.materialize())
        return self

    def __iter__(self):                  # a Python-level __iter__ makes dict(m) / {**m} use __getitem__
        return dict.__iter__(self)

    def items(self):
        return dict.items(self._all())

    def values(self):
        return dict.values(self._all())

    def copy(self):
        return dict(self._all())

    def pop(self, key, *default):
        if key in self:
            self[key]
        return dict.pop(self, key, *default)

    def popitem(self):
        return dict.popitem(self._all())

    def setdefault(self, key, default=None):
        if key in self:
            return self[key]
        return dict.setdefault(self, key, default)

    def __eq__(self, other):
        return dict.__eq__(self._all(), other)

    def __ne__(self, other):
        return not self == other

    __hash__ = None

    def __repr__(self):
        return dict.__repr__(self._all())

    def __reduce__(self):
        return (dict, (dict(self._all()),))


class GGUFFile:
    """A parsed GGUF file (see the module docstring). Use as a context manager or call close()."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._mm = None
        self._u8 = None
        # Only regular files: a FIFO or a character device (/dev/zero) would block or read forever. stat() first,
        # then open with O_NONBLOCK (a FIFO swapped in meanwhile cannot block the open) and check again.
        import stat
        st = os.stat(self.path)                 # a missing file raises FileNotFoundError (an OSError)
        if stat.S_ISDIR(st.st_mode):
            raise GGUFError(f"{self.path}: is a directory, not a GGUF file")
        if not stat.S_ISREG(st.st_mode):
            raise GGUFError(f"{self.path}: is not a regular file (a FIFO, device or socket), not a GGUF file")
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        fh = os.fdopen(fd, "rb")
        with fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise GGUFError(f"{self.path}: is not a regular file, not a GGUF file")
            try:
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError as e:             # empty file
                raise GGUFError(f"{self.path}: empty file, not a GGUF file ({e})") from None
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
        metadata = Metadata()
        types = {}      # key -> (value type, element type or None, value offset, count[, header positions])
        for i in range(n_kv):
            key = c.name(f"metadata key #{i}")
            if not key:
                raise GGUFError(f"metadata key #{i}: empty key")
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
        pos = c.pos
        u64, u32, tail = _U64.unpack_from, _U32.unpack_from, _TI_TAIL.unpack_from
        for i in range(n_tensors):
            name = None
            try:
                nlen, = u64(mm, pos)
                if not nlen:
                    raise GGUFError(f"tensor #{i}: empty name")
                if nlen >= GGML_MAX_NAME:
                    raise GGUFError(f"tensor #{i}: name of {nlen} bytes {mm[pos + 8:pos + 8 + 64]!r}..., "
                                    f"the limit is {GGML_MAX_NAME - 1}")
                raw = mm[pos + 8:pos + 8 + nlen]
                try:
                    name = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise GGUFError(f"tensor #{i}: name {raw!r} is not valid UTF-8") from None
                pos += 8 + nlen
                n_dims, = u32(mm, pos)
                if not 1 <= n_dims <= GGML_MAX_DIMS:
                    raise GGUFError(f"tensor {name!r}: n_dims is {n_dims}, must be 1..{GGML_MAX_DIMS}")
                ne = _NE[n_dims].unpack_from(mm, pos + 4)
                pos += 4 + 8 * n_dims
                type_id, offset = tail(mm, pos)
                pos += 12
            except (struct.error, OverflowError):
                what = f"tensor #{i}" + (f" ({name!r})" if name is not None else "")
                raise GGUFError(f"{what}: descriptor truncated at offset {pos} (file is {size} bytes)") from None
            if len(raw) < nlen:
                raise GGUFError(f"tensor #{i}: name truncated at offset {pos} (file is {size} bytes)")
            infos.append((name, ne, _check_type(type_id, f"tensor {name!r} type"), offset))
        c.pos = pos
        if len({t[0] for t in infos}) != len(infos):
            seen = set()
            for t in infos:
                if t[0] in seen:
                    raise GGUFError(f"tensor {t[0]!r}: duplicate tensor name")
                seen.add(t[0])

        self.data_offset = _align(c.pos, alignment)
        if self.data_offset > size and infos:  # (metadata-only files, e.g. vocab files, may skip the padding)
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
            start = c.pos
            v = c.unpack(_STRUCTS[vt], what)
            if vt == _V.BOOL:
                if v > 1:
                    raise GGUFError(f"{what}: bool value {v} is not 0 or 1")
                v = bool(v)
            return v, (vt, None, start, 1)
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
                hp, stop = _scan_string_array(self._u8, c.buf, c.pos, count, c.end, what)
                c.pos = stop
                if count >= 1024:
                    val = _LazyStrings(self._u8, c.buf, hp, stop)
                else:
                    val = _decode_strings(self._u8, c.buf, hp, stop)
                return val, (_V.ARRAY, _V.STRING, start, count, hp)
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
        vt, et, off, count = self._types[key][:4]
        mm = self._live()
        if vt == _V.STRING:
            return _Cursor(mm, off, len(mm)).raw_string(key)
        if vt == _V.ARRAY and et == _V.STRING:
            hp = self._types[key][4]
            stop = int(hp[-1]) + 8 + _U64.unpack_from(mm, int(hp[-1]))[0] if count else off
            return _decode_strings(self._u8, mm, hp, stop, raw=True)
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
        for k, v in dict.items(md):     # metadata stays usable after close: no references into the mapping
            if isinstance(v, np.ndarray):
                v = v.copy()
                v.flags.writeable = False
                dict.__setitem__(md, k, v)
            elif type(v) is _LazyStrings:
                v.detach()
        self._types = {k: t[:4] for k, t in getattr(self, "_types", {}).items()}
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


# ------------------------------------------------------------------------------------------------ writer

_INT_RANGES = {
    _V.UINT8: (0, 0xFF), _V.INT8: (-0x80, 0x7F), _V.UINT16: (0, 0xFFFF), _V.INT16: (-0x8000, 0x7FFF),
    _V.UINT32: (0, 0xFFFFFFFF), _V.INT32: (-0x80000000, 0x7FFFFFFF),
    _V.UINT64: (0, (1 << 64) - 1), _V.INT64: (-(1 << 63), (1 << 63) - 1),
}
_DTYPE_TO_VTYPE = {np.dtype(dt): vt for vt, (_, dt) in _SCALAR.items() if vt != _V.BOOL}
_DTYPE_TO_VTYPE[np.dtype(np.bool_)] = _V.BOOL
_DTYPE_TO_GGML = {np.dtype("float32"): _T.F32, np.dtype("float16"): _T.F16, np.dtype("float64"): _T.F64,
                  np.dtype("int8"): _T.I8, np.dtype("int16"): _T.I16, np.dtype("int32"): _T.I32,
                  np.dtype("int64"): _T.I64}


def _pack_string(v) -> bytes:
    raw = v if isinstance(v, (bytes, bytearray, memoryview)) else str(v).encode("utf-8", "surrogateescape")
    return _U64.pack(len(raw)) + bytes(raw)


def _pack_scalar(vt: GGUFValueType, v, key: str) -> bytes:
    if vt == _V.STRING:
        if not isinstance(v, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"{key!r}: STRING value must be str or bytes, got {type(v).__name__}")
        return _pack_string(v)
    if vt == _V.BOOL:
        if not isinstance(v, (bool, np.bool_)) and v not in (0, 1):
            raise TypeError(f"{key!r}: BOOL value must be a bool, got {v!r}")
        return bytes([1 if v else 0])
    if vt in (_V.FLOAT32, _V.FLOAT64):
        return _STRUCTS[vt].pack(float(v))
    if vt in _INT_RANGES:
        if isinstance(v, (float, np.floating)) or isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{key!r}: {vt.name} value must be an int, got {v!r}")
        v = int(v)
        lo, hi = _INT_RANGES[vt]
        if not lo <= v <= hi:
            raise OverflowError(f"{key!r}: {v} does not fit in {vt.name}")
        return _STRUCTS[vt].pack(v)
    raise TypeError(f"{key!r}: cannot pack value type {vt!r}")


def _infer_type(v) -> GGUFValueType:
    """Value type that add() picks: bool->BOOL, int->INT32 (INT64/UINT64 when it does not fit),
    float->FLOAT32, str/bytes->STRING, numpy scalars->their own type, sequences->ARRAY."""
    if isinstance(v, (bool, np.bool_)):
        return _V.BOOL
    if isinstance(v, np.generic):
        vt = _DTYPE_TO_VTYPE.get(v.dtype)
        if vt is None:
            raise TypeError(f"no GGUF type for numpy {v.dtype}")
        return vt
    if isinstance(v, int):
        for vt in (_V.INT32, _V.INT64, _V.UINT64):
            lo, hi = _INT_RANGES[vt]
            if lo <= v <= hi:
                return vt
        raise OverflowError(f"integer {v} does not fit in 64 bits")
    if isinstance(v, float):
        return _V.FLOAT32
    if isinstance(v, (str, bytes, bytearray)):
        return _V.STRING
    if isinstance(v, (list, tuple, np.ndarray)):
        return _V.ARRAY
    raise TypeError(f"no GGUF type for {type(v).__name__}")


def _infer_array_type(values) -> GGUFValueType:
    if isinstance(values, np.ndarray):
        vt = _DTYPE_TO_VTYPE.get(values.dtype.newbyteorder("<") if values.dtype.byteorder == ">" else values.dtype)
        if vt is None:
            raise TypeError(f"no GGUF array element type for numpy {values.dtype}")
        return vt
    if len(values) == 0:
        raise ValueError("cannot infer the element type of an empty array: pass etype")
    kinds = {_infer_type(v) for v in values}
    if kinds <= {_V.STRING}:
        return _V.STRING
    if _V.ARRAY in kinds:
        raise TypeError("nested arrays are not supported")
    if kinds <= {_V.BOOL}:
        return _V.BOOL
    if kinds <= {_V.INT32, _V.INT64, _V.UINT64}:
        for vt in (_V.INT32, _V.INT64, _V.UINT64):
            lo, hi = _INT_RANGES[vt]
            if all(lo <= int(v) <= hi for v in values):
                return vt
    if kinds <= {_V.INT32, _V.INT64, _V.UINT64, _V.FLOAT32}:
        return _V.FLOAT32
    raise TypeError(f"array of mixed element types {sorted(k.name for k in kinds)}")


class GGUFWriter:
    """Writes a GGUF v3 file.

    >>> w = GGUFWriter()                          # alignment=32 (another value adds general.alignment)
    >>> w.add_string("general.architecture", "llama")
    >>> w.add_uint32("llama.block_count", 30)     # explicit types: add_uint8 ... add_float64, add_bool
    >>> w.add("llama.rope.freq_base", 1e4)        # inferred: int->INT32 (INT64/UINT64 if needed),
    ...                                           # float->FLOAT32, bool, str/bytes, list/ndarray->ARRAY
    >>> w.add_array("tokenizer.ggml.tokens", ["a", "b"])               # element type inferred or etype=
    >>> w.add_tensor("w", np.zeros((4, 64), np.float32))               # F32/F16/F64/I8..I64 from dtype
    >>> w.add_tensor("q", blocks_u8, ggml_type=GGMLType.Q4_1, shape=(4, 64))   # raw blocks + logical shape
    >>> w.write("out.gguf")                       # or w.tobytes()

    Shapes are in numpy order (rows, cols); the file stores them reversed (ggml ne). Keys and tensor names
    must be unique. Strings are str (encoded UTF-8, surrogateescape) or raw bytes. Tensor data is kept by
    reference until write(); each tensor is padded to the alignment, as gguf-py does."""

    def __init__(self, alignment: int = GGUF_DEFAULT_ALIGNMENT):
        if alignment <= 0 or alignment & (alignment - 1) or alignment > MAX_ALIGNMENT:
            raise ValueError(f"alignment must be a power of two <= {MAX_ALIGNMENT}, got {alignment}")
        self.alignment = alignment
        self._kv = {}           # key -> packed (type + value) bytes
        self._tensors = {}      # name -> (ne tuple, GGMLType, data array (contiguous, any dtype), nbytes)
        if alignment != GGUF_DEFAULT_ALIGNMENT:
            self.add_uint32("general.alignment", alignment)

    # ---- metadata
    def _put(self, key: str, packed: bytes) -> None:
        if not isinstance(key, str):
            raise TypeError(f"metadata key must be str, got {type(key).__name__}")
        if key in self._kv:
            raise ValueError(f"duplicate metadata key {key!r}")
        key.encode("utf-8")     # keys must be valid UTF-8
        self._kv[key] = packed

    def add_value(self, key: str, value, vtype: GGUFValueType, etype: GGUFValueType | None = None) -> None:
        """Add a value of an explicit type (etype for arrays; inferred when None)."""
        vtype = _V(vtype)
        if vtype == _V.ARRAY:
            self.add_array(key, value, etype)
        else:
            self._put(key, _U32.pack(vtype) + _pack_scalar(vtype, value, key))

    def add(self, key: str, value, vtype: GGUFValueType | None = None) -> None:
        """Add a value, inferring its type unless vtype is given (see _infer_type)."""
        self.add_value(key, value, _infer_type(value) if vtype is None else vtype)

    def add_uint8(self, key, v): self.add_value(key, v, _V.UINT8)
    def add_int8(self, key, v): self.add_value(key, v, _V.INT8)
    def add_uint16(self, key, v): self.add_value(key, v, _V.UINT16)
    def add_int16(self, key, v): self.add_value(key, v, _V.INT16)
    def add_uint32(self, key, v): self.add_value(key, v, _V.UINT32)
    def add_int32(self, key, v): self.add_value(key, v, _V.INT32)
    def add_uint64(self, key, v): self.add_value(key, v, _V.UINT64)
    def add_int64(self, key, v): self.add_value(key, v, _V.INT64)
    def add_float32(self, key, v): self.add_value(key, v, _V.FLOAT32)
    def add_float64(self, key, v): self.add_value(key, v, _V.FLOAT64)
    def add_bool(self, key, v): self.add_value(key, v, _V.BOOL)
    def add_string(self, key, v): self.add_value(key, v, _V.STRING)

    def add_array(self, key: str, values, etype: GGUFValueType | None = None) -> None:
        """Add an array; etype is the element type (inferred from a numpy dtype or the values if None)."""
        if isinstance(values, (str, bytes)):
            raise TypeError(f"{key!r}: add_array needs a sequence, got {type(values).__name__}")
        et = _infer_array_type(values) if etype is None else _V(etype)
        if et == _V.ARRAY:
            raise TypeError(f"{key!r}: nested arrays are not supported")
        head = _U32.pack(_V.ARRAY) + _U32.pack(et) + _U64.pack(len(values))
        if et == _V.STRING:
            body = b"".join(_pack_scalar(_V.STRING, v, key) for v in values)
        else:
            dt = _SCALAR[et][1]
            if et == _V.BOOL:
                arr = np.asarray(values)
                if arr.size and not np.isin(arr, (0, 1)).all():
                    raise TypeError(f"{key!r}: BOOL array holds a value other than 0/1/True/False")
                arr = arr.astype(np.uint8)
            elif et in _INT_RANGES:
                if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
                    arr = values
                    lo_v, hi_v = (int(values.min()), int(values.max())) if values.size else (0, 0)
                else:
                    if any(isinstance(v, (float, np.floating, str, bytes)) for v in values):
                        raise TypeError(f"{key!r}: {et.name} array holds a non-integer")
                    ints = [int(v) for v in values]
                    lo_v, hi_v = (min(ints), max(ints)) if ints else (0, 0)
                    arr = ints
                lo, hi = _INT_RANGES[et]
                if lo_v < lo or hi_v > hi:
                    raise OverflowError(f"{key!r}: values do not fit in {et.name}")
                arr = arr.astype(dt) if isinstance(arr, np.ndarray) else np.array(arr, dtype=dt)
            else:
                arr = np.asarray(values, dtype=dt)
            body = np.ascontiguousarray(arr, dtype=dt).tobytes()
        self._put(key, head + body)

    # ---- tensors
    def add_tensor(self, name: str, data: np.ndarray, ggml_type: GGMLType | None = None,
                   shape: tuple | None = None) -> None:
        """Add a tensor. Unquantized: data's dtype gives the type (or pass ggml_type=BF16 with uint16 data).
        Quantized: data is uint8 blocks (any shape, C-contiguous bytes), ggml_type and the logical shape."""
        if name in self._tensors:
            raise ValueError(f"duplicate tensor name {name!r}")
        if len(name.encode("utf-8")) >= GGML_MAX_NAME:
            raise ValueError(f"tensor name {name!r} is longer than {GGML_MAX_NAME - 1} bytes")
        data = np.asarray(data)
        if ggml_type is None:
            ggml_type = _DTYPE_TO_GGML.get(data.dtype)
            if ggml_type is None:
                raise TypeError(f"tensor {name!r}: no ggml type for dtype {data.dtype}; pass ggml_type")
        ggml_type = _check_type(int(ggml_type), f"tensor {name!r}")
        shape = tuple(int(d) for d in (data.shape if shape is None else shape))
        if not 1 <= len(shape) <= GGML_MAX_DIMS:
            raise ValueError(f"tensor {name!r}: needs 1..{GGML_MAX_DIMS} dimensions, shape is {shape}")
        if any(d < 0 for d in shape):
            raise ValueError(f"tensor {name!r}: negative dimension in {shape}")
        bs, ts = GGML_TYPE_INFO[ggml_type]
        if shape[-1] % bs:
            raise ValueError(f"tensor {name!r}: last dimension {shape[-1]} is not a multiple of the "
                             f"block size {bs} of {ggml_type.name}")
        n = 1
        for d in shape:
            n *= d
        nbytes = n // bs * ts
        if data.nbytes != nbytes:
            raise ValueError(f"tensor {name!r}: {ggml_type.name} of shape {shape} needs {nbytes} bytes, "
                             f"data has {data.nbytes}")
        self._tensors[name] = (tuple(reversed(shape)), ggml_type, np.ascontiguousarray(data), nbytes)

    # ---- output
    def _layout(self):
        a = self.alignment
        parts = [GGUF_MAGIC, _U32.pack(GGUF_VERSION), _U64.pack(len(self._tensors)), _U64.pack(len(self._kv))]
        for key, packed in self._kv.items():
            parts.append(_pack_string(key))
            parts.append(packed)
        offset = 0
        for name, (ne, t, _, nbytes) in self._tensors.items():
            parts += [_pack_string(name), _U32.pack(len(ne)), _NE[len(ne)].pack(*ne), _TI_TAIL.pack(t, offset)]
            offset = _align(offset + nbytes, a)
        head = b"".join(parts)
        return head + bytes(_align(len(head), a) - len(head))

    def _chunks(self):
        yield self._layout()
        for _, _, data, nbytes in self._tensors.values():
            if nbytes:
                yield memoryview(data).cast("B")
            pad = _align(nbytes, self.alignment) - nbytes
            if pad:
                yield bytes(pad)

    def tobytes(self) -> bytes:
        return b"".join(bytes(c) for c in self._chunks())

    def write(self, path) -> str:
        """Write the file (to path + '.tmp', then renamed into place); returns the path."""
        path = os.fspath(path)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            for chunk in self._chunks():
                f.write(chunk)
        os.replace(tmp, path)
        return path
