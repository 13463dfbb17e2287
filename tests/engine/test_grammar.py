"""Structured output (fastgguf.engine.grammar): the llguidance vocabulary bridge on every vocabulary we have, grammars
that fail closed, llama.cpp's sample GBNF grammars, and SamplingParams(json_schema=, grammar=).

Documents are tokenized by fastgguf's own tokenizer (tokenize_raw) and fed token by token through the masks: each
token must be allowed by the mask before it, and at the end every end-of-generation id must be allowed.
"""
import dataclasses
import glob
import json
import os
import sys
import threading

import numpy as np
import pytest

pytest.importorskip("llguidance")

from fastgguf import Model, SamplingParams  # noqa: E402
from fastgguf.cli import build_parser  # noqa: E402
from fastgguf.cli.common import sampling_params  # noqa: E402
from fastgguf.engine.grammar import (Grammar, GrammarError, Matcher, Vocabulary, require_llguidance,  # noqa: E402
                                     vocabulary)
from fastgguf.tokenizer import Tokenizer  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
VOCABS = sorted(os.path.basename(p)[len("ggml-vocab-"):-len(".gguf.xz")]
                for p in glob.glob(os.path.join(DATA, "vocab", "ggml-vocab-*.gguf.xz")))
GRAMMARS = os.path.join(DATA, "grammars")
N_PAD = 13      # vocabulary-only files: a logits row this much wider than the vocabulary

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "kind": {"enum": ["cat", "dog", "émeu"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 200},
        "weight": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "owner": {"$ref": "#/$defs/person"},
        "notes": {"type": ["string", "null"]},
    },
    "required": ["name", "kind", "age", "tags", "owner"],
    "additionalProperties": False,
    "$defs": {"person": {"type": "object", "properties": {"id": {"type": "integer"}, "verified": {"type": "boolean"}},
                         "required": ["id", "verified"], "additionalProperties": False}},
}
DOC = {"name": 'Zoë "the" \\ cat\n\tof 日本 😀', "kind": "émeu", "age": 12, "weight": -3.25e-3,
       "tags": ["a", "b c", ""], "owner": {"id": 7, "verified": True}, "notes": None}
DOCUMENTS = [
    json.dumps(DOC, ensure_ascii=False),
    json.dumps(DOC, ensure_ascii=False, indent=2),
    "\n" + json.dumps(dict(DOC, kind="cat"), separators=(",", ":")),        # \u escapes, a leading newline
]
BREAKS_SCHEMA = [
    json.dumps(dict(DOC, age=-1)),                           # minimum
    json.dumps(dict(DOC, kind="cow"), ensure_ascii=False),   # enum
    json.dumps({k: v for k, v in DOC.items() if k != "tags"}, ensure_ascii=False),   # required
    json.dumps(dict(DOC, extra=1), ensure_ascii=False),       # additionalProperties
    "   " + json.dumps(DOC, ensure_ascii=False),              # 3 leading spaces
    json.dumps(DOC, ensure_ascii=False) + "\n",               # trailing whitespace
]


def allowed(mask, i):
    return bool(mask[i >> 5] >> np.uint32(i & 31) & np.uint32(1))


def allowed_ids(mask):
    return np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")).tolist()


def walk(vocab, grammar, tok, text):
    """Feed text's raw tokens through a Matcher; the Matcher after the last one, or None at the first refusal."""
    ids = tok.tokenize_raw(text)
    assert b"".join(tok.token_to_piece(i) for i in ids) == text.encode("utf-8"), "tokenize_raw must keep the bytes"
    m = Matcher(vocab, grammar)
    for t in ids:
        if not allowed(m.fill_mask(), t):
            return None
        m.consume(t)
    return m


def check_bridge(tok, vocab):
    grammar = Grammar.json_schema(SCHEMA)
    first = Matcher(vocab, grammar).fill_mask()
    ids = allowed_ids(first)
    assert any(tok.token_to_piece(i).startswith(b"{") for i in ids if i < tok.n_vocab)
    assert max(ids) < tok.n_vocab, "padding ids are never allowed"
    assert not set(ids) & tok.eog_ids, "an empty output does not match the schema"
    for text in DOCUMENTS:
        m = walk(vocab, grammar, tok, text)
        assert m is not None, text
        mask = m.fill_mask()
        assert m.accepting() and m.stopped()
        assert set(allowed_ids(mask)) == set(tok.eog_ids), "after the value only end of generation"
        m.consume(min(tok.eog_ids))
    for text in BREAKS_SCHEMA:
        m = walk(vocab, grammar, tok, text)
        assert m is None or not m.accepting(), text


@pytest.fixture(scope="module")
def vocab_tokenizer(vocab_path):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Tokenizer(vocab_path(name))
        return cache[name]
    return get


@pytest.mark.parametrize("name", VOCABS)
def test_bridge_on_llama_cpp_vocabularies(name, vocab_tokenizer):
    tok = vocab_tokenizer(name)
    if tok.wpm or tok.ugm:      # encoder vocabularies (embeddings, rerank): they normalize text and generate nothing
        pytest.skip(f"{name}: a {tok.model!r} vocabulary has no raw-bytes tokenization for a grammar")
    vocab = Vocabulary(tok, tok.n_vocab + N_PAD)     # vocabulary-only file: no Model, a wider logits row
    assert (vocab.n_vocab, vocab.n_words) == (tok.n_vocab + N_PAD, -(-(tok.n_vocab + N_PAD) // 32))
    assert vocab.eog_ids == tok.eog_ids
    check_bridge(tok, vocab)


def test_vocabularies_include_spm_with_space_prefix(vocab_tokenizer):
    spm = [n for n in ("llama-spm", "phi-3") if n in VOCABS]
    assert spm
    for name in spm:
        tok = vocab_tokenizer(name)
        assert tok.spm and tok.add_space_prefix
        # what the bridge must not do: tokenize() prefixes a space, tokenize_raw() keeps the bytes
        assert tok.token_to_piece(tok.tokenize("{", add_special=False)[0]).startswith(b" ")
        assert b"".join(map(tok.token_to_piece, tok.tokenize_raw("{"))) == b"{"
        assert tok.add_space_prefix, "tokenize_raw leaves the shared tokenizer alone"
        with pytest.raises(TypeError):
            tok.tokenize_raw(b"{")


@pytest.mark.parametrize("which", ["default", "gemma3"])
def test_bridge_on_models(which, request):
    path = request.getfixturevalue("default_model_path" if which == "default" else "gemma3_path")
    model = Model(path)
    got = []
    threads = [threading.Thread(target=lambda: got.append(vocabulary(model))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(v is got[0] for v in got), "one Vocabulary per model"
    assert vocabulary(model) is got[0]
    assert got[0].n_vocab == model.n_vocab
    check_bridge(model.tokenizer, got[0])


# -- fail closed -------------------------------------------------------------------------------------------------

# (what schema_rewrite makes exact, `not` / `if` / dependentRequired / unknown formats among them, compiles: its tests)
UNSUPPORTED = [
    ({"not": {"pattern": "^a"}}, "not"),      # not {type: string, pattern}: narrowed to the non-strings
    ({"if": {"pattern": "^a"}, "then": {"minLength": 2}}, "if"),
    ({"type": "array", "contains": {"type": "integer"}}, "contains"),
    ({"type": "object", "propertyNames": {"pattern": "^a"}}, "propertyNames"),
    ({"type": "string", "pattern": "^(?=a)[a-z]+$"}, "look-around"),
    ({"$ref": "https://example.com/schema.json"}, "https://example.com/schema.json"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf"),
]


@pytest.mark.parametrize("schema,word", UNSUPPORTED, ids=[w for _, w in UNSUPPORTED])
def test_unsupported_schemas_are_refused(schema, word):
    with pytest.raises(GrammarError, match="json_schema") as e:
        Grammar.json_schema(schema)
    assert word in str(e.value)
    assert "   1 | " not in str(e.value), "llguidance's source listing is cut off"
    with pytest.raises(GrammarError) as e:
        SamplingParams(json_schema=schema)
    assert word in str(e.value)
    with pytest.raises(ValueError):             # GrammarError is a ValueError: the API answers 400
        SamplingParams(json_schema=schema)


def test_lenient_only_when_asked():
    schema = {"type": "array", "contains": {"type": "integer"}}
    with pytest.raises(GrammarError):
        Grammar.json_schema(schema)
    assert Grammar.json_schema(schema, lenient=True).kind == "json_schema"
    assert Grammar.json_schema({"oneOf": [{"type": "integer"}, {"type": "string"}]})     # disjoint oneOf is fine


@pytest.mark.parametrize("text,word", [('root ::= "a" foo', "foo"), ('root ::= [a-', "end of input"),
                                       ('start ::= "a"', "root")])
def test_broken_gbnf_is_refused(text, word):
    with pytest.raises(GrammarError, match="gbnf") as e:
        Grammar.gbnf(text)
    assert word in str(e.value)
    with pytest.raises(GrammarError, match="^grammar: "):
        SamplingParams(grammar=text)


@pytest.mark.parametrize("make", [lambda: Grammar.lark('start: "a" foo'), lambda: Grammar.regex("(?=a)b"),
                                  lambda: Grammar.regex("[a-")])
def test_broken_lark_and_regex_are_refused(make):
    with pytest.raises(GrammarError):
        make()


def test_without_llguidance_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "llguidance", None)      # import llguidance now raises ImportError
    for make in (require_llguidance, Grammar.json_object, lambda: Grammar.gbnf('root ::= "a"'),
                 lambda: SamplingParams(json_schema={"type": "object"})):
        with pytest.raises(ImportError, match=r"pip install 'fastgguf\[structured\]'"):
            make()
    assert SamplingParams().constraint() is None                  # unconstrained params never need it


def test_refused_tokens_raise(vocab_tokenizer):
    tok = vocab_tokenizer("llama-bpe")
    vocab = Vocabulary(tok)
    m = Matcher(vocab, Grammar.json_schema(SCHEMA))
    eog = min(tok.eog_ids)
    with pytest.raises(RuntimeError, match="end-of-generation"):
        m.consume(eog)                                  # the value has not started: the grammar cannot end
    (bad,) = tok.tokenize_raw("x")
    assert not allowed(m.fill_mask(), bad)
    with pytest.raises(RuntimeError, match="refused"):
        m.consume(bad)
    with pytest.raises(RuntimeError):
        m.consume(tok.n_vocab)


def test_end_of_generation_only_where_the_grammar_ends():
    """An EOG token that is also text ("x" here: the metadata makes it EOS) is never allowed as text: sampling it
    would end the output early. Only where the grammar may end, and then every EOG id."""
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default", "tokenizer.ggml.merges": [],
          "tokenizer.ggml.tokens": ["x", "y", "z", "<|endoftext|>"], "tokenizer.ggml.token_type": [1, 1, 1, 3],
          "tokenizer.ggml.eos_token_id": 0}
    tok = Tokenizer.from_metadata(md)
    assert tok.eog_ids == {0, 3} and tok.token_to_piece(0) == b"x"
    m = Matcher(Vocabulary(tok), Grammar.lark('start: "x" | "y" | "yz"'))
    assert allowed_ids(m.fill_mask()) == [1]
    m.consume(1)
    assert allowed_ids(m.fill_mask()) == [0, 2, 3] and m.accepting() and not m.stopped()
    m.consume(3)
    assert m.stopped()


def test_whitespace_is_bounded(vocab_tokenizer):
    tok = vocab_tokenizer("gpt-2")
    vocab = Vocabulary(tok)
    g = Grammar.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert walk(vocab, g, tok, '{\n' + " " * 20 + '"a": 1}').fill_mask() is not None
    assert walk(vocab, g, tok, '{\n' + " " * 21 + '"a"') is None
    assert walk(vocab, g, tok, '{' + " " * 2) is None
    assert walk(vocab, g, tok, '\n\n{"a": 1}').accepting()
    number = Grammar.json_schema({"type": "number"})
    assert walk(vocab, number, tok, "-1.5e3").accepting()                 # exponents without bounds
    assert walk(vocab, Grammar.json_schema({"type": "number", "maximum": 10}), tok, "1e0") is None   # see docstring


# -- other grammar kinds -----------------------------------------------------------------------------------------

SAMPLES = {"arithmetic": "x+1=(y -2)\n", "list": "- one\n- two words\n", "json": '{"a": [1, 2.5, "x"]}',
           "json_arr": '[\n{"a": true},\n{"b": null}]', "chess": "1. e4 e5\n2. Nf3 Nc6\n", "english": "Hello there.",
           "japanese": "こんにちは", "c": "int main(){return 0;}"}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_llama_cpp_sample_grammars(name, vocab_tokenizer):
    with open(os.path.join(GRAMMARS, f"{name}.gbnf"), encoding="utf-8") as f:
        g = Grammar.gbnf(f.read())
    assert g.kind == "gbnf"
    tok = vocab_tokenizer("llama-spm")
    m = walk(Vocabulary(tok), g, tok, SAMPLES[name])
    assert m is not None, "a sample document of the grammar"


def test_lark_and_regex(vocab_tokenizer):
    tok = vocab_tokenizer("qwen2")
    vocab = Vocabulary(tok)
    yes_no = Grammar.lark('start: "yes" | "no"')
    assert walk(vocab, yes_no, tok, "yes").accepting()
    assert walk(vocab, yes_no, tok, "maybe") is None
    digits = Grammar.regex(r"[0-9]{3}-[a-z]+")
    m = walk(vocab, digits, tok, "123-abc")
    assert m.accepting() and not m.stopped()
    assert walk(vocab, digits, tok, "12-") is None


def test_grammar_is_a_value():
    a, b = Grammar.json_schema(SCHEMA), Grammar.json_schema(json.dumps(SCHEMA))
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != Grammar.json_object()
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.text = "start: /x/"
    with pytest.raises(ValueError):
        Grammar("yaml", "start: /x/")
    with pytest.raises(TypeError):
        Grammar.json_schema(["not", "a", "dict"])
    with pytest.raises(GrammarError):
        Grammar.json_schema({"type": "number", "minimum": float("nan")})


# -- SamplingParams ----------------------------------------------------------------------------------------------

def test_params_constraint():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    p = SamplingParams(json_schema=schema)
    assert p.constraint() == Grammar.json_schema(schema)
    schema["properties"]["b"] = {"type": "string"}          # the params keep their own copy
    assert p.json_schema == {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert p == SamplingParams(json_schema={"type": "object", "properties": {"a": {"type": "integer"}}})
    assert hash(p) == hash(SamplingParams(json_schema=p.json_schema))
    assert p.replace(seed=3).constraint() == p.constraint()
    assert SamplingParams(json_schema={"properties": {"a": {}, "b": {}}}) != SamplingParams(
        json_schema={"properties": {"b": {}, "a": {}}}), "property order is part of the grammar"
    q = SamplingParams(grammar='root ::= "yes" | "no"')
    assert isinstance(q.grammar, Grammar) and q.constraint() is q.grammar
    assert SamplingParams(grammar=q.grammar) == q
    assert SamplingParams().constraint() is None
    with pytest.raises(ValueError, match="not both"):
        SamplingParams(json_schema=schema, grammar='root ::= "a"')
    with pytest.raises(ValueError, match="cut"):
        SamplingParams(json_schema=schema, stop=["}"])
    with pytest.raises(TypeError):
        SamplingParams(json_schema='{"type": "object"}')
    with pytest.raises(TypeError):
        SamplingParams(grammar=3)


def test_cli_flags(tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text('{"type": "object", "properties": {"a": {"type": "integer"}}}')
    gbnf = tmp_path / "yes.gbnf"
    gbnf.write_text('root ::= "yes" | "no"\n')
    parse = build_parser().parse_args
    assert sampling_params(parse(["run", "--json-schema", str(schema), "x"])).json_schema["properties"] == {
        "a": {"type": "integer"}}
    assert sampling_params(parse(["run", "--json-schema", '{"type": "string"}', "x"])).json_schema == {
        "type": "string"}
    assert sampling_params(parse(["run", "--grammar", str(gbnf), "x"])).constraint() == Grammar.gbnf(
        'root ::= "yes" | "no"\n')
    with pytest.raises(SystemExit):
        parse(["run", "--json-schema", "not json", "x"])


def test_generate_enforces_the_schema(default_model_path):
    """generate() masks every token: the real model's output under a schema parses and validates (greedy and
    sampled, seeded), and finishes "stop" at the end of the value."""
    import jsonschema
    from fastgguf.engine.generate import generate
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 12}}, "required": ["answer"],
              "additionalProperties": False}
    model = Model(default_model_path)
    for kw in (dict(temperature=0), dict(temperature=1.0, seed=1), dict(temperature=1.5, seed=2)):
        r = generate(model, "Reply in JSON: what is 2 + 2?", json_schema=schema, max_tokens=48, **kw)
        assert r.finish_reason == "stop", (kw, r.text)
        jsonschema.validate(json.loads(r.text), schema)


def test_background_mask_equals_the_mask_computed_in_place(vocab_tokenizer):
    """consume() starts the next mask in a worker thread (it overlaps the forward pass); fill_mask() must then
    give exactly the mask a matcher computes in place, token after token, and a copy never races it."""
    tok = vocab_tokenizer("llama-bpe")
    vocab, grammar = Vocabulary(tok), Grammar.json_schema(SCHEMA)
    bg, ref = Matcher(vocab, grammar), Matcher(vocab, grammar)
    ids = list(tok.tokenize_raw(DOCUMENTS[0]))
    for i, t in enumerate(ids):
        got = bg.fill_mask().copy()
        ref._compute()                       # in place, no worker: the reference
        assert np.array_equal(got, ref.mask), i
        bg.consume(t)
        ref._consume(t)
        assert bg._pending is not None or bg.stopped()
        if i == len(ids) // 2:
            twin = bg.copy()                 # waits for the pending mask first
            assert bg._pending is None and np.array_equal(twin.fill_mask(), bg.fill_mask())
    assert set(allowed_ids(bg.fill_mask())) == set(tok.eog_ids)
    bg.consume(min(tok.eog_ids))
    assert bg._pending is None               # the sequence ended: nothing computed for nobody


def test_background_masks_after_fork(vocab_tokenizer):
    """A forked child gets a worker of its own (a parent's threads do not survive fork)."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    tok = vocab_tokenizer("llama-bpe")
    m = Matcher(Vocabulary(tok), Grammar.json_schema(SCHEMA))
    m.consume(list(tok.tokenize_raw("{"))[0])
    m.fill_mask()
    pid = os.fork()
    if pid == 0:
        try:
            import signal
            signal.alarm(30)                 # a worker that never runs would hang the child: fail it instead
            m.consume(list(tok.tokenize_raw(' "name"'))[0])
            m.fill_mask()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
