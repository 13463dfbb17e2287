"""Structured output, by properties: random JSON Schemas of the supported subset against random-weight models.

- soundness: whatever a random model writes under a schema (temperature 1, random seeds: its free output is noise
  over the whole vocabulary) and ends with finish_reason "stop" parses and validates; "length" happens only at
  max_tokens. The oracle is jsonschema's Draft202012Validator with its FORMAT_CHECKER (date, uuid, email checked:
  test_format_checking_is_active shows it);
- completeness: instances drawn for each schema (keys in the schema's order, any separators the grammar allows) are
  accepted token by token by a fresh Matcher, and end of generation is allowed after them;
- llama.cpp's sample GBNF grammars: a random model's output under each is accepted again by a fresh Matcher.

Two models (tests/models.py "vocab"): a llama BPE vocabulary (128k tokens, multi-digit number tokens) and a
SentencePiece one (32k, byte fallback). The schema and instance strategies are this file's own (hypothesis-jsonschema
does not run on current hypothesis).
"""
import datetime
import json
import os
import re

import pytest

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fastgguf import Model  # noqa: E402
from fastgguf.engine.grammar import DATE, Grammar, Matcher, vocabulary  # noqa: E402
from fastgguf.engine.tools import tool_grammar, validate_tools  # noqa: E402
from models import build  # noqa: E402

GRAMMARS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "grammars")
VOCABS = ("llama-bpe", "llama-spm")
MAX_TOKENS = 64
PROMPT = "JSON:"
Validator = jsonschema.Draft202012Validator
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("vocab_models")
    return {name: Model(build(root / f"{name}.gguf", "vocab", vocab=name, seed=i)) for i, name in enumerate(VOCABS)}


def validator(schema):
    return Validator(schema, format_checker=Validator.FORMAT_CHECKER)


# -- schemas ------------------------------------------------------------------------------------------------------

KEYS = ["a", "b", "name", "id", "x y", 'q"uote', "é", "日本", "list", "n"]
FORMATS = ("date", "uuid", "email")
ENUM_VALUES = st.one_of(st.text(st.characters(blacklist_categories=("Cs",)), max_size=4), st.integers(-50, 50),
                        st.booleans(), st.none())
# anyOf branches come from distinct families: no value fits two branches
FAMILIES = ("string", "number", "boolean", "null", "object", "array")


@st.composite
def leaf(draw, family=None):
    family = family or draw(st.sampled_from(("string", "number", "integer", "boolean", "null", "enum", "const")))
    if family == "string":
        if draw(st.integers(0, 4)) == 0:
            return {"type": "string", "format": draw(st.sampled_from(FORMATS))}
        s = {"type": "string"}
        lo = draw(st.integers(0, 3))
        if draw(st.booleans()):
            s["minLength"] = lo
        if draw(st.integers(0, 3)):          # mostly bounded: a random model's strings otherwise run to max_tokens
            s["maxLength"] = lo + draw(st.integers(0, 5))
        return s
    if family in ("number", "integer"):
        s = {"type": family}
        half = (lambda k: k) if family == "integer" else (lambda k: k / 2)
        lo = draw(st.integers(-40, 40))
        if draw(st.booleans()):
            s["minimum"] = half(lo)
        if draw(st.booleans()):
            s["maximum"] = half(lo + draw(st.integers(0, 80)))
        return s
    if family in ("boolean", "null"):
        return {"type": family}
    if family == "enum":
        return {"enum": draw(st.lists(ENUM_VALUES, min_size=1, max_size=4, unique_by=json.dumps))}
    return {"const": draw(ENUM_VALUES)}


@st.composite
def node(draw, depth, defs, family=None):
    """A subschema at most `depth` composites deep; may point into defs (a dict name -> schema)."""
    kinds = ["leaf"] * 3 + (["object", "array", "anyOf"] if depth > 0 else []) + (["ref"] if defs else [])
    kind = ("leaf" if family in ("string", "number", "boolean", "null") else family) or draw(st.sampled_from(kinds))
    if kind == "leaf":
        return draw(leaf(family))
    if kind == "ref":
        return {"$ref": "#/$defs/" + draw(st.sampled_from(sorted(defs)))}
    if kind == "object":
        keys = draw(st.lists(st.sampled_from(KEYS), max_size=4, unique=True))
        s = {"type": "object", "properties": {k: draw(node(depth - 1, defs)) for k in keys}}
        required = [k for k in keys if draw(st.booleans())]
        if required:
            s["required"] = required
        extra = draw(st.sampled_from(["false", "false", "absent", "schema"]))
        if extra == "false":
            s["additionalProperties"] = False
        elif extra == "schema":
            s["additionalProperties"] = draw(leaf("integer"))
        return s
    if kind == "array":
        s = {"type": "array", "items": draw(node(depth - 1, defs))}
        lo = draw(st.integers(0, 2))
        if draw(st.booleans()):
            s["minItems"] = lo
        if draw(st.integers(0, 3)):
            s["maxItems"] = lo + draw(st.integers(0, 3))
        return s
    families = draw(st.lists(st.sampled_from(FAMILIES), min_size=2, max_size=3, unique=True))
    return {"anyOf": [draw(node(depth - 1, {}, f)) for f in families]}


@st.composite
def schemas(draw):
    defs = {}
    for i in range(draw(st.integers(0, 2))):
        defs[f"d{i}"] = draw(node(1, {}))
    root = draw(node(2, defs, draw(st.sampled_from([None, "object"]))))     # an object at the root half the time
    return dict(root, **{"$defs": defs}) if defs else root


# -- instances ----------------------------------------------------------------------------------------------------

TEXT = st.characters(blacklist_categories=("Cs",))
EMAIL = st.from_regex(r"[a-z0-9]{1,6}(\.[a-z0-9]{1,4})?@[a-z]{1,6}\.[a-z]{2,3}", fullmatch=True)


@st.composite
def instance(draw, s, defs):
    if "$ref" in s:
        return draw(instance(defs[s["$ref"].rsplit("/", 1)[1]], defs))
    if "anyOf" in s:
        return draw(instance(draw(st.sampled_from(s["anyOf"])), defs))
    if "enum" in s:
        return draw(st.sampled_from(s["enum"]))
    if "const" in s:
        return s["const"]
    t = s["type"]
    if t == "string":
        f = s.get("format")
        if f == "date":
            return draw(st.dates()).isoformat()
        if f == "uuid":
            return str(draw(st.uuids()))
        if f == "email":
            return draw(EMAIL)
        text = draw(st.text(TEXT, min_size=s.get("minLength", 0), max_size=s.get("maxLength", 8)))
        return Escaped(text) if draw(st.booleans()) else text
    if t == "integer":
        return draw(st.integers(int(s.get("minimum", -10 ** 6)), int(s.get("maximum", 10 ** 6))))
    if t == "number":
        if "minimum" not in s and "maximum" not in s:     # unbounded: exponents too
            return draw(st.floats(allow_nan=False, allow_infinity=False))
        lo, hi = s.get("minimum", s.get("maximum", 0) - 1000), s.get("maximum", s.get("minimum", 0) + 1000)
        return draw(st.integers(int(lo * 100), int(hi * 100))) / 100     # bounded: no exponent (see grammar.py)
    if t == "boolean":
        return draw(st.booleans())
    if t == "null":
        return None
    if t == "array":
        lo = s.get("minItems", 0)
        return draw(st.lists(instance(s["items"], defs), min_size=lo, max_size=s.get("maxItems", lo + 3)))
    out = {}
    required = s.get("required", ())
    for k, sub in s["properties"].items():          # in the schema's order, as the grammar writes them
        if k in required or draw(st.booleans()):
            out[k] = draw(instance(sub, defs))
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        for k in draw(st.lists(st.sampled_from(["zz", "extra", "ω"]), max_size=2, unique=True)):
            if k not in s["properties"]:
                out[k] = draw(instance(extra, defs))
    return out


class Escaped(str):
    """A free string (no enum, const or format) that dumps() writes with \\uXXXX escapes (surrogate pairs beyond the
    BMP): the grammar counts an escape as the one character it stands for."""


def dumps(draw, value):
    """value's JSON text in one of the styles the grammar allows. Property names, enum and const strings are written
    as themselves (grammar.py's departures); Escaped strings ensure_ascii (through placeholders)."""
    escaped = []

    def mark(v):
        if isinstance(v, Escaped):
            escaped.append(json.dumps(str(v)))
            return f"\0\ue000{len(escaped) - 1}\ue001\0"      # a placeholder no drawn string is
        if isinstance(v, list):
            return [mark(x) for x in v]
        if isinstance(v, dict):
            return {k: mark(x) for k, x in v.items()}
        return v
    style = draw(st.sampled_from([{"separators": (",", ":")}, {"separators": (", ", ": ")}, {"indent": 2}]))
    lead = draw(st.sampled_from(["", "", " ", "\n"]))
    text = json.dumps(mark(value), ensure_ascii=False, **style)
    for i, e in enumerate(escaped):
        text = text.replace(f'"\\u0000\ue000{i}\ue001\\u0000"', e, 1)
    return lead + text


def allowed(mask, i):
    return bool(int(mask[i >> 5]) >> (i & 31) & 1)


def refeed(model, grammar, ids):
    """A fresh Matcher fed ids one by one (each allowed by the mask before it); the Matcher, or the index refused."""
    m = Matcher(vocabulary(model), grammar)
    for i, t in enumerate(ids):
        if not allowed(m.fill_mask(), t):
            return i
        m.consume(t)
    return m


# -- the oracle is live -------------------------------------------------------------------------------------------

def test_format_checking_is_active():
    for fmt, good, bad in (("date", "2024-02-29", "2023-02-30"), ("uuid", "123e4567-e89b-12d3-a456-426614174000",
                                                                   "123e4567e89b12d3a456426614174000"),
                           ("email", "a@b.co", "no-at-sign")):
        v = validator({"type": "string", "format": fmt})
        assert v.is_valid(good) and not v.is_valid(bad), fmt


# -- soundness ----------------------------------------------------------------------------------------------------

STATS = {"stop": 0, "length": 0}


@pytest.mark.parametrize("vocab", VOCABS)
@SETTINGS
@given(schema=schemas(), seed=st.integers(0, 2 ** 31 - 1))
def test_random_model_output_validates(models, vocab, schema, seed):
    model = models[vocab]
    check = validator(schema)
    grammar = Grammar.json_schema(schema)
    for j in range(2):
        r = model.generate(PROMPT, json_schema=schema, temperature=1.0, seed=seed + j, max_tokens=MAX_TOKENS)
        STATS[r.finish_reason] += 1
        if r.finish_reason == "stop":
            value = json.loads(r.text)
            errors = [e.message for e in check.iter_errors(value)]
            assert not errors, (r.text, errors)
            m = refeed(model, grammar, r.token_ids)
            assert not isinstance(m, int) and m.accepting(), (r.text, m)
        else:
            assert r.finish_reason == "length" and len(r.token_ids) == MAX_TOKENS, (r.finish_reason, r.text)


def test_soundness_was_tested():
    """The property above is not vacuous: a good share of its outputs ended "stop" (validated), not "length"."""
    if not STATS["stop"] + STATS["length"]:
        pytest.skip("run with test_random_model_output_validates")
    assert STATS["stop"] >= (STATS["stop"] + STATS["length"]) // 4, STATS     # 62 of 100 when written


# -- completeness -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("vocab", VOCABS)
@SETTINGS
@given(data=st.data())
def test_schema_instances_are_accepted(models, vocab, data):
    model = models[vocab]
    schema = data.draw(schemas(), "schema")
    grammar = Grammar.json_schema(schema)
    defs = schema.get("$defs", {})
    for _ in range(2):
        value = data.draw(instance(schema, defs), "instance")
        assert validator(schema).is_valid(value), "the instance strategy draws valid instances"
        text = dumps(data.draw, value)
        ids = model.tokenizer.tokenize_raw(text)
        m = refeed(model, grammar, ids)
        assert not isinstance(m, int), (text, model.tokenizer.detokenize(ids[:m]))
        mask = m.fill_mask()
        assert all(allowed(mask, e) for e in model.tokenizer.eog_ids), text


def test_date_format_is_exact(models):
    """llguidance's own format: date allows Feb 29 of every year and year 0000 (found by this file): grammar.DATE
    is added beside it. DATE against datetime.date over every month/day string of many years, then the grammar at
    the root, under a pattern of its own, and nested (items, anyOf, $defs)."""
    for y in [*range(0, 30), *range(1895, 2105), *range(9990, 10000), 100, 400, 1600, 1700]:
        for mo in range(14):
            for d in range(33):
                text = f"{y:04d}-{mo:02d}-{d:02d}"
                try:
                    exists = bool(datetime.date.fromisoformat(text))
                except ValueError:
                    exists = False
                assert exists == bool(re.fullmatch(DATE, text)), text
    model = models["llama-bpe"]
    date = {"type": "string", "format": "date"}
    for schema, wrap in ((date, "{}"), (dict(date, pattern="^2"), "{}"), ({"type": "array", "items": date}, "[{}]"),
                         ({"anyOf": [{"type": "null"}, {"$ref": "#/$defs/d"}], "$defs": {"d": date}}, "{}")):
        grammar = Grammar.json_schema(schema)
        for text, ok in (("2024-02-29", True), ("2000-02-29", True), ("2023-02-28", True), ("2023-02-29", False),
                         ("1900-02-29", False), ("0000-01-01", False), ("2023-04-31", False)):
            m = refeed(model, grammar, model.tokenizer.tokenize_raw(wrap.format(json.dumps(text))))
            assert (not isinstance(m, int) and m.accepting()) == ok, (schema, text)
            assert validator(schema).is_valid(json.loads(wrap.format(json.dumps(text)))) == ok, (schema, text)
    # a tool's parameters (engine.tools writes its own %json bodies)
    tool = {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "properties": {"day": date}, "required": ["day"], "additionalProperties": False}}}
    grammar = Grammar.lark(tool_grammar(validate_tools([tool], "required"), "hermes"))
    for text, ok in (("2024-02-29", True), ("2023-02-29", False)):
        call = json.dumps({"name": "book", "arguments": {"day": text}})
        m = refeed(model, grammar, model.tokenizer.tokenize_raw(f"<tool_call>\n{call}\n</tool_call>"))
        assert (not isinstance(m, int) and m.accepting()) == ok, text


# -- llama.cpp's GBNF samples -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(os.path.basename(p)[:-5] for p in os.listdir(GRAMMARS) if p.endswith(".gbnf")))
def test_gbnf_outputs_are_accepted_again(models, name):
    with open(os.path.join(GRAMMARS, f"{name}.gbnf"), encoding="utf-8") as f:
        text = f.read()
    grammar = Grammar.gbnf(text)
    for vocab, model in models.items():
        for seed in range(3):
            r = model.generate(PROMPT, grammar=text, temperature=1.0, seed=seed, max_tokens=32)
            assert r.finish_reason in ("stop", "length"), r.finish_reason
            if r.finish_reason == "length":
                assert len(r.token_ids) == 32
            m = refeed(model, grammar, r.token_ids)
            assert not isinstance(m, int), (vocab, seed, r.text, m)
            if r.finish_reason == "stop":
                assert m.accepting(), (vocab, seed, r.text)
