"""GGUF format facts shared by the reader and the writer: magic, versions, ggml type ids and their block layouts,
metadata value types, and the tensor descriptor. (Which types fastgguf can *run* is a different fact, owned by the
C type table: fastgguf.kernels.type_table().)"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

import numpy as np

from fastgguf.errors import GGUFError

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64          # including the terminating NUL in ggml: names are at most 63 bytes
MAX_ALIGNMENT = 1 << 24     # anything above 16 MiB is treated as a corrupt file
INT64_MAX = (1 << 63) - 1


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
