"""Tokenizers as llama.cpp runs them (byte-level BPE and SentencePiece), built from a GGUF's vocabulary: the
Tokenizer (fastgguf.tokenizer.core), its pre-tokenizer table and special-token rules, the Unicode classes the
pre-tokenizers see (unicode_classes), and the compiled merge loop (_bpe, with a Python reference in core)."""
from fastgguf.errors import TokenizerError
from fastgguf.tokenizer.core import StreamingDecoder, Tokenizer

__all__ = ["Tokenizer", "TokenizerError", "StreamingDecoder"]
