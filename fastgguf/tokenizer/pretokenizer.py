"""Pre-splitting for BPE vocabularies: llama.cpp's pre-tokenizer regexes (one list per ``tokenizer.ggml.pre``
type, see bpe.py) run as llama.cpp runs them (llama.cpp src/unicode.cpp unicode_regex_split).

- The regexes run in sequence; each one splits every piece from the previous one into its matches and the text
  between them.
- A code point outside ASCII is seen by a regex only through its class (letter, number, punctuation, mark, symbol,
  whitespace, other: Unicode 15.1, see unicode_classes.py), so the results do not depend on the Python or ``regex``
  Unicode version.
"""
import bisect
import functools
import itertools
import re

from fastgguf.tokenizer import unicode_classes as _unicode_classes

# ---------------------------------------------------------------------------------------------------------------
# Unicode classes as llama.cpp's pre-tokenizer sees them
# ---------------------------------------------------------------------------------------------------------------
# llama.cpp runs its regexes on a "collapsed" copy of the text: ASCII stays as is, every other code point becomes
# one stand-in character for its class. We do the same, so ASCII-range regex classes plus these stand-ins express
# \p{L}, \p{N}, ... exactly.

_STAND_IN = {"O": "\xd0", "N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5", "W": "\x0b"}
# \p{X} -> stand-in + the ASCII members of the class (llama.cpp k_ucat_map)
_UCAT = {
    "N": "\xd1" + "0-9",
    "L": "\xd2" + "A-Za-z",
    "P": "\xd3" + r"!-#%-*,-/:-;?-@\[-\]_\{\}",
    "M": "\xd4",
    "S": "\xd5" + r"\$\+<->\^`\|~",
}
_UCAT_NAMES = {"N": "N", "L": "L", "P": "P", "M": "M", "S": "S", "Lu": "L", "Ll": "L", "Lt": "L", "Lm": "L",
               "Lo": "L"}


def _load_runs():
    starts, classes = [], []
    for run in _unicode_classes.RUNS.split():
        starts.append(int(run[:-1], 16))
        classes.append(run[-1])
    return starts, classes


_RUN_STARTS, _RUN_CLASSES = _load_runs()


def char_class(cp):
    """Class letter (W L N M P S O) of code point cp, as llama.cpp's regexes see it."""
    return _RUN_CLASSES[bisect.bisect_right(_RUN_STARTS, cp) - 1]


class _CollapseTable(dict):
    """str.translate table: non-ASCII code point -> stand-in of its class (filled on first sight)."""

    def __missing__(self, cp):
        v = _STAND_IN[char_class(cp)] if cp >= 0x80 else cp
        self[cp] = v
        return v


class _SpaceTable(dict):
    """str.translate table: non-ASCII whitespace -> \\v (llama.cpp's view for regexes without \\p{..})."""

    def __missing__(self, cp):
        v = "\x0b" if cp >= 0x80 and char_class(cp) == "W" else cp
        self[cp] = v
        return v


_COLLAPSE = _CollapseTable()
_SPACES = _SpaceTable()

# ---------------------------------------------------------------------------------------------------------------
# Pre-tokenizers (llama.cpp llm_tokenizer_bpe: regex lists per LLAMA_VOCAB_PRE_TYPE)
# ---------------------------------------------------------------------------------------------------------------

_R_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_R_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_R_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_R_QWEN35 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
             r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_R_DEEPSEEK3 = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
                r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_R_GPT4O = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
            r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
            r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
            r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
            r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_R_BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
_R_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_R_CJK_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
_R_NEWLINES = r"[^\n]+|[\n]+"

_PRE_REGEXES = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", _R_GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "llama3": [_R_LLAMA3],
    "jais2": [r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|"
              r"\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}"],
    "deepseek-llm": [
        "[\r\n]",
        "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
        "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
        "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
        "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
        "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
        "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102"
        "\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
        "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
        "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
        "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
        "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
        "\U0001e900-\U0001e943]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        "\\s+$",
        _R_CJK,
        r"\p{N}+",
    ],
    "deepseek3": [r"\p{N}{1,3}", _R_CJK_KANA, _R_DEEPSEEK3],
    "spark2_5": [r"\p{N}{1,3}", _R_CJK_KANA,
                 r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
                 r" ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+", r"\p{N}"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _R_CJK, r"\p{N}"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _R_GPT2, r"[0-9][0-9][0-9]"],
    # llama.cpp: [r"\p{N}", _R_GPT2]. The same cut in one pass: each number character alone, and whitespace before
    # a number counts as ending its piece (the number was cut off first, so \s+(?!\S) saw the end there).
    "starcoder": [r"\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"],
    "starcoder-2pass": [r"\p{N}", _R_GPT2],
    "gpt2": [_R_GPT2],
    "qwen2": [_R_QWEN2],
    "qwen35": [_R_QWEN35],
    "bloom": [_R_BLOOM],
    "chatglm4": [_R_LLAMA3],
    "viking": [_R_BLOOM, r"\p{N}"],
    "tekken": [r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|"
               r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|"
               r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "chameleon": ["<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]", _R_GPT2],
    "gpt4o": [_R_GPT4O],
    "granite-emb-multi": [
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+"
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*"
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
        r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "bailingmoe": [r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                   r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"],
    "seed-coder": [r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}|"
                   r" ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "ufakzeka": [r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "laguna": [_R_NEWLINES, _R_QWEN2],
    "exaone-moe": [r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
                   r"[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|"
                   r"\s*[\r\n]|\s+(?!\S)|\s+"],
    "youtu": ["[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
              "\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
              r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
              r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
              r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
              r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
              r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "minicpm5": [r"\p{N}{1,3}",
                 r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "newlines": [_R_NEWLINES],
}

_UCAT_RE = re.compile(r"\\p\{(\w+)\}")


def _compile_pre_regex(expr):
    """A llama.cpp pre-tokenizer regex -> (compiled Python regex, view) where view is "collapsed" (text with
    non-ASCII code points replaced by class stand-ins, for regexes using \\p{..}) or "spaces" (text with non-ASCII
    whitespace replaced by \\v). ECMAScript semantics: \\s, \\d are ASCII (re.ASCII) and $ is end of input."""
    collapsed = bool(_UCAT_RE.search(expr))
    out, inside, i = [], False, 0
    while i < len(expr):
        c = expr[i]
        if c == "\\":
            m = _UCAT_RE.match(expr, i)
            if collapsed and m and m.group(1) in _UCAT_NAMES:
                cls = _UCAT[_UCAT_NAMES[m.group(1)]]
                out.append(cls if inside else "[" + cls + "]")
                i = m.end()
            else:
                out.append(expr[i:i + 2])
                i += 2
            continue
        if c == "[" and not inside:
            inside = True
        elif c == "]" and inside:
            inside = False
        elif c == "$" and not inside:
            c = "\\Z"
        elif c == "(" and not inside and not expr.startswith("?", i + 1):
            c = "(?:"                                  # groups only group: findall() must return whole matches
        out.append(c)
        i += 1
    return re.compile("".join(out), re.ASCII), ("collapsed" if collapsed else "spaces")


@functools.lru_cache(maxsize=None)
def compiled_pre(key):
    """The compiled regex list of a _PRE_REGEXES key: ((pattern, view), ...) for pre_split."""
    return tuple(_compile_pre_regex(e) for e in _PRE_REGEXES[key])


def pre_split(text, compiled):
    """Cut text into words with the regex sequence (llama.cpp unicode_regex_split, without byte encoding)."""
    n = len(text)
    if text.isascii():
        views = {"collapsed": text, "spaces": text}
    else:
        views = {}
    if len(compiled) == 1:
        pattern, view_name = compiled[0]
        view = views.get(view_name)
        if view is None:
            view = views[view_name] = text.translate(_COLLAPSE if view_name == "collapsed" else _SPACES)
        words = pattern.findall(view)
        if sum(map(len, words)) == n:                    # the regex covered every character: no gaps to add
            if view is text:
                return words
            ends = list(itertools.accumulate(map(len, words)))
            return [text[e - len(w):e] for w, e in zip(words, ends)]
    spans = [(0, n)]
    for pattern, view_name in compiled:
        view = views.get(view_name)
        if view is None:
            view = views[view_name] = text.translate(_COLLAPSE if view_name == "collapsed" else _SPACES)
        out = []
        finditer = pattern.finditer
        for s, e in spans:
            pos = s
            for m in finditer(view, s, e):
                a, b = m.span()
                if a > pos:
                    out.append((pos, a))
                if b > a:
                    out.append((a, b))
                pos = b
            if pos < e:
                out.append((pos, e))
        spans = out
    return [text[s:e] for s, e in spans]
