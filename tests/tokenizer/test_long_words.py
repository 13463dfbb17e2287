"""One huge pre-tokenized word (megabytes of one letter, which no pre-tokenizer regex splits): its merge costs
n log n, as llama.cpp's queue does (no cap on the word: the ids stay llama.cpp's), and the compiled merge loop lets
go of the GIL every few thousand merges, so a thread tokenizing it never stalls the others (a server's event loop)."""
import threading
import time

import pytest

from fastgguf.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok(default_model_path):
    return Tokenizer(default_model_path)


def _seconds(fn, repeat=2):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def test_one_letter_word_scales_linearly(tok):
    small, big = 1 << 19, 1 << 20
    ids = tok.tokenize("a" * small, add_special=False)
    assert len(ids) * 4 >= small and tok.detokenize(ids) == "a" * small
    t_small = _seconds(lambda: tok.tokenize("a" * small, add_special=False))
    t_big = _seconds(lambda: tok.tokenize("a" * big, add_special=False))
    assert t_big < 3.2 * t_small, (t_small, t_big)  # linear (n log n): ~2x; quadratic: 4x


def test_a_huge_word_does_not_hold_the_gil(tok):
    word = "a" * (1 << 20)
    th = threading.Thread(target=tok.tokenize, args=(word,))
    gaps, t0 = [], time.perf_counter()
    th.start()
    last = t0
    while th.is_alive():
        time.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    total = last - t0
    # holding the GIL through the merge: one gap as long as the whole call; letting go: many short ones
    assert len(gaps) > 10 and max(gaps) < total / 3, (max(gaps), total, len(gaps))
