"""uniqueItems enforced as the output is written (fastgguf.engine.unique_items), against jsonschema's equality."""
import json
import os
import random
import re

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fastgguf.engine.schema_rewrite import UNIQUE_MARK, rewrite
from fastgguf.engine.unique_items import TokenBytes, UniqueItems, _Places
from fastgguf.errors import GrammarError

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True)


def tracker(schema):
    return UniqueItems(_Places(rewrite(schema, defer_unique=True)))


def feed_all(u, pieces):
    """The index of the first piece feed() refuses, or None."""
    for i, p in enumerate(pieces):
        if not u.feed(p):
            return i
    return None


def chunks(text, rng):
    """text's UTF-8 bytes cut at random places (tokens of 1-6 bytes)."""
    data, out, i = text.encode(), [], 0
    while i < len(data):
        n = rng.randint(1, 6)
        out.append(data[i:i + n])
        i += n
    return out


def test_rewrite_marks_what_it_cannot_enumerate():
    s = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    with pytest.raises(GrammarError, match="uniqueItems at #: repeats can only be excluded"):
        rewrite(s)                                    # tool arguments: refused as before
    assert rewrite(s, defer_unique=True) == {"type": "array", "items": {"type": "string"}, UNIQUE_MARK: True}
    big = {"type": "array", "items": {"enum": list(range(500))}, "uniqueItems": True}
    with pytest.raises(GrammarError, match="more than 256 arrays"):   # counted without a 1,000-digit number
        rewrite(big)
    assert rewrite(big, defer_unique=True)[UNIQUE_MARK] is True
    small = {"type": "array", "items": {"enum": ["x", "y"]}, "uniqueItems": True}
    assert UNIQUE_MARK not in rewrite(small, defer_unique=True)        # enumerated: the grammar says it
    assert rewrite({"type": "array", UNIQUE_MARK: True}) == {"type": "array"}   # a schema's own mark means nothing


@pytest.mark.parametrize("doc,repeat", [
    ('["a", "b", "a"]', True),
    ('["a", "\\u0061"]', True),                       # the same string, escaped
    ('["a\\"", "a\\\\"]', False),
    ('[1, 1.0]', True),
    ('[1, 10]', False),
    ('[1e2, 100]', True),
    ('[true, 1]', False),
    ('[null, false, 0, "", [], {}]', False),
    ('[{"a": 1, "b": [2]}, {"b": [2], "a": 1.0}]', True),   # objects unordered
    ('[[1, 2], [2, 1]]', False),
    ('[[1, 2], [1, 2]]', True),
    ('[ "x" , "y" ,"x" ]', True),
    ('[\n  -0,\n  0\n]', True),
])
def test_repeats_are_found_wherever_the_tokens_split(doc, repeat):
    schema = {"type": "array", "uniqueItems": True}
    valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(doc))
    assert valid == (not repeat)
    for seed in range(20):
        pieces = chunks(doc, random.Random(seed))
        first = feed_all(tracker(schema), pieces)
        assert (first is not None) == repeat, (doc, pieces)


def test_places_follow_keys_refs_and_alternatives():
    schema = {
        "$defs": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
        "type": "object",
        "properties": {"tags": {"$ref": "#/$defs/tags"}, "free": {"type": "array"},
                       "either": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/tags"}]}},
        "patternProperties": {"^u_": {"type": "array", "uniqueItems": True}},
        "additionalProperties": {"type": "object", "properties": {"deep": {"$ref": "#/$defs/tags"}}},
    }
    cases = [('{"tags": ["a", "a"]}', True), ('{"free": ["a", "a"]}', False), ('{"either": ["a", "a"]}', True),
             ('{"u_x": [1, 1]}', True), ('{"v": {"deep": ["q", "q"]}}', True), ('{"v": {"free": [1, 1]}}', False),
             ('{"free": ["a", "a"], "tags": ["a", "b"]}', False), ('{"t\\"ags": ["a", "a"]}', False)]
    for doc, repeat in cases:
        for seed in range(5):
            first = feed_all(tracker(schema), chunks(doc, random.Random(seed)))
            assert (first is not None) == repeat, doc


def test_items_and_prefix_items():
    schema = {"type": "array", "prefixItems": [{"type": "string"}],
              "items": {"type": "array", "uniqueItems": True}}
    assert feed_all(tracker(schema), [b'[[1, 1], [2, 2]]']) == 0      # position 1 on: unique inner arrays
    assert feed_all(tracker(schema), [b'["a", [1, 2], [3, 4]]']) is None
    assert feed_all(tracker({"type": "array", "items": {"type": "array", "uniqueItems": True}}),
                    [b'[[1, 1]]']) == 0


VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([1.0, 2.5, -0.0]),
                                st.text(alphabet="ab\"\\é\n", max_size=3)),
                      lambda inner: st.one_of(st.lists(inner, max_size=3),
                                              st.dictionaries(st.sampled_from(["k", "l", "é"]), inner, max_size=2)),
                      max_leaves=6)


def dump(v, rng):
    """JSON text of v with random spacing and number spellings (1 as 1, 1.0 or 1e0) and escapes."""
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, int):
        return rng.choice([str(v), f"{v}.0", f"{v}e0"])
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=rng.random() < 0.5)
    sp = rng.choice(["", " ", "\n  "])
    if isinstance(v, list):
        return "[" + sp + ("," + sp).join(dump(x, rng) for x in v) + sp + "]"
    return "{" + sp + ("," + sp).join(json.dumps(k) + ":" + sp + dump(x, rng) for k, x in v.items()) + sp + "}"


@SETTINGS
@given(st.lists(VALUES, max_size=6), st.randoms(use_true_random=False))
def test_feed_refuses_exactly_what_jsonschema_rejects(items, rng):
    """For random arrays (repeats drawn in often), fed in random pieces: feed() refuses a piece iff the array breaks
    uniqueItems under jsonschema, and the piece it refuses is the one that completes the first repeat."""
    items = items + [rng.choice(items) for _ in range(rng.randint(0, 2))] if items else items
    rng.shuffle(items)
    schema = {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}
    doc = '{"a": ' + dump(items, rng) + "}"
    valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(doc))
    pieces = chunks(doc, rng)
    first = feed_all(tracker(schema), pieces)
    assert (first is None) == valid, (doc, pieces)
    if first is not None:                             # the prefix up to that piece already holds a repeat
        done = b"".join(pieces[:first + 1])
        assert feed_all(tracker(schema), [done]) == 0
        assert feed_all(tracker(schema), [b"".join(pieces[:first])]) is None


def test_forbid_clears_exactly_the_tokens_that_complete_a_repeat():
    pieces = [b'"', b'a', b'"', b'",', b'"]', b'b', b', ', b'ab"', b'\xff<|end|>', b'[', b'[[1,1,', b'1']
    vocab = TokenBytes(pieces)
    schema = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    u = tracker(schema)
    for p in (b'[', b'"', b'a', b'"', b', ', b'"', b'a'):
        assert u.feed(p)
    mask = np.full(1, 0xFFFFFFFF, np.uint32)
    u.forbid(mask, vocab)
    allowed = {pieces[i] for i in range(len(pieces)) if mask[0] >> i & 1}
    assert allowed == set(pieces) - {b'"', b'",', b'"]'}        # each would close a second "a"
    assert not u.copy().feed(b'"') and u.feed(b'b"')            # copy(): the original goes on unchanged
    outer = tracker({"type": "array", "items": {"type": "array", "uniqueItems": True}})
    mask = np.full(1, 0xFFFFFFFF, np.uint32)
    outer.forbid(mask, vocab)                                   # no unique array open: only "[[1,1," can repeat
    assert not mask[0] >> 10 & 1 and mask[0] >> 9 & 1
    assert outer.feed(b'[') and not outer.feed(b'[1,1,') and outer.feed(b'[1,2,')


def test_tracker_only_where_the_grammar_needs_it():
    pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import Grammar
    assert UniqueItems.of(Grammar.json_schema({"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True})) \
        is None                                                 # enumerated in the grammar
    assert UniqueItems.of(Grammar.json_schema({"type": "array", "uniqueItems": True})) is not None
    assert UniqueItems.of(Grammar.regex("x-fastgguf-uniqueItems")) is None


# -- wired in: Matcher, generate(), a real model ---------------------------------------------------------------------

FRUITS = {"type": "object", "additionalProperties": False, "required": ["fruits", "numbers"],
          "properties": {"fruits": {"type": "array", "items": {"type": "string", "maxLength": 20},
                                    "uniqueItems": True, "minItems": 8, "maxItems": 8},
                         "numbers": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True,
                                     "minItems": 6, "maxItems": 6}}}


def test_matcher_refuses_the_token_that_completes_a_repeat(vocab_path):
    pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import Grammar, Matcher, Vocabulary
    from fastgguf.tokenizer import Tokenizer
    tok = Tokenizer(vocab_path("llama-bpe"))
    vocab, grammar = Vocabulary(tok), Grammar.json_schema(FRUITS)
    for text, ok in (('{"fruits": ["a", "b", "c", "d", "e", "f", "g", "h"], "numbers": [1, 2, 3, 4, 5, 6]}', True),
                     ('{"fruits": ["a", "b", "c", "d", "e", "f", "g", "a"]', False),
                     ('{"fruits": ["a", "b", "c", "d", "e", "f", "g", "\\u0061"]', False),
                     ('{"fruits": ["a", "b", "c", "d", "e", "f", "g", "h"], "numbers": [1, 2, 3, 4, 5, 1]}', False)):
        m, ids = Matcher(vocab, grammar), tok.tokenize_raw(text)
        for i, t in enumerate(ids):
            mask = m.fill_mask()
            if not mask[t >> 5] >> np.uint32(t & 31) & np.uint32(1):
                assert not ok, (text, i)
                with pytest.raises(RuntimeError, match="uniqueItems"):
                    m.copy().consume(t)              # consume() refuses it too, naming the keyword
                break
            m.consume(t)
        else:
            assert ok, text
            assert m.accepting()


def test_generate_writes_distinct_items_or_fails_closed(default_model_path, monkeypatch):
    pytest.importorskip("llguidance")
    from fastgguf import Model
    from fastgguf.engine import grammar
    from fastgguf.engine.generate import generate
    model = Model(default_model_path)
    schema = {"type": "object", "additionalProperties": False, "required": ["words", "numbers"],
              "properties": {"words": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                       "uniqueItems": True, "minItems": 5, "maxItems": 5},
                             "numbers": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True,
                                         "minItems": 5, "maxItems": 5}}}
    prompt = 'Output {"words": ["yes", "yes", "yes", "yes", "yes"], "numbers": [7, 7, 7, 7, 7]}'
    validator = jsonschema.Draft202012Validator(schema)
    for kw in (dict(temperature=0), dict(temperature=0.9, seed=3)):
        r = generate(model, prompt, json_schema=schema, max_tokens=120, **kw)
        assert r.finish_reason == "stop", r.text
        assert validator.is_valid(json.loads(r.text)), r.text
    with monkeypatch.context() as mp:             # the same request without the scanner: the model repeats
        mp.setattr(grammar.UniqueItems, "of", classmethod(lambda cls, g: None))
        r = generate(model, prompt, json_schema=schema, max_tokens=120, temperature=0)
        assert not validator.is_valid(json.loads(r.text)), r.text
    # a grammar that leaves only a repeat (one-letter items, three of them from two letters) ends in an error
    # naming the keyword, never in an invalid array
    dead = {"type": "array", "items": {"type": "string", "pattern": "^[ab]$"}, "uniqueItems": True, "minItems": 3}
    with pytest.raises(RuntimeError, match="uniqueItems"):
        generate(model, "letters", json_schema=dead, max_tokens=40, temperature=0)


def test_matcher_looks_past_a_string_that_would_be_forced_to_repeat(vocab_path):
    """maxLength 2, "ab" written: after '"a', the token "b" would leave only the closing quote, a repeat; it is
    refused then (a dead end avoided), while "c" is not."""
    pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import Grammar, Matcher, Vocabulary
    from fastgguf.tokenizer import Tokenizer
    tok = Tokenizer(vocab_path("llama-bpe"))
    vocab = Vocabulary(tok)
    m = Matcher(vocab, Grammar.json_schema({"type": "array", "items": {"type": "string", "maxLength": 2},
                                            "uniqueItems": True}))
    for t in tok.tokenize_raw('["ab", "a'):
        m.fill_mask()
        m.consume(t)
    mask = m.fill_mask()
    (b,), (c,) = tok.tokenize_raw("b"), tok.tokenize_raw("c")
    assert not mask[b >> 5] >> np.uint32(b & 31) & np.uint32(1)
    assert mask[c >> 5] >> np.uint32(c & 31) & np.uint32(1)


# -- items from a finite set of strings: kept on the values not written yet, no dead end -----------------------------

def test_choices_follow_refs_all_of_and_alternatives():
    def choices(schema, i=0):
        places = _Places(rewrite(schema, defer_unique=True))
        return places.choices(((),), i)
    abc = ["abc", "abd", "x", "y", "z", "w"]
    c = choices({"type": "array", "items": {"type": "string", "enum": abc}, "uniqueItems": True})
    assert c.texts == sorted(t.encode() for t in abc) and c.only
    c = choices({"$defs": {"l": {"enum": abc + [1]}}, "type": "array", "uniqueItems": True,
                 "items": {"allOf": [{"$ref": "#/$defs/l"}, {"enum": ["abc", "x", "q", 1]}]}})
    assert c.texts == [b"abc", b"x"] and not c.only                 # the number 1 may be an item too
    c = choices({"type": "array", "uniqueItems": True, "items": {"anyOf": [{"const": "a"}, {"enum": abc}]}})
    assert len(c.texts) == 7 and c.only
    c = choices({"anyOf": [{"type": "array", "items": {"enum": abc}}, {"type": "string"}], "uniqueItems": True})
    assert len(c.texts) == 6                                        # the string branch holds no array
    for loose in ({"anyOf": [{"type": "array", "items": {"enum": abc}}, {"type": "array"}], "uniqueItems": True},
                  {"type": "array", "items": {"anyOf": [{"enum": abc}, {"type": "string"}]}, "uniqueItems": True},
                  {"type": "array", "items": {"enum": abc + ['q"uote']}, "uniqueItems": True},   # spelled escaped
                  {"type": "array", "items": {"type": "string"}, "uniqueItems": True}):
        assert choices(loose) is None, loose
    tuple_ = {"type": "array", "prefixItems": [{"type": "string"}], "items": {"enum": abc}, "uniqueItems": True}
    assert choices(tuple_, 0) is None and len(choices(tuple_, 1).texts) == 6


def test_forbid_keeps_a_finite_string_item_on_values_not_written():
    """Values "abc" and "abd" written: in a third item, "a" and "ab" lead only to repeats and are refused (the
    grammar's mask, all ones here, allows them); the closing quote only on a value; once every value is written,
    no ',' (no item may follow)."""
    pieces = [b'"', b'a', b'ab', b'b', b'c', b'd', b'x', b'"]', b'", ', b',', b' ', b'xy', b'y', b'"x', b', "a']
    vocab = TokenBytes(pieces)
    schema = {"type": "array", "items": {"enum": ["abc", "abd", "x", "xy", "y", "bcd"]}, "uniqueItems": True}

    def allowed_after(text):
        u = tracker(schema)
        assert u.feed(text.encode())
        mask = np.full(1, 0xFFFFFFFF, np.uint32)
        u.forbid(mask, vocab)
        return {pieces[i] for i in range(len(pieces)) if mask[0] >> i & 1}

    assert allowed_after('["abc", "abd", "') == {b'x', b'xy', b'y', b'b'}
    assert allowed_after('["abc", "abd", "b') == {b'c'}
    closing = {b'"', b'"]', b'"x'}                                # ('"x': the grammar's to refuse)
    assert allowed_after('["abc", "abd", "x') == closing | {b'", ', b'y'}
    after = allowed_after('["abc", "abd", "x"')
    assert b', "a' not in after and b',' in after and b'", ' not in after   # '"a' leads only to repeats
    assert allowed_after('["abc", "x') == closing | {b'", ', b'y'}
    assert b'", ' not in allowed_after('["abc", "abd", "x", "y", "bcd", "x')   # xy would be the last value
    full = allowed_after('["abc", "abd", "x", "y", "bcd", "xy"')
    assert b',' not in full and b' ' in full
    assert not tracker(schema).feed(b'["abc", "abd", "x", "y", "bcd", "xy",')
    assert not tracker(schema).feed(b'["q"]')                                 # not a value of the set


def test_tiny_enum_no_dead_end(vocab_path):
    """The model wants to write "ab" again and again: values "abc" and "abd" are written, so after '"ab' only
    repeats would be left. The uniqueItems lookahead (4 tokens, for a single token completing a repeat) let "ab"
    through and then found no token (RuntimeError); now "a" and "ab" are refused at once and the array ends valid."""
    pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import Grammar, Matcher, Vocabulary
    from fastgguf.tokenizer import Tokenizer
    tok = Tokenizer(vocab_path("llama-bpe"))
    vocab = Vocabulary(tok)
    schema = {"type": "array", "items": {"enum": ["abc", "abd", "x1", "x2", "x3", "x4"]}, "uniqueItems": True}
    assert UNIQUE_MARK in Grammar.json_schema(schema).text        # over 256 arrays: left to the scanner
    m = Matcher(vocab, Grammar.json_schema(schema))
    for t in tok.tokenize_raw('["abc", "abd", "'):
        m.fill_mask()
        m.consume(t)
    prefs = [tok.tokenize_raw(p)[0] for p in ("ab", "a", "b")] + [tok.tokenize_raw(p)[0] for p in ('"]', "]")]
    text = b'["abc", "abd", "'
    for _ in range(20):
        mask = m.fill_mask()
        ok = [t for t in prefs if mask[t >> 5] >> np.uint32(t & 31) & np.uint32(1)]
        t = ok[0] if ok else int(np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))[0])
        if t in vocab.eog_ids:
            break
        m.consume(t)
        text += vocab.tokens[t]
    doc = json.loads(text)
    assert jsonschema.Draft202012Validator(schema).is_valid(doc) and len(doc) == 3, text


@pytest.fixture(scope="module")
def bpe(vocab_path):
    pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import Vocabulary
    from fastgguf.tokenizer import Tokenizer
    return Vocabulary(Tokenizer(vocab_path("llama-bpe")))


def walk(m, vocab, rng, limit=400):
    """A model that likes to repeat: in a string item, with odds 4 in 5, a token that spells on towards an item
    written before (where the mask allows one), else any allowed token. The bytes written (RuntimeError where no
    token is allowed: a dead end)."""
    text = b""
    for _ in range(limit):
        mask = m.fill_mask()
        ids = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))
        if text.count(b'"') % 2:
            partial = text[text.rindex(b'"') + 1:]
            rests = [d[len(partial):] for d in re.findall(rb'"([^"]*)"', text) if d.startswith(partial)]
            liked = [t for t in ids if any(r.startswith(vocab.tokens[t]) for r in rests if r)]
            if liked and rng.random() < 0.8:
                ids = liked
        t = int(rng.choice(list(ids)))
        if t in vocab.eog_ids:
            return text
        m.consume(t)
        text += vocab.tokens[t]
    return None


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.lists(st.text(alphabet="abé", min_size=1, max_size=4), min_size=6, max_size=9, unique=True),
       st.integers(0, 3), st.randoms(use_true_random=False))
def test_generated_arrays_of_a_finite_set_are_valid(bpe, values, min_items, rng):
    """Random enums of short strings that are prefixes of one another, written by a model that likes to repeat:
    never a dead end (the mask is never empty), and what ends is valid under jsonschema."""
    from fastgguf.engine.grammar import Grammar, Matcher
    schema = {"type": "array", "items": {"type": "string", "enum": values}, "uniqueItems": True,
              "minItems": min_items}
    m = Matcher(bpe, Grammar.json_schema(schema))
    text = walk(m, bpe, rng)
    if text is not None:
        doc = json.loads(text)
        assert jsonschema.Draft202012Validator(schema).is_valid(doc), text


def test_real_schema_with_a_large_enum_never_dead_ends(default_model_path):
    """JsonSchemaStore's github-workflow-template-properties (JSONSchemaBench): categories are distinct items of 865
    language names. Greedy, the default model wrote "Cloud Firestore Security Rules", then "Cloud Firestore
    Security" again, and the generation ended in the uniqueItems RuntimeError (the lookahead sees only a single
    token completing a repeat). Now it ends in "stop" or "length", and a "stop" text is valid."""
    pytest.importorskip("llguidance")
    from fastgguf import Model
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "schemas",
                        "github-workflow-template-properties.json")
    with open(path) as f:
        schema = json.load(f)
    model = Model(default_model_path, n_threads=1)
    r = model.chat([{"role": "user", "content": "Write a realistic JSON instance of this JSON Schema:\n"
                     + json.dumps(schema)[:3000]}], max_tokens=256, temperature=0, json_schema=schema)
    assert r.finish_reason in ("stop", "length"), r.finish_reason
    assert '"Cloud Firestore Security Rules"' in r.text                # past the former dead end
    if r.finish_reason == "stop":
        assert jsonschema.Draft7Validator(schema).is_valid(json.loads(r.text)), r.text
