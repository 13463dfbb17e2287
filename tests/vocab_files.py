"""llama.cpp's vocabulary-only GGUF files, kept xz-compressed in tests/data/vocab/ggml-vocab-<name>.gguf.xz (with
their .inp/.out tokenizer cases), and the one way the tests unpack them and read their cases."""
import lzma
import os

VOCAB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vocab")


def unpack_vocab(name, dest):
    """Write ggml-vocab-<name>.gguf, decompressed, to dest; returns dest as a str."""
    dest = str(dest)
    with lzma.open(os.path.join(VOCAB_DIR, f"ggml-vocab-{name}.gguf.xz")) as src, open(dest, "wb") as out:
        out.write(src.read())
    return dest


CASE_SEP = "\n__ggml_vocab_test__\n"


def read_cases(name):
    """(text, ids) pairs of llama.cpp's .inp/.out files (same parsing as tests/test-tokenizer-0.cpp; the ids were
    made with add_special=False, parse_special=False)."""
    base = os.path.join(VOCAB_DIR, f"ggml-vocab-{name}.gguf")
    with open(base + ".inp", encoding="utf-8", newline="") as f:
        raw = f.read()
    texts, pos = [], 0
    while pos < len(raw):
        k = raw.find(CASE_SEP, pos)
        if k < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:k])
        pos = k + len(CASE_SEP)
    with open(base + ".out", encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    assert len(lines) >= len(texts)
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]
