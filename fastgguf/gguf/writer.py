"""GGUF writer: GGUF v3 files byte-for-byte identical to gguf-py's writer (see GGUFWriter)."""

from __future__ import annotations

import os

import numpy as np

from fastgguf.gguf.constants import (GGML_MAX_DIMS, GGML_MAX_NAME, GGML_TYPE_INFO, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC,
                                     GGUF_VERSION, MAX_ALIGNMENT, _NE, _SCALAR, _STRUCTS, _TI_TAIL, _U32, _U64, GGMLType,
                                     GGUFValueType, _align, _check_type)

_V = GGUFValueType
_T = GGMLType

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
