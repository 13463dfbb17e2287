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
run-time extensions (VNNI on avx512, dotprod on neon) off.
"""
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
    matmul,
    quantize,
    quantize_as_llama_file,
    read_bandwidth,
    row_size,
    set_ext,
    set_isa,
    type_table,
    vec_dot,
    vec_dot_type,
)

__all__ = ["ISAS", "SUPPORTED_TYPES", "WEIGHT_TYPES", "active", "active_ext", "available", "block_size", "build_info",
           "compiled", "cpu_features", "dequantize", "ext_available", "ext_enabled", "ext_name", "gemv", "matmul",
           "quantize", "quantize_as_llama_file", "read_bandwidth", "row_size", "set_ext", "set_isa", "type_table",
           "vec_dot", "vec_dot_type"]
