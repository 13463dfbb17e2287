"""Tokenizer speed: encode / decode of a 100 KB text (pytest-benchmark).

    python -m pytest benchmarks/bench_tokenizer.py --benchmark-columns=min,median,mean

"cold" clears the word cache before every round (every distinct word goes through BPE merging), "warm" reuses it.
The text mixes English prose, Python code, numbers and non-Latin scripts, with ~10k distinct words.
"""
import lzma
import os
import random

import pytest

from fastgguf.tokenizer import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB_DIR = os.path.join(HERE, "..", "tests", "data", "vocab")


def make_text(n_bytes=100_000, seed=0):
    rng = random.Random(seed)
    syll = ["ka", "lo", "ren", "tis", "pa", "qu", "ex", "ion", "str", "ea", "mo", "dy", "th", "ing", "ver", "ab"]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(6000)]
    common = "the of and to in is that for it as with was on be by this are from at or an".split()
    code = ["def f_{0}(x, y=3):\n    return [i * {0} for i in range(x) if i % 2]\n",
            "    if self.value_{0} >= 10_000:\n        raise ValueError(f\"bad {{x!r}}\")\n"]
    other = ["Grüße aus Köln, ça va? ", "日本語のテキストです。", "Привет, мир! ", "🦙🚀 ", "  \t\n", "3.14159 "]
    parts, size = [], 0
    while size < n_bytes:
        r = rng.random()
        if r < 0.70:
            s = " ".join(rng.choice(common) if rng.random() < 0.4 else rng.choice(words)
                         for _ in range(rng.randint(5, 20))).capitalize() + ". "
        elif r < 0.85:
            s = rng.choice(code).format(rng.randint(0, 999))
        else:
            s = rng.choice(other)
        parts.append(s)
        size += len(s.encode())
    return "".join(parts).encode()[:n_bytes].decode("utf-8", "ignore")


TEXT = make_text()


@pytest.fixture(scope="module", params=["smollm2", "llama-spm", "llama-bpe"])
def tok(request, tmp_path_factory):
    if request.param == "smollm2":
        from fastgguf import hub
        path = hub.default_model_path(download=False)
        if not os.path.exists(path):
            pytest.skip("default model not cached")
    else:
        path = tmp_path_factory.mktemp("vocab") / f"{request.param}.gguf"
        with lzma.open(os.path.join(VOCAB_DIR, f"ggml-vocab-{request.param}.gguf.xz")) as f:
            path.write_bytes(f.read())
    return Tokenizer(str(path))


def test_encode_100k_cold(benchmark, tok):
    def run():
        tok._word_cache.clear()
        return tok.tokenize(TEXT)
    ids = benchmark.pedantic(run, rounds=5, iterations=1)
    assert tok.detokenize(ids) == TEXT


def test_encode_100k_warm(benchmark, tok):
    tok.tokenize(TEXT)
    benchmark.pedantic(tok.encode, args=(TEXT,), rounds=10, iterations=1)


def test_decode_100k(benchmark, tok):
    ids = tok.tokenize(TEXT)
    text = benchmark.pedantic(tok.decode, args=(ids,), rounds=10, iterations=1)
    assert text == TEXT


def test_streaming_decode_100k(benchmark, tok):
    ids = tok.tokenize(TEXT)

    def run():
        dec = tok.streaming_decoder()
        return "".join(dec.feed(i) for i in ids) + dec.flush()
    text = benchmark.pedantic(run, rounds=5, iterations=1)
    assert text == (" " + TEXT if tok.add_space_prefix else TEXT)     # a stream keeps SPM's prefix space
