"""Architectures: base.py holds Arch (the llama layout), Hparams and the registry; each other module is one short
description that registers itself. Importing this package registers them all."""
from fastgguf.arch import bert, gemma, gemma4, gptoss, granite, granitehybrid, lfm2, lfm2moe, llama  # noqa: F401
from fastgguf.arch import olmoe, phi3, qwen, qwen35, smollm3  # noqa: F401
from fastgguf.arch.base import ARCHS, Arch, Hparams, get, register

__all__ = ["ARCHS", "Arch", "Hparams", "get", "register"]
