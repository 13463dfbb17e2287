# cython: language_level=3
"""Thin Python wrappers over the C kernels, for tests, benchmarks and the quantizer.

Arrays in, arrays out; every function validates its arguments so the C underneath can trust them."""
import os

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t

from fastgguf.kernels cimport *

cnp.import_array()

SUPPORTED_TYPES = {"F32": FG_TYPE_F32, "F16": FG_TYPE_F16, "BF16": FG_TYPE_BF16, "Q4_0": FG_TYPE_Q4_0,
                   "Q4_1": FG_TYPE_Q4_1, "Q8_0": FG_TYPE_Q8_0, "Q8_1": FG_TYPE_Q8_1}
ISAS = ("scalar", "avx2", "avx512", "neon")


def _init():
    if fg_init() != 0:
        want = os.environ.get("FASTGGUF_ISA", "")
        raise RuntimeError(
            f"FASTGGUF_ISA={want!r} is not usable on this CPU: choose one of {available()} "
            f"(CPU features: {fg_cpu_features().decode() or 'none'})")


def available():
    """Instruction sets this CPU (and OS) can run, best last."""
    return [fg_isa_name(i).decode() for i in range(FG_ISA_COUNT) if fg_isa_available(i)]


def active():
    """The instruction set the kernels use now."""
    return fg_isa_name(fg_isa_active()).decode()


def cpu_features():
    return fg_cpu_features().decode()


def set_isa(name):
    """Force an instruction set for this module's kernels (tests, benchmarks). Returns the previous one."""
    prev = active()
    i = fg_isa_from_name(str(name).encode())
    if i < 0:
        raise ValueError(f"unknown instruction set {name!r}; known: {list(ISAS)}")
    if fg_set_isa(i) != 0:
        raise ValueError(f"instruction set {name!r} is not available on this CPU; available: {available()}")
    return prev


cdef int _type_id(t) except -1:
    if isinstance(t, str):
        if t.upper() not in SUPPORTED_TYPES:
            raise ValueError(f"unsupported type {t!r}; supported: {sorted(SUPPORTED_TYPES)}")
        return SUPPORTED_TYPES[t.upper()]
    ti = int(t)
    if not fg_type_supported(ti):
        raise ValueError(f"unsupported ggml type id {ti}")
    return ti


def block_size(t):
    return fg_blck_size(_type_id(t))


def row_size(t, int64_t n):
    cdef int ti = _type_id(t)
    _check_len(ti, n)
    return fg_row_size(ti, n)


def vec_dot_type(t):
    cdef int r = fg_vec_dot_type(_type_id(t))
    if r < 0:
        raise ValueError(f"type {t!r} is an activation-only type")
    return r


cdef _check_len(int ti, int64_t n):
    cdef int64_t b = fg_blck_size(ti)
    if n < 0 or n % b:
        raise ValueError(f"row length {n} is not a multiple of the block size {b}")


def quantize(x, t):
    """Quantize float rows x (..., n) into raw blocks: uint8 (..., row_bytes)."""
    cdef int ti = _type_id(t)
    cdef cnp.ndarray[cnp.float32_t, ndim=2] a = np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(-1, np.shape(x)[-1]))
    cdef int64_t n = a.shape[1], rows = a.shape[0], i
    _check_len(ti, n)
    cdef size_t rs = fg_row_size(ti, n)
    cdef cnp.ndarray[cnp.uint8_t, ndim=2] out = np.empty((rows, rs), dtype=np.uint8)
    with nogil:
        for i in range(rows):
            fg_quantize_row(ti, &a[i, 0] if n else NULL, &out[i, 0] if rs else NULL, n)
    return out.reshape(tuple(np.shape(x)[:-1]) + (rs,))


def dequantize(raw, t, int64_t n):
    """Dequantize raw blocks (..., row_bytes) holding rows of n elements into float32 (..., n)."""
    cdef int ti = _type_id(t)
    _check_len(ti, n)
    cdef size_t rs = fg_row_size(ti, n)
    r = np.ascontiguousarray(np.asarray(raw).view(np.uint8))
    if r.shape[-1] != rs:
        raise ValueError(f"raw rows are {r.shape[-1]} bytes, expected {rs} for {n} elements")
    cdef cnp.ndarray[cnp.uint8_t, ndim=2] a = r.reshape(-1, rs)
    cdef int64_t rows = a.shape[0], i
    cdef cnp.ndarray[cnp.float32_t, ndim=2] out = np.empty((rows, n), dtype=np.float32)
    with nogil:
        for i in range(rows):
            fg_dequantize_row(ti, &a[i, 0] if rs else NULL, &out[i, 0] if n else NULL, n)
    return out.reshape(tuple(r.shape[:-1]) + (n,))


def matmul(w_raw, wtype, x, int n_threads=0):
    """y = x @ W.T with W given as raw rows (rows, row_bytes) of type wtype; x float (m, n) or (n,).

    The activation is quantized to vec_dot_type(wtype) first, exactly as in the forward pass."""
    cdef int ti = _type_id(wtype)
    xa = np.asarray(x, dtype=np.float32)
    squeeze = xa.ndim == 1
    cdef cnp.ndarray[cnp.float32_t, ndim=2] xs = np.ascontiguousarray(xa.reshape(1, -1) if squeeze else xa)
    cdef int64_t n = xs.shape[1], m = xs.shape[0]
    _check_len(ti, n)
    cdef size_t rs = fg_row_size(ti, n)
    w = np.asarray(w_raw)
    if w.dtype != np.uint8:
        w = w.view(np.uint8)
    w = w.reshape(w.shape[0], -1)
    if w.shape[1] != rs:
        raise ValueError(f"weight rows are {w.shape[1]} bytes, expected {rs} for {n} elements of {wtype}")
    if not w.flags.c_contiguous:
        w = np.ascontiguousarray(w)
    cdef const uint8_t[:, ::1] wv = w
    cdef int64_t rows = wv.shape[0]
    cdef cnp.ndarray[cnp.float32_t, ndim=2] y = np.empty((m, rows), dtype=np.float32)
    cdef int rc
    with nogil:
        rc = fg_gemm(ti, &wv[0, 0] if rows and rs else NULL, rs, rows, n, &xs[0, 0] if m and n else NULL, m,
                     &y[0, 0] if m and rows else NULL, n_threads)
    if rc != 0:
        raise MemoryError("fg_gemm failed")
    return y[0] if squeeze else y


_init()
