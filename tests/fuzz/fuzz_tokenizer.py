"""Fuzz target: the tokenizer's encode/decode round trip and streaming decode.

For byte-level BPE vocabularies (llama.cpp's gpt-2, llama-bpe and qwen2 vocab files, tests/data/vocab), any valid
UTF-8 text round-trips: decode(encode(text)) == text (add_special=False, parse_special=False). Feeding the ids one
by one to tokenizer.streaming_decoder() gives the same text as decode(), and with parse_special=True the ids are
still valid ids that decode without error. The first input byte picks the vocabulary.

Normalizing vocabularies (WPM bert-bge: lowercase, accents and whitespace dropped; UGM nomic-bert-moe: NFKC
charsmap, spaces merged) cannot round-trip; for them the ids are valid and the streamed text is the decoded text
(plus the leading space detokenize drops). For WPM, tokenizing the decoded text again gives the same ids when no
[UNK] came out (its normalization is idempotent; UGM's is not: a decoded "f" + U+0301 composes the second time).

    python tests/fuzz/fuzz_tokenizer.py -max_total_time=60 tests/fuzz/corpus/tokenizer
"""
import lzma
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

with _harness.instrumented():
    _harness.import_fastgguf()
    from fastgguf.tokenizer import Tokenizer  # noqa: E402

VOCAB_DIR = os.path.join(_harness.ROOT, "tests", "data", "vocab")
VOCABS = ["gpt-2", "llama-bpe", "qwen2"]
NORMALIZING = ["bert-bge", "nomic-bert-moe"]


def _load(name):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"ggml-vocab-{name}.gguf")
        with lzma.open(os.path.join(VOCAB_DIR, f"ggml-vocab-{name}.gguf.xz")) as src, open(path, "wb") as dst:
            dst.write(src.read())
        return Tokenizer(path)


TOKENIZERS = [_load(name) for name in VOCABS + NORMALIZING]


def test_one_input(data):
    if not data:
        return
    k = data[0] % len(TOKENIZERS)
    tok = TOKENIZERS[k]
    text = data[1:].decode("utf-8", "ignore")
    ids = tok.encode(text, add_special=False, parse_special=False)
    out = tok.decode(ids)
    if k >= len(VOCABS):
        _normalizing(tok, text, ids, out)
        return
    assert out == text, f"round trip: {text!r} -> {ids} -> {out!r}"
    dec = tok.streaming_decoder()
    streamed = "".join(dec.feed(i) for i in ids) + dec.flush()
    assert streamed == out, f"streaming decode {streamed!r} != decode {out!r}"
    ids = tok.encode(text, add_special=True, parse_special=True)
    assert all(0 <= i < tok.n_vocab for i in ids)
    dec = tok.streaming_decoder(skip_special=False)
    assert "".join(dec.feed(i) for i in ids) + dec.flush() == tok.decode(ids, skip_special=False)


def _normalizing(tok, text, ids, out):
    assert all(0 <= i < tok.n_vocab for i in ids)
    dec = tok.streaming_decoder()
    streamed = "".join(dec.feed(i) for i in ids) + dec.flush()
    assert streamed in (out, " " + out), f"streaming decode {streamed!r} != decode {out!r}"
    if tok.wpm and tok.unk_id not in ids:
        again = tok.encode(out, add_special=False, parse_special=False)
        assert again == ids, f"{text!r} -> {ids} -> {out!r} -> {again}"
    ids = tok.encode(text, add_special=True, parse_special=True)
    assert all(0 <= i < tok.n_vocab for i in ids)
    tok.decode(ids, skip_special=False)


if __name__ == "__main__":
    _harness.run(test_one_input)
