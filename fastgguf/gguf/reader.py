"""GGUF reader (pure Python + numpy).

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
"""

from __future__ import annotations

import mmap
import os
import struct

import numpy as np

from fastgguf.errors import GGUFError
from fastgguf.gguf.constants import (GGML_MAX_DIMS, GGML_MAX_NAME, GGML_TYPE_INFO, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC,
                                     INT64_MAX, MAX_ALIGNMENT, _NE, _SCALAR, _STRUCTS, _TENSOR_DTYPES, _TI_TAIL, _U32,
                                     _U64, GGMLType, GGUFValueType, TensorInfo, _align, _check_type)

_V = GGUFValueType
_T = GGMLType

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
        """Length of an array value without decoding it (GGUFError naming the key when the value is no array)."""
        v = dict.__getitem__(self, key)
        if not isinstance(v, (list, tuple, np.ndarray, _LazyStrings)):
            raise GGUFError(f"metadata {key} should be an array, got {type(v).__name__} {v!r:.40}")
        return len(v)

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


def _map_file(fh):
    return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


def _private_copy(fh):
    """The whole file read into an anonymous (private) mapping: same interface as the file mapping, but the file
    may change or disappear afterwards without touching it."""
    size = os.fstat(fh.fileno()).st_size
    if size == 0:
        raise ValueError("cannot map an empty file")
    mm = mmap.mmap(-1, size)
    view, done = memoryview(mm), 0
    while done < size:
        n = fh.readinto(view[done:])
        if not n:
            view.release()
            mm.close()
            raise GGUFError(f"{fh.name}: the file shrank while being read")
        done += n
    view.release()
    return mm


class GGUFFile:
    """A parsed GGUF file (see the module docstring). Use as a context manager or call close().

    mmap=True maps the file read-only and shares its pages (the file must then not change while it is open: a
    truncation kills the process with SIGBUS on the next read, an in-place rewrite changes the data under you);
    mmap=False copies it into private memory first."""

    def __init__(self, path, mmap=True):
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
                mm = _map_file(fh) if mmap else _private_copy(fh)
            except ValueError as e:             # empty file
                raise GGUFError(f"{self.path}: empty file, not a GGUF file ({e})") from None
        self._mm = mm
        self._u8 = np.frombuffer(mm, dtype=np.uint8)    # the one buffer export every array view shares
        self._u8.flags.writeable = False
        try:
            self._parse(mm)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- parsing
    def _parse(self, mm) -> None:
        """Header, metadata, alignment, tensor descriptors, then the tensors' places in the data section; sets
        file_size, version, metadata (and _types), alignment, data_offset and tensors, in that order."""
        size = len(mm)
        self.file_size = size
        c = _Cursor(mm, 0, size)
        n_tensors, n_kv = self._read_header(c)
        self._read_metadata(c, n_kv)
        self.alignment = self._read_alignment()
        infos = self._read_tensor_infos(c, n_tensors)
        self.data_offset = _align(c.pos, self.alignment)
        if self.data_offset > size and infos:  # (metadata-only files, e.g. vocab files, may skip the padding)
            raise GGUFError(f"data section: starts at {self.data_offset}, past the end of the file ({size})")
        self.tensors = self._place_tensors(infos)

    def _read_header(self, c: _Cursor) -> tuple:
        """Magic and version (sets self.version); (tensor count, metadata key count), each checked against the
        bytes left in the file."""
        mm, size = c.buf, c.end
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
        return n_tensors, n_kv

    def _read_metadata(self, c: _Cursor, n_kv: int) -> None:
        """The n_kv key-value pairs (keys non-empty and unique): sets self.metadata and self._types."""
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

    def _read_alignment(self) -> int:
        """general.alignment (a uint32, a power of two, at most MAX_ALIGNMENT), else the default."""
        metadata, types = self.metadata, self._types
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
        return alignment

    def _read_tensor_infos(self, c: _Cursor, n_tensors: int) -> list:
        """The n_tensors tensor descriptors, [(name, ne, type, relative offset)]: names (1..63 bytes of UTF-8,
        unique), n_dims and types checked; leaves c after the last one."""
        mm, size = c.buf, c.end
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
        return infos

    def _place_tensors(self, infos: list) -> dict:
        """{name: TensorInfo} from the descriptors: shapes, element and byte counts, block multiples, and data
        offsets (aligned, in order, disjoint, inside the file) checked against the data section at data_offset."""
        size, alignment = self.file_size, self.alignment
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
        return tensors

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
        self._live()  # raises once closed
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
