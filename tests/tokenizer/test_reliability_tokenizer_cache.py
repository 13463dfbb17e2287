"""The tokenizer's per-word cache is bounded by bytes: long words are not kept, and distinct words cannot grow it
past Tokenizer.WORD_CACHE_BYTES for the model's life."""
import random
import tracemalloc

import pytest

from fastgguf.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def smol_path(default_model_path):
    return default_model_path


def _words(n, length, seed=0):
    rng = random.Random(seed)
    return ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(length)) for _ in range(n)]


def test_long_words_are_not_retained(smol_path):
    tok = Tokenizer(smol_path)
    words = _words(4, 50_000)
    tok.encode("warm up the cache and the regexes")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for w in words:
            tok.encode(w)
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert retained < 200_000, f"encoding 4 distinct 50k-character words kept {retained} bytes"


def test_cache_stays_within_its_byte_budget_and_ids_do_not_change(smol_path):
    class Small(Tokenizer):
        WORD_CACHE_BYTES = 64 << 10
    small, plain = Small(smol_path), Tokenizer(smol_path)
    text = " ".join(f"w{i}x{i * 7919 % 10007}" for i in range(20_000))
    ids = small.encode(text)
    assert 0 < small._word_cache_bytes <= Small.WORD_CACHE_BYTES
    assert ids == small.encode(text) == plain.encode(text)
    assert all(len(w) <= Tokenizer.WORD_CACHE_MAX_CHARS for w in small._word_cache)
