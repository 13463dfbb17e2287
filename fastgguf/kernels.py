"""Public face of the C kernels: which instruction sets this build and CPU run, which one is in use, the type
table, and array-level quantize / dequantize / matmul (the same kernels the forward pass calls).

    >>> from fastgguf import kernels
    >>> kernels.available()        # e.g. ['scalar', 'avx2', 'avx512']: compiled in AND run by this CPU
    >>> kernels.active()           # chosen at import: the best available, or FASTGGUF_ISA
    >>> kernels.set_isa("scalar")  # force one for everything, the model's forward pass included (returns the previous)
    >>> kernels.type_table()       # every format: block size, bytes, activation type, kernels per ISA
    >>> kernels.build_info()       # threads (and their API), compiler, compiled ISAs, platform of this build

There is one kernel table in the process (fastgguf._native holds every C file once), so set_isa() reaches the
forward pass, the samplers and these wrappers alike. FASTGGUF_ISA=<name> picks the instruction set at import: an
unknown or unavailable name makes `import fastgguf` fail with the valid values; FASTGGUF_NO_EXT=1 keeps the
run-time extensions (VNNI on avx512, dotprod and i8mm on neon) off.

quantize() and quantize_as_llama_file() refuse rows they cannot write: a block with a NaN or inf weight, or one too
large for the format (one of 6e5 overflows a Q4_0 block's fp16 scale), raises QuantizeError naming its row and block
(first_unfit_block: every weight finite, every row written dequantizing to finite values).
"""
from typing import NamedTuple

import numpy as np

from fastgguf import _native
from fastgguf._threads import check_n_threads
from fastgguf.errors import QuantizeError
from fastgguf._native import (  # noqa: F401
    ISAS,
    SUPPORTED_TYPES,
    WEIGHT_TYPES,
    active,
    active_ext,
    available,
    block_size,
    build_info,
    compiled,
    cpu_features,
    dequantize,
    ext_available,
    ext_enabled,
    ext_name,
    gemv,
    gemv_packed,
    pack_rows,
    PACK_ROWS,
    read_bandwidth,
    row_size,
    set_ext,
    set_isa,
    type_table,
    vec_dot,
    vec_dot_type,
)

__all__ = ["ISAS", "SUPPORTED_TYPES", "WEIGHT_TYPES", "active", "active_ext", "available", "block_size", "build_info",
           "compiled", "cpu_features", "dequantize", "ext_available", "ext_enabled", "ext_name", "gemv", "gemv_packed",
           "matmul", "pack_rows", "PACK_ROWS",
           "quantize", "quantize_as_llama_file", "read_bandwidth", "row_size", "set_ext", "set_isa", "type_table",
           "vec_dot", "vec_dot_type", "first_unfit_block", "UnfitBlock"]


class UnfitBlock(NamedTuple):
    """A block that its format cannot hold: row (of the rows given), block (its index in the row), columns (first,
    last), weight (its largest in magnitude, or its first NaN), type (the format's name)."""
    row: int
    block: int
    columns: tuple
    weight: float
    type: str

    def message(self, first_row=0):
        """'row R, block B (columns ...) does not fit TYPE: ...' (rows counted from first_row)."""
        why = ("overflows the format" if np.isfinite(self.weight) else
               "is not finite: NaN and inf weights cannot be quantized")
        return (f"row {first_row + self.row}, block {self.block} (columns {self.columns[0]}-{self.columns[1]}) does "
                f"not fit {self.type}: its weight {self.weight:g} {why}")


def first_unfit_block(x, raw, t):
    """The first block of `raw` (float rows x (..., n) quantized to type t) that holds a NaN or inf weight of x or
    does not dequantize to finite values, as an UnfitBlock; None when there is none. The one check of quantize(),
    quantize_as_llama_file() and fastgguf.gguf.quantize."""
    x = np.asarray(x, dtype=np.float32)
    n = x.shape[-1] if x.ndim else 0
    if x.size == 0 or n == 0:
        return None
    x = x.reshape(-1, n)
    y = _native.dequantize(raw, t, n).reshape(-1, n)
    bad = ~(np.isfinite(x) & np.isfinite(y))  # (a NaN weight may leave its block's scale finite: it is lost)
    if not bad.any():
        return None
    r, c = (int(i) for i in np.argwhere(bad)[0])
    blk = block_size(t)
    c0 = c - c % blk
    w = x[r, c0:c0 + blk]
    name = t.upper() if isinstance(t, str) else _native.SUPPORTED_NAMES[int(t)]
    return UnfitBlock(r, c // blk, (c0, c0 + blk - 1), float(w[np.argmax(np.abs(w))]), name)


def _checked(x, raw, t):
    bad = first_unfit_block(x, raw, t)
    if bad is not None:
        e = QuantizeError(bad.message())
        e.unfit = bad  # for a caller that names more (fastgguf.gguf.quantize: the tensor, its row in the file)
        raise e
    return raw


def matmul(w_raw, wtype, x, n_threads=None):
    """y = x @ W.T with W given as raw rows (rows, row_bytes) of type wtype; x float (m, n) or (n,).

    The activation is quantized to vec_dot_type(wtype) first, exactly as in the forward pass. n_threads: None (or
    0) for all, else a positive int checked as every n_threads is (fastgguf.engine.threads)."""
    if n_threads is None or (not isinstance(n_threads, bool) and n_threads == 0):
        return _native.matmul(w_raw, wtype, x, 0)
    return _native.matmul(w_raw, wtype, x, check_n_threads(n_threads))


def quantize(x, t, isa=None):
    """Quantize float rows x (..., n) into raw blocks: uint8 (..., row_bytes). isa: force an instruction set.
    QuantizeError (naming the row and block) when a block cannot be written: a NaN or inf weight, or one too large
    for the format's scale."""
    return _checked(x, _native.quantize(x, t, isa), t)


def quantize_as_llama_file(x, t):
    """Quantize float rows x (..., n) as llama-quantize writes them into a file (ggml_quantize_chunk, no importance
    matrix): the scalar reference of quantize(), except IQ4_NL, whose file quantizer searches 7 trial scales either
    side (quantize_row_iq4_nl_ref, which quantize() matches, tries none). Used by fastgguf.gguf.quantize.
    QuantizeError as quantize()'s."""
    return _checked(x, _native.quantize_as_llama_file(x, t), t)
