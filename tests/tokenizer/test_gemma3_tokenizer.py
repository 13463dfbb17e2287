"""The Gemma 3 vocabulary (SentencePiece, 262,144 tokens, byte fallback) gives llama.cpp's ids exactly
(tests/data/gemma3-tokenizer.json, made by tools/gen_gemma3_tokenizer.py with llama-tokenize)."""
import json
import os

import pytest

from fastgguf.gguf import GGUFFile
from fastgguf.tokenizer import Tokenizer

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "gemma3-tokenizer.json")


@pytest.fixture(scope="module")
def tok(gemma3_path):
    with GGUFFile(gemma3_path) as f:
        return Tokenizer.from_metadata(f.metadata)


def _cases():
    with open(DATA, encoding="utf-8") as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: f"{c['text'][:24]!r}-{'special' if c['parse_special'] else 'plain'}")
def test_ids_equal_llama_cpp(tok, case):
    assert tok.tokenize(case["text"], add_special=True, parse_special=case["parse_special"]) == case["ids"]


def test_round_trip_and_specials(tok):
    for c in _cases():
        if not c["parse_special"] and c["ids"][1:]:
            assert tok.detokenize(c["ids"][1:]) == c["text"], c["text"]
    assert tok.bos_id == 2 and 1 in tok.eog_ids
    ids = tok.tokenize("<start_of_turn>user\nhi<end_of_turn>", add_special=False, parse_special=True)
    assert ids[0] == 105 and len(tok.tokenize("<start_of_turn>", add_special=False, parse_special=False)) > 1
