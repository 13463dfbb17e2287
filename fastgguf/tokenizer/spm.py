"""SentencePiece BPE (SPM, ``tokenizer.ggml.model`` "llama": Llama 2, TinyLlama, Mistral, Phi-3): llama.cpp
llm_tokenizer_spm.

Spaces become U+2581, a space is prefixed (``add_space_prefix``), symbols merge by score (highest first, leftmost
first), unknown characters fall back to ``<0xXX>`` byte tokens. The text is merged in chunks cut before each U+2581
that no token spans (the same ids as merging it whole, and a chunk's ids can be cached). Pieces turn U+2581 back
into spaces.
"""
import itertools
import re

from fastgguf.tokenizer.merge import merge_scored
from fastgguf.tokenizer.vocab import SPM_SPACE, Algorithm


def space_cut_regex(texts):
    """Regex cutting SPM text before each U+2581 that no token (of texts) spans: the characters c for which
    some text holds c + U+2581 must stay glued to what follows."""
    glue = set(re.findall(f"([^\x00])(?={SPM_SPACE})", "\x00".join(texts)))
    if not glue:
        return re.compile(f"(?={SPM_SPACE})")
    return re.compile(f"(?<![{''.join(re.escape(c) for c in sorted(glue))}])(?={SPM_SPACE})")


class SPM(Algorithm):
    kind = "SPM"
    scored = True
    special_defaults = dict(bos=1, eos=2, unk=0)
    add_bos = add_space_prefix = True

    def build(self, vocab, cache):
        self._vocab = vocab
        self.cut = space_cut_regex(vocab.texts)
        self._word_ids = cache(self.word)

    def encode(self, text, space_prefix):
        if space_prefix:
            text = " " + text
        return itertools.chain.from_iterable(map(self._word_ids, filter(None, self.cut.split(
            text.replace(" ", SPM_SPACE)))))

    def word(self, text):
        """ids of an escaped SPM text chunk (llm_tokenizer_spm_session::tokenize)."""
        vocab = self._vocab.ids
        unk = self._vocab.unk_id
        ids = []
        for s in merge_scored(list(text), vocab, self._vocab.scores):
            i = vocab.get(s)
            if i is not None:
                ids.append(i)
                continue
            for b in s.encode("utf-8", "surrogateescape"):            # byte fallback
                i = vocab.get(f"<0x{b:02X}>")
                if i is None:
                    i = vocab.get(chr(b)) if b < 0x80 else None
                if i is None:
                    i = unk
                if i is not None:
                    ids.append(i)
        return tuple(ids)
