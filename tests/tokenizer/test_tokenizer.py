"""Tokenizer tests: exact ids against llama.cpp's own tokenizer test files and the SmolLM2 reference.

tests/data/vocab/ggml-vocab-*.gguf.xz are llama.cpp's vocabulary-only GGUF files (models/, xz-compressed), with
their .inp/.out cases (made with add_special=False, parse_special=False by llama.cpp's test-tokenizer-0).
"""
import json
import os

import numpy as np
import pytest

from fastgguf.tokenizer import Tokenizer, TokenizerError
from vocab_files import read_cases

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
SUPPORTED = ["command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2", "llama-bpe", "llama-spm",
             "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder"]
# exact ids for these too; no decode round trip (WPM lowercases, strips accents and drops whitespace; UGM
# normalizes with NFKC and merges spaces)
NORMALIZING = ["bert-bge", "nomic-bert-moe"]

_tokenizers = {}


@pytest.fixture(scope="session")
def vocab_tokenizer(vocab_path):
    def get(name):
        if name not in _tokenizers:
            _tokenizers[name] = Tokenizer(vocab_path(name))
        return _tokenizers[name]
    return get


# -- llama.cpp vocabularies -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SUPPORTED + NORMALIZING)
def test_llama_cpp_vocab_cases(name, vocab_tokenizer):
    tok = vocab_tokenizer(name)
    cases = read_cases(name)
    assert len(cases) >= 40
    failures = []
    for text, expected in cases:
        got = tok.tokenize(text, add_special=False, parse_special=False)
        if got != expected:
            failures.append((text, expected, got))
    assert not failures, f"{len(failures)}/{len(cases)} cases differ, first: {failures[0]!r}"


@pytest.mark.parametrize("name", SUPPORTED)
def test_llama_cpp_vocab_decode_roundtrip(name, vocab_tokenizer):
    tok = vocab_tokenizer(name)
    for text, expected in read_cases(name):
        assert tok.detokenize(expected) == text


@pytest.mark.parametrize("model, kind", [("rwkv", "RWKV"), ("plamo2", "PLaMo")])
def test_unsupported_types_from_metadata(model, kind):
    with pytest.raises(TokenizerError, match=kind):
        Tokenizer.from_metadata({"tokenizer.ggml.model": model, "tokenizer.ggml.tokens": ["a", "b"]})


def test_unknown_pre_tokenizer_is_named():
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "no-such-pre", "tokenizer.ggml.tokens": ["a"],
          "tokenizer.ggml.merges": []}
    with pytest.raises(TokenizerError, match="no-such-pre"):
        Tokenizer.from_metadata(md)


def test_spm_special_defaults_and_bos(vocab_tokenizer):
    tok = vocab_tokenizer("llama-spm")
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (1, 2, True)
    ids = tok.tokenize("Hello world")
    assert ids[0] == 1 and ids[1:] == tok.tokenize("Hello world", add_special=False)
    assert tok.detokenize(ids) == "Hello world"
    # <s> in the text is a control token: only recognised with parse_special
    assert tok.tokenize("<s>Hi", add_special=False, parse_special=True)[0] == 1
    assert 1 not in tok.tokenize("<s>Hi", add_special=False, parse_special=False)
    assert tok.token_to_piece(1) == b"" and tok.token_to_piece(1, special=True) == b"<s>"
    assert tok.eog_ids == {2} and tok.is_eog(2) and not tok.is_eog(1)


def test_spm_byte_fallback_and_streaming(vocab_tokenizer):
    tok = vocab_tokenizer("llama-spm")
    text = "a \U0001f999 b"                           # the llama emoji is not in the vocabulary: 4 byte tokens
    ids = tok.tokenize(text, add_special=False)
    assert [tok.token_text(i) for i in ids if tok.token_text(i).startswith("<0x")] == ["<0xF0>", "<0x9F>",
                                                                                      "<0xA6>", "<0x99>"]
    dec = tok.streaming_decoder()
    outs = [dec.feed(i) for i in ids]
    assert "".join(outs) + dec.flush() == " " + text  # the stream keeps the SPM prefix space
    assert all("\ufffd" not in o for o in outs)
    k = ids.index(tok.tokenize("\U0001f999", add_special=False)[-1])
    assert outs[k - 3:k] == ["", "", ""] and outs[k] == "\U0001f999"


def test_phi3_rstrip_of_special_tokens(vocab_tokenizer):
    tok = vocab_tokenizer("phi-3")
    end = tok.tokenize("<|end|>", add_special=False, parse_special=True)
    assert len(end) == 1 and tok.is_eog(end[0])
    # special tokens of Phi-3 eat the whitespace that follows them (llama.cpp RSTRIP attribute)
    a = tok.tokenize("<|user|>\nHi", add_special=False, parse_special=True)
    b = tok.tokenize("<|user|>Hi", add_special=False, parse_special=True)
    assert a == b


def test_llama3_eog_and_specials(vocab_tokenizer):
    tok = vocab_tokenizer("llama-bpe")
    eot = tok.tokenize("<|eot_id|>", add_special=False, parse_special=True)
    assert eot == [128009] and tok.is_eog(128009) and tok.is_eog(tok.eos_id)
    assert tok.add_bos and tok.tokenize("x")[0] == 128000
    plain = tok.tokenize("<|eot_id|>", add_special=False, parse_special=False)
    assert 128009 not in plain and tok.detokenize(plain) == "<|eot_id|>"
    assert tok.detokenize([128000, 9906]) == "Hello"
    assert tok.detokenize([128000, 9906], skip_special=False) == "<|begin_of_text|>Hello"


def test_decode_rejects_out_of_range(vocab_tokenizer):
    tok = vocab_tokenizer("gpt-2")
    with pytest.raises(ValueError, match="50257"):
        tok.detokenize([1, 50257])
    with pytest.raises(ValueError, match="-1"):
        tok.detokenize([-1])
    with pytest.raises(ValueError, match="99999"):
        tok.token_to_piece(99999)
    assert tok.detokenize(np.array([15496, 995], dtype=np.int32)) == "Hello world"


def test_streaming_decoder_never_splits_utf8(vocab_tokenizer):
    tok = vocab_tokenizer("gpt-2")
    text = "naïve 日本語 🦙 done"
    ids = tok.tokenize(text)
    dec = tok.streaming_decoder()
    outs = [dec.feed(i) for i in ids]
    assert all("\ufffd" not in o for o in outs)
    assert "".join(outs) + dec.flush() == text
    assert any(o == "" for o in outs)                # some tokens carry only part of a character
    partial = next(i for i in ids if b"\xf0" in tok.token_to_piece(i))      # first bytes of the emoji
    dec = tok.streaming_decoder()
    assert "\ufffd" not in dec.feed(partial)
    assert dec.flush() == "\ufffd"                   # a dangling partial character becomes U+FFFD on flush
    assert dec.feed(tok.tokenize("ok")[0]) == "ok"     # and the decoder is usable again


# -- the default model (SmolLM2) --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2(default_model_path):
    return Tokenizer(default_model_path)


def test_smollm2_reference_ids(smollm2):
    with open(os.path.join(DATA, "smollm2-tokenizer.json"), encoding="utf-8") as f:
        ref = json.load(f)
    assert len(ref["cases"]) >= 10
    for case in ref["cases"]:
        assert smollm2.tokenize(case["text"], parse_special=True) == case["ids_parse_special"], case["text"]
        assert smollm2.tokenize(case["text"]) == case["ids_plain"], case["text"]
        assert smollm2.detokenize(case["ids_plain"]) == case["text"]


def test_smollm2_properties(smollm2, default_model_path):
    assert smollm2.n_vocab == 49152 and not smollm2.add_bos
    assert smollm2.eos_id == 2 and smollm2.is_eog(2) and smollm2.is_eog(0)   # <|im_end|>, <|endoftext|>
    assert "<|im_start|>" in smollm2.chat_template
    ids = smollm2.tokenize("<|im_start|>user\nHi<|im_end|>", parse_special=True)
    assert ids[0] == 1 and ids[-1] == 2
    assert smollm2.detokenize(ids) == "user\nHi"
    assert smollm2.detokenize(ids, skip_special=False) == "<|im_start|>user\nHi<|im_end|>"
    from fastgguf.gguf import GGUFFile
    with GGUFFile(default_model_path) as f:
        tok = Tokenizer.from_metadata(f.metadata)
    assert tok.tokenize("Hello world") == [19556, 905]


# -- small synthetic vocabularies (no files) --------------------------------------------------------------------

def _byte_chars():
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        out[b] = chr(b) if b in keep else chr(256 + n)
        n += b not in keep
    return out


def _tiny_bpe(**extra):
    chars = _byte_chars()
    tokens = [chars[b] for b in range(256)] + ["he", "ll", "hell", "hello", "Ġw", "<|end|>", "<extra>"]
    types = [1] * 261 + [3, 4]
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.token_type": np.array(types, np.int32),
          "tokenizer.ggml.merges": ["h e", "l l", "he ll", "hell o", "Ġ w"],
          "tokenizer.ggml.eos_token_id": 261}
    md.update(extra)
    return Tokenizer.from_metadata(md)


def test_tiny_bpe_merges_by_rank():
    tok = _tiny_bpe()
    he, ll, hell, hello, gw = 256, 257, 258, 259, 260
    assert tok.tokenize("hello") == [hello]
    assert tok.tokenize("hell") == [hell]
    assert tok.tokenize("hel") == [he, ord("l")]
    assert tok.tokenize("hello wo") == [hello, gw, ord("o")]
    assert tok.detokenize([hello, gw, ord("o")]) == "hello wo"
    assert tok.bos_id is None or tok.bos_id == 11     # gpt2 default BOS id 11 when the key is absent


def test_tiny_bpe_user_defined_always_control_only_when_asked():
    tok = _tiny_bpe()
    assert tok.tokenize("a<extra>b") == [ord("a"), 262, ord("b")]              # user-defined: always
    assert 261 not in tok.tokenize("a<|end|>b")                                # control: only with parse_special
    assert tok.tokenize("a<|end|>b", parse_special=True) == [ord("a"), 261, ord("b")]
    assert tok.is_eog(261) and tok.eog_ids == {261}
    assert tok.detokenize([ord("a"), 261, 262]) == "a<extra>"
    assert tok.token_to_piece(261) == b"" and tok.token_to_piece(261, special=True) == b"<|end|>"


def test_add_bos_eos_flags():
    tok = _tiny_bpe(**{"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.bos_token_id": 262,
                       "tokenizer.ggml.add_eos_token": True})
    assert tok.tokenize("hello") == [262, 259, 261]
    assert tok.tokenize("hello", add_special=False) == [259]
    assert tok.tokenize("", add_special=True) == [262, 261]
    with pytest.raises(TokenizerError, match="add_bos_token"):
        Tokenizer.from_metadata({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
                                 "tokenizer.ggml.tokens": ["a"] * 1 + ["b"], "tokenizer.ggml.merges": [],
                                 "tokenizer.ggml.add_bos_token": True})


def test_tiny_spm_scores_and_space_prefix():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + \
             ["▁", "a", "b", "ab", "▁a", "▁ab", "ba"]
    n0 = 3 + 256
    scores = [0.0] * n0 + [-1.0, -2.0, -2.0, -3.0, -1.5, -0.5, -2.5]
    types = [2, 3, 3] + [6] * 256 + [1] * 7
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.scores": np.array(scores, np.float32), "tokenizer.ggml.token_type": np.array(types)}
    tok = Tokenizer.from_metadata(md)
    sp, a, b, ab, spa, spab, ba = range(n0, n0 + 7)
    assert tok.tokenize("ab") == [1, spab]
    assert tok.tokenize("ab", add_special=False) == [spab]
    assert tok.tokenize("aba", add_special=False) == [spab, a]
    assert tok.tokenize("c", add_special=False) == [sp, 3 + ord("c")]           # byte fallback <0x63>
    assert tok.detokenize([1, spab, a]) == "aba"
    # after a special token the next text gets a space prefix again (llama.cpp SPM behaviour)
    assert tok.tokenize("</s>ab", add_special=False, parse_special=True) == [2, spab]


def test_encode_argument_checks():
    tok = _tiny_bpe()
    with pytest.raises(TypeError):
        tok.tokenize(b"bytes")
    assert tok.tokenize("") == []
    assert tok.tokenize("\ud800x") == tok.tokenize("\ufffdx")                    # lone surrogate -> U+FFFD


# -- the compiled merge loop against the Python reference --------------------------------------------------------

def test_compiled_merge_matches_python_reference(vocab_tokenizer):
    import random

    from fastgguf.tokenizer import merge as T
    bpe, spm = vocab_tokenizer("gpt-2"), vocab_tokenizer("llama-spm")
    rng = random.Random(0)
    letters = "aeinorstlhd Ġ▁'.,0123456789\u00e9"
    for _ in range(3000):
        word = "".join(rng.choice(letters) for _ in range(rng.randint(1, 24)))
        w = word.replace(" ", "Ġ")
        assert T.merge_ranked(list(w), bpe._algo.ranks) == T.merge_ranked_py(list(w), bpe._algo.ranks)
        w = word.replace(" ", "▁").replace("Ġ", "▁")
        assert T.merge_scored(list(w), spm._vocab.ids, spm._vocab.scores) == \
            T.merge_scored_py(list(w), spm._vocab.ids, spm._vocab.scores)


@pytest.mark.parametrize("name", ["qwen2", "llama-spm"])
def test_python_merge_fallback_gives_same_ids(name, vocab_path, monkeypatch):
    from fastgguf.tokenizer import bpe, merge, spm
    monkeypatch.setattr(bpe, "merge_ranked", merge.merge_ranked_py)
    monkeypatch.setattr(spm, "merge_scored", merge.merge_scored_py)
    tok = Tokenizer(vocab_path(name))
    for text, expected in read_cases(name):
        assert tok.tokenize(text, add_special=False) == expected


def test_pre_tokenizer_one_pass_starcoder_equals_two_passes():
    """The one-regex form of the starcoder/smollm pre-tokenizer cuts exactly like llama.cpp's two regexes."""
    import random

    from fastgguf.tokenizer import pretokenizer as T
    one, two = T.compiled_pre("starcoder"), T.compiled_pre("starcoder-2pass")
    rng = random.Random(1)
    alphabet = list(" \t\n\r'sdtmlvre0123456789abcXYZ,.!?-_()\u00a0\u3000\u0660\u00e9\u0301日🦙\x1c\x0b") + ["'s", "  "]
    for _ in range(20000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        assert T.pre_split(s, one) == T.pre_split(s, two), repr(s)


# -- regex pre-tokenizers against llama.cpp's hand-written splitters (unicode.cpp *_custom_gpt2/llama3/qwen2) -------

def _custom_split(text, kind):
    """A direct Python transcription of llama.cpp's custom splitters (the code it runs instead of these regexes):
    kind "gpt2", "llama3" (numbers by 3) or "qwen2" (numbers by 1)."""
    from fastgguf.tokenizer.pretokenizer import char_class
    n = len(text)

    def cls(p):
        return char_class(ord(text[p])) if 0 <= p < n else None       # None: outside the text

    def letter(p):
        return cls(p) == "L"

    def number(p):
        return cls(p) == "N"

    def space(p):
        return cls(p) == "W"

    def other(p):          # not whitespace, letter or number, and inside the text
        return cls(p) not in (None, "W", "L", "N")

    words, pos, start = [], 0, 0

    def add(end):
        nonlocal start
        if end > start:
            words.append(text[start:end])
        start = end

    while pos < n:
        c = text[pos]
        if c == "'" and pos + 1 < n:
            c1 = text[pos + 1] if kind == "gpt2" else text[pos + 1].lower()
            if c1 in "stmd":
                pos += 2
                add(pos)
                continue
            if pos + 2 < n:
                c2 = text[pos + 2] if kind == "gpt2" else text[pos + 2].lower()
                if c1 + c2 in ("re", "ve", "ll"):
                    pos += 3
                    add(pos)
                    continue
        if kind == "gpt2":
            q = pos + 1 if c == " " else pos
            if letter(q) or number(q) or other(q):
                test = letter if letter(q) else number if number(q) else other
                pos = q
                while test(pos):
                    pos += 1
                add(pos)
                continue
        else:
            if c not in "\r\n" and not number(pos) and (letter(pos) or letter(pos + 1)):
                pos += 1
                while letter(pos):
                    pos += 1
                add(pos)
                continue
            if number(pos):
                step = 3 if kind == "llama3" else 1
                k = 0
                while number(pos) and k < step:
                    pos += 1
                    k += 1
                add(pos)
                continue
            q = pos + 1 if c == " " else pos
            if other(q):
                pos = q
                while other(pos):
                    pos += 1
                while pos < n and text[pos] in "\r\n":
                    pos += 1
                add(pos)
                continue
        nws, last_nl = 0, -1
        while space(pos + nws):
            if text[pos + nws] in "\r\n":
                last_nl = pos + nws + 1
            nws += 1
        if kind != "gpt2" and last_nl >= 0:
            pos = last_nl
        elif nws > 1 and pos + nws < n:
            pos += nws - 1
        elif nws > 0:
            pos += nws
        else:
            pos += 1
        add(pos)
    return words


@pytest.mark.parametrize("kind", ["gpt2", "llama3", "qwen2"])
def test_pre_tokenizer_regex_equals_llama_cpp_custom_splitter(kind):
    import random

    from fastgguf.tokenizer import pretokenizer as T
    compiled = T.compiled_pre(kind)
    rng = random.Random(2)
    alphabet = list(" \t\n\r'sSdtTmlLvVrReE0123456789abcXYZ,.!?-_()") + ["'s", "'LL", "'Re", "  ", "   ", "\r\n"] \
        + list("\u00a0\u3000\u2028\u0660\u00e9\u0301\u0378日本🦙\x1c\x0b\x85")   # NBSP..., numbers, marks, unassigned
    for _ in range(20000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert T.pre_split(s, compiled) == _custom_split(s, kind), repr(s)


@pytest.mark.parametrize("name", ["llama-spm", "gemma-4"])
def test_cutting_spm_text_at_spaces_changes_nothing(name, vocab_tokenizer):
    """Merging word by word (cut before U+2581 where no token can span) equals merging the whole text at once."""
    import random

    from fastgguf.tokenizer import core as T
    tok = vocab_tokenizer(name)
    rng = random.Random(3)
    words = ["the", "a", "▁", "▁▁", "ing", "Hello", "wor", "ld", "\u00e9t\u00e9", "日本", "🦙", ".", ">", "<", "'s",
             "12", "\n"]
    for _ in range(300):
        text = "".join(rng.choice(words) + ("▁" if rng.random() < 0.5 else "") for _ in range(rng.randint(1, 12)))
        if tok.spm:
            whole = list(tok._algo.word(text))
            cut = [i for c in tok._algo.cut.split(text) if c for i in tok._algo.word(c)]
        else:
            text = text.replace("\n", "")
            whole = list(tok._algo.word(text))
            cut = [i for c in tok._algo.cut.split(text) if c for i in tok._algo.word(c)]
        assert cut == whole, repr(text)


# -- optional: against llama.cpp itself (llama-cpp-python), when it is installed -----------------------------------

@pytest.mark.parametrize("name", ["llama-spm", "phi-3", "gpt-2", "qwen2", "llama-bpe",
                                  "bert-bge", "nomic-bert-moe"])
def test_random_text_against_llama_cpp(name, vocab_path, vocab_tokenizer):
    llama_cpp = pytest.importorskip("llama_cpp")
    import random
    path = vocab_path(name)
    ref = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    tok = vocab_tokenizer(name)
    specials = [tok.token_text(i) for i in tok._special_all[:40]]
    alphabet = list(" \t\n\r'sStTdDlLvVrReE0123456789abcXYZ,.!?-_()[]<>|/\\\"#$%&*+=~`^@") \
        + ["'s", "'LL", "  ", "   ", "\r\n", "\n\n", "Hello", " world", "ing", "▁"] \
        + list("\u00a0\u3000\u2028\u0660\u00e9\u0301\u0378日本語한국어ру́сский🦙🚀\x1c\x0b\x85\u200b\ufeffµ")
    rng = random.Random(4)
    for _ in range(300):
        parts = [rng.choice(alphabet) for _ in range(rng.randint(0, 24))]
        if specials and rng.random() < 0.3:
            parts.insert(rng.randint(0, len(parts)), rng.choice(specials))
        s = "".join(parts)
        for parse_special in (False, True):
            expected = ref.tokenize(s.encode("utf-8"), add_bos=True, special=parse_special)
            assert tok.tokenize(s, add_special=True, parse_special=parse_special) == expected, (s, parse_special)


def test_cli_tokenize(vocab_path, capsys):
    from fastgguf.cli import main
    assert main(["tokenize", "-m", vocab_path("gpt-2"), "--ids", "Hello world"]) == 0
    assert capsys.readouterr().out.strip() == "[15496, 995]"
    assert main(["tokenize", "-m", vocab_path("gpt-2"), "Hello world"]) == 0
    assert capsys.readouterr().out.splitlines() == [" 15496 -> 'Hello'", "   995 -> ' world'"]
    assert main(["tokenize", "-m", vocab_path("bert-bge"), "--ids", "Hello world"]) == 0
    assert capsys.readouterr().out.strip() == "[101, 7592, 2088, 102]"        # llama-tokenize's ids
