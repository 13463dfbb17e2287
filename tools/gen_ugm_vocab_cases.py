"""Regenerate the UGM (T5/XLM-R unigram) tokenizer cases of tests/data/vocab/ggml-vocab-nomic-bert-moe.gguf with
llama.cpp's own llama-tokenize (llama.cpp ships this vocabulary file without .inp/.out cases).

Writes, next to the compressed vocabulary:
- ggml-vocab-nomic-bert-moe.gguf.inp/.out: llama.cpp's test-tokenizer-0 format (cases separated by
  "\\n__ggml_vocab_test__\\n" after each, one line of ids per case), add_special=False and parse_special=False
  (llama-tokenize --no-bos --no-parse-special): the texts of ggml-vocab-llama-bpe.gguf.inp (unicode, whitespace
  runs, CJK, emoji, code) and some that exercise the precompiled charsmap (NFKC, full-width, ligatures).
- ggml-vocab-nomic-bert-moe.gguf.special.json: [{"text", "add_special", "parse_special", "ids"}] for a few texts
  with <s> </s> <mask> in them, each way.

Usage: python tools/gen_ugm_vocab_cases.py [path/to/llama-tokenize] [path/to/ggml-vocab-nomic-bert-moe.gguf]
(defaults: ~/.cache/llama-ref/build/bin/llama-tokenize and the vocabulary decompressed from tests/data/vocab).
"""
import json
import lzma
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB_DIR = os.path.join(ROOT, "tests", "data", "vocab")
NAME = "nomic-bert-moe"
CASE_SEP = "\n__ggml_vocab_test__\n"

EXTRA = [
    "ｈｅｌｌｏ　ｗｏｒｌｄ ＡＢＣ１２３",        # full-width forms (NFKC)
    "ﬁnancial ﬂow Ⅻ ① ㎏ ½ ™",                 # compatibility characters
    "naïve cafe\u0301 Ça ÅNGSTRÖM",              # precomposed and combining accents
    "zero\u200bwidth\u200d joiner \ufeffbom",     # format characters
    "a\u00a0b\u2003c\u3000d\u2028e",             # Unicode spaces
    "  leading, trailing and   inner   runs  ",
    "tabs\tand\nnew\r\nlines\n\n\n",
    "한국어 텍스트와 日本語のテキスト와 中文文本",
    "Русский текст с ударе́нием, ελληνικά, עברית, العربية, हिन्दी, ไทย",
    "emoji 🦙🚀👍🏽 👨‍👩‍👧 flags 🇫🇷",
    "def f(x):\n    return x ** 2  # comment\n",
    "<mask> hello <s> world </s> <pad> <unk>",
    "unknown \U000e0001 tag and \U0010fffd private",
    "x" * 40 + " " + "ab" * 30,
]
SPECIAL = ["<s>Hello</s>", "Hello <mask> world", "hello<mask>world </s>", "<pad><unk> x", "plain text"]


def read_texts(name):
    with open(os.path.join(VOCAB_DIR, f"ggml-vocab-{name}.gguf.inp"), encoding="utf-8", newline="") as f:
        texts = f.read().split(CASE_SEP)
    return texts[:-1] if texts[-1] == "" else texts            # every case ends with the separator


def tokenize(tool, vocab, text, add_special, parse_special):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
    try:
        args = [tool, "-m", vocab, "-f", f.name, "--ids", "--log-disable", "--no-escape"]
        if not add_special:
            args.append("--no-bos")
        if not parse_special:
            args.append("--no-parse-special")
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    line = [x for x in out.splitlines() if x.startswith("[")][-1]
    return json.loads(line)


def main(tool=os.path.expanduser("~/.cache/llama-ref/build/bin/llama-tokenize"), vocab=None):
    tmp = None
    if vocab is None:
        tmp = tempfile.mkdtemp()
        vocab = os.path.join(tmp, f"ggml-vocab-{NAME}.gguf")
        with lzma.open(os.path.join(VOCAB_DIR, f"ggml-vocab-{NAME}.gguf.xz")) as src, open(vocab, "wb") as dst:
            dst.write(src.read())
    texts = read_texts("llama-bpe") + EXTRA
    base = os.path.join(VOCAB_DIR, f"ggml-vocab-{NAME}.gguf")
    with open(base + ".inp", "w", encoding="utf-8", newline="") as f:
        f.write("".join(t + CASE_SEP for t in texts))
    with open(base + ".out", "w", encoding="utf-8", newline="") as f:
        for t in texts:
            f.write("".join(f" {i}" for i in tokenize(tool, vocab, t, False, False)) + "\n")
    special = [{"text": t, "add_special": a, "parse_special": p, "ids": tokenize(tool, vocab, t, a, p)}
               for t in SPECIAL for a in (False, True) for p in (False, True)]
    with open(base + ".special.json", "w", encoding="utf-8") as f:       # one case a line
        f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in special) + "\n]\n")
    print(len(texts), "cases,", len(special), "special cases ->", base + ".{inp,out,special.json}")
    if tmp:
        os.unlink(vocab)
        os.rmdir(tmp)


if __name__ == "__main__":
    main(*sys.argv[1:])
