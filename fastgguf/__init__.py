"""fastgguf: a fast CPU inference engine for GGUF language models. This module is the public API only."""

__version__ = "0.2.0.dev0"

from fastgguf import kernels  # noqa: E402,F401  (first: a bad FASTGGUF_ISA fails the import here)
from fastgguf.engine.generate import GenerationResult, GenerationStream  # noqa: E402,F401
from fastgguf.engine.model import Context  # noqa: E402,F401
from fastgguf.engine.params import SamplingParams  # noqa: E402,F401
from fastgguf.errors import (ChatTemplateError, ConvertError, FastGGUFError, GGUFError, GrammarError,  # noqa: E402,F401
                             HubError, QuantizeError, StateError, TokenizerError)
from fastgguf.gguf import GGUFFile, GGUFWriter  # noqa: E402,F401
from fastgguf.api.openai.client import Model  # noqa: E402,F401  (engine's Model + the OpenAI-style create_* methods)
from fastgguf.tokenizer import Tokenizer  # noqa: E402,F401

__all__ = ["Model", "Context", "Tokenizer", "GGUFFile", "GGUFWriter", "SamplingParams", "GenerationResult",
           "GenerationStream", "kernels", "FastGGUFError", "GGUFError", "TokenizerError", "ChatTemplateError",
           "QuantizeError", "HubError", "GrammarError", "ConvertError", "StateError", "__version__"]
