"""Byte-level BPE (``tokenizer.ggml.model`` "gpt2": GPT-2, Llama 3, Qwen2, SmolLM, DeepSeek, Falcon, StarCoder,
...) and SentencePiece-style BPE ("gemma4", and the pre types marked spm_style): llama.cpp llm_tokenizer_bpe.

The text is cut into words by the pre-tokenizer regexes that ``tokenizer.ggml.pre`` selects (pretokenizer.py), each
word is byte-encoded through the GPT-2 byte<->unicode table and merged by rank (lowest rank first, leftmost
first); pieces map back through the byte table. SentencePiece-style: raw UTF-8 with U+2581 for spaces, words also
cut where no merge spans a U+2581, ``<0xXX>`` byte fallback.
"""
import itertools

from fastgguf.errors import TokenizerError
from fastgguf.tokenizer.merge import merge_ranked
from fastgguf.tokenizer.pretokenizer import compiled_pre, pre_split
from fastgguf.tokenizer.spm import space_cut_regex
from fastgguf.tokenizer.vocab import SPM_SPACE, Algorithm, spaced_piece


# ---------------------------------------------------------------------------------------------------------------
# GPT-2 byte <-> unicode table
# ---------------------------------------------------------------------------------------------------------------

def _gpt2_byte_table():
    """Byte b -> the printable character GPT-2 uses for it."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


_BYTE_TO_CHAR = _gpt2_byte_table()                                  # {byte: char}
_CHAR_TO_BYTE = {c: b for b, c in _BYTE_TO_CHAR.items()}           # {char: byte}
_BYTE_ENCODE = {b: c for b, c in _BYTE_TO_CHAR.items()}            # str.translate table over latin-1 text
_BYTE_DECODE = {ord(c): b for b, c in _BYTE_TO_CHAR.items()}       # str.translate table back to latin-1 text


def _byte_encode(word):
    """UTF-8 bytes of word, each written as its GPT-2 character."""
    return word.encode("utf-8", "surrogateescape").decode("latin-1").translate(_BYTE_ENCODE)


def _byte_decode(text):
    """Inverse of _byte_encode; characters outside the table stand for their own UTF-8 bytes (llama.cpp renders
    them as "[UNK_BYTE_0x...]" text instead: some Command-R tokens hold such characters)."""
    try:
        return text.translate(_BYTE_DECODE).encode("latin-1")
    except UnicodeEncodeError:
        pass
    out = bytearray()
    for c in text:
        b = _CHAR_TO_BYTE.get(c)
        if b is None:
            out += c.encode("utf-8", "surrogateescape")
        else:
            out.append(b)
    return bytes(out)


# ---------------------------------------------------------------------------------------------------------------
# Pre-tokenizer types (llama.cpp LLAMA_VOCAB_PRE_TYPE; the regex lists are pretokenizer.py's)
# ---------------------------------------------------------------------------------------------------------------

# tokenizer.ggml.pre -> (regex list, settings). Settings: ignore_merges (a word that is itself a token is not
# merged), add_bos (default when the metadata has no add_bos_token), no_bos (no default BOS id), spm_style
# (raw UTF-8 with U+2581 for spaces and <0xXX> byte tokens, as Gemma 4), force_bos (a BOS whatever add_bos_token
# says), newline_runs (a run of newlines that is a token is not merged).
_PRE_TYPES = {}


def _pre(names, regexes, **settings):
    for name in names.split():
        _PRE_TYPES[name] = (regexes, settings)


_pre("default", "default")
_pre("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano", "llama3",
     ignore_merges=True, add_bos=True)
_pre("dbrx smaug-bpe", "llama3")
_pre("deepseek-llm", "deepseek-llm")
_pre("deepseek-coder", "deepseek-coder")
_pre("deepseek-v3 hunyuan-dense hy_v4 joyai-llm", "deepseek3")
_pre("spark2_5", "spark2_5")
_pre("youtu", "youtu", ignore_merges=True)
_pre("falcon", "falcon")
_pre("mpt olmo jais trillion granite-docling exaone4 gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de "
     "a.x-4.0 mellum modern-bert jina-v1-en jina-v2-code roberta-bpe", "gpt2")
_pre("jais-2", "jais2")
_pre("starcoder refact command-r smollm codeshell exaone minerva-7b mellum2", "starcoder")
_pre("qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2", "qwen2")
_pre("qwen35", "qwen35")
_pre("poro-chat bloom gpt3-finnish", "bloom")
_pre("chatglm-bpe", "chatglm4", no_bos=True)
_pre("glm4 glm5", "chatglm4", no_bos=True, ignore_merges=True)
_pre("viking", "viking")
_pre("tekken", "tekken", ignore_merges=True, add_bos=True)
_pre("chameleon", "chameleon", add_bos=True)
_pre("gpt-4o llama4 kanana2 talkie minimax-m2", "gpt4o")
_pre("granite-embed-multi-97m", "granite-emb-multi", ignore_merges=True)
_pre("bailingmoe bailingmoe2 llada-moe", "bailingmoe")
_pre("seed-coder", "seed-coder")
_pre("ufakzeka", "ufakzeka")
_pre("laguna", "laguna")
_pre("exaone-moe", "exaone-moe")
_pre("minicpm5", "minicpm5", ignore_merges=True)
_pre("gemma4 granite-embed-multi-311m", "newlines", spm_style=True, add_bos=True, force_bos=True, newline_runs=True)
_pre("sarvam-moe", "newlines", spm_style=True)


class BPE(Algorithm):
    def __init__(self, md):
        super().__init__(md)
        pre = md.get("tokenizer.ggml.pre")
        self.kind = f"BPE pre={pre!r}"
        if md.get("tokenizer.ggml.model") == "gemma4":
            pre = "gemma4"
            bos = eos = None
        else:
            bos = eos = 11
            if pre is None:
                pre = "default"
        if pre not in _PRE_TYPES:
            raise TokenizerError(f"unknown pre-tokenizer type: tokenizer.ggml.pre = {pre!r}")
        regex_key, settings = _PRE_TYPES[pre]
        self._regexes = compiled_pre(regex_key)
        self.add_bos = bool(settings.get("add_bos", False))
        self.force_bos = bool(settings.get("force_bos"))
        self.special_defaults = dict(bos=None if settings.get("no_bos") else bos, eos=eos, unk=None)
        self._spm_style = bool(settings.get("spm_style"))
        self._ignore_merges = bool(settings.get("ignore_merges"))
        self._newline_runs = bool(settings.get("newline_runs"))
        merges = md.get("tokenizer.ggml.merges")
        if merges is None:
            raise TokenizerError("BPE vocabulary without tokenizer.ggml.merges")
        # rank of "left right" (first occurrence wins). Symbols never hold a plain space (byte-encoded, or
        # spaces escaped as U+2581), so looking up left + " " + right is llama.cpp's split at the first space.
        self.ranks = dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))
        if self._spm_style:
            self.cut = space_cut_regex([m.replace(" ", "", 1) for m in merges])

    def build(self, vocab, cache):
        self._ids = vocab.ids
        self._word_ids = cache(self.word)

    def encode(self, text, space_prefix):
        """Ids of the words pre_split cuts text into (no space prefix: llama.cpp's BPE adds none)."""
        word_ids = self._word_ids
        if self._spm_style:                      # SPM-style: words are whole lines, cut them where no merge spans
            cut = self.cut.split
            return [i for word in pre_split(text.replace(" ", SPM_SPACE), self._regexes)
                    for chunk in cut(word) if chunk for i in word_ids(chunk)]
        return itertools.chain.from_iterable(map(word_ids, pre_split(text, self._regexes)))

    def word(self, word):
        """ids of one pre-tokenized word (llm_tokenizer_bpe_session::tokenize)."""
        vocab = self._ids
        if not self._spm_style:
            word = _byte_encode(word)
        if self._ignore_merges:
            i = vocab.get(word)
            if i is not None:
                return (i,)
        elif self._newline_runs and word.strip("\n") == "":      # gemma4: a run of newlines as one token
            i = vocab.get(word)
            if i is not None:
                return (i,)
        syms = merge_ranked(list(word), self.ranks)
        ids = []
        for s in syms:
            i = vocab.get(s)
            if i is not None:
                ids.append(i)
            elif not self._spm_style:
                for c in s:                      # llama.cpp looks up each UTF-8 byte on its own: ASCII only
                    i = vocab.get(c) if c < "\x80" else None
                    if i is not None:
                        ids.append(i)
            else:
                for b in s.encode("utf-8", "surrogateescape"):
                    i = vocab.get(f"<0x{b:02X}>")
                    if i is not None:
                        ids.append(i)
        return tuple(ids)

    def piece(self, text):
        return spaced_piece(text) if self._spm_style else _byte_decode(text)
