"""Re-quantize a GGUF model: ``quantize_file(src, dst, "q4_k_m")``; ``quantized_variant(src, "Q8_0")`` caches one.

Two policies:
- the llama.cpp recipes (q4_k_m, q4_k_s, q5_k_m, q5_k_s, q6_k, q3_k_m, q2_k, q5_0, q5_1, iq4_nl, mxfp4_moe) choose every
  tensor's type as llama-quantize does (src/llama-quant.cpp, llama_tensor_get_type, without an importance matrix):
  only 2-D+ ``*weight`` tensors that are not norms are quantized (others are copied as they are); the output matrix
  (or, with tied embeddings, the token embedding) becomes Q6_K (Q8_0 when its rows are not a multiple of the
  default type's block); attn_v / ffn_down / attn_output get more bits by layer position as the recipe says; a row
  length that the chosen type's block does not divide falls back (Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1,
  Q6_K -> Q8_0, IQ4_XS -> IQ4_NL; F16 when even that does not fit). With the same input the output is byte-identical,
  tensor by tensor, to ``llama-quantize --allow-requantize IN OUT TYPE``; ``pure=True`` skips the mixture rules (not
  the fallbacks), as ``llama-quantize --pure``. mxfp4_moe (llama-quantize's MXFP4_MOE, its only MXFP4 recipe) makes
  the 3-D expert tensors MXFP4 and every other quantized tensor Q8_0; with ``pure=True`` every one is MXFP4.
- q4_0 / q4_1 / q8_0 keep fastgguf's original policy: 2-D (and higher) ``*.weight`` tensors become the target type;
  the token embedding and the output matrix become Q8_0 unless ``pure=True``; 1-D tensors become F32; rows not a
  multiple of 32 become F16.
A tensor already in its target type is copied byte for byte; any other input (F32, F16, BF16 or a quantized type
fastgguf reads) is dequantized to float32, then quantized (llama-quantize --allow-requantize does the same).
All metadata is copied; general.file_type is set to llama.cpp's LLAMA_FTYPE_* value of the recipe and
general.quantization_version to 2. Work is split into row chunks over a thread pool: the kernels release the GIL.
"""
from __future__ import annotations

import errno
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fastgguf import kernels
from fastgguf._threads import check_n_threads, usable_cpus
from fastgguf.errors import QuantizeError
from fastgguf.gguf import GGML_TYPE_INFO, GGMLType, GGUFFile, GGUFValueType, GGUFWriter

T = GGMLType
TARGETS = {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q8_0": T.Q8_0}  # fastgguf's own policy
# the llama.cpp recipes: name -> (llama_ftype, default tensor type)
RECIPES = {"q5_0": (8, T.Q5_0), "q5_1": (9, T.Q5_1), "q2_k": (10, T.Q2_K), "q3_k_m": (12, T.Q3_K),
           "q4_k_s": (14, T.Q4_K), "q4_k_m": (15, T.Q4_K), "q5_k_s": (16, T.Q5_K), "q5_k_m": (17, T.Q5_K),
           "q6_k": (18, T.Q6_K), "iq4_nl": (25, T.IQ4_NL), "mxfp4_moe": (38, T.MXFP4)}
ALL_TYPES = sorted(TARGETS) + sorted(RECIPES)
# llama.cpp's llama_ftype values for general.file_type
FILE_TYPES = {GGMLType.F32: 0, GGMLType.F16: 1, GGMLType.Q4_0: 2, GGMLType.Q4_1: 3, GGMLType.Q8_0: 7,
              GGMLType.BF16: 32}
# when a row length is not a multiple of the chosen type's block (llama-quant.cpp, tensor_type_fallback)
FALLBACK = {T.IQ4_XS: T.IQ4_NL, T.Q2_K: T.Q4_0, T.Q3_K: T.Q4_0, T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0}
# substrings of 2-D weights that llama.cpp never quantizes (tensor_allows_quantization; the ones that can occur in
# the architectures of fastgguf and their near relatives)
_KEEP = ("_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj", "ssm_conv1d",
         "shortconv.conv.weight", "time_mix_", "attn_rel_b.weight", ".position_embd", ".rel_pos", ".patch_embd")
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


def _n_dims(shape) -> int:
    """ggml_n_dims: dimensions up to the last one larger than 1 (shape is numpy order, ne reversed)."""
    ne = tuple(reversed(tuple(shape)))
    return max([i + 1 for i, n in enumerate(ne) if n != 1] or [1])


def _layer_key(name: str):
    """llama_model_loader's weight order: by layer number (-1 outside blk.N.), then by name."""
    m = re.match(r"blk\.(-?\d+)\.", name)
    return (int(m.group(1)) if m else -1, name.encode())


def _gqa_experts(md: dict):
    arch = md.get("general.architecture", "")

    def first(key, default):
        v = md.get(f"{arch}.{key}", default)
        try:
            return int(v[0]) if len(v) else default  # per-layer arrays: llama.cpp's n_gqa() looks at layer 0
        except TypeError:
            return int(v)
    n_head = first("attention.head_count", 0)
    n_kv = first("attention.head_count_kv", n_head)
    return (n_head // n_kv if n_head and n_kv else 0), first("expert_count", 0), first("block_count", 0)


def _fallback(t: GGMLType, ncols: int) -> GGMLType:
    bs = GGML_TYPE_INFO[t][0]
    if ncols % bs == 0:
        return t
    r = FALLBACK.get(t, t)
    if r == t and bs > 32:
        raise QuantizeError(f"no fallback type for {t.name} with rows of {ncols}")
    return r if ncols % GGML_TYPE_INFO[r][0] == 0 else T.F16


def llama_plan(tensors: dict, md: dict, recipe: str, pure: bool = False) -> dict:
    """{name: type} as llama-quantize chooses for the recipe; tensors: {name: (shape, source type)}."""
    ftype, default = RECIPES[recipe]
    n_gqa, n_expert, n_layer = _gqa_experts(md)
    if n_expert > 1 and ftype != 38:  # (mxfp4_moe's rule is made for experts)
        raise QuantizeError("the llama.cpp recipes are implemented for dense models only (this one has experts)")
    names = sorted(tensors, key=_layer_key)
    n_attn_v = sum(1 for n in names if any(k in n for k in ("attn_v.weight", "attn_qkv.weight", "attn_kv_b.weight")))
    tied = "output.weight" not in tensors
    i_attn_v = i_down = i_gate = i_up = 0

    def more_bits(i, n):
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    plan = {}
    for name in names:
        shape, stype = tensors[name]
        quantizable = (_n_dims(shape) >= 2 and name.endswith("weight") and not any(k in name for k in _KEEP)
                       and name not in ("position_embd.weight", "token_types.weight"))
        if not quantizable:
            plan[name] = stype
            continue
        nx = shape[-1]
        t = default
        is_out = name == "output.weight"
        is_embd = name in ("token_embd.weight", "per_layer_token_embd.weight")
        attn_v = not is_out and not is_embd and any(k in name for k in ("attn_qkv.weight", "attn_kv_b.weight",
                                                                        "attn_v.weight"))
        if not pure:
            if ftype == 38:  # MoE tensors (ne[2] > 1) MXFP4, the rest (output and embeddings included) Q8_0
                t = T.MXFP4 if not (is_out or (tied and is_embd)) and len(shape) >= 3 and shape[-3] > 1 else T.Q8_0
            elif is_out or (tied and is_embd):
                t = T.Q8_0 if nx % GGML_TYPE_INFO[t][0] else (T.Q6_K if t != T.Q8_0 else t)
            elif is_embd:
                pass
            elif attn_v:
                if ftype == 10:
                    t = T.Q4_K if n_gqa >= 4 else T.Q3_K
                elif ftype == 12:
                    t = T.Q5_K if i_attn_v < 2 else T.Q4_K
                elif ftype == 25 and n_gqa >= 4:
                    t = T.Q5_K
                elif ftype in (15, 17) and more_bits(i_attn_v, n_attn_v):
                    t = T.Q6_K
                elif ftype == 14 and i_attn_v < 4:
                    t = T.Q5_K
                i_attn_v += 1
            elif "attn_k.weight" in name or "attn_q.weight" in name:
                pass
            elif "attn_output.weight" in name:
                t = {10: T.Q3_K, 12: T.Q4_K}.get(ftype, t)
            elif "ffn_up" in name:
                i_up += 1
            elif "ffn_gate" in name:
                i_gate += 1
            elif "ffn_down" in name:
                i = i_down
                if ftype == 10:
                    t = T.Q3_K
                elif ftype == 12:
                    t = T.Q5_K if i < n_layer // 16 else T.Q4_K  # (Falcon aside: Q4_K everywhere else)
                elif ftype == 15:
                    if more_bits(i, n_layer):
                        t = T.Q6_K
                elif i < n_layer // 8 and ftype == 25:
                    t = T.Q5_K
                elif ftype == 17 and more_bits(i, n_layer):
                    t = T.Q6_K
                elif ftype == 14 and i < n_layer // 8:
                    t = T.Q5_K
                i_down += 1
        plan[name] = _fallback(t, nx)
    return plan


def _convert_rows(src: np.ndarray, stype: GGMLType, dtype_out: GGMLType, n: int, llama: bool = False,
                  where: tuple = ("?", 0)) -> np.ndarray:
    """Rows of one tensor (raw view, numpy-typed for float types) -> raw rows of dtype_out. where: (tensor name,
    index of the first row) for the errors: QuantizeError before anything is written when a source weight is NaN
    or inf, or when a written row does not dequantize to finite values (kernels.quantize's check, named here by
    tensor: a weight too large for the format: one of 6e5 overflows a Q4_0 block's fp16 scale; llama-quantize
    refuses those as 'quantized data validation failed')."""
    if stype in (GGMLType.F32, GGMLType.F16):
        f = np.asarray(src, dtype=np.float32)
    else:  # BF16 (uint16 view) and the block types: the kernels dequantize them
        f = kernels.dequantize(np.ascontiguousarray(src).view(np.uint8), int(stype), n)
    _check_source(f, *where)
    if dtype_out == GGMLType.F32:
        return np.ascontiguousarray(f, dtype=np.float32).view(np.uint8)
    try:  # llama-quantize's row quantizers (IQ4_NL: with its trial-scale search), or fastgguf's
        quantizer = kernels.quantize_as_llama_file if llama else kernels.quantize
        return quantizer(f, int(dtype_out))
    except QuantizeError as e:  # kernels.first_unfit_block's: named here by tensor and row in the file
        bad = getattr(e, "unfit", None)
        if bad is None:
            raise
        raise QuantizeError(f"tensor {where[0]!r}: {bad.message(where[1])}") from None


def _check_source(a: np.ndarray, name: str, r0: int) -> None:
    """QuantizeError naming the tensor, row and column of a NaN or inf among source rows a (rows r0.. of it)."""
    bad = _first_nonfinite(a)
    if bad:
        raise QuantizeError(f"tensor {name!r}: the weight at row {r0 + bad[0]}, column {bad[1]} is {a[bad]}: NaN and "
                            f"inf weights cannot be quantized (a broken source model)")


def _first_nonfinite(a: np.ndarray):
    """(row, column) of the first NaN or inf of a (rows, n) array, None if all are finite."""
    if np.isfinite(a).all():
        return None
    return tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])


def copy_metadata(f: GGUFFile, w: GGUFWriter, skip=("general.alignment",)) -> None:
    """Every metadata key of f but those in skip, into w, with its own value type (strings as their raw bytes)."""
    for key in f.metadata:
        if key in skip:
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
    """Write dst: src with its weights quantized to qtype (a llama.cpp recipe such as "q4_k_m", or "q4_0", "q4_1",
    "q8_0", or one of those three as a GGMLType). Returns {tensor name: GGMLType written}."""
    recipe = qtype.lower() if isinstance(qtype, str) and qtype.lower() in RECIPES else None
    qt = RECIPES[recipe][1] if recipe else _target(qtype)
    n_threads = usable_cpus() if n_threads is None else check_n_threads(n_threads)
    out_dir = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(out_dir):  # said before the work, not after it
        raise FileNotFoundError(errno.ENOENT, "the output's directory does not exist", out_dir)
    with GGUFFile(src) as f:
        for name, ti in f.tensors.items():
            if ti.type not in READABLE:
                raise QuantizeError(f"{src}: tensor {name!r} is {ti.type.name}; readable inputs are "
                                    f"{sorted(t.name for t in READABLE)}")
        w = GGUFWriter(alignment=f.alignment)
        copy_metadata(f, w, skip=("general.alignment", "general.file_type", "general.quantization_version"))
        w.add_uint32("general.file_type", RECIPES[recipe][0] if recipe else FILE_TYPES[qt])
        w.add_uint32("general.quantization_version", QUANTIZATION_VERSION)
        if recipe:
            llama = llama_plan({n: (tuple(ti.shape), GGMLType(ti.type)) for n, ti in f.tensors.items()},
                               f.metadata, recipe, pure)
        plan, jobs, outputs = {}, [], {}
        for name, ti in f.tensors.items():
            out_t = llama[name] if recipe else target_type(name, ti.shape, qt, pure)
            if ti.n_elements == 0:
                out_t = ti.type  # a tensor with a zero dimension has nothing to quantize: copied as it is
            plan[name] = out_t
            src_arr = f.tensor(name)
            n = ti.shape[-1] if ti.shape else 1
            rows = ti.n_elements // n if n else 0
            if out_t == ti.type:
                if ti.type in (GGMLType.F32, GGMLType.F16) and rows:  # norms and the like: checked as well
                    _check_source(src_arr.reshape(rows, -1), name, 0)
                outputs[name] = src_arr  # unchanged: copied byte for byte (a view into the mapping)
                continue
            src2 = src_arr.reshape(rows, -1)
            out = np.empty((rows, n // GGML_TYPE_INFO[out_t][0] * GGML_TYPE_INFO[out_t][1]), np.uint8)
            outputs[name] = out
            step = max(1, CHUNK_ELEMENTS // max(n, 1))
            for r0 in range(0, rows, step):
                jobs.append((name, src2, ti.type, out_t, n, r0, min(rows, r0 + step), out))
        bar = _Progress(sum(j[1][j[5]:j[6]].nbytes for j in jobs), progress)

        def run(job):
            name, s, stype, out_t, n, r0, r1, out = job
            out[r0:r1] = _convert_rows(s[r0:r1], stype, out_t, n, recipe is not None, (name, r0)).reshape(r1 - r0, -1)
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
            raise QuantizeError(f"unknown quantization type {qtype!r}; choose one of {ALL_TYPES}")
        return TARGETS[key]
    t = GGMLType(int(qtype))
    if t not in TARGETS.values():
        raise QuantizeError(f"cannot quantize to {t.name}; choose one of {sorted(TARGETS)}")
    return t


def quantized_variant(src, qtype, cache_dir=None) -> str:
    """Path of `src` quantized to qtype in cache_dir (default: next to src), made once.
    SmolLM2-135M-Instruct.Q4_1.gguf -> SmolLM2-135M-Instruct.Q8_0.gguf (or .Q4_K_M.gguf for the recipe q4_k_m)."""
    if isinstance(qtype, str) and qtype.lower() in RECIPES:
        qt, label = qtype.lower(), qtype.upper()
    else:
        qt = _target(qtype)
        label = qt.name
    src = os.fspath(src)
    cache_dir = os.path.dirname(os.path.abspath(src)) if cache_dir is None else os.fspath(cache_dir)
    stem = os.path.basename(src)
    stem = stem[:-5] if stem.endswith(".gguf") else stem
    stem = re.sub(r"[.-](I?Q\d_[0-9A-Z_]+|F16|BF16|F32)$", "", stem, flags=re.IGNORECASE)
    path = os.path.join(cache_dir, f"{stem}.{label}.gguf")
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
