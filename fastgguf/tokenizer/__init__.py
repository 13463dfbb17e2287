"""Tokenizers as llama.cpp runs them, built from a GGUF's vocabulary: the Tokenizer (core: special tokens,
detokenizing), the Vocab every algorithm shares (vocab), one module per algorithm (bpe: byte-level and
SentencePiece-style BPE, spm: SentencePiece, wpm: WordPiece, ugm: Unigram), BPE's pre-tokenizer regexes and the
Unicode classes they see (pretokenizer, unicode_classes), and the compiled merge loop (_bpe, with a Python reference
in merge)."""
from fastgguf.errors import TokenizerError
from fastgguf.tokenizer.core import StreamingDecoder, Tokenizer

__all__ = ["Tokenizer", "TokenizerError", "StreamingDecoder"]
