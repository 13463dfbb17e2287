"""Tokenizers built from GGUF ``tokenizer.*`` metadata, giving exactly llama.cpp's token ids.

Supported vocabularies (``tokenizer.ggml.model``):

- ``gpt2``: byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM, DeepSeek, Falcon, StarCoder, ...). The text is cut into
  words by the pre-tokenizer regexes that ``tokenizer.ggml.pre`` selects, each word is byte-encoded through the
  GPT-2 byte<->unicode table and merged by rank (lowest rank first, leftmost first).
- ``llama``: SentencePiece BPE (Llama 2, TinyLlama, Mistral, Phi-3): spaces become U+2581, a space is prefixed
  (``add_space_prefix``), symbols merge by score (highest first, leftmost first), unknown characters fall back
  to ``<0xXX>`` byte tokens.
- ``gemma4``: SentencePiece-style BPE on raw UTF-8 (U+2581 for spaces, ``<0xXX>`` byte fallback).
- ``bert``: WordPiece (WPM; BERT, bge, MiniLM). llama.cpp's normalizer (its own NFD-first-code-point and lowercase
  tables, accent marks and \\p{C} dropped, punctuation, ASCII symbols and CJK ideographs as words of their own),
  then greedy longest match over U+2581 + word; a word with an unmatched position is one [UNK].
  ``tokenize(add_special=True)`` gives [CLS] ... [SEP] (llama.cpp adds both whatever add_bos/add_sep say).
- ``t5``: Unigram (UGM; T5, XLM-R, bge-m3, nomic-embed-v2). The precompiled charsmap (SentencePiece's XCDA,
  tokenizer.ggml.precompiled_charsmap) normalizes, spaces become U+2581 (one before the text with
  add_space_prefix; with remove_extra_whitespaces one before every word and runs dropped; llama.cpp has no key for
  treat_whitespace_as_suffix, so it is off), then a Viterbi over the token scores picks the best sum, unknown code
  points costing the lowest score - 10 as [UNK]. Defaults: EOS </s>=1 added, no BOS, unless the metadata says.

Other types (rwkv, plamo2, ...) raise :class:`TokenizerError` at construction.

Facts (regexes, defaults, special-token rules) follow llama.cpp's src/llama-vocab.cpp and src/unicode.cpp:

- Pre-tokenizer regexes run in sequence; each one splits every piece from the previous one into its matches and
  the text between them. As in llama.cpp, a code point outside ASCII is seen by the regex only through its
  class (letter, number, punctuation, mark, symbol, whitespace, other: Unicode 15.1, see _unicode_classes.py),
  so the results do not depend on the Python or ``regex`` Unicode version.
- Special tokens (CONTROL / USER_DEFINED / UNKNOWN types) are cut out of the text before tokenization, longest
  first. With ``parse_special=False`` only USER_DEFINED tokens are recognised (llama.cpp and HF do the same).
- ``eog_ids``: as llama.cpp collects them: EOS, EOT, EOM, FIM pad/repo/sep, and every token whose text is one of
  <|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, </s>, <|return|>, ... (with llama.cpp's
  exceptions for gpt-oss' <|end|> and Gemma 4's </s>).
- ``token_to_piece(id, special=False)``: llama_token_to_piece: CONTROL and UNKNOWN tokens give b"" unless
  ``special``; USER_DEFINED tokens give their text; BPE pieces map back through the GPT-2 byte table; SPM pieces
  turn U+2581 into spaces and <0xXX> into the byte.
- ``detokenize(ids, skip_special=True)`` (alias ``decode``): the concatenated pieces (``special = not skip_special``) decoded as UTF-8
  with replacement characters. When the vocabulary adds a space prefix (SPM), the leading space of the first
  rendered piece is dropped, also after a BOS, so ``detokenize(tokenize(s)) == s`` (llama_detokenize keeps it after a
  BOS). The same for WPM, whose every word starts with U+2581, and UGM with remove_extra_whitespaces. llama.cpp's
  "clean spaces" pass is not applied.
- ``streaming_decoder()``: ``feed(id)`` returns only complete UTF-8 characters (bytes of a split character wait for
  the next tokens); nothing is stripped, so the stream of a generation is exactly its pieces.
"""
from __future__ import annotations

import bisect
import codecs
import functools
import itertools
import re

import numpy as np

from fastgguf.errors import TokenizerError
from fastgguf.tokenizer import unicode_classes as _unicode_classes
from fastgguf.tokenizer.merge import merge_ranked, merge_scored
from fastgguf.tokenizer.pretokenizer import char_class, compiled_pre, pre_split
from fastgguf.tokenizer.vocab import (ATTR_BYTE, ATTR_CONTROL, ATTR_LSTRIP, ATTR_NORMAL, ATTR_RSTRIP, ATTR_UNKNOWN,
                                      ATTR_UNUSED, ATTR_USER_DEFINED, SPM_SPACE, Vocab, md_bool, short_repr)

__all__ = ["Tokenizer", "TokenizerError", "StreamingDecoder"]


_ASCII_SPACE = " \t\n\v\f\r"          # C isspace(): what llama.cpp strips around LSTRIP/RSTRIP special tokens
_SPM_SPACE = SPM_SPACE

_UNSUPPORTED_MODELS = {"rwkv": "RWKV",
                       "plamo2": "PLaMo-2", "no_vocab": "no vocabulary", "none": "no vocabulary",
                       "hybriddna": "hybrid DNA BPE", "whitespace": "whitespace BPE", "test": "test"}


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
# (raw UTF-8 with U+2581 for spaces and <0xXX> byte tokens, as Gemma 4).
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


# ---------------------------------------------------------------------------------------------------------------
# WordPiece (WPM, tokenizer.ggml.model "bert"): llama.cpp llm_tokenizer_wpm_session
# ---------------------------------------------------------------------------------------------------------------
# llama.cpp's BERT normalizer works per code point with its own Unicode tables (not Python's unicodedata, whose
# version follows the interpreter): its "NFD" keeps only the first code point of a decomposition, its lowercase
# maps one code point to one. unicode_classes.py holds those tables, generated from the same unicode-data.cpp.

def _load_pair_runs(text):
    """unicode_classes "<first>:<count>:<step>:<value>:<value step>" runs -> {code point: code point}."""
    out = {}
    for run in text.split():
        first, count, step, value, vstep = (int(x, 16) for x in run.split(":"))
        for k in range(count):
            out[first + k * step] = value + k * vstep
    return out


@functools.lru_cache(maxsize=None)
def _wpm_unicode():
    """(lowercase map, NFD map, sorted CONTROL run starts, their ends), built on first use of a WPM vocabulary."""
    starts, ends = [], []
    for run in _unicode_classes.CONTROL.split():
        a, b = run.split("-")
        starts.append(int(a, 16))
        ends.append(int(b, 16))
    return _load_pair_runs(_unicode_classes.LOWER), _load_pair_runs(_unicode_classes.NFD), starts, ends


def _wpm_is_chinese(cp):
    """llm_tokenizer_wpm_session::is_chinese_char (with llama.cpp's 0x2B920 lower bound, as HF's Rust code)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B920 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class _WpmTable(dict):
    """str.translate table doing llm_tokenizer_wpm_session::preprocess per code point: whitespace -> " ",
    dropped code points (NUL, U+FFFD, \\p{C}, and \\p{M} when stripping accents) -> "", punctuation, ASCII
    symbols and CJK ideographs -> " c " (a word of their own), anything else -> itself (lowercased).
    The text is then cut at spaces."""

    def __init__(self, lowercase, strip_accents):
        super().__init__()
        self._lower, self._strip = lowercase, strip_accents

    def __missing__(self, cp):
        lower, nfd, cstarts, cends = _wpm_unicode()
        c = nfd.get(cp, cp) if self._strip else cp      # flags are those of the normalized code point
        cls = char_class(c)
        k = bisect.bisect_right(cstarts, c) - 1
        if cls == "W":
            v = " "
        elif c == 0 or c == 0xFFFD or (k >= 0 and c <= cends[k]) or (self._strip and cls == "M"):
            v = ""
        else:
            v = chr(lower.get(c, c) if self._lower else c)
            if cls == "P" or (c < 0x7F and cls == "S") or _wpm_is_chinese(c):
                v = " " + v + " "
        self[cp] = v
        return v


@functools.lru_cache(maxsize=None)
def _wpm_table(lowercase, strip_accents):
    return _WpmTable(lowercase, strip_accents)


# ---------------------------------------------------------------------------------------------------------------
# Unigram (UGM, tokenizer.ggml.model "t5"): llama.cpp llm_tokenizer_ugm
# ---------------------------------------------------------------------------------------------------------------

class _Charsmap:
    """SentencePiece's precompiled_charsmap (tokenizer.ggml.precompiled_charsmap), read as llama.cpp does:
    uint32 size of an XOR-compressed compact double array (XCDA, little-endian uint32 entries), the array, then
    NUL-terminated replacement strings. longest(data, pos) walks the XCDA over the UTF-8 bytes of data from pos
    and gives (matched length, replacement bytes) of the longest prefix it holds, or (0, None)."""

    def __init__(self, blob):
        if len(blob) < 4:
            raise TokenizerError("tokenizer.ggml.precompiled_charsmap too small for its xcda_blob_size header")
        size = int.from_bytes(blob[:4], "little")
        if size + 4 >= len(blob):
            raise TokenizerError("tokenizer.ggml.precompiled_charsmap: XCDA size past the end of the blob")
        self._xcda = np.frombuffer(blob, "<u4", size // 4, 4).tolist()
        self._repl = blob[4 + size:]
        self._root = self._base(0)
        self._starts = {}                  # first byte -> can a match start with it (most bytes: no)

    def _node(self, i):
        if i >= len(self._xcda):
            raise TokenizerError("precompiled_charsmap: index out of the XCDA array")
        return self._xcda[i]

    def _base(self, i):
        p = self._node(i)
        return (p >> 10) << ((p & (1 << 9)) >> 6)

    def can_start(self, c):
        ok = self._starts.get(c)
        if ok is None:
            ok = self._starts[c] = c != 0 and self._node(self._root ^ c) & 0x800000ff == c
        return ok

    def longest(self, data, pos):
        node, best, best_off = self._root, 0, 0
        for p in range(pos, len(data)):
            c = data[p]
            if c == 0:
                break
            node ^= c
            packed = self._node(node)
            if packed & 0x800000ff != c:          # LCHECK: not a child of the previous node
                break
            leaf = (packed >> 8) & 1
            node ^= self._base(node)
            if leaf:                              # BASE points at the node holding the replacement's offset
                best, best_off = p - pos + 1, self._node(node) & 0x7fffffff
        if not best:
            return 0, None
        if best_off >= len(self._repl):
            raise TokenizerError("precompiled_charsmap: replacement offset past the end")
        end = self._repl.find(b"\0", best_off)
        if end < 0:
            raise TokenizerError("precompiled_charsmap: unterminated replacement string")
        return best, self._repl[best_off:end]


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------------------------

def _space_cut_regex(texts):
    """Regex cutting SPM text before each U+2581 that no token (of texts) spans: the characters c for which
    some text holds c + U+2581 must stay glued to what follows."""
    glue = set(re.findall(f"([^\x00])(?={_SPM_SPACE})", "\x00".join(texts)))
    if not glue:
        return re.compile(f"(?={_SPM_SPACE})")
    return re.compile(f"(?<![{''.join(re.escape(c) for c in sorted(glue))}])(?={_SPM_SPACE})")


class Tokenizer:
    """Tokenizer of a GGUF model: ``Tokenizer(path)`` or ``Tokenizer.from_metadata(metadata)``."""

    # the per-word ids cache: bounded by bytes (estimated), and words longer than this are never cached
    WORD_CACHE_BYTES = 16 << 20
    WORD_CACHE_MAX_CHARS = 256

    def __init__(self, path=None, *, _metadata=None):
        if _metadata is None:
            if path is None:
                raise TypeError("Tokenizer() needs a GGUF path (or use Tokenizer.from_metadata)")
            from fastgguf.gguf import GGUFFile
            with GGUFFile(path) as f:
                md = f.metadata
                keys = [k for k in md if k.startswith("tokenizer.") or k in ("general.name",
                                                                                "general.architecture")]
                self._load({k: md[k] for k in keys})
        else:
            self._load(_metadata)

    @classmethod
    def from_metadata(cls, metadata):
        """Build from a GGUF metadata dict (string arrays as list[str], numeric arrays as sequences/arrays)."""
        return cls(_metadata=metadata)

    # -- loading ------------------------------------------------------------------------------------------------

    def _load(self, md):
        # a GGUF file may hold any value type under any key: a wrong one is a TokenizerError, not a crash later
        for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
            v = md.get(key)
            if v is not None and not isinstance(v, str):
                raise TokenizerError(f"metadata {key} should be a string, got {type(v).__name__} {short_repr(v)}")
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            v = md.get(key)
            if v is not None and (not isinstance(v, (list, tuple)) or not all(isinstance(t, str) for t in v)):
                raise TokenizerError(f"metadata {key} should be an array of strings, got {type(v).__name__} "
                                     f"{short_repr(v)}")
        for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            v = md.get(key)
            if v is not None and not (isinstance(v, np.ndarray) and v.dtype.kind in "biuf" or isinstance(
                    v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v)):
                raise TokenizerError(f"metadata {key} should be a numeric array, got {type(v).__name__} "
                                     f"{short_repr(v)}")
        model = md.get("tokenizer.ggml.model")
        if model is None:
            raise TokenizerError("metadata has no tokenizer.ggml.model")
        if model in _UNSUPPORTED_MODELS:
            raise TokenizerError(f"unsupported tokenizer type: tokenizer.ggml.model = {model!r} "
                                 f"({_UNSUPPORTED_MODELS[model]}); supported: 'gpt2' (BPE), 'llama' (SPM), 'gemma4', "
                                 f"'bert' (WPM), 't5' (UGM)")
        if model not in ("gpt2", "llama", "gemma4", "bert", "t5"):
            raise TokenizerError(f"unknown tokenizer type: tokenizer.ggml.model = {model!r}")
        tokens = md.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise TokenizerError("metadata has no tokenizer.ggml.tokens")
        tokens = list(tokens)
        n = len(tokens)
        if n == 0:
            raise TokenizerError("tokenizer.ggml.tokens is empty")
        self.model = model
        self.spm = model == "llama"
        self.wpm = model == "bert"
        self.ugm = model == "t5"
        pre = md.get("tokenizer.ggml.pre")
        self.pre = pre

        # defaults per type (llama_vocab::impl::load)
        settings, merges, defaults = {}, None, {}
        self.add_sep = pre in ("jina-v1-en", "jina-v2-code", "roberta-bpe")
        if self.spm:
            bos, eos, unk = 1, 2, 0
            self.add_bos, self.add_eos, self.add_space_prefix = True, False, True
            self._escape_spaces, self._byte_encode = True, False
        elif self.wpm:
            bos, eos, unk = 101, None, 100
            defaults = dict(sep=102, pad=0, mask=103)
            self.add_bos, self.add_eos, self.add_space_prefix, self.add_sep = True, False, False, True
            self._escape_spaces, self._byte_encode = False, False
            lowercase = md_bool(md, "tokenizer.ggml.normalizer.lowercase")
            lowercase = True if lowercase is None else lowercase
            strip = md_bool(md, "tokenizer.ggml.normalizer.strip_accents")
            self._wpm_table = _wpm_table(lowercase, lowercase if strip is None else strip)
        elif self.ugm:
            bos, eos, unk = None, 1, 2
            defaults = dict(pad=0)
            self.add_bos, self.add_eos, self.add_space_prefix = False, True, False
            self._escape_spaces, self._byte_encode = False, False
            cm = md.get("tokenizer.ggml.precompiled_charsmap")
            if cm is not None:
                if isinstance(cm, np.ndarray) and cm.dtype.kind in "iu" and cm.dtype.itemsize == 1:
                    cm = cm.tobytes()
                elif isinstance(cm, (list, tuple)) and all(type(x) is int and -128 <= x < 256 for x in cm):
                    cm = bytes(x & 0xFF for x in cm)
                elif not isinstance(cm, (bytes, bytearray)):
                    raise TokenizerError("metadata tokenizer.ggml.precompiled_charsmap should be an int8/uint8 array")
                cm = _Charsmap(bytes(cm)) if len(cm) else None
            self._charsmap = cm
            v = md_bool(md, "tokenizer.ggml.remove_extra_whitespaces")
            self._merge_spaces = bool(v)
        else:
            if model == "gemma4":
                pre = "gemma4"
                bos = eos = unk = None
            else:
                bos, eos, unk = 11, 11, None
                if pre is None:
                    pre = "default"
            if pre not in _PRE_TYPES:
                raise TokenizerError(f"unknown pre-tokenizer type: tokenizer.ggml.pre = {pre!r}")
            regex_key, settings = _PRE_TYPES[pre]
            self._pre_regexes = compiled_pre(regex_key)
            self.add_bos = bool(settings.get("add_bos", False))
            self.add_eos = False
            self.add_space_prefix = False
            spm_style = bool(settings.get("spm_style"))
            self._escape_spaces, self._byte_encode = spm_style, not spm_style
            if settings.get("no_bos"):
                bos = None
            merges = md.get("tokenizer.ggml.merges")
            if merges is None:
                raise TokenizerError("BPE vocabulary without tokenizer.ggml.merges")
            # rank of "left right" (first occurrence wins). Symbols never hold a plain space (byte-encoded, or
            # spaces escaped as U+2581), so looking up left + " " + right is llama.cpp's split at the first space.
            self._ranks = dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))
        self._ignore_merges = bool(settings.get("ignore_merges"))
        self._newline_runs = bool(settings.get("newline_runs"))
        v = md_bool(md, "tokenizer.ggml.add_space_prefix")
        if v is not None:
            self.add_space_prefix = v

        # vocabulary
        vocab = Vocab(tokens, md, scored=self.spm or self.ugm)
        texts, scores, attrs = vocab.texts, vocab.scores, vocab.attrs
        self._texts, self._vocab, self._scores, self._attrs = texts, vocab.ids, scores, attrs
        self._max_token_chars = vocab.max_token_chars
        if self.ugm:                              # llama.cpp builds its token tries before the attribute fixes
            self._ugm_tables(texts, scores, attrs)
        vocab.find_specials(md, dict(bos=bos, eos=eos, unk=unk, **defaults))
        special = vocab.special_ids

        v = md_bool(md, "tokenizer.ggml.add_bos_token")
        if v is not None:
            self.add_bos = v
        v = md_bool(md, "tokenizer.ggml.add_eos_token")
        if v is not None:
            self.add_eos = v
        v = md_bool(md, "tokenizer.ggml.add_sep_token")
        if v is not None:
            self.add_sep = v      # read by whoever joins two texts (rerank); tokenize() itself does not use it
        if settings.get("force_bos"):
            self.add_bos = True

        special_ids = np.flatnonzero(np.asarray(attrs) & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)).tolist()

        # special tokens cut out of the text, longest first
        self._special_all = sorted(special_ids, key=lambda i: (-len(texts[i].encode("utf-8", "surrogateescape")),
                                                                i))
        self._special_user = [i for i in self._special_all if not attrs[i] & (ATTR_CONTROL | ATTR_UNKNOWN)]

        ct = md.get("tokenizer.chat_template")
        self.chat_template = ct if isinstance(ct, str) else None     # a non-string template counts as none
        self.n_vocab = n
        self.special_ids = special                # {"bos", "eos", "eot", "eom", "unk", "sep", "pad", "mask", "fim_*"}
        self.eog_ids = vocab.eog_ids
        self.bos_id = special["bos"]
        self.eos_id = special["eos"]
        self.eot_id = special["eot"]
        self.unk_id = special["unk"]
        self.pad_id = special["pad"]
        self.sep_id = special["sep"]
        if self.wpm and (self.bos_id is None or self.sep_id is None):
            raise TokenizerError("a WPM (bert) vocabulary needs a [CLS] (BOS) and a [SEP] token id")
        if self.add_bos and self.bos_id is None:
            raise TokenizerError("tokenizer.ggml.add_bos_token is true, but there is no BOS token id")
        if self.add_eos and self.eos_id is None:
            raise TokenizerError("tokenizer.ggml.add_eos_token is true, but there is no EOS token id")

        # pieces for decoding: (bytes without specials, bytes with specials), made on first use
        self._pieces = [None] * n
        if self.spm or self._escape_spaces:
            self._spm_cut = _space_cut_regex(texts if self.spm else [m.replace(" ", "", 1) for m in merges])
        # the leading space detokenize drops: the one the tokenizer itself put before the first word
        self._strip_lead = self.add_space_prefix or self.wpm or (self.ugm and self._merge_spaces)
        if self.wpm:
            self._word_ids = self._bounded_word_cache(self._wpm_word)
        elif not self.ugm:                        # UGM runs its Viterbi over a whole fragment: no words to cache
            self._word_ids = self._bounded_word_cache(self._spm_chunk if self.spm else self._bpe_word)

    def _bounded_word_cache(self, fn):
        """fn (word -> tuple of ids) with a cache of at most WORD_CACHE_BYTES (estimated: key, value, entry),
        emptied when full; words over WORD_CACHE_MAX_CHARS are computed each time, not kept for the model's life."""
        import sys
        cache = self._word_cache = {}
        self._word_cache_bytes = 0
        budget, max_chars, getsizeof = self.WORD_CACHE_BYTES, self.WORD_CACHE_MAX_CHARS, sys.getsizeof

        def word_ids(word):
            ids = cache.get(word)
            if ids is None:
                ids = fn(word)
                if len(word) <= max_chars:
                    cost = getsizeof(word) + getsizeof(ids) + 100
                    if self._word_cache_bytes + cost > budget:
                        cache.clear()
                        self._word_cache_bytes = 0
                    cache[word] = ids
                    self._word_cache_bytes += cost
            return ids
        return word_ids

    def _piece(self, i):
        """(piece rendered without specials, piece rendered with specials): llama.cpp token_to_piece."""
        p = self._pieces[i]
        if p is None:
            p = self._pieces[i] = self._make_piece(i)
        return p

    def _make_piece(self, i):
        attr, text = self._attrs[i], self._texts[i]
        raw = text.encode("utf-8", "surrogateescape")
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL):
            return (b"", raw)
        if attr & ATTR_USER_DEFINED:
            return (raw, raw)
        if attr & ATTR_NORMAL:
            if self.spm or self.wpm or self.ugm or self._escape_spaces:
                p = text.replace(_SPM_SPACE, " ").encode("utf-8", "surrogateescape")
            else:
                p = _byte_decode(text)
            return (p, p)
        if attr & ATTR_BYTE:
            try:
                b = bytes([int(text[3:5], 16)])
            except ValueError:
                b = b""
            return (b, b)
        return (b"", b"")

    # -- encoding -----------------------------------------------------------------------------------------------

    def tokenize(self, text, add_special=True, parse_special=False):
        """Token ids of text. add_special: add BOS/EOS as the model wants (tokenizer.ggml.add_bos_token/...);
        parse_special: recognise control tokens such as <|im_start|> written in the text."""
        return self._tokenize(text, add_special, parse_special, self.add_space_prefix)

    def tokenize_raw(self, text):
        """Ids whose pieces are exactly text's UTF-8 bytes: no BOS/EOS, no SentencePiece space prefix, control
        tokens not parsed (WPM and UGM normalize the text, so for them the pieces can differ from it). For
        constrained decoding (engine.grammar): a piece of output tokenized on its own must not grow a leading space.
        The shared tokenizer's add_space_prefix is left alone."""
        return self._tokenize(text, False, False, False)

    def _tokenize(self, text, add_special, parse_special, space_prefix):
        if not isinstance(text, str):
            raise TypeError(f"tokenize() needs a str, got {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:                # lone surrogates: llama.cpp sees invalid UTF-8 -> U+FFFD
            text = re.sub("[\ud800-\udfff]", "\ufffd", text)
        out = []
        frags = self._partition(text, parse_special) if text else []
        if self.wpm:                             # llama.cpp: [CLS] and [SEP] whatever add_bos/add_sep say
            if add_special:
                out.append(self.bos_id)
            for f in frags:
                if type(f) is str:
                    self._encode_wpm(f, out)
                else:
                    out.append(f)
            if add_special:
                out.append(self.sep_id)
            return out
        if add_special and self.add_bos:
            out.append(self.bos_id)
        if self.ugm:
            for f in frags:
                if type(f) is str:
                    self._encode_ugm(f, out, space_prefix)
                else:
                    out.append(f)
        elif self.spm:
            prev_special = True
            for f in frags:
                if type(f) is str:
                    if space_prefix and prev_special:
                        f = " " + f
                    self._encode_spm(f.replace(" ", _SPM_SPACE), out)
                    prev_special = False
                else:
                    out.append(f)
                    prev_special = True
        else:
            for f in frags:
                if type(f) is str:
                    if self._escape_spaces:
                        f = f.replace(" ", _SPM_SPACE)
                    self._encode_bpe(f, out)
                else:
                    out.append(f)
        if add_special and self.add_eos:
            out.append(self.eos_id)
        return out

    def _partition(self, text, parse_special):
        """Cut special tokens out of text: list of str fragments and int token ids (tokenizer_st_partition)."""
        frags = [text]
        texts, attrs = self._texts, self._attrs
        order = self._special_all if parse_special else self._special_user
        for tid in [i for i in order if texts[i] in text]:    # only tokens present in the text can be cut
            tok = texts[tid]
            if len(frags) > 1 and not any(type(f) is str and tok in f for f in frags):
                continue
            lstrip, rstrip = attrs[tid] & ATTR_LSTRIP, attrs[tid] & ATTR_RSTRIP
            out = []
            for f in frags:
                if type(f) is not str or tok not in f:
                    out.append(f)
                    continue
                pos = 0
                while True:
                    m = f.find(tok, pos)
                    if m < 0:
                        break
                    left = f[pos:m]
                    if lstrip:
                        left = left.rstrip(_ASCII_SPACE)
                    if left:
                        out.append(left)
                    out.append(tid)
                    pos = m + len(tok)
                    if rstrip:
                        while pos < len(f) and f[pos] in _ASCII_SPACE:
                            pos += 1
                if pos < len(f):
                    out.append(f[pos:])
            frags = out
        return frags

    def _encode_bpe(self, text, out):
        word_ids = self._word_ids
        if self._escape_spaces:                  # SPM-style BPE: words are whole lines, cut them where no merge spans
            cut = self._spm_cut.split
            for word in pre_split(text, self._pre_regexes):
                for chunk in cut(word):
                    if chunk:
                        out.extend(word_ids(chunk))
            return
        out.extend(itertools.chain.from_iterable(map(word_ids, pre_split(text, self._pre_regexes))))

    def _bpe_word(self, word):
        """ids of one pre-tokenized word (llm_tokenizer_bpe_session::tokenize)."""
        vocab = self._vocab
        if self._byte_encode:
            word = _byte_encode(word)
        if self._ignore_merges:
            i = vocab.get(word)
            if i is not None:
                return (i,)
        elif self._newline_runs and word.strip("\n") == "":      # gemma4: a run of newlines as one token
            i = vocab.get(word)
            if i is not None:
                return (i,)
        syms = merge_ranked(list(word), self._ranks)
        ids = []
        for s in syms:
            i = vocab.get(s)
            if i is not None:
                ids.append(i)
            elif self._byte_encode:
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

    def _encode_wpm(self, text, out):
        out.extend(itertools.chain.from_iterable(map(self._word_ids, filter(None, text.translate(
            self._wpm_table).split(" ")))))

    def _wpm_word(self, word):
        """ids of one normalized word (llm_tokenizer_wpm_session::tokenize): greedy longest match from the left
        over the word with a U+2581 prefix (the GGUF vocabulary marks word starts with it and writes "##" pieces
        bare); if some position matches no token, the whole word is [UNK]."""
        vocab, longest = self._vocab, self._max_token_chars
        word = _SPM_SPACE + word
        n = len(word)
        ids, i = [], 0
        while i < n:
            for j in range(min(n, i + longest), i, -1):
                t = vocab.get(word[i:j])
                if t is not None:
                    ids.append(t)
                    i = j
                    break
            else:
                return (self.unk_id,) if self.unk_id is not None else ()
        return tuple(ids)

    def _ugm_tables(self, texts, scores, attrs):
        """llm_tokenizer_ugm: the tokens the Viterbi may use (NORMAL, USER_DEFINED, UNUSED) with their longest
        length per first character, USER_DEFINED tokens (kept whole by the normalizer), the [UNK] score."""
        usable = ATTR_NORMAL | ATTR_USER_DEFINED | ATTR_UNUSED
        self._ugm_vocab = {t: i for i, t in enumerate(texts) if attrs[i] & usable}
        longest = {}
        for t in self._ugm_vocab:
            if len(t) > longest.get(t[0], 0):
                longest[t[0]] = len(t)
        self._ugm_longest = longest
        user = [texts[i].encode("utf-8", "surrogateescape") for i in range(len(texts)) if attrs[i] & ATTR_USER_DEFINED]
        self._ugm_user = sorted(set(user), key=len, reverse=True)
        self._ugm_user_first = {u[0] for u in user if u}
        normal = [scores[i] for i in range(len(texts)) if attrs[i] & ATTR_NORMAL]
        min_score = np.float32(min(normal)) if normal else np.float32(np.finfo(np.float32).max)
        self._ugm_unk_score = float(min_score - np.float32(10.0))      # float arithmetic, as llama.cpp

    def _ugm_normalize(self, text, space_prefix):
        """llm_tokenizer_ugm_session::normalize: charsmap replacements (USER_DEFINED tokens kept whole), then
        spaces escaped as U+2581: one before the text (add_space_prefix), or before every word with runs of
        spaces dropped (remove_extra_whitespaces)."""
        data = text.encode("utf-8", "surrogateescape")
        cm, user, user_first = self._charsmap, self._ugm_user, self._ugm_user_first
        space = _SPM_SPACE.encode()
        prepend, merge = space_prefix, self._merge_spaces
        out = bytearray()
        prepended = in_word = False
        pos, n = 0, len(data)
        while pos < n:
            c = data[pos]
            piece = None
            if c in user_first:
                for u in user:
                    if data.startswith(u, pos):
                        piece, used = u, len(u)
                        break
            if piece is None and cm is not None and cm.can_start(c):
                used, piece = cm.longest(data, pos)          # the replacement may be empty: text dropped
            if piece is None:
                used = 1 if c < 0x80 else 2 if c < 0xE0 else 3 if c < 0xF0 else 4   # one UTF-8 character
                piece = data[pos:pos + used]
            for b in piece:
                if b != 0x20:
                    if not in_word:
                        in_word = True
                        if (prepend and not prepended) or merge:
                            out += space
                            prepended = True
                    out.append(b)
                else:
                    in_word = False
                    if not merge:
                        out += space
            pos += used
        return out.decode("utf-8", "replace")

    def _encode_ugm(self, text, out, space_prefix):
        """llm_tokenizer_ugm_session::tokenize: Viterbi over the normalized text, one code point at a time: the
        best (highest) sum of token scores (USER_DEFINED tokens score 0), a code point no one-character token
        covers costs [UNK] at the lowest score - 10; runs of [UNK] come out as one."""
        norm = self._ugm_normalize(text, space_prefix)
        n = len(norm)
        if not n:
            return
        vocab, longest, scores, attrs = self._ugm_vocab, self._ugm_longest, self._scores, self._attrs
        unk, unk_score = self.unk_id, self._ugm_unk_score
        best_tok = [unk] * (n + 1)
        best_from = [0] * (n + 1)
        best_score = [-float("inf")] * (n + 1)
        best_score[0] = 0.0
        get = vocab.get
        for i in range(n):
            cur = best_score[i]
            single = False
            for j in range(i + 1, min(n, i + longest.get(norm[i], 0)) + 1):
                t = get(norm[i:j])
                if t is not None:
                    if j == i + 1:
                        single = True
                    score = cur + (0.0 if attrs[t] & ATTR_USER_DEFINED else scores[t])
                    if score > best_score[j]:
                        best_tok[j], best_from[j], best_score[j] = t, i, score
            if not single:
                score = cur + unk_score
                if score > best_score[i + 1]:
                    best_tok[i + 1], best_from[i + 1], best_score[i + 1] = unk, i, score
        ids, pos, prev_unk = [], n, False
        while True:
            t = best_tok[pos]
            is_unk = t == unk
            if not (prev_unk and is_unk):
                ids.append(t)
            if best_from[pos] == 0:
                break
            prev_unk = is_unk
            pos = best_from[pos]
        out.extend(t for t in reversed(ids) if t is not None)     # no [UNK] id: unknown text is dropped

    def _encode_spm(self, text, out):
        out.extend(itertools.chain.from_iterable(map(self._word_ids, filter(None, self._spm_cut.split(text)))))

    def _spm_chunk(self, text):
        """ids of an escaped SPM text chunk (llm_tokenizer_spm_session::tokenize)."""
        vocab = self._vocab
        ids = []
        for s in merge_scored(list(text), vocab, self._scores):
            i = vocab.get(s)
            if i is not None:
                ids.append(i)
                continue
            for b in s.encode("utf-8", "surrogateescape"):            # byte fallback
                i = vocab.get(f"<0x{b:02X}>")
                if i is None:
                    i = vocab.get(chr(b)) if b < 0x80 else None
                if i is None:
                    i = self.unk_id
                if i is not None:
                    ids.append(i)
        return tuple(ids)

    # -- decoding -----------------------------------------------------------------------------------------------

    def _check_id(self, i):
        if not (type(i) is int or hasattr(i, "__index__")) or not 0 <= int(i) < self.n_vocab:
            raise ValueError(f"token id {i!r} is out of range for a vocabulary of {self.n_vocab} tokens")
        return int(i)

    def token_to_piece(self, token_id, special=False):
        """Bytes of one token (llama_token_to_piece): control/unknown tokens give b"" unless special=True."""
        return self._piece(self._check_id(token_id))[1 if special else 0]

    def detokenize(self, ids, skip_special=True):
        """Text of ids; see the module docstring for the rules."""
        ids = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
        if ids:
            try:
                ok = min(ids) >= 0 and max(ids) < self.n_vocab
            except TypeError:
                ok = False
            if not ok:
                for t in ids:
                    self._check_id(t)
        pieces, piece = self._pieces, self._piece
        k = 0 if skip_special else 1
        out = [(pieces[t] or piece(t))[k] for t in ids]
        data = b"".join(out)
        if self._strip_lead and out:
            first = next((p for p in out if p), b"")
            if first.startswith(b" ") and data.startswith(b" "):
                data = data[1:]
        return data.decode("utf-8", "replace")

    # the other common spelling (Hugging Face's); tokenize/detokenize is the one fastgguf uses
    encode = tokenize
    decode = detokenize

    def streaming_decoder(self, skip_special=True):
        """Decoder fed one id at a time that only ever returns complete UTF-8 characters."""
        return StreamingDecoder(self, skip_special)

    # -- properties ---------------------------------------------------------------------------------------------

    def is_eog(self, token_id):
        return token_id in self.eog_ids

    def max_chars(self, n_tokens):
        """The most characters a text of n_tokens tokens can have (no token spells more characters than its
        vocabulary text has), or None where the normalizer drops characters (WPM, UGM: whitespace). A longer text
        cannot fit n_tokens whatever it holds: a server refuses it before the tokenization it would cost."""
        return None if self.wpm or self.ugm else n_tokens * self._max_token_chars

    def token_text(self, token_id):
        """The raw vocabulary text of a token."""
        return self._texts[self._check_id(token_id)]

    def token_attr(self, token_id):
        """llama.cpp token attribute bits (ATTR_* constants of this module)."""
        return self._attrs[self._check_id(token_id)]

    def __len__(self):
        return self.n_vocab

    def __repr__(self):
        kind = "SPM" if self.spm else "WPM" if self.wpm else "UGM" if self.ugm else f"BPE pre={self.pre!r}"
        return f"<Tokenizer {kind} n_vocab={self.n_vocab} bos={self.bos_id} eos={self.eos_id}>"


class StreamingDecoder:
    """Turns a stream of token ids into text without ever splitting a UTF-8 character."""

    def __init__(self, tokenizer, skip_special=True):
        self._tok = tokenizer
        self._special = not skip_special
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, token_id):
        """Text completed by this token ('' while a multi-byte character is still incomplete)."""
        return self._dec.decode(self._tok.token_to_piece(token_id, self._special))

    def flush(self):
        """Whatever is pending (an incomplete character becomes U+FFFD); the decoder can be reused after."""
        s = self._dec.decode(b"", final=True)
        self._dec.reset()
        return s
