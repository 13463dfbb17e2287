r"""Rewrites that let llguidance enforce more of a JSON Schema, exactly (used by fastgguf.engine.grammar and tools).

    rewrite(schema) -> a schema accepting the same JSON instances, in what llguidance compiles

A pure function (no llguidance here). Where an exact rewrite cannot be proved it raises GrammarError naming the
keyword and the JSON pointer where it sits ("oneOf at #/properties/shape: branches 0 and 2 may both match ...").
Nothing is loosened. The schema is read under its own draft ($schema; 2020-12 without one): a keyword its draft does
not define is left alone, as llguidance and validators leave it. Only what the root reaches (subschemas, local
$refs) is rewritten: llguidance compiles nothing else, so an unused definition is never refused.

The rules ("==": accepts the same instances):

- format is an annotation unless the format-assertion vocabulary is in use (2020-12; earlier drafts leave it to the
  implementation): one llguidance does not implement is dropped; one it does (KNOWN_FORMATS) is kept, enforced.
  The output must be valid under both readings, so in a complement (not, a oneOf's other branches) a known format
  rejects nothing, as read as an annotation: exactly the instances valid under both (not A is within not S where
  the asserted S is within the annotation A). Not in an if's test (its positive side would enforce it): refused.
- \< and \> in a pattern (literal < and > in ECMA-262 and Python's re; word boundaries to llguidance) are
  written \x3c and \x3e.
- oneOf [B0..Bn] == anyOf [B0..Bn] when every two branches are disjoint (no instance matches both) where its
  context holds (the keywords beside it, the other members of an allOf it is in; as llguidance checks a oneOf):
  then exactly one matches iff at least one does. A definition whose oneOf is proved only with what holds where it
  is named is rewritten at each $ref naming it, with that place's context. Disjointness is proved from what each
  side forces (_Facts: $refs followed, allOf merged, cycles cut): types (integer within number), finite value sets
  (enum/const) refuted by the other side (a three-valued evaluator, _check), strings a pattern lists
  (_pattern_words) and the shortest match of any pattern (_pattern_min_len), numeric, length, item-count and
  property-count ranges, array positions both sides have and keys both must have whose schemas are disjoint (a key
  one side requires and the other forbids, e.g. by additionalProperties: false, counts), not {type}, and each
  alternative of an anyOf/oneOf inside a side. The proof is per kind of instance (null, boolean, integer, other
  number, string, array, object): two branches not proved disjoint on kinds K become Bi -> allOf [Bi, Ci] with Ci
  == not Bj on K and anything on the other kinds, which is exactly oneOf's "not both" (e.g. two object shapes that
  both accept every non-object get Ci == {type: object}). Where not Bj on K cannot be written: GrammarError naming
  the two branches, unless the caller allows narrowing (rewrite(narrowed=[...])): then Ci is the part of not Bj
  that can be written (complement(part=True): a keyword whose complement cannot be written adds nothing to the
  union), so fewer instances are accepted, each matching exactly one branch; refused still where no branch is
  left. not S and if's complement likewise, where the part is not nothing. Narrowing is tried only after the exact
  rewrite of the whole schema has failed, so nothing that can be rewritten exactly is narrowed.
- not S == the complement of S, keyword by keyword (not (A and B) == not A or not B), each within the kinds it
  constrains: type -> the other types (refused where integer is excluded but number is not: "a number that is not
  an integer" has no type); enum/const -> the other types, the other boolean, the open intervals around the
  numbers, the strings of other lengths or leaving the set at some position (a pattern anchored at the start, its
  length pinned by minLength = maxLength: no end anchor, whose meaning differs between regex dialects); required
  [k] -> objects without k (properties {k: false}); properties {k: S} -> objects with k whose value is in not S;
  min/max length, items, properties, minimum/maximum and the exclusive bounds -> the opposite bound within the
  type; contains S -> arrays whose items are all in not S; allOf/anyOf by de Morgan, not not S == S, a disjoint
  oneOf as anyOf, $ref followed; a known format -> nothing (above); pattern ^[C]{low,high}$ -> too short, too
  long by 2 (Python's $ takes a final newline), or a character outside C and not a newline (exact where C's
  characters read alike in every dialect, C holds a newline and the run is unbounded; else a part, for narrowing:
  _class_run_complement). Refused: any other pattern, a known format in an if's test, multipleOf, items,
  additionalProperties, patternProperties, uniqueItems, if/then/else, dependencies, propertyNames, a recursive
  $ref, arrays or objects in enum.
- if I then T else E == anyOf [allOf [I, T], allOf [not I, E]]; without else == anyOf [not I, T]; without then ==
  anyOf [I, E] (no complement needed); neither: no constraint. Refused when not I cannot be written. Several allOf
  members that are if/then/else on one property's value (the discriminator form) become one anyOf over the cases
  (a non-object, no such key, each set of values the same ifs accept, any other value: in each case every if's
  verdict is known) instead of an anyOf each, which llguidance would multiply out; cases the context excludes go.
- Presence tests side by side (allOf/anyOf members made only of required, properties {k: false}, type object:
  what dependencies, not required and counted key sets become) that llguidance would multiply past
  MAX_PRESENCE_TERMS object shapes, reading at most MAX_PRESENCE_KEYS keys -> one anyOf of key sets (Shannon
  expansion on one key at a time, sets differing in one key merged), plus the non-objects where they pass: the
  same verdict on every assignment of those keys.
- dependentRequired {a: [b..]} == anyOf [{properties: {a: false}}, {required: [a, b..]}]; dependentSchemas {a: S}
  == anyOf [{properties: {a: false}}, allOf [{required: [a]}, S]]; dependencies likewise. A non-object passes both
  sides, as it passes the keyword. dependencies is enforced in every draft: llguidance refuses it in every draft,
  and a 2019-09 or later validator ignores it, so there the output keeps what the author meant (valid either way).
- uniqueItems: false, or maxItems <= 1 -> dropped; a tuple (no items after prefixItems) whose positions are
  pairwise disjoint -> dropped; items from a finite set of values (enum, const, boolean, null) -> allOf the arrays
  of distinct values (an enum), at most MAX_ARRAYS of them; else marked UNIQUE_MARK for the matcher to enforce
  where rewrite(defer_unique=True) was asked for (engine.unique_items), refused where not (tool arguments).
- minProperties <= the number of required keys, or maxProperties >= the number of keys an object can have (all in
  properties: additionalProperties false, no patternProperties) -> dropped; maxProperties 0 -> additionalProperties
  false beside them (no key at all); where a listed key is optional (llguidance counts only where every listed key
  is required) -> allOf [anyOf over the sets S of optional keys present: {required: S, properties: {each other
  optional key: false}}], the sets whose size the bounds rule out left out (at most MAX_KEY_SETS sets; the bounds
  kept beside it where keys not listed may count); else left to llguidance (it refuses).
- propertyNames: one every string satisfies -> dropped; a finite set of names (enum/const) -> allOf {properties:
  {each name it accepts: true}, additionalProperties: false}; where every name is listed (additionalProperties
  false, no patternProperties) each is checked now and one it rejects gets properties {name: false}. Else left to
  llguidance (refused).
- unevaluatedProperties S, where no anyOf/oneOf/if/then/else/dependentSchemas branch evaluates a property (so what
  is evaluated does not depend on which validates) -> dropped where an additionalProperties (or a nested
  unevaluatedProperties) in the allOf / $ref closure evaluates everything; else allOf [{properties: {each evaluated
  name: true}, patternProperties: {each evaluated pattern: true}, additionalProperties: S}]. Else left to
  llguidance (refused).
- contains S, where S accepts everything or every value the items allow (a finite set) -> minItems 1. Else left to
  llguidance (refused).

A $ref to json-schema.org's meta-schema of draft 4, 6 or 7 ("http://json-schema.org/draft-04/schema#/definitions/
positiveInteger", as Swagger 2.0 has) in a schema of a draft that reads it alike is pointed at a copy embedded in
its definitions under a private URI (meta_schemas.json; llguidance resolves no remote $ref and reserves these URIs).
A $ref to a subschema that moved (oneOf renamed anyOf, then/else placed in an anyOf) is pointed at its new place;
one to a part that no longer exists (inside a not) is refused. Regexes run here (names, enum strings against
pattern) only where Python's re and ECMA-262 agree and cannot take long; elsewhere the answer is "unknown", and an
unknown never proves anything.
"""
import copy
import itertools
import json
import math
import os
import re
from urllib.parse import unquote, urldefrag, urljoin

try:
    import re._parser as _rx_parser      # Python 3.11+
except ImportError:                      # pragma: no cover - older Pythons
    import sre_parse as _rx_parser

from fastgguf.errors import GrammarError

__all__ = ["rewrite", "KNOWN_FORMATS", "MAX_ARRAYS", "UNIQUE_MARK"]

# the formats llguidance 1.9 implements (each name compiled alone; any other is "Unknown format")
KNOWN_FORMATS = frozenset(("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid",
                           "uri"))
MAX_ARRAYS = 256        # at most this many arrays enumerated for a uniqueItems
MAX_KEY_SETS = 64       # at most this many sets of optional keys enumerated for a min/maxProperties
UNIQUE_MARK = "x-fastgguf-uniqueItems"   # rewrite(defer_unique=True): the items of this array must be distinct
_BUDGET = 20000         # disjointness steps per rewrite: a proof that needs more is not found (refused)
_STEPS = 500000         # subschemas the evaluator may visit per rewrite: past it every answer is "unknown"
_DEPTH = 6              # nesting of properties / items / alternatives a disjointness proof looks into
_DEFAULT_BASE = "https://fastgguf.invalid/schema.json"
_DRAFTS = {"http://json-schema.org/draft-04/schema": 4, "http://json-schema.org/draft-06/schema": 6,
           "http://json-schema.org/draft-07/schema": 7, "https://json-schema.org/draft/2019-09/schema": 2019,
           "https://json-schema.org/draft/2020-12/schema": 2020}
# the assertion keywords, with the drafts in which validators apply them (first, last): any other key is ignored
_VOCAB = {k: (4, 2020) for k in (
    "type", "enum", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "items", "minItems", "maxItems", "uniqueItems", "properties",
    "patternProperties", "additionalProperties", "required", "minProperties", "maxProperties", "allOf", "anyOf",
    "oneOf", "not", "$ref")}
_VOCAB.update({"const": (6, 2020), "contains": (6, 2020), "propertyNames": (6, 2020), "if": (7, 2020),
               "then": (7, 2020), "else": (7, 2020), "dependencies": (4, 7), "additionalItems": (4, 2019),
               "dependentRequired": (2019, 2020), "dependentSchemas": (2019, 2020), "minContains": (2019, 2020),
               "maxContains": (2019, 2020), "unevaluatedItems": (2019, 2020),
               "unevaluatedProperties": (2019, 2020), "$recursiveRef": (2019, 2019), "prefixItems": (2020, 2020),
               "$dynamicRef": (2020, 2020)})
_ONE = ("additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then", "else",
        "unevaluatedItems", "unevaluatedProperties")      # keywords whose value is one subschema
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")           # a list of them ("items": either)
_NAMED = ("properties", "patternProperties", "dependentSchemas")   # name -> subschema ("dependencies": some)
_TYPES = ("null", "boolean", "number", "string", "array", "object")
_MISSING = object()


def rewrite(schema, lenient=False, defer_unique=False, narrowed=None):
    """A schema accepting exactly the instances `schema` accepts, in the subset llguidance compiles (see the module
    docstring). GrammarError names what cannot be rewritten exactly; lenient=True leaves such a keyword as it is
    instead (llguidance's lenient mode then ignores it). defer_unique=True marks a uniqueItems it cannot rewrite
    with UNIQUE_MARK instead of refusing it: the caller then enforces it as the output is written
    (fastgguf.engine.unique_items). Given a list `narrowed`, a schema that cannot be rewritten exactly may be
    rewritten to accept fewer instances, every one of them valid (a oneOf whose overlap can be excluded only in
    part): a line saying where is appended to the list. The input is not modified."""
    if not isinstance(schema, dict):
        return schema
    try:
        json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return schema                             # not JSON: the caller says so
    schema = _embed_meta_schemas(schema)
    try:
        try:
            return _Rewriter(_Doc(schema), lenient, defer_unique).run()
        except GrammarError:
            if narrowed is None:
                raise
        return _Rewriter(_Doc(schema), lenient, defer_unique, narrowed).run()   # exact where it could be: first
    except RecursionError:
        raise GrammarError("the schema is nested too deeply to rewrite") from None


_META_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "meta_schemas.json")
_META = {}   # the meta-schemas of drafts 4, 6 and 7 (meta_schemas.json: json-schema.org's documents), read once


def _meta_schema(uri):
    """json-schema.org's meta-schema at uri (http or https, no fragment), or None."""
    if not _META:
        with open(_META_FILE, encoding="utf-8") as f:
            _META.update(json.load(f))
    return _META.get(uri.replace("https://", "http://", 1))


def _embed_meta_schemas(schema):
    """schema with each $ref to a draft 4-7 meta-schema (Swagger 2.0's "http://json-schema.org/draft-04/schema#/
    definitions/positiveInteger") pointed at a copy of that meta-schema embedded in its definitions, under a
    private URI: llguidance resolves no remote $ref and reserves these URIs. Only where the meta-schema's draft
    reads keywords as the schema's own does (4 in 4; 6 or 7 in 6 or 7) and the schema holds no such document
    itself; else schema, unchanged (the $ref stays remote, for llguidance to refuse)."""
    uri = schema.get("$schema")
    draft = _DRAFTS.get(uri.rstrip("#"), 2020) if isinstance(uri, str) else 2020
    if draft > 7 or not isinstance(schema.get("definitions", {}), dict):
        return schema
    refs = list(_meta_refs(schema, draft))
    if not refs or any(target is None for _, target in refs):
        return schema                            # None: the document holds a meta-schema of its own
    schema = copy.deepcopy(schema)
    defs = schema.setdefault("definitions", {})
    for target in {t for _, t in refs}:
        name = target.rsplit("/", 2)[-2]         # "draft-04"
        doc = {k: v for k, v in copy.deepcopy(_meta_schema(target)).items() if k not in ("$schema", "id", "$id")}
        doc["id" if draft == 4 else "$id"] = _META_PRIVATE + name + "/schema#"
        stack = [doc]
        while stack:                             # its own "#/definitions/..." made absolute: llguidance reads a
            node = stack.pop()                   # fragment-only $ref against the root, not an embedded id
            if isinstance(node, dict):
                if isinstance(node.get("$ref"), str) and node["$ref"].startswith("#"):
                    node["$ref"] = _META_PRIVATE + name + "/schema" + node["$ref"]
                stack.extend(child for _, child, _ in _children(node, defs=True))
        defs["x-fastgguf-" + name] = doc
    for node, target in _meta_refs(schema, draft):
        if target is not None and node["$ref"].startswith(("http://json-schema.org/", "https://json-schema.org/")):
            frag = urldefrag(node["$ref"])[1]
            node["$ref"] = _META_PRIVATE + target.rsplit("/", 2)[-2] + "/schema" + ("#" + frag if frag else "")
    return schema


_META_PRIVATE = "https://fastgguf.invalid/json-schema/"   # + "draft-04/schema#": an embedded meta-schema's id


def _meta_refs(schema, draft):
    """(holder, meta-schema URI) of each $ref in schema's subschemas naming a meta-schema its draft can read; (node,
    None) for a subschema whose own id is a meta-schema's."""
    family = {4: 4, 6: 6, 7: 6}
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        ref, own = node.get("$ref"), node.get("id" if draft == 4 else "$id")
        if isinstance(own, str) and own.rstrip("#").replace("https://", "http://", 1) in _DRAFTS:
            yield node, None
        if isinstance(ref, str) and ref.startswith(("http://json-schema.org/", "https://json-schema.org/")):
            target = urldefrag(ref)[0].rstrip("#").replace("https://", "http://", 1)
            if family.get(_DRAFTS.get(target)) == family.get(draft):
                yield node, target
        stack.extend(child for _, child, _ in _children(node, defs=True))


def _perms_at_most(n, sizes, limit):
    """Whether the arrays of distinct items from n values, of the given sizes, are at most limit in number
    (counted without building a number of thousands of digits)."""
    count = 0
    for k in sizes:
        p = 1
        for i in range(k):
            p *= n - i
            if count + p > limit:
                return False
        count += p
    return True


def _pointer(path):
    """'#/a/b' for the path ('a', 'b'), with JSON pointer escapes."""
    return "#" + "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def _refuse(keyword, path, reason):
    return GrammarError(f"{keyword} at {_pointer(path)}: {reason}")


# ------------------------------------------------------------------------------------------------- the document

class _Target:
    """What a $ref resolves to: its path from the root, the subschema, and the base URI its own $refs resolve
    against."""
    __slots__ = ("path", "node", "base")

    def __init__(self, path, node, base):
        self.path, self.node, self.base = path, node, base


class _Doc:
    """The schema being rewritten: its draft, and $ref resolution (JSON pointers, $id / id bases, anchors)."""

    def __init__(self, root):
        self.root = root
        uri = root.get("$schema")
        self.draft = _DRAFTS.get(uri.rstrip("#"), 2020) if isinstance(uri, str) else 2020
        self.id_key = "id" if self.draft == 4 else "$id"
        self.resources = {}     # absolute URI (no fragment) -> path
        self.anchors = {}       # (absolute URI, name) -> path
        self.bases = {}         # path of each subschema -> the base URI of its $refs
        self.steps = _STEPS     # what the evaluator (_check) may still spend on this document
        self._refs = []         # ($ref, base) of every $ref in the document
        self._index(root, (), _DEFAULT_BASE)
        self.resources.setdefault(_DEFAULT_BASE, ())
        self.targets = {t.path for t in (self.resolve(r, b) for r, b in self._refs) if t is not None}

    def active(self, key):
        """Whether validators of this draft apply keyword `key` (an assertion or applicator of this draft)."""
        first, last = _VOCAB.get(key, (9999, 0))
        return first <= self.draft <= last

    def rebase(self, node, base):
        """The base URI inside node (its $id, or draft 4's id, applied to the enclosing base)."""
        i = node.get(self.id_key) if isinstance(node, dict) else None
        if isinstance(i, str) and not i.startswith("#"):
            return _join_uri(base, i)
        return base

    def _index(self, node, path, base):
        if not isinstance(node, dict):
            return
        base = self.rebase(node, base)
        self.bases[path] = base
        if "$ref" in node:
            self._refs.append((node["$ref"], base))
        uri = urldefrag(base)[0]
        self.resources.setdefault(uri, path)
        i, anchor = node.get(self.id_key), node.get("$anchor")
        if isinstance(i, str) and "#" in i and self.draft <= 7:     # draft 4-7's plain-name fragment: an anchor
            anchor = urldefrag(_join_uri(base, i))[1]
        if isinstance(anchor, str) and anchor and not anchor.startswith("/"):
            self.anchors.setdefault((uri, anchor), path)
        for key, child, sub in _children(node, defs=True):
            self._index(child, path + sub, base)

    def base_at(self, path):
        """The base URI of the subschema at path (found by walking down from the root where it was not indexed)."""
        if path in self.bases:
            return self.bases[path]
        node, base = self.root, self.bases[()]
        for i, p in enumerate(path):
            node = _step(node, p)
            if node is _MISSING:
                break
            base = self.bases.get(path[:i + 1]) or self.rebase(node, base)
        return base

    def resolve(self, ref, base):
        """The _Target of a $ref, or None where it is not in this document (remote, or no such place)."""
        if not isinstance(ref, str):
            return None
        uri, frag = urldefrag(_join_uri(base, ref))
        if uri not in self.resources:
            return None
        path = self.resources[uri]
        if frag and not frag.startswith("/"):
            path = self.anchors.get((uri, frag))
        elif frag:
            path += tuple(unquote(p).replace("~1", "/").replace("~0", "~") for p in frag[1:].split("/"))
        node = _get(self.root, path) if path is not None else _MISSING
        if node is _MISSING:
            return None
        return _Target(path, node, self.base_at(path))


def _join_uri(base, ref):
    """ref resolved against base (urljoin, but a bare fragment also against a base whose scheme urljoin does not
    resolve against, such as urn: or classpath:)."""
    return urldefrag(base)[0] + ref if ref.startswith("#") else urljoin(base, ref)


def _step(node, key):
    if isinstance(node, dict):
        return node.get(key, _MISSING)
    if isinstance(node, list) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    return _MISSING


def _get(node, path):
    for p in path:
        node = _step(node, p)
        if node is _MISSING:
            break
    return node


def _children(node, defs=False):
    """(keyword, subschema, path suffix) of each direct subschema of node (and of $defs/definitions if defs)."""
    for key, value in node.items():
        if key in _ONE or (key == "items" and not isinstance(value, list)):
            yield key, value, (key,)
        elif key in _MANY or key == "items":
            if isinstance(value, list):
                for i, v in enumerate(value):
                    yield key, v, (key, str(i))
        elif key in _NAMED or key == "dependencies" or (defs and key in ("$defs", "definitions")):
            if isinstance(value, dict):
                for name, v in value.items():
                    if isinstance(v, (dict, bool)):
                        yield key, v, (key, name)


# ------------------------------------------------------------------------------------------------------ values

def _canon(v):
    """A hashable key equal for JSON-equal values (1 == 1.0, true != 1, objects unordered)."""
    if v is None or isinstance(v, bool):
        return ("lit", v)
    if isinstance(v, (int, float)):
        return ("num", v)
    if isinstance(v, list):
        return ("arr", tuple(_canon(x) for x in v))
    if isinstance(v, dict):
        return ("obj", frozenset((k, _canon(x)) for k, x in v.items()))
    return ("str", v)


def _kind(v, draft):
    """The instance type of a value, with numbers split: integer (what "integer" accepts) or fraction (the rest)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if draft > 4 and v.is_integer() else "fraction"
    return {str: "string", list: "array", dict: "object"}.get(type(v))


_ALL_KINDS = frozenset(("null", "boolean", "integer", "fraction", "string", "array", "object"))


def _kinds(t):
    """The kinds a "type" value allows (all of them where it is malformed: the analysis then assumes nothing)."""
    names = [t] if isinstance(t, str) else t if isinstance(t, list) else None
    if names is None or not all(isinstance(n, str) for n in names):
        return _ALL_KINDS
    out = set()
    for n in names:
        out |= {"number": {"integer", "fraction"}}.get(n, {n} if n in _ALL_KINDS else set())
    return frozenset(out)


_RX = {}
# syntax Python's re reads otherwise than ECMA-262 (or not at all), and repetition that can make a backtracking
# matcher take exponential time (a repeated group)
_UNSAFE_RX = re.compile(r"\\[AZzGhHRXvV]|\(\?[PaiLmsux<]|\{,|\[\^?\]|\)[*+{]")
_REPEATS = re.compile(r"[*+]|\{\d*,\}")


def _search(pattern, s):
    """Whether regex `pattern` finds a match in s (True / False), or None where Python's re might disagree with the
    ECMA-262 dialect JSON Schema means (non-ASCII or line-break text, Python-only syntax) or might take long (a
    repeated group, more than 3 unbounded repeats, a text over 100 characters)."""
    if not isinstance(pattern, str) or not isinstance(s, str) or len(s) > 100 or not all(" " <= c <= "~" for c in s):
        return None
    if pattern not in _RX:
        try:
            unsafe = _UNSAFE_RX.search(pattern) or len(_REPEATS.findall(pattern)) > 3 or len(pattern) > 1000
            _RX[pattern] = None if unsafe else re.compile(pattern, re.ASCII)
        except (re.error, RecursionError, OverflowError):
            _RX[pattern] = None
    rx = _RX[pattern]
    return None if rx is None else rx.search(s) is not None


_LITERAL = re.compile(r"(?:[A-Za-z0-9 _\-!\"#%&',/:;<=>@`~]|\\[.^$*+?()\[\]{}\\/-])*")
_ESCAPED = re.compile(r"\\(.)")
_BACKREF = re.compile(r"\\[1-9]|\\k<")


def _pattern_words(pattern):
    """The strings a pattern allows when it lists them: ^word$ or ^(w1|w2|...)$ of literal ASCII characters (a
    frozenset); else None. Under ECMA-262 the set is the words; a validator using Python's re also takes each word
    followed by one newline ($ matches before a final newline there), so those are in the set too."""
    if not (len(pattern) <= 1000 and pattern.startswith("^") and pattern.endswith("$")
            and not pattern.endswith("\\$")):
        return None
    inner = pattern[1:-1]
    if inner.startswith("(") and inner.endswith(")") and "(" not in inner[1:] and ")" not in inner[:-1]:
        inner = inner[1:-1].removeprefix("?:")      # ^(a|b)$; a bare ^a|b$ is (^a)|(b$): its | is refused below
    elif "|" in inner:
        return None
    words = inner.split("|")
    if not all(_LITERAL.fullmatch(w) for w in words) or any(w.endswith("\\") for w in words):
        return None
    words = [_ESCAPED.sub(r"\1", w) for w in words]
    return frozenset(words) | frozenset(w + "\n" for w in words)


def _pattern_min_len(pattern):
    """A lower bound on the length (code points) of a string a pattern finds a match in: half the shortest match
    Python's parser reckons (ECMA-262 counts UTF-16 units, two to a code point at most); 0 where the pattern is
    one Python reads otherwise or not at all."""
    if not isinstance(pattern, str) or len(pattern) > 1000 or _UNSAFE_RX.search(pattern) or _BACKREF.search(pattern):
        return 0
    try:
        low = _rx_parser.parse(pattern, re.ASCII).getwidth()[0]
    except (re.error, RecursionError, OverflowError, ValueError, TypeError):
        return 0
    return (int(low) + 1) // 2


def _unknown_format(f):
    """A format llguidance does not implement: an annotation, dropped (a malformed one is llguidance's to report)."""
    return isinstance(f, str) and f not in KNOWN_FORMATS


def _angles_literal(pattern):
    """pattern with each \\< and \\> written \\x3c and \\x3e: a literal < and > in ECMA-262 (an identity escape)
    and in Python's re (which jsonschema uses), where llguidance's regex syntax reads a word boundary (refused as
    look-around): the same strings match."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i:i + 2] if pattern[i] == "\\" else pattern[i]
        out.append({"\\<": "\\x3c", "\\>": "\\x3e"}.get(c, c))
        i += len(c)
    return "".join(out)


def _and3(results):
    """Three-valued and: False if any is False, None if any is unknown, else True."""
    out = True
    for r in results:
        if r is False:
            return False
        if r is None:
            out = None
    return out


def _or3(results):
    out = False
    for r in results:
        if r is True:
            return True
        if r is None:
            out = None
    return out


def _num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# ------------------------------------------------------------------------------------ a three-valued evaluator

def _check(doc, node, base, v, depth=0):
    """Whether the subschema node accepts the value v under the draft's semantics (format as an annotation for the
    formats rewrite() drops): True, False, or None where this evaluator cannot tell (a keyword it does not
    evaluate, a pattern it cannot run exactly, too deep)."""
    if node is True or node is False:
        return node
    doc.steps -= 1
    if not isinstance(node, dict) or depth > 24 or doc.steps < 0:
        return None
    base = doc.rebase(node, base)
    results = []
    if "$ref" in node:
        t = doc.resolve(node["$ref"], base)
        results.append(None if t is None else _check(doc, t.node, t.base, v, depth + 1))
        if doc.draft <= 7:
            return results[0]
    kind = _kind(v, doc.draft)
    for check in (_check_any, _check_logic, _check_string, _check_number, _check_array, _check_object):
        results.append(check(doc, node, base, v, kind, depth + 1))
        if results[-1] is False:
            return False
    return _and3(results)


def _check_any(doc, node, base, v, kind, depth):
    out = []
    for key, arg in node.items():
        if not doc.active(key):
            continue
        if key == "type":
            out.append(kind in _kinds(arg))
        elif key == "enum":
            out.append(isinstance(arg, list) and _canon(v) in {_canon(x) for x in arg})
        elif key == "const":
            out.append(_canon(v) == _canon(arg))
        elif key in ("unevaluatedItems", "unevaluatedProperties", "$recursiveRef", "$dynamicRef"):
            out.append(None)
    return _and3(out)


def _check_logic(doc, node, base, v, kind, depth):
    out = []
    for key in ("allOf", "anyOf", "oneOf"):
        arg = node.get(key)
        if isinstance(arg, list):
            r = [_check(doc, s, base, v, depth) for s in arg]
            if key == "allOf":
                out.append(_and3(r))
            elif key == "anyOf":
                out.append(_or3(r))
            else:
                out.append(None if None in r and r.count(True) < 2 else r.count(True) == 1)
    if "not" in node:
        r = _check(doc, node["not"], base, v, depth)
        out.append(None if r is None else not r)
    if "if" in node and doc.active("if"):
        r = _check(doc, node["if"], base, v, depth)
        branch = node.get("then" if r else "else", True)
        out.append(None if r is None else _check(doc, branch, base, v, depth))
    return _and3(out)


def _check_string(doc, node, base, v, kind, depth):
    if kind != "string":
        return True
    out = []
    if "minLength" in node:
        out.append(len(v) >= node["minLength"] if _num(node["minLength"]) else None)
    if "maxLength" in node:
        out.append(len(v) <= node["maxLength"] if _num(node["maxLength"]) else None)
    if "pattern" in node:
        out.append(_search(node["pattern"], v))
    if "format" in node and not _unknown_format(node["format"]):
        out.append(None)
    return _and3(out)


def _check_number(doc, node, base, v, kind, depth):
    if kind not in ("integer", "fraction"):
        return True
    out = []
    for key, above in (("minimum", True), ("maximum", False)):
        x = node.get(key)
        if x is not None:
            excl = node.get("exclusiveM" + key[1:]) is True        # draft 4's boolean form
            out.append(None if not _num(x) else (v > x if excl else v >= x) if above else (v < x if excl else v <= x))
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        x = node.get(key)
        if _num(x):
            out.append(v > x if key == "exclusiveMinimum" else v < x)
        elif x is not None and not isinstance(x, bool):
            out.append(None)
    m = node.get("multipleOf")
    if m is not None:
        out.append(v % m == 0 if isinstance(v, int) and isinstance(m, int) and m > 0 else True if v == 0 else None)
    return _and3(out)


def _item_schemas(doc, node):
    """(prefix schemas, schema of the items after them or _MISSING) of an array subschema, per its draft."""
    items = node.get("items", _MISSING)
    if isinstance(items, list):
        return items, node.get("additionalItems", _MISSING)
    if doc.draft >= 2020 and isinstance(node.get("prefixItems"), list):
        return node["prefixItems"], items
    return [], items


def _check_array(doc, node, base, v, kind, depth):
    if kind != "array":
        return True
    out = []
    prefix, rest = _item_schemas(doc, node)
    for i, x in enumerate(v):
        s = prefix[i] if i < len(prefix) else rest
        if s is not _MISSING:
            out.append(_check(doc, s, base, x, depth))
    for key, ok in (("minItems", lambda n: len(v) >= n), ("maxItems", lambda n: len(v) <= n)):
        if key in node:
            out.append(ok(node[key]) if _num(node[key]) else None)
    if node.get("uniqueItems") is True:
        out.append(len({_canon(x) for x in v}) == len(v))
    if "contains" in node and doc.active("contains"):
        if "minContains" in node or "maxContains" in node:
            out.append(None)
        else:
            out.append(_or3(_check(doc, node["contains"], base, x, depth) for x in v))
    return _and3(out)


def _check_object(doc, node, base, v, kind, depth):
    if kind != "object":
        return True
    out = []
    props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    patterns = node.get("patternProperties") if isinstance(node.get("patternProperties"), dict) else {}
    extra = node.get("additionalProperties", _MISSING)
    for k, x in v.items():
        if k in props:
            out.append(_check(doc, props[k], base, x, depth))
        hits = [_search(p, k) for p in patterns]
        for p, hit in zip(patterns, hits):
            if hit:
                out.append(_check(doc, patterns[p], base, x, depth))
        if extra is not _MISSING and k not in props and True not in hits:
            out.append(None if None in hits else _check(doc, extra, base, x, depth))
        if "propertyNames" in node and doc.active("propertyNames"):
            out.append(_check(doc, node["propertyNames"], base, k, depth))
    if isinstance(node.get("required"), list):
        req = node["required"]
        out.append(all(k in v for k in req) if all(isinstance(k, str) for k in req) else None)
    for key, ok in (("minProperties", lambda n: len(v) >= n), ("maxProperties", lambda n: len(v) <= n)):
        if key in node:
            out.append(ok(node[key]) if _num(node[key]) else None)
    deps = {}
    for key in ("dependencies", "dependentRequired", "dependentSchemas"):
        if doc.active(key) and isinstance(node.get(key), dict):
            deps.update(node[key])
    for k, d in deps.items():
        if k in v:
            out.append((all(x in v for x in d) if all(isinstance(x, str) for x in d) else None)
                       if isinstance(d, list) else _check(doc, d, base, v, depth))
    return _and3(out)


# --------------------------------------------------------------------------------------- proving disjointness

class _Facts:
    """What a conjunction of subschemas forces on an instance (an over-approximation: a keyword not read here is a
    constraint forgotten, never one invented)."""

    def __init__(self):
        self.kinds = _ALL_KINDS
        self.values = None                       # a finite list of the values allowed, or None
        self.lo, self.lo_x, self.hi, self.hi_x = -math.inf, False, math.inf, False
        self.min_len, self.max_len = 0, math.inf
        self.strings = None                      # a finite set of the strings allowed (literal patterns), or None
        self.min_items, self.max_items = 0, math.inf
        self.max_props = math.inf
        self.required = set()
        self.arrays = []                         # (prefix schemas, rest schema or _MISSING, base) per subschema
        self.objects = []                        # (properties, patternProperties, additionalProperties, base)
        self.groups = []                         # (list of alternatives, base) of each anyOf / oneOf
        self.nodes = []                          # (subschema, base) of every subschema read
        self.unsat = False

    def bound(self, x, low, excl):
        if not _num(x):
            return
        if low and (x > self.lo or (x == self.lo and excl)):
            self.lo, self.lo_x = x, excl
        elif not low and (x < self.hi or (x == self.hi and excl)):
            self.hi, self.hi_x = x, excl

    def at(self, i):
        """The subschemas the item at index i must satisfy."""
        out = []
        for prefix, rest, base in self.arrays:
            s = prefix[i] if i < len(prefix) else rest
            if s is not _MISSING:
                out.append((s, base))
        return out

    def prop(self, k):
        """The subschemas the value of property k must satisfy where the object has k."""
        out = []
        for props, patterns, extra, base in self.objects:
            listed = k in props
            if listed:
                out.append((props[k], base))
            hits = [_search(p, k) for p in patterns]
            out += [(patterns[p], base) for p, hit in zip(patterns, hits) if hit]
            if not listed and extra is not _MISSING and not any(h is not False for h in hits):
                out.append((extra, base))
        return out


class _Prover:
    """Disjointness of subschemas (no instance satisfies both), proved from their _Facts; False means not proved."""

    def __init__(self, doc):
        self.doc = doc
        self.budget = _BUDGET

    def facts(self, schemas, expanded=frozenset()):
        f = _Facts()
        for node, base in schemas:
            self._collect(node, base, f, frozenset(), expanded)
        self._settle(f)
        return f

    def _collect(self, node, base, f, seen, expanded):
        if node is False:
            f.unsat = True
        if not isinstance(node, dict):
            return
        doc = self.doc
        base = doc.rebase(node, base)
        f.nodes.append((node, base))
        if "$ref" in node:
            t = doc.resolve(node["$ref"], base)
            if t is not None and t.path not in seen:
                self._collect(t.node, t.base, f, seen | {t.path}, expanded)
            if doc.draft <= 7:
                return
        active = {k: v for k, v in node.items() if doc.active(k)}
        if "type" in active:
            f.kinds &= _kinds(active["type"])
        for key in ("enum", "const"):
            if key in active and (key == "const" or isinstance(active[key], list)):
                vals = [active[key]] if key == "const" else active[key]
                keep = {_canon(x) for x in vals}
                f.values = vals if f.values is None else [x for x in f.values if _canon(x) in keep]
        self._collect_bounds(active, f)
        if isinstance(active.get("pattern"), str):
            words = _pattern_words(active["pattern"])
            if words is not None:
                f.strings = words if f.strings is None else f.strings & words
            f.min_len = max(f.min_len, _pattern_min_len(active["pattern"]))
        if "required" in active and isinstance(active["required"], list):
            f.required |= {k for k in active["required"] if isinstance(k, str)}
        if any(k in active for k in ("items", "prefixItems", "additionalItems")):
            f.arrays.append((*_item_schemas(doc, node), base))
        if any(k in active for k in ("properties", "patternProperties", "additionalProperties")):
            props, patterns = active.get("properties"), active.get("patternProperties")
            f.objects.append((props if isinstance(props, dict) else {},
                              patterns if isinstance(patterns, dict) else {},
                              active.get("additionalProperties", _MISSING), base))
        negated = active.get("not")
        if isinstance(negated, dict) and set(negated) == {"type"}:
            f.kinds -= _kinds(negated["type"]) if _kinds(negated["type"]) != _ALL_KINDS else frozenset()
        for s in active.get("allOf", ()) if isinstance(active.get("allOf"), list) else ():
            self._collect(s, base, f, seen, expanded)
        for key in ("anyOf", "oneOf"):
            if isinstance(active.get(key), list) and id(active[key]) not in expanded:
                f.groups.append((active[key], base))

    def _collect_bounds(self, active, f):
        draft4 = self.doc.draft == 4
        f.bound(active.get("minimum"), True, draft4 and active.get("exclusiveMinimum") is True)
        f.bound(active.get("maximum"), False, draft4 and active.get("exclusiveMaximum") is True)
        if not draft4:
            f.bound(active.get("exclusiveMinimum"), True, True)
            f.bound(active.get("exclusiveMaximum"), False, True)
        for key, low, attr in (("minLength", True, "min_len"), ("maxLength", False, "max_len"),
                               ("minItems", True, "min_items"), ("maxItems", False, "max_items"),
                               ("maxProperties", False, "max_props")):
            x = active.get(key)
            if _num(x):
                setattr(f, attr, max(getattr(f, attr), x) if low else min(getattr(f, attr), x))

    def _settle(self, f):
        """Narrow the kinds by the bounds and the values, and the values by every subschema read."""
        doc = self.doc
        if f.values is not None:
            f.values = [v for v in f.values if _kind(v, doc.draft) in f.kinds
                        and all(_check(doc, n, b, v) is not False for n, b in f.nodes)]
            f.kinds = f.kinds & {_kind(v, doc.draft) for v in f.values}
        empty = set()
        if f.lo > f.hi or (f.lo == f.hi and (f.lo_x or f.hi_x)):
            empty |= {"integer", "fraction"}
        elif _int_range(f)[0] > _int_range(f)[1]:
            empty.add("integer")
        if f.strings is not None:
            f.strings = frozenset(w for w in f.strings if f.min_len <= len(w) <= f.max_len)
        if f.min_len > f.max_len or f.strings == frozenset():
            empty.add("string")
        if f.min_items > f.max_items:
            empty.add("array")
        if len(f.required) > f.max_props:
            empty.add("object")
        f.kinds = f.kinds - empty
        if not f.kinds:
            f.unsat = True

    def disjoint(self, As, Bs, depth=_DEPTH):
        """Proved: no instance satisfies all of As and all of Bs ((subschema, base) lists)."""
        return not self.overlap(As, Bs, depth)

    def overlap(self, As, Bs, depth=_DEPTH, expanded=frozenset()):
        """The kinds of instance (_kind) for which no proof shows As and Bs disjoint: empty when they are."""
        self.budget -= 1
        if self.budget < 0:
            return _ALL_KINDS
        fa, fb = self.facts(As, expanded), self.facts(Bs, expanded)
        kinds = self._overlap(fa, fb, depth)
        if not kinds or depth <= 0:
            return kinds
        for f, mine, other in ((fa, As, Bs), (fb, Bs, As)):
            for alternatives, base in f.groups:    # an anyOf overlaps where one of its alternatives does
                more = expanded | {id(alternatives)}
                union = frozenset()
                for alt in alternatives:
                    union |= self.overlap(mine + [(alt, base)], other, depth - 1, more)
                    if union >= kinds:
                        break
                kinds &= union
                if not kinds:
                    return kinds
        return kinds

    def _overlap(self, a, b, depth):
        if a.unsat or b.unsat:
            return frozenset()
        common = a.kinds & b.kinds
        draft = self.doc.draft
        if a.values is not None and b.values is not None:
            shared = {_canon(v) for v in a.values} & {_canon(v) for v in b.values}
            return frozenset(_kind(v, draft) for v in a.values if _canon(v) in shared)
        for x, y in ((a, b), (b, a)):
            if x.values is not None:           # the values of one side that the other does not refute
                return frozenset(_kind(v, draft) for v in x.values if _kind(v, draft) in y.kinds
                                 and not any(_check(self.doc, n, base, v) is False for n, base in y.nodes))
        return frozenset(k for k in common if not self._apart_kind(k, a, b, depth))

    def _apart_kind(self, kind, a, b, depth):
        if kind == "fraction":
            return (a.hi < b.lo or b.hi < a.lo or (a.hi == b.lo and (a.hi_x or b.lo_x))
                    or (b.hi == a.lo and (b.hi_x or a.lo_x)))
        if kind == "integer":
            (alo, ahi), (blo, bhi) = _int_range(a), _int_range(b)
            return ahi < blo or bhi < alo
        if kind == "string":
            return a.max_len < b.min_len or b.max_len < a.min_len or self._words_apart(a, b) or \
                self._words_apart(b, a)
        if kind == "array":
            if a.max_items < b.min_items or b.max_items < a.min_items:
                return True
            n = min(max(a.min_items, b.min_items), 16)     # indices every instance of both has
            return depth > 0 and self._some_apart([(a.at(i), b.at(i)) for i in range(int(n))], depth - 1)
        if kind == "object":
            keys = sorted(a.required | b.required)
            if len(keys) > min(a.max_props, b.max_props):
                return True
            return depth > 0 and self._some_apart([(a.prop(k), b.prop(k)) for k in keys[:64]], depth - 1)
        return False

    def _some_apart(self, pairs, depth):
        """Some (As, Bs) pair is disjoint: first by what each side forces alone (cheap: a discriminating key's
        values), then looking into alternatives, so the budget goes to the deep proofs last."""
        return any(self.disjoint(x, y, 0) for x, y in pairs) or (
            depth > 0 and any(self.disjoint(x, y, depth) for x, y in pairs))

    def _words_apart(self, a, b):
        """a allows finitely many strings (a literal pattern) and b refutes each: its own words, its lengths, or a
        subschema of b that rejects it."""
        if a.strings is None:
            return False
        return all((b.strings is not None and w not in b.strings) or not b.min_len <= len(w) <= b.max_len
                   or any(_check(self.doc, n, base, w) is False for n, base in b.nodes) for w in a.strings)


def _int_range(f):
    """The integers within f's numeric bounds, as an inclusive (low, high) pair (infinities where unbounded)."""
    lo = f.lo if f.lo == -math.inf else math.floor(f.lo) + 1 if f.lo_x else math.ceil(f.lo)
    hi = f.hi if f.hi == math.inf else math.ceil(f.hi) - 1 if f.hi_x else math.floor(f.hi)
    return lo, hi


# --------------------------------------------------------------------------------------------- complements

class _Inexpressible(Exception):
    """The complement of a subschema cannot be written in what llguidance compiles (the message says why)."""


def _union(pieces):
    """anyOf of the pieces, simplified: false ones dropped, true absorbs, a bare anyOf flattened, one piece alone."""
    out, seen = [], set()
    for p in pieces:
        if p is True:
            return True
        for q in (p["anyOf"] if isinstance(p, dict) and list(p) == ["anyOf"] else [p]):
            key = _canon(q)
            if q is not False and key not in seen:
                seen.add(key)
                out.append(q)
    return False if not out else out[0] if len(out) == 1 else {"anyOf": out}


def _intersection(parts):
    out = []
    for p in parts:
        if p is False:
            return False
        if p is not True:
            out += p["allOf"] if isinstance(p, dict) and list(p) == ["allOf"] else [p]
    return True if not out else out[0] if len(out) == 1 else {"allOf": out}


_NUMBER = frozenset(("integer", "fraction"))
# the kinds of instance each keyword constrains (any other kind passes it)
_APPLIES = {**{k: frozenset(("string",)) for k in ("minLength", "maxLength", "pattern", "format")},
            **{k: _NUMBER for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")},
            **{k: frozenset(("array",)) for k in ("items", "prefixItems", "additionalItems", "minItems", "maxItems",
                                                 "uniqueItems", "contains", "minContains", "maxContains",
                                                 "unevaluatedItems")},
            **{k: frozenset(("object",)) for k in ("properties", "patternProperties", "additionalProperties",
                                                  "required", "minProperties", "maxProperties", "propertyNames",
                                                  "dependencies", "dependentRequired", "dependentSchemas",
                                                  "unevaluatedProperties")}}


def _widen(kinds):
    """Kinds with number whole: the integers and the other numbers cannot be told apart by a type alone."""
    return kinds | _NUMBER if kinds & _NUMBER else kinds


def _type_names(kinds):
    """The "type" value accepting exactly the instances of these kinds (number whole, see _widen)."""
    names = [t for t in _TYPES if (_NUMBER if t == "number" else {t}) <= kinds]
    if "integer" in kinds and "fraction" not in kinds:
        names.append("integer")
    return names[0] if len(names) == 1 else names


def _restrict(piece, kinds):
    """A complement piece cut down to the given kinds (the rest is the caller's to cover)."""
    if kinds == _ALL_KINDS or not isinstance(piece, dict):
        return piece
    if "anyOf" in piece and list(piece) == ["anyOf"]:
        return _union([_restrict(p, kinds) for p in piece["anyOf"]])
    if "type" in piece:
        have = _kinds(piece["type"]) & _widen(kinds)
        return {**piece, "type": _type_names(have)} if have else False
    if list(piece) == ["enum"]:
        return piece if any(_kind(v, 6) in _widen(kinds) for v in piece["enum"]) else False
    return piece


def _type_complement(t, kinds):
    names = [t] if isinstance(t, str) else t
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise _Inexpressible(f"type {t!r} is malformed")
    if "integer" in names and "number" not in names and "fraction" in kinds:
        raise _Inexpressible("not type integer: the numbers that are not integers cannot be written")
    others = [n for n in _TYPES if n not in names]
    return False if not others else {"type": others[0] if len(others) == 1 else others}


def _rx_char(c, in_class=False):
    """c as a regex literal that ECMA-262, Python's re and llguidance read alike."""
    if c < " " or c == "\x7f":
        return "\\u%04x" % ord(c)
    return "\\" + c if c in ("\\]^-[" if in_class else "\\^$.|?*+()[]{}") else c


# \s in each dialect: Python's re (str.isspace), ECMA-262 (WhiteSpace, LineTerminator: also U+FEFF) and
# llguidance's regex syntax (Unicode White_Space: also U+0085): their union, where a complement must hold for all
_ANY_SPACE = frozenset("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"
                       + "".join(map(chr, range(0x2000, 0x200b))))


def _class_run_complement(pattern):
    """For a pattern ^[C]{low,high}$ (+, *, {n}, ...; C literal characters, ranges, \\s and \\d, or one
    character): pieces whose union is strings it does not match, and whether they are all of them; None for any
    other pattern. In every dialect such a string is shorter than low, longer than high + 1 (Python's $ also
    matches before a final newline), or holds a character outside C and other than a newline. Left out (so not
    exact) where the dialects differ: \\s and \\d (the union of every dialect's is counted in C), and the
    strings those three pieces miss, where high is finite or C has no newline (a newline inside, one more
    character)."""
    try:
        tree = list(_rx_parser.parse(pattern))
    except Exception:
        return None
    c = _rx_parser._constants if hasattr(_rx_parser, "_constants") else _rx_parser
    if len(tree) != 3 or tree[0] != (c.AT, c.AT_BEGINNING) or tree[2] != (c.AT, c.AT_END) \
            or tree[1][0] not in (c.MAX_REPEAT, c.MIN_REPEAT):
        return None
    low, high, body = tree[1][1]
    body = list(body)
    if len(body) != 1 or body[0][0] not in (c.IN, c.LITERAL):
        return None
    chars, exact = set(), high == c.MAXREPEAT
    for op, arg in body[0][1] if body[0][0] == c.IN else body:
        if op == c.LITERAL:
            chars.add(chr(arg))
        elif op == c.RANGE and arg[1] - arg[0] < 256:
            chars.update(map(chr, range(arg[0], arg[1] + 1)))
        elif op == c.CATEGORY and arg in (c.CATEGORY_SPACE, c.CATEGORY_DIGIT):
            chars |= _ANY_SPACE if arg == c.CATEGORY_SPACE else _any_digit()
            exact = False
        else:
            return None
    if "\n" not in chars:
        chars.add("\n")
        exact = False
    pieces = [{"type": "string", "maxLength": low - 1}] if low else []
    if high != c.MAXREPEAT:
        pieces.append({"type": "string", "minLength": high + 2})
    return pieces + [{"type": "string", "pattern": "[^" + _class_text(chars) + "]"}], exact


def _class_text(chars):
    """The characters as the inside of a regex class, runs of 3 or more as ranges."""
    out, run = [], []
    for ch in sorted(chars) + [None]:
        if run and (ch is None or ord(ch) != ord(run[-1]) + 1):
            ends = [run[0], run[-1]] if len(run) >= 3 else run
            out.append(("-" if len(run) >= 3 else "").join(_rx_char(x, True) for x in ends))
            run = []
        if ch is not None:
            run.append(ch)
    return "".join(out)


_DIGITS = []


def _any_digit():
    """Every decimal digit of Unicode (Python's \\d, as its re tests it; ECMA-262's and llguidance's are 0-9),
    listed once per process (0.1 s)."""
    if not _DIGITS:
        _DIGITS.append(frozenset(filter(str.isdecimal, map(chr, range(0x110000)))))
    return _DIGITS[0]


def _not_among(words):
    """A pattern finding, at the start, every string of the words' (common) length that is none of them: a prefix
    of some word, then a character no word continues that prefix with."""
    nexts = {}
    for w in words:
        for i in range(len(w)):
            nexts.setdefault(w[:i], set()).add(w[i])
    alts = ["".join(map(_rx_char, p)) + "[^" + "".join(_rx_char(c, True) for c in sorted(cs)) + "]"
            for p, cs in sorted(nexts.items())]
    return "^(?:" + "|".join(alts) + ")"


def _strings_other_than(strings):
    """Pieces whose union is every string not in `strings`: the other lengths, then per length the strings that
    leave the set (length pinned by minLength = maxLength, so the pattern needs no end anchor)."""
    by_len = {}
    for s in strings:
        by_len.setdefault(len(s), set()).add(s)

    def piece(lo, hi):
        return {"type": "string", **({"minLength": lo} if lo else {}), **({} if hi is None else {"maxLength": hi})}
    pieces, prev = [], -1
    for n in sorted(by_len):
        if n - prev > 1:
            pieces.append(piece(prev + 1, n - 1))
        prev = n
        if n:
            pieces.append({**piece(n, n), "pattern": _not_among(by_len[n])})
    return pieces + [piece(prev + 1, None)]


def _numbers_other_than(nums, draft):
    """Pieces whose union is every number not in nums: the open intervals around and between them."""
    nums = sorted({_canon(x): x for x in nums}.values())
    if any(abs(x) > 2 ** 53 for x in nums):
        raise _Inexpressible("not enum/const: numbers beyond 2^53 cannot be compared exactly")

    def below(x):
        return {"maximum": x, "exclusiveMaximum": True} if draft == 4 else {"exclusiveMaximum": x}

    def above(x):
        return {"minimum": x, "exclusiveMinimum": True} if draft == 4 else {"exclusiveMinimum": x}
    pieces = [{"type": "number", **below(nums[0])}]
    pieces += [{"type": "number", **above(a), **below(b)} for a, b in zip(nums, nums[1:])]
    return pieces + [{"type": "number", **above(nums[-1])}]


def _values_complement(values, draft, kinds):
    if not isinstance(values, list):
        raise _Inexpressible("enum is not a list")
    if any(_kind(v, draft) in kinds for v in values if isinstance(v, (list, dict))):
        raise _Inexpressible("not enum/const holding an array or an object cannot be written")
    types, pieces = [], []
    if None not in values:
        types.append("null")
    bools = {v for v in values if isinstance(v, bool)}
    if not bools:
        types.append("boolean")
    elif len(bools) == 1:
        pieces.append({"enum": [not bools.pop()]})
    nums = [v for v in values if _num(v)] if "integer" in kinds else []
    if nums:
        pieces += _numbers_other_than(nums, draft)
    else:
        types.append("number")
    strings = [v for v in values if isinstance(v, str)] if "string" in kinds else []
    if strings:
        pieces += _strings_other_than(strings)
    else:
        types.append("string")
    types += [t for t in ("array", "object") if not any(_kind(v, draft) == t for v in values)]
    return _union(([{"type": types}] if types else []) + pieces)


_BOUND_FLIPS = {"minLength": ("string", "maxLength", -1), "maxLength": ("string", "minLength", 1),
                "minItems": ("array", "maxItems", -1), "maxItems": ("array", "minItems", 1),
                "minProperties": ("object", "maxProperties", -1), "maxProperties": ("object", "minProperties", 1)}


# keywords whose meaning depends on another keyword beside them: a conjunct holding one goes in an allOf
_INTERACTING = frozenset(("properties", "patternProperties", "additionalProperties", "items", "prefixItems",
                          "additionalItems", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "if",
                          "then", "else", "contains", "minContains", "maxContains", "unevaluatedItems",
                          "unevaluatedProperties", "$ref", "$id", "id"))


def _join(dst, *parts):
    return None if dst is None else dst + parts


# ------------------------------------------------------------------------------------------------ the rewrite

# -- key presence (_Rewriter._presence_cover)

MAX_PRESENCE_TERMS = 64   # an allOf of presence tests whose product llguidance would list past this is recomputed
MAX_PRESENCE_KEYS = 16    # ... where they read at most this many keys


def _presence(f):
    """f as a test of which keys an object has, or None: a tree of ("and"/"or", [trees]), ("has", k),
    ("lacks", k) and ("object",), read from true/false, type object, required, properties {k: false}, allOf and
    anyOf (what dependencies, not required and min/maxProperties rewrite into)."""
    if f is True or f is False:
        return ("and" if f else "or", [])
    if not isinstance(f, dict) or not f or not set(f) <= {"type", "required", "properties", "allOf", "anyOf"}:
        return None
    parts = []
    for key, arg in f.items():
        if key == "type":
            if arg not in ("object", ["object"]):
                return None
            parts.append(("object",))
        elif key == "required":
            if not isinstance(arg, list) or not all(isinstance(k, str) for k in arg):
                return None
            parts += [("has", k) for k in arg]
        elif key == "properties":
            if not isinstance(arg, dict) or any(v is not False for v in arg.values()):
                return None
            parts += [("lacks", k) for k in arg]
        else:
            if not isinstance(arg, list) or not arg:
                return None
            subs = [_presence(m) for m in arg]
            if None in subs:
                return None
            parts.append(("and" if key == "allOf" else "or", subs))
    return ("and", parts)


def _terms(t):
    """How many object shapes llguidance lists for the presence test t (an anyOf adds, an allOf multiplies)."""
    if t[0] == "and":
        return math.prod(_terms(s) for s in t[1])
    return sum(_terms(s) for s in t[1]) if t[0] == "or" else 1


def _keys_read(t, out):
    if t[0] in ("has", "lacks"):
        out[t[1]] = out.get(t[1], 0) + 1
    for s in t[1] if t[0] in ("and", "or") else ():
        _keys_read(s, out)
    return out


def _assign(t, known):
    """t with what `known` (key -> present, "" -> is an object) settles replaced by True/False, simplified."""
    op = t[0]
    if op == "object":
        return known.get("", t)
    if op in ("has", "lacks"):
        v = known.get(t[1])
        return t if v is None else v == (op == "has")
    unit = op == "and"                            # and: True is neutral, False absorbs; or: the reverse
    subs = []
    for s in t[1]:
        s = _assign(s, known)
        if s is (not unit):
            return not unit
        if s is not unit:
            subs.append(s)
    return unit if not subs else subs[0] if len(subs) == 1 else (op, subs)


def _non_object(t):
    """Whether the presence test t accepts a non-object (required and properties say nothing of one)."""
    if t[0] in ("and", "or"):
        return (all if t[0] == "and" else any)(map(_non_object, t[1]))
    return t[0] != "object"


def _first_key(t):
    return t[1] if t[0] in ("has", "lacks") else next(filter(None, map(_first_key, t[1])), None) \
        if t[0] in ("and", "or") else None


def _cubes(t, cube, budget):
    """The sets of settled keys (key -> present) under which the presence test t holds, together covering
    exactly the objects it accepts (a Shannon expansion on one key at a time); None past budget[0] of them."""
    if t is True or t is False:
        budget[0] -= t
        return None if budget[0] < 0 else [dict(cube)] if t else []
    k = _first_key(t)
    hi = _cubes(_assign(t, {k: True}), {**cube, k: True}, budget)
    lo = None if hi is None else _cubes(_assign(t, {k: False}), {**cube, k: False}, budget)
    if lo is None:
        return None
    strip = [{a: b for a, b in c.items() if a != k} for c in hi]
    if strip == [{a: b for a, b in c.items() if a != k} for c in lo]:
        return strip                              # k does not matter here
    return hi + lo


def _merge_cubes(cubes):
    """Cubes that differ in one key's presence only merged into one without that key, until none do."""
    cubes = [frozenset(c.items()) for c in cubes]
    changed = True
    while changed:
        changed, seen = False, set(cubes)
        for a in cubes:
            for k, v in a:
                b = (a - {(k, v)}) | {(k, not v)}
                if b in seen:
                    merged = a - {(k, v)}
                    cubes = [c for c in cubes if c not in (a, b)] + [merged]
                    changed = True
                    break
            if changed:
                break
    return [dict(c) for c in cubes]


class _Rewriter:
    """One rewrite of one document: each reachable subschema rewritten once, $refs moved with what they name."""

    def __init__(self, doc, lenient, defer_unique=False, narrowed=None):
        self.doc, self.lenient, self.defer_unique = doc, lenient, defer_unique
        self.narrowed = narrowed  # None: exact or refused; a list: where fewer instances are accepted (rewrite)
        self.prover = _Prover(doc)
        self.placed = {}     # path of a rewritten subschema in the input -> its path in the output
        self.refs = []       # (output dict holding a $ref, path of the input subschema it came from)
        self.todo = []       # paths of $ref targets still to rewrite
        self.inlined = set()  # paths of $ref targets rewritten where they are named instead (_inline)
        self.counted = set()  # paths of subschemas whose min/maxProperties became an anyOf (_present_sets)
        self.if_test = False  # True while an if's complement is written: a known format there is refused (_if)
        self.handlers = {"format": self._format, "oneOf": self._one_of, "not": self._not, "if": self._if,
                         "then": self._skip, "else": self._skip, "dependencies": self._dependent,
                         "dependentRequired": self._dependent, "dependentSchemas": self._dependent,
                         "uniqueItems": self._unique, "minProperties": self._count, "maxProperties": self._count,
                         "propertyNames": self._names, "contains": self._contains, "$ref": self._ref,
                         "unevaluatedProperties": self._unevaluated, "pattern": self._pattern}

    def run(self):
        out = self.node(self.doc.root, (), ())
        while self.todo:                          # $ref targets outside what the walk from the root rewrote
            self.todo.sort(key=len, reverse=True)
            path = self.todo.pop()
            dst = self._map(path)
            parent = _get(out, dst[:-1])
            if path in self.placed or not dst or _step(parent, dst[-1]) is _MISSING:
                continue
            saved = len(self.refs), dict(self.placed)
            try:
                new = self.node(_get(self.doc.root, path), path, dst)
            except GrammarError as e:
                del self.refs[saved[0]:]
                self.placed = saved[1]
                self._inline(path, e)
                continue
            parent[dst[-1] if isinstance(parent, dict) else int(dst[-1])] = new
        self._fix_refs(out)
        return out

    def _inline(self, path, error):
        """A $ref target that cannot be rewritten alone (a oneOf proved disjoint only with what holds where it is
        named, as llguidance would check it): rewritten at each $ref naming it, with that place's context, in an
        allOf beside the $ref's other keywords; else the error stands."""
        sites = [(holder, ctx) for holder, src, ctx in self.refs if "$ref" in holder
                 and getattr(self.doc.resolve(holder["$ref"], self.doc.base_at(src)), "path", None) == path]
        if self.lenient or path in self.inlined or not sites or not all(ctx for _, ctx in sites):
            raise error
        self.inlined.add(path)
        for holder, ctx in sites:
            try:
                new = self.node(_get(self.doc.root, path), path, None, ctx, inline=True)
            except GrammarError:
                raise error from None
            del holder["$ref"]
            self._all_of(holder).append(new)

    def node(self, schema, src, dst, ctx=(), inline=False):
        """The rewrite of the input subschema at path src, to be placed at path dst of the output (None: a copy no
        $ref can name). ctx: (subschema, base) pairs that hold wherever this one is read (the other members of an
        allOf it is in, the keywords beside it); the rewrite is exact where they hold. None for a $ref's target,
        which must be exact wherever it is named (but where inline: a copy for one place)."""
        if dst is not None:
            self.placed[src] = dst
        if not isinstance(schema, dict):
            return copy.deepcopy(schema)
        ctx = () if src in self.doc.targets and not inline else ctx
        out = {}
        for key, value in schema.items():
            if key == UNIQUE_MARK:
                continue                          # ours alone: a schema's own says nothing
            handler = self.handlers.get(key)
            if handler is None or not (self.doc.active(key) or key == "dependencies"):
                self._copy(schema, key, value, out, src, dst, ctx)
                continue
            saved, saved_all = dict(out), out.get("allOf")
            saved_all = list(saved_all) if isinstance(saved_all, list) else saved_all
            try:
                handler(schema, key, value, out, src, dst, ctx)
            except GrammarError:
                if not self.lenient:
                    raise
                out.clear()                       # lenient: the keyword stays as it was, for llguidance to ignore
                out.update(saved, **({"allOf": saved_all} if "allOf" in saved else {}))
                out.update({k: copy.deepcopy(schema[k]) for k in (key, "then", "else") if k in schema and
                            (k == key or key == "if")})
        if isinstance(out.get("patternProperties"), dict) and len(out["patternProperties"]) > 1:
            self._fold_patterns(out, src)
        if isinstance(out.get("allOf"), list) and not self.lenient:
            self._presence_cover(out, dst)
        return out

    def _presence_cover(self, out, dst):
        """The anyOf and allOf members of out that test only which keys an object has (dependencies, not
        required, counted key sets), where llguidance would multiply them out past MAX_PRESENCE_TERMS shapes,
        replaced by one anyOf of key sets (each {required: present, properties: {absent: false}}) that accepts
        exactly the same objects, found by expanding on one key at a time, plus the non-objects where the tests
        let them through: exact, the same test computed over every assignment of the keys it reads."""
        members = [("anyOf",)] if isinstance(out.get("anyOf"), list) else []
        members += [("allOf", str(i)) for i in range(len(out["allOf"]))]
        tests = [(at, _presence({"anyOf": out["anyOf"]} if at == ("anyOf",) else out["allOf"][int(at[1])]))
                 for at in members]
        tests = [(at, t) for at, t in tests if t is not None]
        whole = ("and", [t for _, t in tests])
        if len(tests) < 2 or _terms(whole) <= MAX_PRESENCE_TERMS:
            return
        counts = _keys_read(whole, {})
        if len(counts) > MAX_PRESENCE_KEYS or dst is not None and any(
                path in self.doc.targets and at[:len(dst) + 1] in (dst + ("allOf",), dst + ("anyOf",))
                for path, at in self.placed.items()):
            return                                # too many keys, or a $ref names a member (which would move)
        non_object = _non_object(whole)
        found = _cubes(_assign(whole, {"": True}), {}, [4 * MAX_PRESENCE_TERMS])
        if found is None or len(_merge_cubes(found)) >= _terms(whole):
            return                                # no fewer shapes (or too many to merge)
        found = _merge_cubes(found)
        shapes = [{**({} if non_object else {"type": "object"}),
                   **({"required": [k for k, v in c.items() if v]} if any(c.values()) else {}),
                   **({"properties": {k: False for k, v in c.items() if not v}} if not all(c.values()) else {})}
                  for c in found]
        if non_object:
            shapes.insert(0, {"type": [t for t in _TYPES if t != "object"]})
        for at, _ in reversed(tests):
            if at == ("anyOf",):
                del out["anyOf"]
            else:
                del out["allOf"][int(at[1])]
        cover = True if {} in shapes else shapes[0] if len(shapes) == 1 else {"anyOf": shapes} if shapes else False
        if "anyOf" not in out and isinstance(cover, dict) and "anyOf" in cover:
            out["anyOf"] = cover["anyOf"]
        elif cover is not True:
            out["allOf"].append(cover)
        if not out["allOf"]:
            del out["allOf"]

    def _fold_patterns(self, out, src):
        """patternProperties that list their names (^(a|b)$) moved into properties, where llguidance (which
        refuses two patterns a name may match both of) intersects a listed name's schema with every pattern it
        matches, as JSON Schema does: exact, since a listed key is not an additional one either."""
        patterns, props = out["patternProperties"], out.get("properties", {})
        if not isinstance(props, dict):
            return
        for p in list(patterns):
            words = _pattern_words(p) if isinstance(p, str) else None
            words = sorted(w for w in words or () if not w.endswith("\n"))
            if not words or src + ("patternProperties", p) in self.doc.targets or any(
                    src + ("properties", w) in self.doc.targets for w in words):
                continue                          # (a $ref names what would move or change)
            schema = patterns.pop(p)
            for w in words:
                props[w] = schema if w not in props else {"allOf": [props[w], schema]}
        if props:
            out["properties"] = props

    def _copy(self, schema, key, value, out, src, dst, ctx):
        """A keyword kept: its subschemas rewritten where its draft applies it (llguidance ignores the others)."""
        walk = self.doc.active(key) or key == "additionalItems"
        if key == "additionalItems" and not isinstance(schema.get("items"), list):
            walk = False                          # read by nobody without a list of items
        if walk and (key in _ONE or (key == "items" and not isinstance(value, list))):
            out[key] = self.node(value, src + (key,), _join(dst, key))
        elif walk and key in ("allOf", "anyOf", "oneOf") and not isinstance(value, list):
            raise _refuse(key, src, "is not a list of schemas")
        elif walk and (key in _MANY or key == "items") and isinstance(value, list):
            done = self._switch(schema, value, out, src, dst, ctx) if key == "allOf" and self.doc.draft >= 7 else ()
            lst = self._all_of(out, src) if key == "allOf" else out.setdefault(key, [])   # may hold conjuncts
            for i, v in enumerate(value):
                if i in done:
                    continue
                inner = ()                        # an allOf member holds with the rest; an anyOf's with its siblings
                if key in ("allOf", "anyOf"):
                    inner = self._beside(schema, src, ctx, key, [] if key == "anyOf" else value[:i] + value[i + 1:])
                lst.append(self.node(v, src + (key, str(i)), _join(dst, key, str(len(lst))), inner))
        elif walk and key in _NAMED and isinstance(value, dict):
            out[key] = {k: self.node(v, src + (key, k), _join(dst, key, k)) for k, v in value.items()}
        else:
            out[key] = copy.deepcopy(value)

    def _switch(self, schema, members, out, src, dst, ctx):
        """allOf members that are if/then/else testing one property's value (the usual discriminator: if
        {properties: {kind: {const: "a"}}} then ...), rewritten as one anyOf over the cases instead of an anyOf each
        (whose intersection llguidance would multiply out): a non-object, an object without the property, one for
        each set of values the same ifs accept, and any other value. In each case every if's verdict is known, so the
        case's branch is its then or its else. Returns the members it rewrote (none where fewer than two qualify)."""
        tests = {}
        for i, m in enumerate(members):
            t = self._value_test(m)
            if t is not None:
                tests.setdefault(t[0], {})[i] = t[1:]
        name, group = max(tests.items(), key=lambda kv: len(kv[1]), default=(None, {}))
        if len(group) < 2:
            return ()
        values = {_canon(v): v for _, _, vals in group.values() for v in vals}
        try:
            other = _values_complement(list(values.values()), self.doc.draft, _ALL_KINDS)
        except _Inexpressible:
            return ()
        cases = [({"type": [t for t in _TYPES if t != "object"]}, {i: not obj for i, (obj, _, _) in group.items()}),
                 ({"type": "object", "properties": {name: False}}, {i: not req for i, (_, req, _) in group.items()})]
        signatures = {}
        for key, v in values.items():
            sig = tuple(i for i, (_, _, vals) in group.items() if key in {_canon(x) for x in vals})
            signatures.setdefault(sig, []).append(v)
        for sig, vals in signatures.items():
            cases.append(({"type": "object", "required": [name], "properties": {name: {"enum": vals}}},
                          {i: i in sig for i in group}))
        cases.append(({"type": "object", "required": [name], "properties": {name: other}}, dict.fromkeys(group, False)))
        beside, base = self._beside(schema, src, ctx, "allOf"), self.doc.base_at(src)
        cases = [c for c in cases if not self.prover.disjoint(list(beside), [(c[0], base)])]   # what can happen here
        slot, lst = self._slot(schema, out)
        for n, (test, verdicts) in enumerate(cases):
            parts = [test]
            for i, holds in verdicts.items():
                k = "then" if holds else "else"
                if k in members[i]:
                    at = src + ("allOf", str(i), k)
                    here = None if at in self.placed else _join(dst, *slot, str(n), "allOf", str(len(parts)))
                    parts.append(self.node(members[i][k], at, here, beside))
            lst.append({"allOf": parts})
        return set(group)

    def _value_test(self, member):
        """(property, needs an object, needs the property, the values it accepts there) of an allOf member that is
        only if/then/else whose if only tests one property's value among finitely many; else None."""
        if not isinstance(member, dict) or "if" not in member or not {"then", "else"} & set(member):
            return None
        active = {k for k in member if self.doc.active(k) or k in ("$id", "id")}
        test = member["if"]
        if active - {"if", "then", "else"} or not isinstance(test, dict):
            return None
        keys = {k for k in test if self.doc.active(k) or k in ("$id", "id")}
        props = test.get("properties")
        if keys - {"type", "required", "properties"} or not isinstance(props, dict) or len(props) != 1:
            return None
        (name, value), = props.items()
        if test.get("type", "object") not in ("object", ["object"]) or test.get("required", [name]) != [name]:
            return None
        if not isinstance(value, dict) or {k for k in value if self.doc.active(k)} - {"enum", "const", "type"}:
            return None
        values = self._candidates(value, ())
        if values is None or any(isinstance(v, (list, dict)) for v in values):
            return None
        verdicts = [(_check(self.doc, value, self.doc.base_at(()), v), v) for v in values]
        if any(ok is None for ok, _ in verdicts):
            return None
        return name, "type" in test, "required" in test, [v for ok, v in verdicts if ok]

    def _beside(self, schema, src, ctx, key, more=()):
        """The context of a subschema of schema's keyword `key` read at the same instance: ctx, schema's other
        keywords, and `more` subschemas of schema."""
        base = self.doc.base_at(src)
        rest = {k: v for k, v in schema.items() if k not in (key, "then", "else", "$id", "id")}
        return ctx + ((rest, base),) + tuple((m, base) for m in more)

    def _slot(self, schema, out):
        """Where a new anyOf conjunct goes: the subschema's anyOf where it has none, else a new allOf member.
        (path suffix, the list to fill)."""
        if "anyOf" not in schema and "anyOf" not in out:
            out["anyOf"] = []
            return ("anyOf",), out["anyOf"]
        lst = self._all_of(out)
        lst.append({"anyOf": []})
        return ("allOf", str(len(lst) - 1), "anyOf"), lst[-1]["anyOf"]

    def _all_of(self, out, src=()):
        """out's allOf list (made where there is none yet)."""
        lst = out.setdefault("allOf", [])
        if not isinstance(lst, list):
            raise _refuse("allOf", src, "is not a list of schemas")
        return lst

    def _conjoin(self, schema, out, extra):
        """Add a conjunct: its keywords beside the others where none of them is there already nor reads another
        keyword, else as an allOf member."""
        if extra is True:
            return
        if isinstance(extra, dict) and not set(extra) & (set(schema) | set(out) | _INTERACTING):
            out.update(extra)
        else:
            self._all_of(out).append(extra)

    def _map(self, path):
        """Where the input's path is in the output (its nearest rewritten ancestor moved, the rest as it was)."""
        for i in range(len(path), -1, -1):
            if path[:i] in self.placed:
                return self.placed[path[:i]] + path[i:]
        return path

    def _ref(self, schema, key, value, out, src, dst, ctx):
        out[key] = value
        self.refs.append((out, src, self._beside(schema, src, ctx, key)))
        t = self.doc.resolve(value, self.doc.base_at(src))
        if t is not None and t.path not in self.placed:
            self.todo.append(t.path)

    def _fix_refs(self, out):
        """Point each $ref at its target's place in the output; refuse one whose target was rewritten away."""
        for holder, src, _ in self.refs:
            if "$ref" not in holder:
                continue                          # inlined
            ref, base = holder["$ref"], self.doc.base_at(src)
            t = self.doc.resolve(ref, base)
            if t is None:
                continue                          # not in this document: llguidance resolves or refuses it
            new = self._map(t.path)
            resource = self._map(self.doc.resources[urldefrag(_join_uri(base, ref))[0]])
            if new[:len(resource)] != resource or _get(out, new) is _MISSING:
                if self.lenient:
                    continue
                raise _refuse("$ref", src, f"{ref} names a part of the schema that the rewrite of "
                                           f"{_pointer(t.path)}'s keywords removed")
            if new != t.path:
                holder["$ref"] = urldefrag(ref)[0] + _pointer(new[len(resource):])

    # -- complements

    def complement(self, schema, src, seen=frozenset(), kinds=_ALL_KINDS, part=False):
        """A schema accepting exactly what the input subschema at src (`schema`) rejects, in rewritten form, among
        instances of the given kinds (what it says of other kinds is unspecified); _Inexpressible where it cannot be
        written. With part=True, a part of that where the whole cannot be written: a keyword whose complement
        cannot be written adds nothing to the union (not (A and B) ⊇ not A), so every instance it accepts is still
        rejected by the input (possibly none: false)."""
        if schema is True or schema is False:
            return _restrict(not schema, kinds)
        if not isinstance(schema, dict):
            raise _Inexpressible("not a schema")
        doc, pieces = self.doc, []
        if "$ref" in schema:
            try:
                pieces.append(self._ref_complement(schema["$ref"], src, seen, kinds, part))
            except _Inexpressible:
                if not part:
                    raise
                pieces.append(False)
            if doc.draft <= 7:
                return pieces[0]
        for key, arg in schema.items():
            if key != "$ref" and doc.active(key) and _APPLIES.get(key, _ALL_KINDS) & kinds:
                try:
                    pieces += self._complement_keyword(schema, key, arg, src, seen, kinds, part)
                except _Inexpressible:
                    if not part:
                        raise
        return _union(pieces)

    def _ref_complement(self, ref, src, seen, kinds, part):
        t = self.doc.resolve(ref, self.doc.base_at(src))
        if t is None:
            raise _Inexpressible(f"$ref {ref} is not in this document")
        if t.path in seen:
            raise _Inexpressible(f"$ref {ref} is recursive")
        return self.complement(t.node, t.path, seen | {t.path}, kinds, part)

    def _complement_keyword(self, schema, key, arg, src, seen, kinds, part=False):
        """Pieces whose union is, among instances of the kinds, exactly those that keyword `key` of schema
        rejects (with part=True: some of them, see complement)."""
        def sub(s, *path, within=kinds):
            return self.complement(s, src + (key,) + path, seen, within, part)
        if key == "type":
            return [_restrict(_type_complement(arg, kinds), kinds)]
        if key in ("enum", "const"):
            return [_restrict(_values_complement([arg] if key == "const" else arg, self.doc.draft, kinds), kinds)]
        if key == "required" and isinstance(arg, list) and all(isinstance(k, str) for k in arg):
            return [{"type": "object", "properties": {k: False}} for k in dict.fromkeys(arg)]
        if key in ("then", "else") and "if" not in schema:
            return []                             # without an if they say nothing
        if key in _BOUND_FLIPS and isinstance(arg, int) and not isinstance(arg, bool):
            kind, flip, step = _BOUND_FLIPS[key]
            return [] if arg + step < 0 else [{"type": kind, flip: arg + step}]
        if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and (
                _num(arg) or isinstance(arg, bool)):
            return self._bound_complement(schema, key, arg)
        if key == "properties" and isinstance(arg, dict):
            if not part and (not self._trivial(schema.get("additionalProperties", True))
                             or schema.get("patternProperties")):
                raise _Inexpressible("not properties beside additionalProperties or patternProperties")
            out = [(k, sub(s, k, within=_ALL_KINDS)) for k, s in arg.items()]
            return [{"type": "object", "required": [k], "properties": {k: c}} for k, c in out if c is not False]
        if key in ("items", "prefixItems", "additionalItems", "additionalProperties", "unevaluatedItems",
                   "unevaluatedProperties") and self._trivial(arg) or key == "uniqueItems" and arg is False:
            return []
        if key == "patternProperties" and isinstance(arg, dict) and all(map(self._trivial, arg.values())):
            return []
        if key == "pattern" and isinstance(arg, str) and _class_run_complement(arg) is not None:
            pieces, exact = _class_run_complement(arg)
            if exact or part:
                return pieces
            raise _Inexpressible("the complement of pattern differs between regex dialects (\\s, \\d, a bounded run, "
                                "a final newline)")
        if key == "format" and (_unknown_format(arg) or not self.if_test):
            return []                             # nothing: read as the annotation it may be (see _if)
        if key == "contains" and not {"minContains", "maxContains"} & set(schema):
            return [{"type": "array", "items": sub(arg, within=_ALL_KINDS)}]
        if key in ("allOf", "anyOf", "oneOf") and isinstance(arg, list):
            parts = [sub(s, str(i)) for i, s in enumerate(arg)]
            if key == "oneOf" and not part and not self._all_disjoint(arg, src + (key,)):
                raise _Inexpressible("not oneOf whose branches may overlap")
            return parts if key == "allOf" else [_intersection(parts)]
        if key == "not":
            return [self.node(arg, src + ("not",), None)]
        raise _Inexpressible(f"the complement of {key} cannot be written")

    def _bound_complement(self, schema, key, arg):
        if arg is True or arg is False:
            return []                             # draft 4's exclusive flag: read with minimum / maximum
        draft4 = self.doc.draft == 4
        if key in ("minimum", "maximum"):
            low = key == "minimum"
            excl = draft4 and schema.get("exclusiveMinimum" if low else "exclusiveMaximum") is True
        else:
            low, excl = key == "exclusiveMinimum", True
        flip = "maximum" if low else "minimum"
        if excl:                                  # x > a (x < a) fails exactly where x <= a (x >= a)
            return [{"type": "number", flip: arg}]
        if draft4:
            return [{"type": "number", flip: arg, "exclusiveM" + flip[1:]: True}]
        return [{"type": "number", "exclusiveM" + flip[1:]: arg}]

    def _trivial(self, schema, seen=frozenset()):
        """Whether a subschema accepts every instance, as far as its keywords show (annotations only)."""
        if schema is True or schema is _MISSING:
            return True
        if not isinstance(schema, dict):
            return False
        return all(not self.doc.active(k) or k == "format" and _unknown_format(v) for k, v in schema.items())

    def _all_disjoint(self, branches, src, ctx=()):
        """Every two of the branches (at input path src) proved disjoint where the context holds."""
        return all(not self._overlap([a, b], src, ctx) for i, a in enumerate(branches) for b in branches[i + 1:])

    def _overlap(self, pair, src, ctx=()):
        """The kinds of instance where the two branches (at input path src) may both hold, where ctx holds."""
        base = self.doc.base_at(src[:-1])
        return self.prover.overlap(list(ctx) + [(pair[0], base)], list(ctx) + [(pair[1], base)])

    # -- the keywords

    def _format(self, schema, key, value, out, src, dst, ctx):
        if not isinstance(value, str) or value in KNOWN_FORMATS:
            out[key] = value                      # else an annotation llguidance does not know: dropped

    def _pattern(self, schema, key, value, out, src, dst, ctx):
        out[key] = _angles_literal(value) if isinstance(value, str) else value

    def _skip(self, schema, key, value, out, src, dst, ctx):
        """then / else: rewritten with their if (without one they do nothing)."""

    def _one_of(self, schema, key, value, out, src, dst, ctx):
        if not isinstance(value, list) or not value:
            out[key] = copy.deepcopy(value)       # malformed: llguidance says so
            return
        here, beside = src + (key,), self._beside(schema, src, ctx, key)
        rivals = {}          # branch -> [(a branch it was not proved disjoint from, the kinds where they may meet)]
        for i in range(len(value)):
            for j in range(i + 1, len(value)):
                kinds = _widen(self._overlap([value[i], value[j]], here, beside))
                if kinds:
                    rivals.setdefault(i, []).append((j, kinds))
                    rivals.setdefault(j, []).append((i, kinds))
        allowed = self.prover.facts(list(beside)).kinds     # what the context lets through
        negated = {}         # (j, kinds) -> not branch j among those kinds, anything among the others
        unwritten = []       # [((i, j), why)]: the complement of j written in part only (stricter than oneOf asks)
        empty = set()        # (j, kinds) whose complement was written as nothing (false)
        for i, js in sorted(rivals.items()):
            for j, kinds in js:
                if (j, kinds) not in negated:
                    c = self._branch_complement(value[j], here + (str(j),), kinds, (i, j), unwritten)
                    others = _widen(allowed - kinds) - kinds
                    negated[j, kinds] = _union(([{"type": _type_names(others)}] if others else []) + [c])
                    if c is False:
                        empty.add((j, kinds))
        base = self.doc.base_at(src)

        def dead(i):                              # branch i left nothing: all it may be, not branch j refuses
            mine = _widen(self.prover.facts(list(beside) + [(value[i], base)]).kinds)
            return any(r in empty and mine <= r[1] for r in rivals.get(i, ()))
        if unwritten and (self.narrowed is None or all(map(dead, range(len(value))))):
            (i, j), e = unwritten[0]
            raise _refuse(key, src, f"branches {min(i, j)} and {max(i, j)} may both match (not proved disjoint) and "
                                    f"the complement of branch {j} cannot be written ({e})")
        for (i, j), e in unwritten:
            self.narrowed.append(f"oneOf at {_pointer(src)}: where branches {min(i, j)} and {max(i, j)} may both "
                                 f"match, only a part of not branch {j} is allowed beside branch {i} ({e})")
        slot, lst = self._slot(schema, out)
        for i, branch in enumerate(value):
            at = _join(dst, *slot, str(i))
            if i in rivals:                       # exactly one: this branch and none it may overlap
                lst.append({"allOf": [self.node(branch, here + (str(i),), _join(at, "allOf", "0"), beside)]
                            + [negated[j, kinds] for j, kinds in rivals[i]]})
            else:
                lst.append(self.node(branch, here + (str(i),), at, beside))

    def _branch_complement(self, branch, src, kinds, pair, unwritten):
        """not branch among the kinds; where that cannot be written whole, a part of it (complement(part=True)):
        the oneOf then accepts fewer instances than it could, each matching exactly one branch (on the strict
        side), and a branch whose part is false (nothing) can never be chosen."""
        try:
            return self.complement(branch, src, kinds=kinds)
        except _Inexpressible as e:
            unwritten.append((pair, e))
            if self.narrowed is None:
                return False
            return self.complement(branch, src, kinds=kinds, part=True)

    def _negate(self, value, src, key):
        """not value (at src + (key,)); where that cannot be written whole and narrowing is allowed, a part of it
        that is not nothing (complement(part=True)), the place noted in self.narrowed."""
        try:
            return self.complement(value, src + (key,))
        except _Inexpressible as e:
            c = False if self.narrowed is None else self.complement(value, src + (key,), part=True)
            if c is False:
                raise
            self.narrowed.append(f"{key} at {_pointer(src)}: only a part of its complement is allowed ({e})")
            return c

    def _not(self, schema, key, value, out, src, dst, ctx):
        try:
            self._conjoin(schema, out, self._negate(value, src, key))
        except _Inexpressible as e:
            raise _refuse(key, src, str(e)) from None

    def _if(self, schema, key, value, out, src, dst, ctx):
        then, other = schema.get("then", _MISSING), schema.get("else", _MISSING)
        if then is _MISSING and other is _MISSING:
            return                                # no constraint
        negated = None
        if then is not _MISSING:
            saved, self.if_test = self.if_test, True   # a known format in the test: not read as nothing (_if)
            try:
                negated = self._negate(value, src, key)
            except _Inexpressible as e:
                raise _refuse(key, src, f"the complement of the if schema cannot be written ({e})") from None
            finally:
                self.if_test = saved
        slot, lst = self._slot(schema, out)

        beside = self._beside(schema, src, ctx, key)

        def sub(k, *at):                          # then holds with if, and both with the keywords beside them
            more = () if k != "then" else ((value, self.doc.base_at(src)),)
            return self.node(schema[k], src + (k,), _join(dst, *slot, *at), beside + more)
        if then is _MISSING:                      # I or (not I and E) == I or E
            lst += [sub("if", "0"), sub("else", "1")]
        elif other is _MISSING:                   # (I and T) or not I == not I or T
            lst += [negated, sub("then", "1")]
        else:
            lst += [{"allOf": [sub("if", "0", "allOf", "0"), sub("then", "0", "allOf", "1")]},
                    {"allOf": [negated, sub("else", "1", "allOf", "1")]}]

    def _dependent(self, schema, key, value, out, src, dst, ctx):
        """dependencies / dependentRequired / dependentSchemas, one anyOf per property named."""
        if not isinstance(value, dict):
            raise _refuse(key, src, "is not an object")
        for name, dep in value.items():
            absent = {"properties": {name: False}}
            if isinstance(dep, list) and key != "dependentSchemas":
                if not all(isinstance(d, str) for d in dep):
                    raise _refuse(key, src + (key,), f"{name}: not a list of property names")
                if dep:
                    self._slot(schema, out)[1].extend([absent, {"required": list(dict.fromkeys([name, *dep]))}])
            elif isinstance(dep, (dict, bool)) and key != "dependentRequired":
                if not self._trivial(dep):
                    slot, lst = self._slot(schema, out)
                    beside = self._beside(schema, src, ctx, key, [{"required": [name]}])
                    lst += [absent, {"allOf": [{"required": [name]}, self.node(
                        dep, src + (key, name), _join(dst, *slot, "1", "allOf", "1"), beside)]}]
            else:
                raise _refuse(key, src + (key,), f"{name}: neither a list of property names nor a schema")

    def _candidates(self, schema, src):
        """A finite list of distinct values holding every value the subschema at src accepts, or None."""
        f = self.prover.facts([(schema, self.doc.base_at(src))])
        if f.unsat:
            return []
        if f.values is None:
            if not f.kinds <= {"null", "boolean"}:
                return None
            f.values = [v for v in (None, False, True) if _kind(v, self.doc.draft) in f.kinds]
        return list({_canon(v): v for v in f.values}.values())

    def _unique(self, schema, key, value, out, src, dst, ctx):
        if value is not True:
            if value is not False:
                out[key] = value                  # malformed: llguidance says so
            return
        top = schema.get("maxItems")
        top = top if _num(top) else math.inf
        if top <= 1:
            return
        prefix, rest = _item_schemas(self.doc, schema)
        items = "prefixItems" if self.doc.draft >= 2020 and not isinstance(schema.get("items"), list) else "items"
        if prefix and (rest is False or top <= len(prefix)):
            if self._all_disjoint(prefix[:int(min(top, len(prefix)))], src + (items,)):
                return                            # a tuple whose positions cannot hold equal values
            return self._defer_unique(out, key, src, "two positions of the tuple may hold equal values")
        rest_at = src + ("additionalItems" if isinstance(schema.get("items"), list) else "items",)
        values = None if prefix or rest is _MISSING else self._candidates(rest, rest_at)
        if values is None:
            return self._defer_unique(out, key, src, "repeats can only be excluded where the items come from a "
                                                     "small finite set of values (enum, const, boolean, null)")
        low = schema.get("minItems") if _num(schema.get("minItems")) else 0
        sizes = range(int(low), int(min(top, len(values))) + 1)
        if not _perms_at_most(len(values), sizes, MAX_ARRAYS):
            return self._defer_unique(out, key, src, f"more than {MAX_ARRAYS} arrays of distinct items would "
                                                     f"have to be listed")
        arrays = [list(p) for n in sizes for p in itertools.permutations(values, n)]
        self._conjoin(schema, out, {"enum": arrays} if arrays else False)

    def _defer_unique(self, out, key, src, reason):
        """uniqueItems the grammar cannot express: marked (UNIQUE_MARK) for the matcher to enforce where rewrite()
        was asked to (unique_items), else refused with the reason."""
        if not self.defer_unique:
            raise _refuse(key, src, reason)
        out[UNIQUE_MARK] = True

    def _count(self, schema, key, value, out, src, dst, ctx):
        """minProperties / maxProperties: dropped where the other keywords already force them; else, where some
        listed key is optional (which llguidance cannot count), the sets of optional keys present are enumerated."""
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        required = {k for k in required if isinstance(k, str)}
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        closed = schema.get("additionalProperties") is False and not schema.get("patternProperties")
        if not _num(value):
            out[key] = value
        elif key == "minProperties" and value <= len(required) or key == "maxProperties" and closed and (
                value >= len(props)):
            return
        elif key == "maxProperties" and value == 0:
            self._conjoin(schema, out, {"additionalProperties": False})     # no key at all
        elif not set(props) <= required and self._present_sets(schema, src, required, props, closed, out):
            if not closed:
                out[key] = value                  # the keys beyond those listed: llguidance counts them
        else:
            out[key] = value

    def _present_sets(self, schema, src, required, props, closed, out):
        """min/maxProperties where some key in properties is optional: anyOf over the sets S of optional keys an
        object has ({required: S, properties: {the others: false}}), each with every listed key settled, which
        llguidance then counts (exact: every object has one such S). Only the sets whose size the bounds allow are
        kept (where the object is closed, no other key counts; else only maxProperties limits them). At most
        MAX_KEY_SETS sets; False where there would be more (left to llguidance, which refuses). The anyOf is added
        once for both keywords."""
        lo, hi = (schema.get(k) for k in ("minProperties", "maxProperties"))
        lo = lo if _num(lo) else 0
        hi = hi if _num(hi) else math.inf
        optional = [k for k in props if k not in required]
        n_req = len(required)
        sizes = [j for j in range(len(optional) + 1) if n_req + j <= hi and (not closed or n_req + j >= lo)]
        if sum(math.comb(len(optional), j) for j in sizes) > MAX_KEY_SETS:
            return False
        if src in self.counted:
            return True                           # done for the other keyword
        self.counted.add(src)
        branches = [{"required": list(s), "properties": {k: False for k in optional if k not in s}}
                    for j in sizes for s in itertools.combinations(optional, j)]
        self._all_of(out).append({"anyOf": branches} if branches else False)
        return True

    def _unevaluated(self, schema, key, value, out, src, dst, ctx):
        """unevaluatedProperties S, where the keywords that evaluate properties at this instance are known without
        validating it (properties / patternProperties / additionalProperties here, in allOf members and $ref
        targets, none in an anyOf, oneOf, if/then/else or dependentSchemas): dropped where an additionalProperties
        (or a nested unevaluatedProperties) evaluates every property, else == allOf [{properties: {each evaluated
        name: true}, patternProperties: {each evaluated pattern: true}, additionalProperties: S}]. Else left to
        llguidance (refused)."""
        found = self._evaluated(schema, self.doc.base_at(src), frozenset(), top=True)
        if found is None:
            out[key] = self.node(value, src + (key,), _join(dst, key))
            return
        names, patterns, everything = found
        if everything or value is True or value == {}:
            return
        lst = self._all_of(out, src)
        extra = {"properties": {n: True for n in names}} if names else {}
        if patterns:
            extra["patternProperties"] = {p: True for p in patterns}
        extra["additionalProperties"] = self.node(value, src + (key,), _join(dst, "allOf", str(len(lst)),
                                                                             "additionalProperties"))
        lst.append(extra)

    def _evaluated(self, node, base, seen, top=False):
        """(names, patterns, everything): what the subschema node evaluates of an object's properties wherever it
        validates, through allOf and $ref; None where that depends on which branch of a conditional applicator
        validates (one of them evaluates a property) or cannot be followed."""
        if not isinstance(node, dict):
            return set(), set(), False
        props, pats = node.get("properties"), node.get("patternProperties")
        names = set(props) if isinstance(props, dict) else set()
        patterns = set(pats) if isinstance(pats, dict) else set()
        everything = "additionalProperties" in node or (not top and "unevaluatedProperties" in node)
        members = node.get("allOf")
        parts = [(m, base) for m in members] if isinstance(members, list) else []
        if "$ref" in node:
            t = self.doc.resolve(node["$ref"], base)
            if t is None or t.path in seen:
                return None
            seen = seen | {t.path}
            parts.append((t.node, t.base))
        for k in ("anyOf", "oneOf", "if", "then", "else", "dependentSchemas", "$recursiveRef", "$dynamicRef"):
            subs = node.get(k)
            subs = list(subs.values()) if k == "dependentSchemas" and isinstance(subs, dict) else subs
            for sub in (subs if isinstance(subs, list) else [subs] if k in node else []):
                if k.endswith("Ref") or self._evaluated(sub, self.doc.rebase(sub, base) if isinstance(sub, dict)
                                                        else base, seen) != (set(), set(), False):
                    return None
        for sub, b in parts:
            r = self._evaluated(sub, self.doc.rebase(sub, b) if isinstance(sub, dict) else b, seen)
            if r is None:
                return None
            names |= r[0]
            patterns |= r[1]
            everything |= r[2]
        return names, patterns, everything

    def _names(self, schema, key, value, out, src, dst, ctx):
        """propertyNames, where the names an object may have are known now."""
        at = src + (key,)
        base = self.doc.base_at(at)
        if self._any_string(value, at):
            return
        names = self._candidates(value, at)
        if names is not None:                     # only these names: each one accepted, then
            verdict = {n: _check(self.doc, value, base, n) for n in names if isinstance(n, str)}
            if None not in verdict.values():
                allowed = {n: True for n, ok in verdict.items() if ok}
                self._conjoin(schema, out, {"properties": allowed, "additionalProperties": False})
                return
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        if schema.get("additionalProperties") is False and not schema.get("patternProperties"):
            verdict = {n: _check(self.doc, value, base, n) for n in props}
            if None not in verdict.values():      # every name is listed: check each now
                banned = {n: False for n, ok in verdict.items() if not ok}
                if banned:
                    self._conjoin(schema, out, {"properties": banned})
                return
        out[key] = copy.deepcopy(value)           # llguidance refuses it

    def _any_string(self, schema, src, seen=frozenset()):
        """Whether the subschema accepts every string (type, $ref and allOf followed; annotations ignored)."""
        if schema is True:
            return True
        if not isinstance(schema, dict):
            return False
        for k, v in schema.items():
            if k == "$ref":
                t = self.doc.resolve(v, self.doc.base_at(src))
                if t is None or t.path in seen or not self._any_string(t.node, t.path, seen | {t.path}):
                    return False
            elif k == "type":
                if "string" not in ([v] if isinstance(v, str) else v if isinstance(v, list) else []):
                    return False
            elif k == "allOf" and isinstance(v, list):
                if not all(self._any_string(s, src + (k, str(i)), seen) for i, s in enumerate(v)):
                    return False
            elif self.doc.active(k) and not (k == "format" and _unknown_format(v)) and not (
                    k == "minLength" and v == 0):
                return False
        return True

    def _contains(self, schema, key, value, out, src, dst, ctx):
        """contains S: minItems 1 where every item the array can hold satisfies S."""
        prefix, rest = _item_schemas(self.doc, schema)
        always = not {"minContains", "maxContains"} & set(schema) and self._any_value(value)
        if not always and not {"minContains", "maxContains"} & set(schema) and not prefix and rest is not _MISSING:
            values = self._candidates(rest, src + ("items",))
            base = self.doc.base_at(src + (key,))
            always = values is not None and all(_check(self.doc, value, base, v) is True for v in values)
        if always:
            self._conjoin(schema, out, {"minItems": 1})
        else:
            out[key] = copy.deepcopy(value)       # llguidance refuses it

    def _any_value(self, schema):
        return schema is True or isinstance(schema, dict) and self._trivial(schema)
