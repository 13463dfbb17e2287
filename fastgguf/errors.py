"""Every exception fastgguf raises on purpose derives from FastGGUFError, so `except fastgguf.FastGGUFError` catches
them all. Each also keeps the builtin base it had before (GGUFError is still a ValueError, HubError a
RuntimeError), so existing handlers keep working. Bad arguments to the API stay plain ValueError / TypeError.

The command line maps these to exit codes in one table: fastgguf.cli.EXIT_CODES."""

__all__ = ["FastGGUFError", "GGUFError", "TokenizerError", "ChatTemplateError", "QuantizeError", "HubError",
           "GrammarError", "ConvertError", "StateError", "QueueFull"]


class FastGGUFError(Exception):
    """Base of fastgguf's own errors."""


class GGUFError(FastGGUFError, ValueError):
    """A GGUF file is malformed or unsupported (or its model cannot be run), or a GGUFFile is used after close()."""


class TokenizerError(FastGGUFError, ValueError):
    """The vocabulary in a file is invalid or of an unsupported kind."""


class ChatTemplateError(FastGGUFError, ValueError):
    """The chat template is invalid, raised an exception, broke the sandbox's rules or exceeded its budgets."""


class QuantizeError(FastGGUFError, ValueError):
    """A model cannot be quantized as asked."""


class HubError(FastGGUFError, RuntimeError):
    """A model could not be downloaded or verified."""


class ConvertError(FastGGUFError, ValueError):
    """A source model (safetensors, its config or tokenizer files) cannot be converted to GGUF."""


class GrammarError(FastGGUFError, ValueError):
    """A JSON schema or grammar that structured output cannot enforce exactly (the message is llguidance's)."""


class StateError(FastGGUFError, ValueError):
    """A saved Context state cannot be loaded: not a state file, another format version, damaged or truncated, or
    for another model or cache shape (the message names the field that differs)."""


class QueueFull(RuntimeError):
    """The engine's queue (or the grammar compiler's) is full; retry after `retry_after` seconds (HTTP 429)."""

    def __init__(self, message, retry_after=1):
        super().__init__(message)
        self.retry_after = retry_after
