"""Public face of the C kernels: which instruction sets this CPU runs, which one is in use, and array-level
quantize / dequantize / matmul (the same kernels the forward pass calls).

    >>> from fastgguf import kernels
    >>> kernels.available()        # e.g. ['scalar', 'avx2', 'avx512']
    >>> kernels.active()           # chosen at import: the best available, or FASTGGUF_ISA
    >>> kernels.set_isa("scalar")  # force one (returns the previous)

FASTGGUF_ISA=<name> picks the instruction set at import (an unknown or unavailable name is an error);
FASTGGUF_NO_EXT=1 keeps the run-time extensions (VNNI on avx512, dotprod on neon) off.
"""
from fastgguf._kernels import (  # noqa: F401
    ISAS,
    SUPPORTED_TYPES,
    active,
    active_ext,
    available,
    block_size,
    cpu_features,
    dequantize,
    ext_available,
    ext_enabled,
    ext_name,
    gemv,
    matmul,
    quantize,
    read_bandwidth,
    row_size,
    set_ext,
    set_isa,
    vec_dot,
    vec_dot_type,
)

__all__ = ["ISAS", "SUPPORTED_TYPES", "active", "active_ext", "available", "block_size", "cpu_features",
           "dequantize", "ext_available", "ext_enabled", "ext_name", "gemv", "matmul", "quantize",
           "read_bandwidth", "row_size", "set_ext", "set_isa", "vec_dot", "vec_dot_type"]
