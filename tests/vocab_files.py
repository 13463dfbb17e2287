"""llama.cpp's vocabulary-only GGUF files, kept xz-compressed in tests/data/vocab/ggml-vocab-<name>.gguf.xz (with
their .inp/.out tokenizer cases), and the one way the tests unpack them."""
import lzma
import os

VOCAB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vocab")


def unpack_vocab(name, dest):
    """Write ggml-vocab-<name>.gguf, decompressed, to dest; returns dest as a str."""
    dest = str(dest)
    with lzma.open(os.path.join(VOCAB_DIR, f"ggml-vocab-{name}.gguf.xz")) as src, open(dest, "wb") as out:
        out.write(src.read())
    return dest
