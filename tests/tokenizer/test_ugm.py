"""Unigram (tokenizer.ggml.model "t5", XLM-R / bge-m3 / nomic-embed-v2 style) tokenizer: llama.cpp's
llm_tokenizer_ugm.

The cases of tests/data/vocab/ggml-vocab-nomic-bert-moe.gguf.inp/.out (made by llama.cpp's llama-tokenize, see
tools/gen_ugm_vocab_cases.py) run exact in test_tokenizer.py's vocab harness. Here: the same tool's ids with
add_special / parse_special (.special.json), and the normalizer flags and Viterbi on tiny vocabularies."""
import json
import os

import pytest

from fastgguf.tokenizer import Tokenizer, TokenizerError
from vocab_files import VOCAB_DIR

NAME = "nomic-bert-moe"


@pytest.fixture(scope="module")
def nomic(vocab_path):
    return Tokenizer(vocab_path(NAME))


def tiny(tokens, scores, **md):
    """A UGM vocabulary: <pad> </s> <unk> then tokens (ids 3...), no charsmap unless given."""
    meta = {"tokenizer.ggml.model": "t5", "tokenizer.ggml.tokens": ["<pad>", "</s>", "<unk>"] + tokens,
            "tokenizer.ggml.scores": [0.0, 0.0, 0.0] + scores,
            "tokenizer.ggml.token_type": [3, 3, 2] + [1] * len(tokens)}
    meta.update({f"tokenizer.ggml.{k}": v for k, v in md.items()})
    return Tokenizer.from_metadata(meta)


def test_nomic_specials_and_flags(nomic):
    assert (nomic.bos_id, nomic.eos_id, nomic.unk_id, nomic.pad_id, nomic.sep_id) == (0, 2, 3, 1, 2)
    assert nomic.add_bos and nomic.add_eos and nomic.add_space_prefix
    assert repr(nomic).startswith("<Tokenizer UGM")


def test_llama_tokenize_special_cases(nomic):
    with open(os.path.join(VOCAB_DIR, f"ggml-vocab-{NAME}.gguf.special.json"), encoding="utf-8") as f:
        cases = json.load(f)
    assert len(cases) >= 16
    for c in cases:
        got = nomic.tokenize(c["text"], add_special=c["add_special"], parse_special=c["parse_special"])
        assert got == c["ids"], c


def test_decode(nomic):
    ids = nomic.tokenize("Hello  world, ｈｅｌｌｏ!")
    assert nomic.detokenize(ids) == "Hello world, hello!"          # spaces merged, NFKC, leading space dropped
    assert nomic.detokenize(ids, skip_special=False).startswith("<s> Hello")
    dec = nomic.streaming_decoder()
    assert "".join(dec.feed(i) for i in ids) + dec.flush() == " Hello world, hello!"


def test_viterbi_best_sum_and_unknown():
    tok = tiny(["\u2581ab", "\u2581a", "b", "c", "\u2581", "abc"], [-5.0, -1.0, -1.0, -1.0, -3.0, -0.5],
               add_space_prefix=True)
    # "▁ab" (-5) loses to "▁a" + "b" (-2); "▁" + "abc" = -3.5 loses too
    assert tok.tokenize("ab", add_special=False) == [4, 5]
    # x and y are no token: [UNK] at min score - 10 each, and consecutive [UNK]s come out as one
    assert tok.tokenize("axyb", add_special=False) == [4, 2, 5]
    assert tok.tokenize("ab", add_special=True) == [4, 5, 1]       # t5 defaults: no BOS, EOS </s> = 1


def test_space_flags():
    toks = ["\u2581a", "\u2581b", "a", "b", "\u2581"]
    scores = [-1.0, -1.0, -2.0, -2.0, -2.0]
    plain = tiny(toks, scores)                                     # no prefix, spaces kept as they are
    assert plain.tokenize("a  b", add_special=False) == [5, 7, 4]   # a ▁ ▁b (-5) beats a ▁ ▁ b (-8)
    prefix = tiny(toks, scores, add_space_prefix=True)
    assert prefix.tokenize("a  b", add_special=False) == [3, 7, 4]
    merge = tiny(toks, scores, remove_extra_whitespaces=True)      # a U+2581 before every word, runs dropped
    assert merge.tokenize("  a  b ", add_special=False) == [3, 4]
    assert merge.detokenize([3, 4]) == "a b"


def test_user_defined_tokens_score_zero_and_stay_whole():
    tok = tiny(["\u2581", "x", "y", "xy"], [-1.0, -1.0, -1.0, -9.0], token_type=[3, 3, 2, 1, 1, 1, 4])
    assert tok.tokenize("xy", add_special=False) == [6]         # USER_DEFINED "xy" scores 0, not -9


def test_bad_charsmap_is_an_error():
    with pytest.raises(TokenizerError, match="precompiled_charsmap"):
        tiny(["a"], [-1.0], precompiled_charsmap=bytes([200, 0, 0, 0, 1, 2]))
