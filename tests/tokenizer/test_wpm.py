"""WordPiece (tokenizer.ggml.model "bert") tokenizer: llama.cpp's llm_tokenizer_wpm_session.

Every case of llama.cpp's ggml-vocab-bert-bge.gguf.inp/.out runs in test_tokenizer.py's vocab harness (exact ids,
add_special=False). Here: what the .out files do not show (specials added with add_special=True, the normalizer
options, [UNK] for a whole word, decoding), on the bge vocabulary and on tiny vocabularies built from metadata."""
import numpy as np
import pytest

from fastgguf.tokenizer import Tokenizer, TokenizerError
from vocab_files import read_cases


@pytest.fixture(scope="module")
def bge(vocab_path):
    return Tokenizer(vocab_path("bert-bge"))


def tiny(tokens, **md):
    """A WPM vocabulary: [PAD] [UNK] [CLS] [SEP] then tokens (ids 4...)."""
    meta = {"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + tokens,
            "tokenizer.ggml.token_type": [3, 3, 3, 3] + [1] * len(tokens),
            "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.seperator_token_id": 3,
            "tokenizer.ggml.unknown_token_id": 1, "tokenizer.ggml.padding_token_id": 0}
    meta.update({f"tokenizer.ggml.{k}": v for k, v in md.items()})
    return Tokenizer.from_metadata(meta)


def test_bge_specials_and_flags(bge):
    # llama.cpp's bert defaults: [CLS]=101 is the BOS, [SEP]=102, [UNK]=100, [PAD]=0 (the file has no bos key)
    assert (bge.bos_id, bge.sep_id, bge.unk_id, bge.pad_id, bge.eos_id) == (101, 102, 100, 0, None)
    assert bge.add_sep and bge.add_bos and not bge.add_eos
    assert bge.token_text(101) == "[CLS]" and bge.token_text(102) == "[SEP]"
    assert repr(bge).startswith("<Tokenizer WPM")


def test_add_special_wraps_every_case_in_cls_sep(bge):
    """llama_tokenize for WPM: [CLS] first and [SEP] last with add_special, whatever add_bos_token says."""
    for text, expected in read_cases("bert-bge"):
        assert bge.tokenize(text, add_special=True) == [101] + expected + [102], text
    assert bge.tokenize("", add_special=True) == [101, 102]
    off = tiny(["\u2581hi"], add_bos_token=False, add_sep_token=False)
    assert off.tokenize("hi") == [2, 4, 3]
    assert not off.add_sep


def test_parse_special_cuts_control_tokens(bge):
    ids = bge.tokenize("[CLS] hello [SEP] world", add_special=False, parse_special=True)
    assert ids == [101, 7592, 102, 2088]
    # not parsed, the brackets are punctuation words of their own
    assert bge.tokenize("[SEP]", add_special=False) == bge.tokenize("[ sep ]", add_special=False)


def test_normalizer(bge):
    t = bge.tokenize
    assert t("CAFÉ Naïve", add_special=False) == t("cafe naive", add_special=False)     # lowercase, accents gone
    assert t("a\u3000b\u00a0c", add_special=False) == t("a b c", add_special=False)     # Unicode whitespace
    assert t("a\x00b\u200b\ufffdc\x07", add_special=False) == t("abc", add_special=False)  # NUL, \p{C}, U+FFFD
    assert t("日本語", add_special=False) == t("日 本 語", add_special=False)           # CJK: one word each
    assert t("x+y$z", add_special=False) == t("x + y $ z", add_special=False)          # ASCII symbols split
    texts = bge.token_text
    assert [texts(i) for i in t("x\u00a9y", add_special=False)] == ["▁x", "©", "y"]   # past ASCII: not split


def test_normalizer_options():
    toks = ["\u2581hello", "\u2581Hello", "\u2581cafe", "\u2581café", "\u2581caf", "é"]
    low = tiny(toks)
    assert low.tokenize("Hello Café", add_special=False) == [4, 6]
    keep = tiny(toks, **{"normalizer.lowercase": False})           # strip_accents follows lowercase
    assert keep.tokenize("Hello café Café", add_special=False) == [5, 7, 1]
    assert keep.tokenize("cafe\u0301", add_special=False) == [1]     # the mark stays, matches nothing: [UNK]
    assert low.tokenize("cafe\u0301", add_special=False) == [6]      # the mark is dropped
    only_case = tiny(toks, **{"normalizer.lowercase": True, "normalizer.strip_accents": False})
    assert only_case.tokenize("HELLO CAFÉ", add_special=False) == [4, 7]


def test_greedy_longest_match_and_unk_word():
    tok = tiny(["\u2581un", "\u2581unbe", "\u2581u", "lie", "li", "vab", "va", "b", "ly", "\u2581x"])
    assert tok.tokenize("unbelievably", add_special=False) == [5, 7, 9, 12]     # ▁unbe lie vab ly
    # "q" matches nothing: the whole word is one [UNK], the other words are kept
    assert tok.tokenize("x unbeq x", add_special=False) == [13, 1, 13]
    assert tok.tokenize("q", add_special=True) == [2, 1, 3]


def test_decode(bge):
    ids = bge.tokenize("Hello, unbelievable world!")
    assert bge.token_to_piece(7592) == b" hello"                  # word start: U+2581 -> space
    assert bge.token_to_piece(101) == b"" and bge.token_to_piece(101, special=True) == b"[CLS]"
    assert bge.detokenize(ids) == "hello , unbelievable world !"
    assert bge.detokenize(ids, skip_special=False) == "[CLS] hello , unbelievable world ![SEP]"
    assert bge.detokenize(np.array(ids)) == bge.detokenize(ids)
    word = bge.tokenize("unbelievably", add_special=False)
    assert len(word) > 1 and not bge.token_to_piece(word[1]).startswith(b" ")   # a "##" piece: no space
    dec = bge.streaming_decoder()
    assert "".join(dec.feed(i) for i in bge.tokenize("naïve 日本 ok")) + dec.flush() == " naive 日 本 ok"   # the pieces, unstripped


def test_missing_cls_or_sep_is_an_error():
    md = {"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["[UNK]", "\u2581a"]}
    with pytest.raises(TokenizerError, match="CLS"):
        Tokenizer.from_metadata(md)
