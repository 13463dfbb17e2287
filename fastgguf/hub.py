"""Default model download (placeholder; full implementation follows)."""
import os

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> str:
    return os.environ.get("FASTGGUF_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "fastgguf")


def default_model_path(download: bool = True) -> str:
    return os.path.join(cache_dir(), DEFAULT_MODEL_FILE)
