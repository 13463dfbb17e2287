"""WordPiece (WPM, ``tokenizer.ggml.model`` "bert": BERT, bge, MiniLM): llama.cpp llm_tokenizer_wpm.

llama.cpp's normalizer (its own NFD-first-code-point and lowercase tables, accent marks and \\p{C} dropped,
punctuation, ASCII symbols and CJK ideographs as words of their own), then greedy longest match over U+2581 + word;
a word with an unmatched position is one [UNK]. ``tokenize(add_special=True)`` gives [CLS] ... [SEP] (llama.cpp adds
both whatever add_bos/add_sep say). Every word starts with U+2581, so detokenize drops the leading space.
"""
import bisect
import functools
import itertools

from fastgguf.errors import TokenizerError
from fastgguf.tokenizer import unicode_classes as _unicode_classes
from fastgguf.tokenizer.pretokenizer import char_class
from fastgguf.tokenizer.vocab import SPM_SPACE, Algorithm, md_bool


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


class WPM(Algorithm):
    kind = "WPM"
    special_defaults = dict(bos=101, eos=None, unk=100, sep=102, pad=0, mask=103)
    add_bos = True
    bounds = ("bos", "sep")
    lead_space = True
    normalizes = True

    def __init__(self, md):
        super().__init__(md)
        self.add_sep = True
        lowercase = md_bool(md, "tokenizer.ggml.normalizer.lowercase")
        lowercase = True if lowercase is None else lowercase
        strip = md_bool(md, "tokenizer.ggml.normalizer.strip_accents")
        self._table = _wpm_table(lowercase, lowercase if strip is None else strip)

    def build(self, vocab, cache):
        self._vocab = vocab
        self._word_ids = cache(self.word)

    def check(self, vocab):
        if vocab.special_ids["bos"] is None or vocab.special_ids["sep"] is None:
            raise TokenizerError("a WPM (bert) vocabulary needs a [CLS] (BOS) and a [SEP] token id")

    def encode(self, text, space_prefix):
        return itertools.chain.from_iterable(map(self._word_ids, filter(None, text.translate(
            self._table).split(" "))))

    def word(self, word):
        """ids of one normalized word (llm_tokenizer_wpm_session::tokenize): greedy longest match from the left
        over the word with a U+2581 prefix (the GGUF vocabulary marks word starts with it and writes "##" pieces
        bare); if some position matches no token, the whole word is [UNK]."""
        vocab, longest = self._vocab.ids, self._vocab.max_token_chars
        word = SPM_SPACE + word
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
                unk = self._vocab.unk_id
                return (unk,) if unk is not None else ()
        return tuple(ids)
