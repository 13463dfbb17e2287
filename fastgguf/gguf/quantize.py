"""Re-quantize a GGUF model: ``quantize_file(src, dst, "q4_0")``; ``quantized_variant(src, "Q8_0")`` caches one.

Policy (after llama.cpp's for small models, restricted to the formats fastgguf has):
- 2-D (and higher) ``*.weight`` tensors become the target type; the token embedding and the output matrix
  become Q8_0 (llama.cpp keeps them at higher precision too) unless ``pure=True``;
- 1-D tensors (norms, biases) become F32;
- rows whose length is not a multiple of 32 cannot hold blocks: such tensors become F16;
- a tensor already in its target type is copied byte for byte; any other input (F32, F16, BF16, Q4_0, Q4_1,
  Q8_0) is dequantized to float32, then quantized.
All metadata is copied; general.file_type is set to the target and general.quantization_version to 2.
Work is split into row chunks over a thread pool: the kernels release the GIL.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fastgguf import kernels
from fastgguf.engine.threads import check_n_threads, usable_cpus
from fastgguf.errors import QuantizeError
from fastgguf.gguf import GGML_TYPE_INFO, GGMLType, GGUFFile, GGUFValueType, GGUFWriter

TARGETS = {"q4_0": GGMLType.Q4_0, "q4_1": GGMLType.Q4_1, "q8_0": GGMLType.Q8_0}
# llama.cpp's llama_ftype values for general.file_type
FILE_TYPES = {GGMLType.F32: 0, GGMLType.F16: 1, GGMLType.Q4_0: 2, GGMLType.Q4_1: 3, GGMLType.Q8_0: 7,
              GGMLType.BF16: 32}
HIGH_PRECISION = ("token_embd.weight", "output.weight")
READABLE = frozenset(GGMLType(t) for t in kernels.SUPPORTED_TYPES.values())  # what the kernels dequantize
QUANTIZATION_VERSION = 2
CHUNK_ELEMENTS = 1 << 20  # rows per job: about a million elements (4 MB of float32 in flight per thread)


def target_type(name: str, shape: tuple, qtype: GGMLType, pure: bool = False) -> GGMLType:
    """The type a tensor gets when the model is quantized to qtype."""
    if len(shape) < 2 or not name.endswith(".weight"):
        return GGMLType.F32
    want = qtype if pure or name not in HIGH_PRECISION else GGMLType.Q8_0
    if shape[-1] % GGML_TYPE_INFO[want][0]:
        return GGMLType.F16
    return want


def _convert_rows(src: np.ndarray, stype: GGMLType, dtype_out: GGMLType, n: int) -> np.ndarray:
    """Rows of one tensor (raw view, numpy-typed for float types) -> raw rows of dtype_out."""
    if stype in (GGMLType.F32, GGMLType.F16):
        f = np.asarray(src, dtype=np.float32)
    else:  # BF16 (uint16 view) and the block types: the kernels dequantize them
        f = kernels.dequantize(np.ascontiguousarray(src).view(np.uint8), int(stype), n)
    if dtype_out == GGMLType.F32:
        return np.ascontiguousarray(f, dtype=np.float32).view(np.uint8)
    return kernels.quantize(f, int(dtype_out))


def _copy_metadata(f: GGUFFile, w: GGUFWriter, qtype: GGMLType) -> None:
    for key in f.metadata:
        if key in ("general.alignment", "general.file_type", "general.quantization_version"):
            continue
        vt, et = f.value_type(key)
        if vt == GGUFValueType.STRING:
            w.add_value(key, f.metadata_raw(key), vt)
        elif vt == GGUFValueType.ARRAY and et == GGUFValueType.STRING:
            w.add_array(key, f.metadata_raw(key), et)
        elif vt == GGUFValueType.ARRAY:
            w.add_array(key, np.asarray(f.metadata[key]), et)
        else:
            w.add_value(key, f.metadata[key], vt)
    w.add_uint32("general.file_type", FILE_TYPES[qtype])
    w.add_uint32("general.quantization_version", QUANTIZATION_VERSION)


class _Progress:
    """A one-line progress bar on stderr, by bytes of input processed."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.done, self.enabled = max(total, 1), 0, enabled
        self.lock = threading.Lock()
        self.t0 = self.last = time.monotonic()

    def add(self, nbytes: int) -> None:
        with self.lock:
            self.done += nbytes
            now = time.monotonic()
            if self.enabled and (now - self.last > 0.1 or self.done >= self.total):
                self.last = now
                frac = self.done / self.total
                bar = "#" * int(frac * 30)
                sys.stderr.write(f"\rquantizing [{bar:<30}] {frac * 100:5.1f}% {now - self.t0:6.1f}s")
                sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


def quantize_file(src, dst, qtype="q4_0", *, pure: bool = False, n_threads: int | None = None,
                  progress: bool = False) -> dict:
    """Write dst: src with its weights quantized to qtype ("q4_0", "q4_1", "q8_0" or a GGMLType).
    Returns {tensor name: GGMLType written}."""
    qt = _target(qtype)
    n_threads = usable_cpus() if n_threads is None else check_n_threads(n_threads)
    with GGUFFile(src) as f:
        for name, ti in f.tensors.items():
            if ti.type not in READABLE:
                raise QuantizeError(f"{src}: tensor {name!r} is {ti.type.name}; readable inputs are "
                                    f"{sorted(t.name for t in READABLE)}")
        w = GGUFWriter(alignment=f.alignment)
        _copy_metadata(f, w, qt)
        plan, jobs, outputs = {}, [], {}
        for name, ti in f.tensors.items():
            out_t = target_type(name, ti.shape, qt, pure)
            if ti.n_elements == 0:
                out_t = ti.type  # a tensor with a zero dimension has nothing to quantize: copied as it is
            plan[name] = out_t
            src_arr = f.tensor(name)
            if out_t == ti.type:
                outputs[name] = src_arr  # unchanged: copied byte for byte (a view into the mapping)
                continue
            n = ti.shape[-1] if ti.shape else 1
            rows = ti.n_elements // n if n else 0
            src2 = src_arr.reshape(rows, -1)
            out = np.empty((rows, n // GGML_TYPE_INFO[out_t][0] * GGML_TYPE_INFO[out_t][1]), np.uint8)
            outputs[name] = out
            step = max(1, CHUNK_ELEMENTS // max(n, 1))
            for r0 in range(0, rows, step):
                jobs.append((src2, ti.type, out_t, n, r0, min(rows, r0 + step), out))
        bar = _Progress(sum(j[0][j[4]:j[5]].nbytes for j in jobs), progress)

        def run(job):
            s, stype, out_t, n, r0, r1, out = job
            out[r0:r1] = _convert_rows(s[r0:r1], stype, out_t, n).reshape(r1 - r0, -1)
            bar.add(s[r0:r1].nbytes)

        try:
            with ThreadPoolExecutor(max_workers=n_threads) as pool:
                for _ in pool.map(run, jobs):
                    pass
        finally:
            bar.close()
        for name, ti in f.tensors.items():
            w.add_tensor(name, outputs[name], ggml_type=plan[name], shape=ti.shape)
        w.write(dst)
        del outputs, jobs
    return plan


def _target(qtype) -> GGMLType:
    if isinstance(qtype, str):
        key = qtype.lower()
        if key not in TARGETS:
            raise QuantizeError(f"unknown quantization type {qtype!r}; choose one of {sorted(TARGETS)}")
        return TARGETS[key]
    t = GGMLType(int(qtype))
    if t not in TARGETS.values():
        raise QuantizeError(f"cannot quantize to {t.name}; choose one of {sorted(TARGETS)}")
    return t


def quantized_variant(src, qtype, cache_dir=None) -> str:
    """Path of `src` quantized to qtype in cache_dir (default: next to src), made once.
    SmolLM2-135M-Instruct.Q4_1.gguf -> SmolLM2-135M-Instruct.Q8_0.gguf."""
    qt = _target(qtype)
    src = os.fspath(src)
    cache_dir = os.path.dirname(os.path.abspath(src)) if cache_dir is None else os.fspath(cache_dir)
    stem = os.path.basename(src)
    stem = stem[:-5] if stem.endswith(".gguf") else stem
    stem = re.sub(r"[.-](Q\d_[0-9A-Z_]+|F16|BF16|F32)$", "", stem, flags=re.IGNORECASE)
    path = os.path.join(cache_dir, f"{stem}.{qt.name}.gguf")
    if os.path.abspath(path) == os.path.abspath(src) or os.path.exists(path):
        return path
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.part"
    try:
        quantize_file(src, tmp, qt)
        os.replace(tmp, path)  # atomic: concurrent makers both produce the same bytes
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path
