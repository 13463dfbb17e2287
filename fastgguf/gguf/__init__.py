"""GGUF files: format facts (constants), the mmapped reader, the writer, and the quantizer (fastgguf.gguf.quantize,
imported on demand: it needs the native kernels)."""
from fastgguf.errors import GGUFError
from fastgguf.gguf.constants import (GGML_TYPE_INFO, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, REMOVED_TYPES, GGMLType,
                                     GGUFValueType, TensorInfo)
from fastgguf.gguf.reader import GGUFFile
from fastgguf.gguf.writer import GGUFWriter

__all__ = ["GGUFFile", "GGUFError", "GGUFWriter", "GGMLType", "GGUFValueType", "TensorInfo", "GGML_TYPE_INFO",
           "REMOVED_TYPES", "GGUF_MAGIC", "GGUF_DEFAULT_ALIGNMENT"]
