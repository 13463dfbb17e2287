"""Unigram (UGM, ``tokenizer.ggml.model`` "t5": T5, XLM-R, bge-m3, nomic-embed-v2): llama.cpp llm_tokenizer_ugm.

The precompiled charsmap (SentencePiece's XCDA, tokenizer.ggml.precompiled_charsmap) normalizes, spaces become
U+2581 (one before the text with add_space_prefix; with remove_extra_whitespaces one before every word and runs
dropped, so detokenize drops the leading space; llama.cpp has no key for treat_whitespace_as_suffix, so it is off),
then a Viterbi over the token scores picks the best sum, unknown code points costing the lowest score - 10 as
[UNK]. Defaults: EOS </s>=1 added, no BOS, unless the metadata says.
"""
import numpy as np

from fastgguf.errors import TokenizerError
from fastgguf.tokenizer.vocab import (ATTR_NORMAL, ATTR_UNUSED, ATTR_USER_DEFINED, SPM_SPACE, Algorithm,
                                      md_bool)


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


class UGM(Algorithm):
    kind = "UGM"
    scored = True
    special_defaults = dict(bos=None, eos=1, unk=2, pad=0)
    add_eos = True
    normalizes = True

    def __init__(self, md):
        super().__init__(md)
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
        self._merge_spaces = self.lead_space = bool(md_bool(md, "tokenizer.ggml.remove_extra_whitespaces"))

    def build(self, vocab, cache):
        """llm_tokenizer_ugm: the tokens the Viterbi may use (NORMAL, USER_DEFINED, UNUSED) with their longest
        length per first character, USER_DEFINED tokens (kept whole by the normalizer), the [UNK] score. From the
        attributes the token types give: llama.cpp builds its token tries before its attribute fixes."""
        self._vocab = vocab
        texts, scores, attrs = vocab.texts, vocab.scores, vocab.attrs
        usable = ATTR_NORMAL | ATTR_USER_DEFINED | ATTR_UNUSED
        self._usable = {t: i for i, t in enumerate(texts) if attrs[i] & usable}
        longest = {}
        for t in self._usable:
            if len(t) > longest.get(t[0], 0):
                longest[t[0]] = len(t)
        self._longest = longest
        user = [texts[i].encode("utf-8", "surrogateescape") for i in range(len(texts)) if attrs[i] & ATTR_USER_DEFINED]
        self._user = sorted(set(user), key=len, reverse=True)
        self._user_first = {u[0] for u in user if u}
        normal = [scores[i] for i in range(len(texts)) if attrs[i] & ATTR_NORMAL]
        min_score = np.float32(min(normal)) if normal else np.float32(np.finfo(np.float32).max)
        self._unk_score = float(min_score - np.float32(10.0))      # float arithmetic, as llama.cpp

    def _normalize(self, text, space_prefix):
        """llm_tokenizer_ugm_session::normalize: charsmap replacements (USER_DEFINED tokens kept whole), then
        spaces escaped as U+2581: one before the text (add_space_prefix), or before every word with runs of
        spaces dropped (remove_extra_whitespaces)."""
        data = text.encode("utf-8", "surrogateescape")
        cm, user, user_first = self._charsmap, self._user, self._user_first
        space = SPM_SPACE.encode()
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

    def encode(self, text, space_prefix):
        """llm_tokenizer_ugm_session::tokenize: Viterbi over the normalized text, one code point at a time: the
        best (highest) sum of token scores (USER_DEFINED tokens score 0), a code point no one-character token
        covers costs [UNK] at the lowest score - 10; runs of [UNK] come out as one."""
        norm = self._normalize(text, space_prefix)
        n = len(norm)
        if not n:
            return ()
        vocab, longest, scores, attrs = self._usable, self._longest, self._vocab.scores, self._vocab.attrs
        unk, unk_score = self._vocab.unk_id, self._unk_score
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
        return [t for t in reversed(ids) if t is not None]       # no [UNK] id: unknown text is dropped
