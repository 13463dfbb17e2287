"""Tokenizers built from GGUF ``tokenizer.*`` metadata, giving exactly llama.cpp's token ids: :class:`Tokenizer`.

Supported vocabularies (``tokenizer.ggml.model``), one module per algorithm:

- ``gpt2``: byte-level BPE, and ``gemma4``: SentencePiece-style BPE (bpe.py; its words cut by pretokenizer.py).
- ``llama``: SentencePiece BPE (SPM; spm.py).
- ``bert``: WordPiece (WPM; wpm.py).
- ``t5``: Unigram (UGM; ugm.py).

Other types (rwkv, plamo2, ...) raise :class:`TokenizerError` at construction. What the algorithms share (token
texts, scores, attributes, special and end-of-generation ids) is vocab.py's Vocab. The Tokenizer picks the
algorithm once, at load, and does what is common to all of them; as llama.cpp's src/llama-vocab.cpp:

- Special tokens (CONTROL / USER_DEFINED / UNKNOWN types) are cut out of the text before tokenization, longest
  first. With ``parse_special=False`` only USER_DEFINED tokens are recognised (llama.cpp and HF do the same). The
  algorithm encodes each fragment of text left between them.
- ``token_to_piece(id, special=False)``: llama_token_to_piece: CONTROL and UNKNOWN tokens give b"" unless
  ``special``; USER_DEFINED tokens give their text; NORMAL pieces are the algorithm's (BPE pieces map back through
  the GPT-2 byte table, the others turn U+2581 into spaces); BYTE tokens <0xXX> give the byte.
- ``detokenize(ids, skip_special=True)`` (alias ``decode``): the concatenated pieces (``special = not skip_special``) decoded as UTF-8
  with replacement characters. When the vocabulary adds a space prefix (SPM), the leading space of the first
  rendered piece is dropped, also after a BOS, so ``detokenize(tokenize(s)) == s`` (llama_detokenize keeps it after a
  BOS). The same for WPM, whose every word starts with U+2581, and UGM with remove_extra_whitespaces. llama.cpp's
  "clean spaces" pass is not applied.
- ``streaming_decoder()``: ``feed(id)`` returns only complete UTF-8 characters (bytes of a split character wait for
  the next tokens); nothing is stripped, so the stream of a generation is exactly its pieces.
"""
from __future__ import annotations

import codecs
import re

import numpy as np

from fastgguf.errors import TokenizerError
from fastgguf.tokenizer.bpe import BPE
from fastgguf.tokenizer.spm import SPM
from fastgguf.tokenizer.ugm import UGM
from fastgguf.tokenizer.vocab import (ATTR_BYTE, ATTR_CONTROL, ATTR_LSTRIP, ATTR_NORMAL, ATTR_RSTRIP, ATTR_UNKNOWN,
                                      ATTR_USER_DEFINED, Vocab, md_bool, short_repr)
from fastgguf.tokenizer.wpm import WPM

__all__ = ["Tokenizer", "TokenizerError", "StreamingDecoder"]


_ASCII_SPACE = " \t\n\v\f\r"          # C isspace(): what llama.cpp strips around LSTRIP/RSTRIP special tokens

_ALGORITHMS = {"gpt2": BPE, "gemma4": BPE, "llama": SPM, "bert": WPM, "t5": UGM}     # by tokenizer.ggml.model
_UNSUPPORTED_MODELS = {"rwkv": "RWKV",
                       "plamo2": "PLaMo-2", "no_vocab": "no vocabulary", "none": "no vocabulary",
                       "hybriddna": "hybrid DNA BPE", "whitespace": "whitespace BPE", "test": "test"}


def _check_types(md):
    """A GGUF file may hold any value type under any key: a wrong one is a TokenizerError, not a crash later."""
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


def _model_and_tokens(md):
    """tokenizer.ggml.model (a supported one) and the token texts (a non-empty list)."""
    model = md.get("tokenizer.ggml.model")
    if model is None:
        raise TokenizerError("metadata has no tokenizer.ggml.model")
    if model in _UNSUPPORTED_MODELS:
        raise TokenizerError(f"unsupported tokenizer type: tokenizer.ggml.model = {model!r} "
                             f"({_UNSUPPORTED_MODELS[model]}); supported: 'gpt2' (BPE), 'llama' (SPM), 'gemma4', "
                             f"'bert' (WPM), 't5' (UGM)")
    if model not in _ALGORITHMS:
        raise TokenizerError(f"unknown tokenizer type: tokenizer.ggml.model = {model!r}")
    tokens = md.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise TokenizerError("metadata has no tokenizer.ggml.tokens")
    tokens = list(tokens)
    if not tokens:
        raise TokenizerError("tokenizer.ggml.tokens is empty")
    return model, tokens


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
        _check_types(md)
        model, tokens = _model_and_tokens(md)
        self.model = model
        self.pre = md.get("tokenizer.ggml.pre")
        self.spm, self.wpm, self.ugm = model == "llama", model == "bert", model == "t5"

        # the algorithm reads its own keys and defaults (llama_vocab::impl::load), then builds its tables over the
        # tokens before the vocabulary's special tokens are found (llama.cpp: before its attribute fixes)
        algo = self._algo = _ALGORITHMS[model](md)
        v = md_bool(md, "tokenizer.ggml.add_space_prefix")
        self.add_space_prefix = algo.add_space_prefix if v is None else v
        vocab = self._vocab = Vocab(tokens, md, algo.scored)
        algo.build(vocab, self._bounded_word_cache)
        vocab.find_specials(md, algo.special_defaults)
        self._read_add_flags(md, algo)

        # special tokens cut out of the text, longest first
        texts, attrs = vocab.texts, vocab.attrs
        special_ids = np.flatnonzero(np.asarray(attrs) & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)).tolist()
        self._special_all = sorted(special_ids, key=lambda i: (-len(texts[i].encode("utf-8", "surrogateescape")),
                                                                i))
        self._special_user = [i for i in self._special_all if not attrs[i] & (ATTR_CONTROL | ATTR_UNKNOWN)]

        ct = md.get("tokenizer.chat_template")
        self.chat_template = ct if isinstance(ct, str) else None     # a non-string template counts as none
        self.n_vocab = vocab.n
        special = self.special_ids = vocab.special_ids     # {"bos", "eos", "eot", "eom", "unk", "sep", "pad", ...}
        self.bos_id = special["bos"]
        self.eos_id = special["eos"]
        self.eot_id = special["eot"]
        self.unk_id = special["unk"]
        self.pad_id = special["pad"]
        self.sep_id = special["sep"]
        self.eog_ids = vocab.eog_ids
        algo.check(vocab)
        if self.add_bos and self.bos_id is None:
            raise TokenizerError("tokenizer.ggml.add_bos_token is true, but there is no BOS token id")
        if self.add_eos and self.eos_id is None:
            raise TokenizerError("tokenizer.ggml.add_eos_token is true, but there is no EOS token id")

        # pieces for decoding: (bytes without specials, bytes with specials), made on first use
        self._pieces = [None] * vocab.n
        # the leading space detokenize drops: the one the tokenizer itself put before the first word
        self._strip_lead = self.add_space_prefix or algo.lead_space

    def _read_add_flags(self, md, algo):
        """add_bos, add_eos, add_sep: the algorithm's defaults unless tokenizer.ggml.add_*_token say."""
        v = md_bool(md, "tokenizer.ggml.add_bos_token")
        self.add_bos = algo.add_bos if v is None else v
        v = md_bool(md, "tokenizer.ggml.add_eos_token")
        self.add_eos = algo.add_eos if v is None else v
        v = md_bool(md, "tokenizer.ggml.add_sep_token")
        # read by whoever joins two texts (rerank); tokenize() itself does not use it
        self.add_sep = algo.add_sep if v is None else v
        if algo.force_bos:
            self.add_bos = True

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
        attr, text = self._vocab.attrs[i], self._vocab.texts[i]
        raw = text.encode("utf-8", "surrogateescape")
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL):
            return (b"", raw)
        if attr & ATTR_USER_DEFINED:
            return (raw, raw)
        if attr & ATTR_NORMAL:
            p = self._algo.piece(text)
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
        head, tail = self._added_ids() if add_special else ((), ())
        out = list(head)
        encode = self._algo.encode
        for f in self._partition(text, parse_special) if text else ():
            if type(f) is str:
                out.extend(encode(f, space_prefix))
            else:
                out.append(f)
        out.extend(tail)
        return out

    def _added_ids(self):
        """(ids before, ids after) the text when tokenize() adds special tokens."""
        if self._algo.bounds:                    # WPM: llama.cpp adds [CLS] and [SEP] whatever add_bos/add_sep say
            first, last = self._algo.bounds
            return (self.special_ids[first],), (self.special_ids[last],)
        return (self.bos_id,) if self.add_bos else (), (self.eos_id,) if self.add_eos else ()

    def _partition(self, text, parse_special):
        """Cut special tokens out of text: list of str fragments and int token ids (tokenizer_st_partition).
        A str fragment is never empty, and two are never adjacent: a special token stands between them."""
        frags = [text]
        texts, attrs = self._vocab.texts, self._vocab.attrs
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
        return None if self._algo.normalizes else n_tokens * self._vocab.max_token_chars

    def token_text(self, token_id):
        """The raw vocabulary text of a token."""
        return self._vocab.texts[self._check_id(token_id)]

    def token_attr(self, token_id):
        """llama.cpp token attribute bits (the ATTR_* constants of fastgguf.tokenizer.vocab)."""
        return self._vocab.attrs[self._check_id(token_id)]

    def __len__(self):
        return self.n_vocab

    def __repr__(self):
        return f"<Tokenizer {self._algo.kind} n_vocab={self.n_vocab} bos={self.bos_id} eos={self.eos_id}>"


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
