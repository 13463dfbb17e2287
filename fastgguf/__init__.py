"""fastgguf: a fast CPU inference engine for GGUF language models."""

__version__ = "0.1.0"

from fastgguf.gguf import GGUFError, GGUFFile, GGUFWriter  # noqa: E402,F401
from fastgguf.model import Context, Model  # noqa: E402,F401
