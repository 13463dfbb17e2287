"""A safetensors reader: numpy over a read-only mmap, every header field checked where the file enters.

The format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N, N bytes of JSON
``{name: {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, "__metadata__": {str: str}}``,
then the byte buffer; offsets are relative to the buffer's start. The tensors must tile the buffer exactly (no
holes, no overlaps), as the reference implementation requires, so a truncated or spliced file is refused instead of
read as garbage.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct

import numpy as np

from fastgguf.errors import ConvertError

# safetensors dtype -> numpy dtype (all little-endian); BF16 is read as its raw uint16 bits
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
          "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BOOL": "?"}
MAX_HEADER = 100 << 20      # the reference reader's own limit (100 MB of JSON)


class SafetensorsFile:
    """``with SafetensorsFile(path) as st: st.names, st.shape(n), st.dtype(n), st.array(n)`` (read-only views
    into the mapping, valid until close())."""

    def __init__(self, path):
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise ConvertError(f"{self.path}: {size} bytes, too short for a safetensors file (8-byte header "
                                   f"length first)")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > MAX_HEADER or 8 + n > size:
                raise ConvertError(f"{self.path}: header length {n} does not fit in the file ({size} bytes)")
            raw = f.read(n)
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > 8 + n else None
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConvertError(f"{self.path}: the header is not valid UTF-8 JSON: {e}") from None
        if not isinstance(header, dict):
            raise ConvertError(f"{self.path}: the header is a JSON {type(header).__name__}, not an object")
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict):
            raise ConvertError(f"{self.path}: __metadata__ is not an object")
        self.metadata = meta
        self._base, self._size = 8 + n, size - 8 - n
        self._info = {}
        for name, info in header.items():
            self._info[name] = self._check(name, info)
        spans = sorted((b, e, name) for name, (_, _, b, e) in self._info.items() if e > b)
        at = 0
        for b, e, name in spans:
            if b != at:
                raise ConvertError(f"{self.path}: tensor {name!r} starts at byte {b} of the data, expected {at} "
                                   f"({'overlap' if b < at else 'a hole'} in the data buffer)")
            at = e
        if at != self._size:
            raise ConvertError(f"{self.path}: the tensors cover {at} bytes of data, the file holds {self._size}")

    def _check(self, name, info):
        if not isinstance(info, dict):
            raise ConvertError(f"{self.path}: tensor {name!r}: its entry is not an object")
        dt, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dt not in DTYPES:
            raise ConvertError(f"{self.path}: tensor {name!r}: unknown dtype {dt!r} (known: {', '.join(DTYPES)})")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ConvertError(f"{self.path}: tensor {name!r}: shape {shape!r} is not a list of integers >= 0")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs)
                or not 0 <= offs[0] <= offs[1]):
            raise ConvertError(f"{self.path}: tensor {name!r}: data_offsets {offs!r} are not [begin, end] with "
                               f"0 <= begin <= end")
        if offs[1] > self._size:
            raise ConvertError(f"{self.path}: tensor {name!r}: data_offsets {offs} run past the end of the data "
                               f"({self._size} bytes): truncated file?")
        dtype = np.dtype(DTYPES[dt])
        want = math.prod(shape) * dtype.itemsize    # Python ints: a huge shape cannot wrap around
        if offs[1] - offs[0] != want:
            raise ConvertError(f"{self.path}: tensor {name!r}: {dt} of shape {shape} needs {want} bytes, "
                               f"data_offsets {offs} give {offs[1] - offs[0]}")
        return dtype, tuple(shape), offs[0], offs[1]

    @property
    def names(self) -> list:
        """Tensor names in the order of their data."""
        return sorted(self._info, key=lambda n: self._info[n][2])

    def shape(self, name) -> tuple:
        return self._get(name)[1]

    def dtype(self, name) -> np.dtype:
        return self._get(name)[0]

    def _get(self, name):
        try:
            return self._info[name]
        except KeyError:
            raise ConvertError(f"{self.path}: no tensor {name!r}") from None

    def array(self, name) -> np.ndarray:
        dtype, shape, b, e = self._get(name)
        if e == b:
            return np.zeros(shape, dtype)
        if self._mm is None:
            raise ConvertError(f"{self.path} is closed")
        return np.frombuffer(self._mm, dtype=dtype, count=(e - b) // dtype.itemsize,
                             offset=self._base + b).reshape(shape)

    def close(self) -> None:
        # views handed out keep the mapping alive (numpy holds a buffer export): drop ours only
        self._mm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
