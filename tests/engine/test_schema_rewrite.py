"""fastgguf.engine.schema_rewrite (issue 33): each rewrite accepts exactly the instances the original schema accepts.

- property tests, one per rewrite: random schemas of its kind (drafts 4, 7 and 2020-12 where the keyword has a
  meaning there), random instances made of the schemas' own words (keys, strings near the enum strings, numbers at
  the bounds, arrays with repeats), validity under the rewrite == validity under the original. The oracle is
  jsonschema without a format checker (format is an annotation). Where an instance is valid the rewrite also
  compiles with llguidance (a satisfiable schema must);
- each refusal names the keyword and its JSON pointer; lenient=True keeps the keyword instead;
- $refs follow what they name when it moves; unused definitions are never refused; the input is not modified.
"""
import copy
import json
import re

import pytest

jsonschema = pytest.importorskip("jsonschema")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fastgguf.engine.schema_rewrite import KNOWN_FORMATS, MAX_ARRAYS, rewrite  # noqa: E402
from fastgguf.errors import GrammarError  # noqa: E402

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
DRAFTS = {4: "http://json-schema.org/draft-04/schema#", 7: "http://json-schema.org/draft-07/schema#",
          2020: "https://json-schema.org/draft/2020-12/schema"}
KEYS = ["a", "b", "c"]
# strings next to each other (prefixes, one character apart) and the characters a pattern must escape
WORDS = ["", "a", "b", "ab", "ba", "abc", "abd", "\n", "é", "]", "^", "-", "\\", ".", "a*", "\U0001F600"]
NUMS = [-1, 0, 0.5, 1, 1.0, 2, 2.5, 3]
SCALARS = st.sampled_from([None, True, False] + NUMS + WORDS)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)), max_leaves=6)
INSTANCES = st.lists(VALUES, min_size=25, max_size=25)


def validator(schema):
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)


def compiles(schema):
    """llguidance's own verdict on a rewritten schema (None: compiled; llguidance also refuses a schema with an
    unsatisfiable part, which random schemas have)."""
    llguidance = pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import _json_lark
    err = llguidance.LLMatcher.validate_grammar(_json_lark(schema, False))
    return None if not err or any(m in err for m in LEFT_TO_LLGUIDANCE) else err


# llguidance's refusals of what the rewrite leaves alone (by design), and of schemas with an unsatisfiable part
LEFT_TO_LLGUIDANCE = ("Unsatisfiable schema", "min/maxProperties only supported", 'Unimplemented keys: ["contains"]',
                      'Unimplemented keys: ["propertyNames"]')


def check(schema, instances, must_rewrite=True):
    """The rewrite of schema accepts exactly what schema accepts among instances (where it says it narrowed: only
    what schema accepts); returns it (None if refused and refusals are allowed)."""
    original, narrowed = copy.deepcopy(schema), []
    try:
        out = rewrite(schema, narrowed=narrowed)
    except GrammarError:
        if must_rewrite:
            raise
        return None
    assert schema == original, "rewrite() modified its input"
    before, after = validator(schema), validator(out)
    valid = 0
    for x in instances:
        if narrowed:
            assert before.is_valid(x) or not after.is_valid(x), (schema, out, x, narrowed)
        else:
            assert before.is_valid(x) == after.is_valid(x), (schema, out, x)
        valid += after.is_valid(x) if narrowed else before.is_valid(x)
    if valid:
        assert compiles(out) is None, (schema, out, compiles(out))
    return out


# -- random schemas -------------------------------------------------------------------------------------------------

@st.composite
def simple(draw, draft, depth=1, refs=False):
    """A small subschema of one of the shapes the rewrites meet."""
    shapes = ["type", "const", "enum", "string", "number", "required", "props", "closed", "array"]
    shapes += ["anyOf", "allOf", "not", "oneOf"] * (depth > 0) + ["ref"] * refs
    shape = draw(st.sampled_from(shapes))
    if shape == "type":
        t = draw(st.lists(st.sampled_from(["null", "boolean", "number", "integer", "string", "array", "object"]),
                          min_size=1, max_size=2, unique=True))
        return {"type": t[0] if len(t) == 1 else t}
    if shape == "const":
        v = draw(SCALARS)
        return {"const": v} if draft >= 6 else {"enum": [v]}
    if shape == "enum":
        return {"enum": draw(st.lists(SCALARS, min_size=1, max_size=3, unique_by=json.dumps))}
    if shape == "string":
        s = {"type": "string", draw(st.sampled_from(["minLength", "maxLength"])): draw(st.integers(0, 3))}
        return dict(s, format=draw(st.sampled_from(["uri-reference", "topic"]))) if draw(st.booleans()) else s
    if shape == "number":
        s = {"type": draw(st.sampled_from(["number", "integer"]))}
        for bound in draw(st.lists(st.sampled_from(["minimum", "maximum"]), min_size=1, max_size=2, unique=True)):
            s[bound] = draw(st.sampled_from(NUMS))
            if draw(st.booleans()):         # exclusive: draft 4's flag, or the later number form
                if draft == 4:
                    s["exclusiveM" + bound[1:]] = True
                else:
                    s["exclusiveM" + bound[1:]] = s.pop(bound)
        return s
    if shape == "required":
        return {"required": draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True))}
    if shape in ("props", "closed"):
        keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True))
        s = {"properties": {k: draw(simple(draft, depth - 1)) for k in keys}}
        if shape == "closed":
            s.update(type="object", additionalProperties=False)
        if draw(st.booleans()):
            s["required"] = keys[:1]
        return s
    if shape == "array":
        s = {"type": "array", "items": draw(simple(draft, depth - 1))}
        return dict(s, minItems=draw(st.integers(0, 2))) if draw(st.booleans()) else s
    if shape in ("anyOf", "allOf", "oneOf"):
        return {shape: draw(st.lists(simple(draft, depth - 1), min_size=1, max_size=3))}
    if shape == "not":
        return {"not": draw(simple(draft, depth - 1))}
    return {"$ref": "#/definitions/d0"}


def document(draft, root, defs=None, **more):
    out = {"$schema": DRAFTS[draft], **root}
    if defs is not None:
        out["definitions"] = {"d0": defs, **more}
    return out


# -- each rewrite is exact ------------------------------------------------------------------------------------------

@SETTINGS
@given(st.data(), st.sampled_from(sorted(DRAFTS)), INSTANCES)
def test_one_of(data, draft, instances):
    branches = data.draw(st.lists(simple(draft, refs=True), min_size=2, max_size=4))
    context = data.draw(st.sampled_from([{}, {"type": "object"}, {"required": ["a"]},
                                         {"properties": {"a": {"enum": ["a", "b"]}}, "required": ["a"]}]))
    defs = data.draw(simple(draft))
    where = data.draw(st.sampled_from(["beside", "allOf", "named"]))     # where the context holds
    if where == "beside":
        root = {**context, "oneOf": branches}
    else:
        root = {"allOf": [context, {"oneOf": branches} if where == "allOf" else {"$ref": "#/definitions/one"}]}
    check(document(draft, root, defs, one={"oneOf": branches}), instances, must_rewrite=False)


def test_one_of_rewrites():
    """What is proved disjoint, and where branches that may overlap get each other's complement."""
    assert rewrite({"oneOf": [{"type": "integer"}, {"type": "string"}]}) == {
        "anyOf": [{"type": "integer"}, {"type": "string"}]}
    tagged = {"type": "object", "required": ["kind"], "oneOf": [
        {"properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}},
        {"properties": {"kind": {"const": "square"}, "side": {"type": "number"}}}]}
    assert rewrite(tagged) == {"type": "object", "required": ["kind"], "anyOf": tagged["oneOf"]}
    refs = {"oneOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}], "$defs": {
        "a": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"],
              "additionalProperties": False},
        "b": {"type": "object", "properties": {"y": {"type": "string"}}, "required": ["y"],
              "additionalProperties": False}}}
    assert "anyOf" in rewrite(refs)
    xor = rewrite({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]})
    assert xor["anyOf"][0] == {"allOf": [{"required": ["a"]}, {"type": "object", "properties": {"b": False}}]}
    # overlapping only on non-objects (required says nothing of them): the branches keep to objects
    loose = rewrite({"oneOf": [{"required": ["k"], "properties": {"k": {"const": 1}, "n": {"type": "integer"}}},
                               {"required": ["k"], "properties": {"k": {"const": 2}, "n": {"type": "integer"}}}]})
    assert loose["anyOf"][0]["allOf"][1] == {"type": "object"}


def test_one_of_proved_by_what_patterns_force():
    """A pattern listing its words (^(a|b)$) is a finite set of strings, and any pattern's shortest match bounds a
    string's length from below: both prove branches apart (a tag told by pattern, a version string or an empty
    one). A pattern that is not a list of words proves nothing of its strings."""
    tags = {"type": "object", "required": ["type"], "oneOf": [
        {"properties": {"type": {"type": "string", "pattern": "^SEQ$"}, "m": {"type": "integer"}}},
        {"properties": {"type": {"type": "string", "pattern": "^(PREC|PREC_LEFT)$"}, "m": {"type": "integer"}}}]}
    assert rewrite(tags)["anyOf"] == tags["oneOf"]
    version = {"oneOf": [{"type": "string", "pattern": "^([0-9]+)\\.([0-9]+)\\.([0-9]+)$"},
                         {"type": "string", "maxLength": 0}]}
    assert rewrite(version)["anyOf"] == version["oneOf"]
    for overlapping in ({"oneOf": [{"type": "string", "pattern": "^a|b$"}, {"type": "string", "pattern": "^(b)$"}]},
                        {"oneOf": [{"type": "string", "pattern": "^[ab]$"}, {"type": "string", "pattern": "^b$"}]},
                        # "a\n" matches both where $ matches before a final newline (Python's re, jsonschema)
                        {"oneOf": [{"type": "string", "pattern": "^a$"}, {"type": "string", "pattern": "\\n"}]}):
        with pytest.raises(GrammarError, match="oneOf at #: branches 0 and 1"):
            rewrite(overlapping)


NARROWED = [  # (schema, instances it accepts, instances only the narrowed rewrite refuses)
    # a string with an "a" that is not 1 long: the other branch's complement (not pattern) cannot be written, so
    # only strings of length >= 2 are offered for the first branch, and the second (maxLength 1) is never chosen
    ({"oneOf": [{"type": "string", "pattern": "a"}, {"type": "string", "maxLength": 1}]}, ["ab", "ba"], ["b", ""]),
    # an object shape or an array of them, the shape open to arrays (no type): objects and non-arrays only
    ({"oneOf": [{"properties": {"n": {"type": "string"}}}, {"type": "array", "items": {"type": "integer"}}]},
     [{"n": "x"}, "s", 1], [[1, "a"], ["a"]]),
]


@pytest.mark.parametrize("schema, valid, refused", NARROWED)
def test_one_of_narrowed_where_a_complement_is_written_in_part(schema, valid, refused):
    """Where not branch j can be written only in part (a pattern, a format, items, additionalProperties), oneOf
    keeps that part beside branch i: fewer instances than the schema allows, each valid, and the rewrite says
    where (narrowed). A branch left with nothing is never chosen; all of them left with nothing is a refusal."""
    narrowed = []
    out = rewrite(schema, narrowed=narrowed)
    assert narrowed and all(m.startswith("oneOf at #: where branches 0 and 1") for m in narrowed)
    before, after = validator(schema), validator(out)
    for x in valid:
        assert before.is_valid(x) and after.is_valid(x), (out, x)
    for x in refused:
        assert before.is_valid(x) and not after.is_valid(x), (out, x)
    for x in [None, 0, 1.5, "", "a", "ab", [], [1], [1, 1], {}, {"n": 1}, {"n": "a"}, "https://x.org/", "."]:
        assert before.is_valid(x) or not after.is_valid(x), (out, x)
    assert compiles(out) is None


PATTERNS = ["^a$", "^(a|b)$", "^(?:ab|ba)$", "^a|b$", "^b$", "^(abc|abd)$", "^a\\.$", "^\\^$", "^-$", "ab",
            "^[ab]$", "^(a)(b)$", "^a\\*$", "^..$", "b$", "^abc", "\\n"]


@SETTINGS
@given(st.lists(st.sampled_from(PATTERNS), min_size=2, max_size=3),
       st.lists(st.sampled_from(["minLength", "maxLength", None]), min_size=3, max_size=3),
       st.lists(st.sampled_from(WORDS + ["ab\n", "a\n", ".", "a.", "^", "a*", "PREC"]), min_size=25, max_size=25))
def test_one_of_over_patterns(patterns, bounds, instances):
    """oneOf over strings told apart (or not) by patterns and lengths: the rewrite, when made, accepts exactly what
    the schema accepts (jsonschema, Python's re: a word followed by a newline matches ^word$ there too)."""
    branches = []
    for p, b in zip(patterns, bounds):
        s = {"type": "string", "pattern": p}
        if b:
            s[b] = 1
        branches.append(s)
    check({"oneOf": branches}, instances, must_rewrite=False)


def test_one_of_reads_what_holds_beside_it():
    """As llguidance reads a oneOf: with the other members of an allOf it is in, and, for a definition that cannot be
    rewritten alone, with what holds where it is named (a copy rewritten there)."""
    branches = [{"properties": {"kind": {"const": k}, "n": {"type": "integer"}}} for k in "ab"]
    alone = {"oneOf": branches}
    with pytest.raises(GrammarError, match="oneOf at #: branches 0 and 1"):    # {"n": 1.5} matches both
        rewrite(alone)
    members = {"allOf": [{"type": "object", "required": ["kind"]}, alone]}
    assert rewrite(members)["allOf"][1] == {"anyOf": branches}
    named = {"$defs": {"op": alone}, "type": "array",
             "items": {"allOf": [{"type": "object", "required": ["kind"]}, {"$ref": "#/$defs/op"}]}}
    out = rewrite(named)
    assert out["items"]["allOf"][1] == {"allOf": [{"anyOf": branches}]} and out["$defs"] == named["$defs"]
    check(named, [[{"kind": "a"}], [{"kind": "c"}], [{"kind": "a", "n": 1.5}], [{}], [5], []])
    with pytest.raises(GrammarError, match=r"oneOf at #/\$defs/op: branches 0 and 1"):     # named once without
        rewrite({**named, "properties": {"x": {"$ref": "#/$defs/op"}}})
    ignored = {"type": "array", "additionalItems": alone}        # no list of items: nobody reads additionalItems
    assert rewrite(ignored) == ignored


# formats jsonschema's own FormatChecker tests without extra packages, and strings of each and of none
CHECKED_FORMATS = ["date", "email", "ipv4", "ipv6", "uuid"]
FORMAT_WORDS = ["2020-01-02", "1.2.3.4", "::1", "a@b.c", "12345678-1234-5678-1234-567812345678", "a", "", "ab"]


def both_readings(schema):
    """Whether an instance is valid under the schema read both ways: format an annotation (jsonschema's default)
    and format an assertion (its FormatChecker): what a known format's output must be."""
    loose = validator(schema)
    strict = type(loose)(schema, format_checker=type(loose).FORMAT_CHECKER)
    return lambda x: loose.is_valid(x) and strict.is_valid(x)


@SETTINGS
@given(st.sampled_from(sorted(DRAFTS)), st.sampled_from(["oneOf", "not"]),
       st.lists(st.one_of(st.sampled_from(CHECKED_FORMATS).map(lambda f: {"format": f}),
                          st.sampled_from(FORMAT_WORDS).map(lambda w: {"enum": [w]}),
                          st.sampled_from([{"maxLength": 3}, {"type": "number"}, {}])), min_size=1, max_size=3),
       st.lists(st.sampled_from(FORMAT_WORDS + [1, None]), min_size=10, max_size=10))
def test_known_format_in_a_complement_is_read_as_an_annotation(draft, key, branches, instances):
    """not {format: F} and a oneOf's other branch's format: a validator may read F as an annotation (every string
    matches it), so its complement among strings is nothing. The rewrite (F still enforced where it is asked for)
    accepts exactly the instances valid under both readings."""
    schema = {"$schema": DRAFTS[draft], key: branches if key == "oneOf" else {"allOf": branches}}
    out = rewrite(schema)
    valid, after = both_readings(schema), validator(out)
    strict = type(after)(out, format_checker=type(after).FORMAT_CHECKER)
    for x in instances:
        assert valid(x) == (after.is_valid(x) and strict.is_valid(x)), (schema, out, x)


def test_known_formats_in_a_one_of():
    """JSON Schema Store's statamic blueprint: a date or a date-time, exactly one; a validator that reads formats
    as annotations finds every string matching both, so no string is valid under both readings: the property
    cannot be written (optional, it is left out) and the rest of the schema compiles."""
    for one_of in ([{"format": "date"}, {"format": "date-time"}],
                   [{"format": "host-name"}, {"format": "ipv4"}, {"format": "ipv6"}]):   # host-name: unknown
        schema = {"type": "object", "properties": {"d": {"type": "string", "oneOf": one_of}, "n": {"type": "integer"}}}
        out = check(schema, [{}, {"n": 1}, {"d": "2020-01-02"}, {"d": "1.2.3.4"}, {"d": "x"}, {"d": 1}])
        assert not validator(out).is_valid({"d": "2020-01-02"}) and compiles(out) is None
    # a URI or "." (zapp-schema's homepage): URIs other than "."
    check({"oneOf": [{"format": "uri"}, {"enum": ["."]}]}, [".", "x", 1])
    assert rewrite({"oneOf": [{"format": "uri"}, {"enum": ["."]}]})["anyOf"][1] == {
        "allOf": [{"enum": ["."]}, {"type": ["null", "boolean", "number", "array", "object"]}]}


@SETTINGS
@given(st.data(), st.sampled_from(sorted(DRAFTS)), INSTANCES)
def test_not(data, draft, instances):
    check(document(draft, {"not": data.draw(simple(draft, 2, refs=True))}, data.draw(simple(draft))), instances,
          must_rewrite=False)


@pytest.mark.parametrize("negated,instances", [
    ({"type": "string"}, [1, "a", None]),
    ({"enum": ["abc", "abd", "b", 1, 2.5, True, None]}, ["ab", "abc", "abe", "abcd", "b", "", 1, 1.5, 2.5, 3, True,
                                                          False, None, [], {}]),
    ({"const": "a]^-\\\n"}, ["a]^-\\\n", "a]^-\\", "a]^-\\\nx", "b]^-\\\n", "a]^-]\n"]),
    ({"required": ["a", "b"]}, [{}, {"a": 1}, {"a": 1, "b": 2}, 5]),
    ({"properties": {"a": {"type": "string"}}}, [{}, {"a": "x"}, {"a": 1}, "s"]),
    ({"minLength": 2, "maximum": 3}, ["a", "ab", 3, 4, None]),
    ({"anyOf": [{"type": "null"}, {"minItems": 1}]}, [None, [], [1], 0]),
    ({"not": {"type": "array"}}, [[], 1]),
    ({"contains": {"const": 1}}, [[], [1], [2, 1], [2], "x"]),
    ({"then": {"type": "null"}}, [None, 1]),
])
def test_not_examples(negated, instances):
    check({"not": negated}, instances)


@SETTINGS
@given(st.data(), st.sampled_from([7, 2020]), INSTANCES)
def test_if_then_else(data, draft, instances):
    schema = {"if": data.draw(simple(draft, refs=True))}
    for key in data.draw(st.sampled_from([["then"], ["else"], ["then", "else"], []])):
        schema[key] = data.draw(simple(draft))
    check(document(draft, schema, data.draw(simple(draft))), instances, must_rewrite=False)


@SETTINGS
@given(st.data(), st.sampled_from([7, 2020]), INSTANCES)
def test_if_then_on_one_property_in_an_allof(data, draft, instances):
    """The discriminator form (an allOf of if {properties: {p: {const}}} then ...) becomes one anyOf of cases."""
    members = []
    for _ in range(data.draw(st.integers(2, 4))):
        values = data.draw(st.lists(st.sampled_from(["a", "b", 1, None, True]), min_size=1, max_size=2, unique=True))
        test = {"properties": {"a": {"const": values[0]} if len(values) == 1 else {"enum": values}}}
        if data.draw(st.booleans()):
            test["required"] = ["a"]
        if data.draw(st.booleans()):
            test["type"] = "object"
        member = {"if": test}
        for key in data.draw(st.sampled_from([["then"], ["else"], ["then", "else"]])):
            member[key] = data.draw(simple(draft, 0))
        members.append(member)
    schema = document(draft, {"allOf": members + data.draw(st.lists(simple(draft, 0), max_size=1))})
    out = check(schema, instances)
    assert "anyOf" in out and len(out.get("allOf", ())) <= 1


def test_if_without_then_needs_no_complement():
    out = rewrite({"if": {"pattern": "^a"}, "else": {"minLength": 3}})     # (I or E): no complement of a pattern
    assert out == {"anyOf": [{"pattern": "^a"}, {"minLength": 3}]}
    assert rewrite({"if": {"pattern": "^a"}}) == {}
    assert rewrite({"$schema": DRAFTS[4], "if": {"pattern": "^a"}, "then": False}) == {
        "$schema": DRAFTS[4], "if": {"pattern": "^a"}, "then": False}    # no if/then before draft 7: untouched


@SETTINGS
@given(st.data(), st.sampled_from([4, 7, 2020]), INSTANCES)
def test_dependencies(data, draft, instances):
    deps = {}
    for key in data.draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True)):
        if data.draw(st.booleans()):
            deps[key] = data.draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True))
        else:
            deps[key] = data.draw(simple(draft))
    schema = {"properties": {k: data.draw(simple(draft, 0)) for k in KEYS[:2]}}
    if draft == 2020:          # the 2019-09 split; (dependencies, ignored by 2020-12 validators, is tested below)
        schema["dependentRequired"] = {k: v for k, v in deps.items() if isinstance(v, list)}
        schema["dependentSchemas"] = {k: v for k, v in deps.items() if not isinstance(v, list)}
    else:
        schema["dependencies"] = deps
    check(document(draft, schema), instances, must_rewrite=False)


def test_dependencies_in_2020_12_are_enforced_as_draft_7_meant():
    """2019-09 split dependencies into dependentRequired/dependentSchemas; 2020-12 validators ignore it, llguidance
    refuses it: the rewrite enforces it (its output is valid under either reading)."""
    out = rewrite({"type": "object", "dependencies": {"a": ["b"]}})
    assert out == {"type": "object", "anyOf": [{"properties": {"a": False}}, {"required": ["a", "b"]}]}
    assert not validator(out).is_valid({"a": 1})
    assert validator(out).is_valid({"a": 1, "b": 2}) and validator(out).is_valid({"b": 2})


ANGLE_PIECES = ["\\<", "\\>", "\\\\<", "[\\<a]", "[^\\>]", "a", ".", "<", "\\\\", "(\\<|b)", "+"]


@SETTINGS
@given(st.lists(st.sampled_from(ANGLE_PIECES), min_size=1, max_size=5), st.booleans(),
       st.lists(st.text("<>a\\b", max_size=4), min_size=20, max_size=20))
def test_pattern_angle_escapes(pieces, anchored, instances):
    """\\< and \\> are a literal < and > to ECMA-262 and Python's re, word boundaries to llguidance's regex syntax
    (refused as look-around): written \\x3c / \\x3e, the same strings match, and it compiles."""
    pattern = ("^" if anchored else "") + "".join(pieces)
    try:
        jsonschema.validators.validator_for({}).check_schema({"pattern": pattern})
        re.compile(pattern)
    except Exception:
        return                                    # not a regular expression: nothing to compare
    out = check({"type": "string", "pattern": pattern}, instances)
    assert "\\<" not in out["pattern"].replace("\\\\", "") and "\\>" not in out["pattern"].replace("\\\\", "")


def test_pattern_angle_escapes_example():
    """A person's "Name <mail@host.org>" (JSONSchemaBench Github_hard o72113): refused as look-around before."""
    schema = {"type": "string", "pattern": "^.+\\<.+@.+\\..+\\>$"}
    out = check(schema, ["A <a@b.c>", "A a@b.c", "<a@b.c>", "A <a@b.c> "])
    assert out["pattern"] == "^.+\\x3c.+@.+\\..+\\x3e$" and compiles(out) is None


@SETTINGS
@given(st.lists(st.sampled_from(["a", "b", "a-c", "\\s", "\\d", "\\-", "\\n", ".", "\\\\"]), min_size=1, max_size=3,
                unique=True), st.sampled_from(["+", "*", "{2}", "{1,2}", "{0,1}"]), st.sampled_from(["not", "oneOf"]),
       st.lists(st.text("ab1-.\\ \n\x1c\x85\ufeff\u0663z", max_size=4), min_size=25, max_size=25))
def test_not_pattern_of_one_class(parts, quantifier, key, instances):
    """not ^[C]{low,high}$: strings too short, too long (by 2: Python's $ takes a final newline) and those with a
    character outside C and not a newline; exact where C's characters mean the same in every dialect, C holds a
    newline and the run is unbounded, else narrowed (every dialect's \\s and \\d counted in C): what the rewrite
    accepts, the schema does (exactly, where it says so), and it compiles."""
    negated = {"type": "string", "pattern": "^[" + "".join(parts) + "]" + quantifier + "$"}
    schema = {"not": negated} if key == "not" else {"oneOf": [negated, {"type": "string"}]}
    out = check(schema, instances + ["", "a", "z", "ab", "abc", "1\n", "a\na"], must_rewrite=False)
    exact = not {"\\s", "\\d"} & set(parts) and "\\n" in parts and quantifier in "+*"
    assert out is not None or not exact


def test_not_pattern_of_one_class_example():
    """JSONSchemaBench Github_ultra o65418: a name that is not only punctuation and spaces."""
    schema = {"type": "string", "minLength": 1, "not": {"pattern": "^[\\.\\,\\*\\\\\\-\\s\\{\\}\\(\\)]+$"}}
    with pytest.raises(GrammarError, match="not at #: the complement of pattern differs between regex dialects"):
        rewrite(schema)
    narrowed = []
    out = rewrite(schema, narrowed=narrowed)
    assert narrowed == ["not at #: only a part of its complement is allowed (the complement of pattern differs "
                        "between regex dialects (\\s, \\d, a bounded run, a final newline))"]
    valid = validator(out)
    assert [valid.is_valid(x) for x in ["Ann", " -A", "", " ", "(.)", "\ufeff", "a\n"]] == [
        True, True, False, False, False, False, True]
    exact = {"not": {"pattern": "^[a-c\\n]*$"}}
    assert rewrite(exact) == {"type": "string", "pattern": "[^\\u000aa-c]"}
    check(exact, ["", "abc", "abd", "a\n", "d"])


PRESENCE = ["a", "b", "c", "d", "e"]
ALL_KEY_SETS = [{k: 1 for i, k in enumerate(PRESENCE) if m >> i & 1} for m in range(32)] + [None, "x", 1, []]


@st.composite
def presence_test(draw, draft):
    """A subschema that tests only which keys an object has: required, not required, an anyOf of them."""
    keys = st.lists(st.sampled_from(PRESENCE), min_size=1, max_size=3, unique=True)
    shape = draw(st.sampled_from(["required", "not", "anyOf"]))
    if shape == "required":
        return {"required": draw(keys)}
    if shape == "not":
        return {"not": {"required": draw(keys)}}
    return {"anyOf": [{"required": [k]} for k in draw(keys)]}


@SETTINGS
@given(st.data(), st.sampled_from([4, 7, 2020]))
def test_presence_tests_become_key_sets(data, draft):
    """dependencies / not required / anyOf of required side by side (which llguidance multiplies out) recomputed
    as one anyOf of key sets: the same verdict on every set of the keys they read, and on non-objects (the cover
    forced here on any two tests, not only past MAX_PRESENCE_TERMS shapes)."""
    from unittest import mock

    from fastgguf.engine import schema_rewrite
    deps = {k: data.draw(st.one_of(st.lists(st.sampled_from(PRESENCE), max_size=3, unique=True),
                                   presence_test(draft)))
            for k in data.draw(st.lists(st.sampled_from(PRESENCE), min_size=1, max_size=4, unique=True))}
    schema = {"properties": {k: {"type": "integer"} for k in PRESENCE}}
    if data.draw(st.booleans()):
        schema["type"] = "object"
    if data.draw(st.booleans()):
        schema.update(data.draw(presence_test(draft)))
    if draft == 2020:
        schema["dependentRequired"] = {k: v for k, v in deps.items() if isinstance(v, list)}
        schema["dependentSchemas"] = {k: v for k, v in deps.items() if not isinstance(v, list)}
    else:
        schema["dependencies"] = deps
    with mock.patch.object(schema_rewrite, "MAX_PRESENCE_TERMS", 1):
        check(document(draft, schema), ALL_KEY_SETS + [{"a": "x"}], must_rewrite=False)


def test_presence_tests_listed_compactly():
    """JSON Schema Store's JFrog file spec: 6 dependencies (3 of them not required) beside an anyOf of 4 required
    keys, which llguidance multiplied out past its size limit; as key sets, 10 shapes."""
    spec = {"$schema": DRAFTS[7], "additionalProperties": False,
            "properties": {k: {"type": "string"} for k in "pabuxyzlo"},
            "anyOf": [{"required": ["p"]}, {"required": ["a"]}, {"required": ["b"]}, {"required": ["u"]}],
            "dependencies": {"p": {"not": {"required": ["a"]}}, "a": {"not": {"required": ["p", "x", "y", "z"]}},
                             "b": {"not": {"required": ["u", "l", "o"]}}, "u": {"not": {"required": ["b", "l", "o"]}},
                             "x": ["b"], "y": ["b"]}}
    out = rewrite(spec)
    assert "allOf" not in out and len(out["anyOf"]) <= 12, out
    assert out["anyOf"][0] == {"type": ["null", "boolean", "number", "string", "array"]}
    sets = [{k: "v" for i, k in enumerate("pabuxyzlo") if m >> i & 1} for m in range(512)]
    check(spec, sets + [1, None])
    assert compiles(out) is None
    # a $ref naming an allOf member (which the cover would move): left as they were, the $ref right
    named = {**spec, "allOf": [{"properties": {"p": {"minLength": 1}}}], "properties": {
        **spec["properties"], "q": {"$ref": "#/allOf/0"}}}
    out = rewrite(named)
    ref = out["properties"]["q"]["$ref"]
    assert len(out["allOf"]) > 2 and ref.startswith("#/allOf/")
    assert out["allOf"][int(ref.rsplit("/", 1)[1])] == named["allOf"][0]
    for x in [{"q": "", "p": "x"}, {"q": "x", "p": "x"}, {"q": "", "b": "x"}]:    # (too large for llguidance)
        assert validator(named).is_valid(x) == validator(out).is_valid(x)
    # past 16 keys, or more key sets than 4 x 64 before merging, the tests are left as they were
    keys = [f"k{i}" for i in range(17)]
    ring = {"$schema": DRAFTS[7], "dependencies": {k: {"not": {"required": [keys[i - 1]]}} for i, k in enumerate(keys)}}
    assert len(rewrite(ring)["allOf"]) == 16
    ring["dependencies"].pop("k16")
    ring["dependencies"] = {k: {"not": {"required": [keys[i - 1], keys[i - 5]]}} for i, k in enumerate(keys[:16])}
    assert len(rewrite(ring)["allOf"]) == 15


@st.composite
def array_schema(draw):
    shape = draw(st.sampled_from(["enum", "const", "boolean", "tuple"]))
    if shape == "tuple":
        s = {"prefixItems": draw(st.lists(simple(2020, 0), min_size=1, max_size=3)), "items": False}
    elif shape == "boolean":
        s = {"items": {"type": draw(st.sampled_from(["boolean", ["boolean", "null"]]))}}
    else:
        values = draw(st.lists(SCALARS, min_size=1, max_size=4, unique_by=json.dumps))
        s = {"items": {"enum": values} if shape == "enum" else {"const": values[0]}}
    for key in draw(st.lists(st.sampled_from(["minItems", "maxItems"]), max_size=2, unique=True)):
        s[key] = draw(st.integers(0, 3))
    return {"type": "array", **s, "uniqueItems": True}


@SETTINGS
@given(array_schema(), st.lists(st.lists(SCALARS, max_size=4), min_size=25, max_size=25))
def test_unique_items(schema, instances):
    check(schema, instances, must_rewrite=False)


def test_unique_items_rewrites():
    assert rewrite({"type": "array", "items": {"type": "string"}, "uniqueItems": False}) == {
        "type": "array", "items": {"type": "string"}}
    assert rewrite({"type": "array", "maxItems": 1, "uniqueItems": True}) == {"type": "array", "maxItems": 1}
    tuple_ = {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False, "uniqueItems": True}
    assert rewrite(tuple_) == {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}
    out = rewrite({"type": "array", "items": {"enum": ["x", "y"]}, "uniqueItems": True})
    assert out["enum"] == [[], ["x"], ["y"], ["x", "y"], ["y", "x"]]


@SETTINGS
@given(st.data(), INSTANCES)
def test_property_names_contains_and_counts(data, instances):
    closed = data.draw(st.booleans())
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in KEYS[:2]}}
    if closed:
        schema["additionalProperties"] = False
    schema["required"] = data.draw(st.lists(st.sampled_from(KEYS[:2]), max_size=2, unique=True))
    names = data.draw(st.sampled_from([{"enum": ["a", "c"]}, {"const": "b"}, {"pattern": "^[ab]"},
                                       {"maxLength": 0}, {"type": "string"}, {"type": "boolean"}]))
    schema["propertyNames"] = names
    for key in data.draw(st.lists(st.sampled_from(["minProperties", "maxProperties"]), max_size=2, unique=True)):
        schema[key] = data.draw(st.integers(0, 3))
    check(schema, instances, must_rewrite=False)
    contains = {"type": "array", "items": data.draw(simple(2020, 0)), "contains": data.draw(simple(2020, 0))}
    check(contains, instances, must_rewrite=False)


@SETTINGS
@given(st.data(), INSTANCES)
def test_counts_over_optional_keys(data, instances):
    """min/maxProperties where some listed key is optional: rewritten exactly (the sets of optional keys present
    enumerated), and llguidance compiles what comes out, closed, open or with patternProperties."""
    llguidance = pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import _json_lark
    schema = {"type": "object", "properties": {k: data.draw(simple(2020, 0)) for k in KEYS[:3]}}
    shape = data.draw(st.sampled_from(["closed", "open", "patterns"]))
    if shape == "closed":
        schema["additionalProperties"] = False
    elif shape == "patterns":
        schema["patternProperties"] = {"^[ab]": {"type": "integer"}}
    schema["required"] = data.draw(st.lists(st.sampled_from(KEYS[:3]), max_size=2, unique=True))
    for key in data.draw(st.lists(st.sampled_from(["minProperties", "maxProperties"]), min_size=1, unique=True)):
        schema[key] = data.draw(st.integers(0, 4))
    out = check(schema, instances)
    err = llguidance.LLMatcher.validate_grammar(_json_lark(out, False))
    assert not err or "Unsatisfiable" in err, (schema, out, err)


def test_counts_over_optional_keys_in_the_matcher():
    """circleci's step: exactly one key, one of those listed or a custom command's (patternProperties)."""
    llguidance = pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import _byte_tokenizer, build, limits
    schema = {"type": "object", "properties": {"run": {}, "checkout": {}}, "minProperties": 1, "maxProperties": 1,
              "patternProperties": {"^[a-z][a-z-]+$": {}}}
    text = build("json_schema", json.dumps(schema))

    def accepts(doc):
        m = llguidance.LLMatcher(_byte_tokenizer(text), text, log_level=0, limits=limits())
        return all(m.consume_token(b) for b in doc.encode()) and m.is_accepting()

    for doc in ['{"run": 1}', '{"checkout": "x"}', '{"my-cmd": {}}']:
        assert accepts(doc) and validator(schema).is_valid(json.loads(doc)), doc
    for doc in ['{}', '{"run": 1, "checkout": 2}', '{"run": 1, "my-cmd": 2}']:
        assert not accepts(doc) and not validator(schema).is_valid(json.loads(doc)), doc
    many = {"type": "object", "properties": {f"k{i}": {} for i in range(12)}, "minProperties": 6}
    with pytest.raises(GrammarError, match="min/maxProperties"):
        build("json_schema", json.dumps(many))     # C(12, 6..12) sets: past MAX_KEY_SETS, left to llguidance


@SETTINGS
@given(st.data(), INSTANCES)
def test_overlapping_pattern_properties_that_list_names(data, instances):
    """Two patternProperties a name may match both of (which llguidance refuses), one of them listing its names:
    that one moved into properties, where each listed name's schema is intersected with the patterns it matches."""
    llguidance = pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import _json_lark
    listed = data.draw(st.sampled_from(["^(a|b)$", "^a$", "^(?:a|c)$"]))
    other = data.draw(st.sampled_from([".*", "^[abc]", "a"]))
    schema = {"type": "object", "patternProperties": {listed: data.draw(simple(2020, 0)),
                                                      other: data.draw(simple(2020, 0))}}
    if data.draw(st.booleans()):
        schema["properties"] = {"a": data.draw(simple(2020, 0))}
    if data.draw(st.booleans()):
        schema["additionalProperties"] = False
    out = check(schema, instances)
    assert listed not in out["patternProperties"]
    err = llguidance.LLMatcher.validate_grammar(_json_lark(out, False))
    assert not err or "Unsatisfiable" in err, (schema, out, err)


def test_refs_to_a_drafts_meta_schema():
    """Swagger 2.0's "$ref": "http://json-schema.org/draft-04/schema#/definitions/positiveInteger": the meta-schema
    embedded under a private URI (llguidance resolves no remote $ref), its own $refs made absolute; enforced."""
    llguidance = pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import _byte_tokenizer, build, limits
    meta = "http://json-schema.org/draft-04/schema#"
    schema = {"$schema": meta, "id": "http://example.com/s.json#", "type": "object", "required": ["n", "t"],
              "properties": {"n": {"$ref": meta + "/definitions/positiveInteger"},
                             "t": {"$ref": meta + "/properties/type"}}, "additionalProperties": False}
    out = rewrite(schema, defer_unique=True)
    assert out["properties"]["n"]["$ref"].startswith("https://fastgguf.invalid/json-schema/draft-04/schema#")
    assert "x-fastgguf-draft-04" in out["definitions"] and "definitions" not in schema
    text = build("json_schema", json.dumps(schema))

    def accepts(doc):
        m = llguidance.LLMatcher(_byte_tokenizer(text), text, log_level=0, limits=limits())
        return all(m.consume_token(b) for b in doc.encode()) and m.is_accepting()

    for doc, ok in [('{"n": 3, "t": "string"}', True), ('{"n": 0, "t": ["null", "integer"]}', True),
                    ('{"n": -1, "t": "string"}', False), ('{"n": 3, "t": "text"}', False)]:
        assert accepts(doc) == ok == validator(schema).is_valid(json.loads(doc)), doc   # (type's uniqueItems:
    #                                                           the matcher's, engine.unique_items, not llguidance's)
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "$ref": meta + "/definitions/positiveInteger"}
    assert rewrite(draft7) == draft7                  # draft 4's keywords read as draft 7's: left remote
    own = {"$schema": meta, "definitions": {"m": {"id": meta, "definitions": {"p": {"type": "integer"}}}},
           "$ref": meta + "/definitions/p"}
    assert "x-fastgguf-draft-04" not in rewrite(own).get("definitions", {})   # a document with its own copy


@SETTINGS
@given(st.data(), INSTANCES)
def test_unevaluated_properties(data, instances):
    """unevaluatedProperties over properties evaluated here, in allOf members and $ref targets (meltano's plugins:
    allOf [$ref generic, $ref specific], unevaluatedProperties: false): the evaluated names and patterns listed
    beside an additionalProperties; left to llguidance where an anyOf branch evaluates a property."""
    llguidance = pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import _json_lark
    member = st.sampled_from([{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {}}, "required": ["b"]},
                              {"patternProperties": {"^c": {"type": "string"}}}, {"$ref": "#/$defs/d"},
                              {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}, {"type": "object"}])
    schema = {"$schema": DRAFTS[2020], "allOf": data.draw(st.lists(member, min_size=1, max_size=3)),
              "$defs": {"d": {"properties": {"c": {"type": "boolean"}}, "allOf": [{"properties": {"b": {}}}]}},
              "unevaluatedProperties": data.draw(st.sampled_from([False, {"type": "null"}, True]))}
    if data.draw(st.booleans()):
        schema["properties"] = {"a": {}}
    out = check(schema, instances)
    assert "unevaluatedProperties" not in json.dumps(out)
    err = llguidance.LLMatcher.validate_grammar(_json_lark(out, False))
    assert not err or "Unsatisfiable" in err, (schema, out, err)
    branchy = {"$schema": DRAFTS[2020], "anyOf": [{"properties": {"a": {}}}, {"required": ["b"]}],
               "unevaluatedProperties": False}
    assert rewrite(branchy)["unevaluatedProperties"] is False     # which branch evaluates "a" varies: left alone


def test_property_names_rewrites():
    assert rewrite({"type": "object", "propertyNames": {"type": "string", "minLength": 0}}) == {"type": "object"}
    closed = {"properties": {"ok": {}, "no way": {}}, "additionalProperties": False,
              "propertyNames": {"pattern": "^[a-z]+$"}}
    assert rewrite(closed) == {"properties": {"ok": {}, "no way": {}}, "additionalProperties": False,
                               "allOf": [{"properties": {"no way": False}}]}
    enum = rewrite({"type": "object", "additionalProperties": {"type": "integer"},
                    "propertyNames": {"enum": ["x", "y"]}})
    assert enum["allOf"] == [{"properties": {"x": True, "y": True}, "additionalProperties": False}]


@pytest.mark.parametrize("fmt", sorted(KNOWN_FORMATS) + ["uri-reference", "regex", "topic", "int32"])
def test_format(fmt):
    out = rewrite({"type": "string", "format": fmt, "properties": {"a": {"format": fmt}}})
    assert ("format" in out) == (fmt in KNOWN_FORMATS) == ("format" in out["properties"]["a"])
    assert compiles(out) is None


# -- refusals name the keyword and where it is ----------------------------------------------------------------------

REFUSED = [
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]},
     "oneOf at #: branches 0 and 1 may both match (not proved disjoint) and the complement of branch 0 cannot be "
     "written (not type integer: the numbers that are not integers cannot be written)"),
    ({"properties": {"p": {"oneOf": [{"type": "string"}, {"pattern": "^a"}]}}},
     "oneOf at #/properties/p: branches 0 and 1 may both match"),
    ({"not": {"type": "string", "pattern": "^a"}}, "not at #: the complement of pattern cannot be written"),
    ({"not": {"multipleOf": 2}}, "not at #: the complement of multipleOf cannot be written"),
    ({"not": {"enum": [[1]]}}, "not at #: not enum/const holding an array or an object cannot be written"),
    ({"$defs": {"n": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/n"}]}}, "not": {"$ref": "#/$defs/n"}},
     "not at #: $ref #/$defs/n is recursive"),
    ({"not": {"$ref": "other.json"}}, "not at #: $ref other.json is not in this document"),
    ({"if": {"format": "email"}, "then": {"maxLength": 9}},
     "if at #: the complement of the if schema cannot be written (the complement of format cannot be written)"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True},
     "uniqueItems at #: repeats can only be excluded where the items come from a small finite set of values"),
    ({"type": "array", "items": {"enum": list(range(6))}, "uniqueItems": True},
     f"uniqueItems at #: more than {MAX_ARRAYS} arrays of distinct items would have to be listed"),
    ({"prefixItems": [{"type": "string"}, {"type": "string"}], "items": False, "uniqueItems": True},
     "uniqueItems at #: two positions of the tuple may hold equal values"),
    ({"dependencies": {"a": [1]}}, "dependencies at #/dependencies: a: not a list of property names"),
    ({"$defs": {"n": {"not": {"type": "string", "$defs": {"in": {"type": "null"}}}}},
      "properties": {"x": {"$ref": "#/$defs/n"}, "y": {"$ref": "#/$defs/n/not/$defs/in"}}},
     "$ref at #/properties/y: #/$defs/n/not/$defs/in names a part of the schema that the rewrite"),
]


@pytest.mark.parametrize("schema,message", REFUSED, ids=[m.split(":")[0] for _, m in REFUSED])
def test_refusals_name_the_keyword_and_place(schema, message):
    with pytest.raises(GrammarError) as e:
        rewrite(schema)
    assert str(e.value).startswith(message), str(e.value)
    out = rewrite(schema, lenient=True)          # lenient: left as it was, for llguidance to ignore
    assert isinstance(out, dict)


def test_lenient_keeps_what_it_cannot_rewrite_and_rewrites_the_rest():
    schema = {"properties": {"a": {"not": {"pattern": "x"}}, "b": {"not": {"type": "string"}}}}
    out = rewrite(schema, lenient=True)
    assert out["properties"]["a"] == {"not": {"pattern": "x"}}
    assert out["properties"]["b"] == {"type": ["null", "boolean", "number", "array", "object"]}


# -- $refs, reachability, robustness --------------------------------------------------------------------------------

def test_refs_follow_what_moved():
    schema = {"type": "object", "properties": {"shape": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                                               "again": {"$ref": "#/properties/shape/oneOf/1"},
                                               "cond": {"if": {"type": "string"}, "then": {"minLength": 2},
                                                        "else": {"type": "integer"}},
                                               "other": {"$ref": "#/properties/cond/else"}}}
    out = rewrite(schema)
    assert out["properties"]["again"] == {"$ref": "#/properties/shape/anyOf/1"}
    assert out["properties"]["other"] == {"$ref": "#/properties/cond/anyOf/1/allOf/1"}
    check(schema, [{"again": 1}, {"again": "s"}, {"other": 2}, {"other": "x"}, {"cond": "x"}, {"cond": "xy"}])


def test_unused_definitions_are_never_refused_and_used_ones_are_rewritten():
    schema = {"definitions": {"unused": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
                              "used": {"not": {"type": "null"}}},
              "properties": {"a": {"$ref": "#/definitions/used"}}}
    out = rewrite(schema)
    assert out["definitions"]["unused"] == schema["definitions"]["unused"]
    assert out["definitions"]["used"] == {"type": ["boolean", "number", "string", "array", "object"]}
    assert rewrite({"$ref": "#/definitions/used", "definitions": {"used": {"not": {}}}})["definitions"] == {
        "used": {"allOf": [False]}}


def test_ids_and_anchors_resolve():
    schema = {"$id": "https://example.com/root.json", "type": "object", "properties": {
        "a": {"$id": "inner.json", "$defs": {"t": {"const": 1}}, "oneOf": [{"$ref": "#/$defs/t"},
                                                                             {"type": "string"}]},
        "b": {"oneOf": [{"$ref": "inner.json#/$defs/t"}, {"$ref": "#tagged"}]}},
        "$defs": {"x": {"$anchor": "tagged", "type": "string"}}}
    out = rewrite(schema)
    assert "anyOf" in out["properties"]["a"] and "anyOf" in out["properties"]["b"]
    check(schema, [{"a": 1}, {"a": 2}, {"a": "s"}, {"b": 1}, {"b": "s"}, {"b": None}])
    urn = {"$id": "urn:example:root", "$defs": {"s": {"type": "string"}},
           "oneOf": [{"$ref": "#/$defs/s"}, {"type": "integer"}]}        # a base urljoin does not resolve against
    assert rewrite(urn)["anyOf"] == urn["oneOf"]


JUNK = st.recursive(
    st.one_of(SCALARS, st.sampled_from([[], {}, ["a"], -5, 10 ** 20])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
        ["type", "enum", "const", "oneOf", "anyOf", "allOf", "not", "if", "then", "else", "properties", "required",
         "items", "prefixItems", "additionalProperties", "uniqueItems", "dependencies", "propertyNames", "contains",
         "minItems", "maxItems", "minimum", "exclusiveMinimum", "format", "$ref", "$defs", "$id", "a"]),
        inner, max_size=4)), max_leaves=12)


def test_what_is_not_json_is_left_to_the_caller():
    for odd in ({"enum": [{1, 2}]}, {"const": float("nan"), "oneOf": [True]}):
        assert rewrite(odd) is odd
    with pytest.raises(GrammarError, match="not JSON"):
        from fastgguf.engine.grammar import Grammar
        Grammar.json_schema({"enum": [{1, 2}], "not": {"type": "null"}})


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.dictionaries(st.sampled_from(["oneOf", "not", "if", "then", "uniqueItems", "items", "dependencies", "enum",
                                        "propertyNames", "contains", "$ref", "$defs", "maxProperties", "required",
                                        "minProperties", "properties", "additionalProperties"]),
                       JUNK, max_size=4))
def test_malformed_schemas_raise_only_grammar_errors(schema):
    try:
        rewrite(schema)
    except GrammarError:
        pass


# -- wired in: Grammar.json_schema and tool calls -------------------------------------------------------------------

WIRED = {"type": "object", "properties": {"when": {"type": "string", "format": "partial-date"},
                                          "x": {"oneOf": [{"type": "integer"}, {"type": "null"}]},
                                          "y": {"not": {"enum": ["a", "b"]}}}, "required": ["x"],
         "dependentRequired": {"x": ["y"]}}


def test_grammar_json_schema_rewrites():
    pytest.importorskip("llguidance")
    from fastgguf.engine.grammar import Grammar
    assert Grammar.json_schema(WIRED).kind == "json_schema"
    with pytest.raises(GrammarError, match=r"^json_schema: oneOf at #: branches 0 and 1"):
        Grammar.json_schema({"oneOf": [{"type": "integer"}, {"type": "number"}]})
    assert Grammar.json_schema({"oneOf": [{"type": "integer"}, {"type": "number"}]}, lenient=True)


def test_tool_grammars_rewrite_parameters():
    pytest.importorskip("llguidance")
    from fastgguf.engine.tools import ToolError, tool_grammar, validate_tools

    def tools(params):
        return validate_tools([{"type": "function", "function": {"name": "f", "parameters": params}}], "required")
    assert tool_grammar(tools(WIRED), "hermes")
    refs = {"type": "object", "$defs": {"n": {"oneOf": [{"type": "integer"}, {"type": "string"}]}},
            "properties": {"n": {"$ref": "#/$defs/n"}}}
    assert tool_grammar(tools(refs), "generic")          # its $refs rebased below the call schema's $defs
    with pytest.raises(ToolError, match="'f'.*oneOf at #/properties/n: branches 0 and 1") as e:
        tool_grammar(tools({"type": "object", "properties": {
            "n": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}}), "hermes")
    assert e.value.param == "tools"
