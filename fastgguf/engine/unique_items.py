r"""uniqueItems that a grammar cannot express, enforced as the output is written.

    u = UniqueItems.of(grammar)      # None unless the grammar's schema carries UNIQUE_MARK (see below)
    u.forbid(mask, tokens)           # clear in mask the tokens that would complete a repeated item
    u.feed(piece)                    # after each consumed token: False if it repeats one (u is then spent)

A context-free grammar cannot say "no two items alike" over strings, numbers or objects. schema_rewrite enumerates
the arrays of distinct items where the items come from a small finite set; elsewhere (rewrite(defer_unique=True))
it leaves UNIQUE_MARK on the array's subschema instead of refusing it, and this module enforces the mark: a scanner
follows the JSON the model writes; for each open array it knows which subschemas may apply (the schema walked with
the keys and indices written so far: properties, patternProperties, additionalProperties, prefixItems / items /
additionalItems, through $ref, allOf, anyOf, oneOf, if/then/else); where one of them carries the mark it refuses any
token that would complete an item JSON-equal to an earlier item of that array (1 == 1.0, objects unordered, strings
compared after their escapes: jsonschema's equality). An item is complete at its closing quote or bracket, or, a
number or literal, at the first byte after it.

Exact where the subschemas that may apply to an array agree (the usual case: one array at one property). Where an
alternative without uniqueItems may apply to the same array (anyOf [{uniqueItems: true, ...}, {type: array}]),
repeats are refused there too: stricter than the schema, never looser.

Items whose strings are a finite set (an `enum` or `const` of strings on the item schema, met through $ref and
allOf, joined through anyOf/oneOf: _Places.choices, a _Choices) are kept on the values not written yet: in such a
string item a token is allowed only if the item's text so far, extended by the token's bytes, is still a prefix of
an unused value, and the closing quote only on one; once every value is written, no ',' (where the item can be
nothing but one of them). No dead end is reachable there, however long the values (JsonSchemaStore's
github-workflow-template-properties: 865 language names, "Cloud Firestore Security Rules" written, then "Cloud"
led only to a repeat). A set holding a value JSON writes with an escape (a quote, a backslash, a control
character: llguidance accepts several spellings) is left to the general rule. Elsewhere, where the grammar leaves
no way to go on but a repeat (an item's pattern or maxLength forcing its last byte), the mask is empty and the
generation ends with an error naming uniqueItems: never an invalid document. Matcher looks a few tokens ahead for
such corners (grammar._leads_nowhere, from risky()), which finds those a single token would walk into.

Cost: nothing outside the arrays concerned; inside one, a scan of the allowed tokens that can complete an item (in
a string, those holding a quote: 163 of SmolLM2's 49,152) per step. In a string item of a finite set, besides: the
pieces that continue the text so far and the range of values each leads to are found once per prefix and kept
(_Choices.continuations: a few ms for the 865 values at an item's start, the first time); a step then counts the
values written in those ranges (numpy searchsorted: tens of microseconds).
"""
import json
import re
from bisect import bisect_left

import numpy as np

from fastgguf.engine.schema_rewrite import UNIQUE_MARK, _canon, _Doc, _get, _search

__all__ = ["UniqueItems", "TokenBytes", "UNIQUE_MARK", "REPEAT"]

REPEAT = "uniqueItems: the token would repeat an item of an array whose items must be distinct"
_JSON_LINE = re.compile(r"^json_value: %json (\{.*\})$", re.M)
_IN_PLACE = ("allOf", "anyOf", "oneOf")              # lists of subschemas applying to the same instance
_IN_PLACE_ONE = ("if", "then", "else")
_QUOTE, _BACKSLASH = 0x22, 0x5C
_WS = frozenset(b" \t\n\r")
_END = frozenset(b",]}") | _WS                       # what ends a number or literal (and nothing else does)
_MEMO = 4096                                         # child lookups remembered per schema
_PLACES = {}                                         # Grammar.text -> its _Places (shared by its matchers), 32 kept
_STEPS_KEPT = 256                                    # prefixes whose continuing pieces are kept, per _Choices
_DEPTH = 32                                          # $ref / allOf / anyOf levels followed for an item's values
# a frame of the scanner's stack (a list): an open object or array
_ARR, _CANDS, _UNIQUE, _SEEN, _N, _KEY, _START, _ROOTS, _SET = range(9)
# scanner modes: between tokens of JSON, in a string value, in a key, in a number or literal
_OUT, _STR, _KEYSTR, _PRIM = range(4)


class _Places:
    """Which subschemas of a schema may apply at each place of an instance (frozensets of paths into the schema),
    walked one key or index at a time and remembered."""

    def __init__(self, schema):
        self.doc = _Doc(schema)
        self.root = self._close([()])
        self._memo = {}
        self._choices = {}       # (roots, index) -> _Choices or None
        self._sets = {}          # _Values -> its _Choices: one per set, whichever items share it (and its cache)
        self._items = {}         # path -> _Values of the subschema there

    def _close(self, paths):
        """paths and every subschema that applies to the same instance as one of them ($ref, allOf, ...)."""
        out, todo = set(), list(paths)
        while todo:
            p = todo.pop()
            node = _get(self.doc.root, p)
            if p in out or not isinstance(node, dict):
                continue
            out.add(p)
            ref = node.get("$ref")
            if isinstance(ref, str):
                target = self.doc.resolve(ref, self.doc.base_at(p))
                if target is not None:
                    todo.append(target.path)
            for key in _IN_PLACE:
                if isinstance(node.get(key), list):
                    todo.extend(p + (key, str(i)) for i in range(len(node[key])))
            todo.extend(p + (key,) for key in _IN_PLACE_ONE if key in node)
        return frozenset(out)

    def unique(self, cands):
        return any(_get(self.doc.root, p).get(UNIQUE_MARK) is True for p in cands)

    def child(self, cands, step):
        """The places of the value at key `step` (a str) of an object, or at index `step` (an int) of an array:
        (the subschemas reached by the step itself, a tuple; those and all that apply with them, a frozenset)."""
        hit = self._memo.get((cands, step))
        if hit is None:
            paths = []
            for p in cands:
                node = _get(self.doc.root, p)
                paths += _index_paths(node, p, step) if isinstance(step, int) else _key_paths(node, p, step)
            hit = tuple(paths), self._close(paths)
            if len(self._memo) >= _MEMO:
                self._memo.clear()
            self._memo[(cands, step)] = hit
        return hit

    def choices(self, roots, i):
        """The _Choices of item i of an array whose schema is at the paths roots (any of them may be the one that
        applies), or None where its string values are not a finite set known here."""
        key = (roots, i)
        if key not in self._choices:
            values = _NOTHING
            for p in roots:
                values = _join(values, self._array(p, i, 0))
            if len(self._choices) >= _MEMO:
                self._choices.clear()
            if roots and values not in self._sets:
                if len(self._sets) >= _MEMO:
                    self._sets.clear()
                self._sets[values] = _Choices.of(values)
            self._choices[key] = self._sets[values] if roots else None
        return self._choices[key]

    def _array(self, p, i, depth):
        """The _Values that array schema p (and what applies with it) allows as its item i."""
        node = _get(self.doc.root, p)
        if node is False:
            return _NOTHING
        if not isinstance(node, dict) or depth > _DEPTH:
            return _ANY
        types = node.get("type")
        if "array" not in ([types] if isinstance(types, str) else types if isinstance(types, list) else ["array"]):
            return _NOTHING
        out, items = _ANY, _index_paths(node, p, i)
        if items:                                  # more than one: each reading of items; any may be the one
            out = _NOTHING
            for q in items:
                out = _join(out, self._item(q, 0))
        return _meet(out, self._parts(node, p, lambda q: self._array(q, i, depth + 1)))

    def _item(self, p, depth):
        """The _Values that subschema p allows (remembered; past _DEPTH levels of $ref, anything)."""
        hit = self._items.get(p)
        if hit is not None:
            return hit
        node = _get(self.doc.root, p)
        if node is False:
            return _NOTHING
        if not isinstance(node, dict) or depth > _DEPTH:
            return _ANY
        out = _ANY
        if isinstance(node.get("enum"), list):
            enum = node["enum"]
            out = _meet(out, (frozenset(v for v in enum if isinstance(v, str)), all(isinstance(v, str) for v in enum)))
        if "const" in node:
            const = node["const"]
            out = _meet(out, (frozenset([const]) if isinstance(const, str) else frozenset(), isinstance(const, str)))
        types = node.get("type")
        types = [types] if isinstance(types, str) else types
        if isinstance(types, list) and "string" not in types:
            out = _meet(out, (frozenset(), False))
        elif isinstance(types, list) and set(types) == {"string"}:
            out = _meet(out, (None, True))
        out = _meet(out, self._parts(node, p, lambda q: self._item(q, depth + 1)))
        if len(self._items) >= _MEMO:
            self._items.clear()
        self._items[p] = out
        return out

    def _parts(self, node, p, values):
        """The meet of values(q) over the subschemas q applying to the instance of node (at path p) with it: its
        $ref target and allOf's all apply; of anyOf's and oneOf's, any one may be the one that does."""
        out = _ANY
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = self.doc.resolve(ref, self.doc.base_at(p))
            if target is not None:
                out = _meet(out, values(target.path))
        if isinstance(node.get("allOf"), list):
            for k in range(len(node["allOf"])):
                out = _meet(out, values(p + ("allOf", str(k))))
        for key in ("anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                either = _NOTHING
                for k in range(len(node[key])):
                    either = _join(either, values(p + (key, str(k))))
                out = _meet(out, either)
        return out


# The values a subschema allows, as far as strings go: (a frozenset of the strings it allows, or None for strings
# not known to be finitely many; whether it allows nothing but strings). Met (allOf) and joined (anyOf) on the
# loose side: never fewer values than the schema allows.
_ANY, _NOTHING = (None, False), (frozenset(), True)


def _meet(a, b):
    strings = b[0] if a[0] is None else a[0] if b[0] is None else a[0] & b[0]
    return strings, a[1] or b[1]


def _join(a, b):
    strings = None if a[0] is None or b[0] is None else a[0] | b[0]
    return strings, a[1] and b[1]


class _Choices:
    """The strings an array's item may be, a finite set, each as the bytes JSON writes between its quotes (as
    llguidance writes an `enum` string: itself, UTF-8, no escapes), sorted for prefix search. `only`: the item can
    be nothing but one of them."""

    @classmethod
    def of(cls, values):
        strings, only = values
        if strings is None:
            return None
        texts = []
        for v in strings:
            text = json.dumps(v, ensure_ascii=False)[1:-1]
            if "\\" in text or "\x7f" in text:  # escaped (a quote, a control character): spellings vary
                return None
            try:
                texts.append((text.encode("utf-8"), v))
            except UnicodeEncodeError:          # a lone surrogate
                return None
        return cls(sorted(texts), only)

    def __init__(self, texts, only):
        self.texts = [t for t, _ in texts]
        self.keys = [("str", v) for _, v in texts]     # each as _canon writes it, for the seen-sets
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.members = frozenset(self.keys)
        self.only = only
        self._steps = {}         # (TokenBytes, prefix) -> the pieces that continue prefix (see continuations)

    def unused(self, prefix, seen):
        """The texts starting with prefix (bytes) whose values are not in seen (the _canon keys of the items
        written so far), in order."""
        i = bisect_left(self.texts, prefix)
        while i < len(self.texts) and self.texts[i].startswith(prefix):
            if self.keys[i] not in seen:
                yield self.texts[i]
            i += 1

    def continuations(self, prefix, seen, tokens):
        """The ids (int64) of the pieces without quotes (tokens: TokenBytes) that continue prefix towards a text
        whose value is not in seen. Per prefix, each piece's range of texts is found once and kept; a step then
        counts the values written in each range (a few numpy searches)."""
        key = (tokens, prefix)
        hit = self._steps.get(key)
        if hit is None:
            hit = self._pieces(prefix, tokens)
            if len(self._steps) >= _STEPS_KEPT:          # the item's start (the costliest) stays
                self._steps = {k: v for k, v in self._steps.items() if not k[1]}
            self._steps[key] = hit
        ids, lo, hi = hit
        used = np.array(sorted(self.index[k] for k in seen if k in self.index), np.int64)
        if not len(used):
            return ids
        return ids[np.searchsorted(used, hi) - np.searchsorted(used, lo) < hi - lo]

    def _pieces(self, prefix, tokens):
        """(ids, lo, hi) (int64 (n,) each): the pieces that continue prefix towards some text, and for each the
        range [lo, hi) of the texts that prefix + piece starts."""
        start, end = self._range(prefix)
        found = {}
        for text in self.texts[start:end]:
            rest = text[len(prefix):]
            for j in range(1, min(len(rest), tokens.longest) + 1):
                piece = rest[:j]
                if piece not in found and piece in tokens.by_piece:
                    found[piece] = self._range(prefix + piece)
        rows = [(t, lo, hi) for piece, (lo, hi) in found.items() for t in tokens.by_piece[piece]]
        ids, lo, hi = np.array(rows, np.int64).reshape(-1, 3).T
        return ids, lo, hi

    def _range(self, prefix):
        """[start, end): the texts that start with prefix (texts are UTF-8: none holds a byte 0xff)."""
        start = bisect_left(self.texts, prefix)
        if not prefix or prefix[-1] == 0xFF:
            return start, len(self.texts) if not prefix else start
        return start, bisect_left(self.texts, prefix[:-1] + bytes([prefix[-1] + 1]), start)

    def spent(self, seen):
        """Whether every value is in seen."""
        return len(seen) >= len(self.members) and self.members.issubset(seen)


def _index_paths(node, p, i):
    """The subschemas of array schema node (at path p) that apply to its item i (every reading of items)."""
    out = []
    for tuple_key, rest_key in (("prefixItems", "items"), ("items", "additionalItems")):
        fixed = node.get(tuple_key)
        if isinstance(fixed, list):
            out.append(p + (tuple_key, str(i)) if i < len(fixed) else p + (rest_key,))
    if isinstance(node.get("items"), dict) and not isinstance(node.get("prefixItems"), list):
        out.append(p + ("items",))
    return out


def _key_paths(node, p, k):
    """The subschemas of object schema node (at path p) that apply to its value at key k."""
    props = node.get("properties")
    out = [p + ("properties", k)] if isinstance(props, dict) and k in props else []
    matched = False
    patterns = node.get("patternProperties")
    for pattern in patterns if isinstance(patterns, dict) else ():
        hit = _search(pattern, k)                 # None: not known here; counted as a match (more places, safe)
        if hit is not False:
            out.append(p + ("patternProperties", pattern))
        matched = matched or hit is True
    if not matched and not (isinstance(props, dict) and k in props):
        out.append(p + ("additionalProperties",))
    return out


class UniqueItems:
    """One sequence's scanner over the JSON being written, with the items of each open array marked unique."""

    @classmethod
    def of(cls, grammar):
        """A fresh UniqueItems for a Grammar whose schema has UNIQUE_MARK, or None."""
        if grammar.kind != "json_schema" or UNIQUE_MARK not in grammar.text:
            return None
        places = _PLACES.get(grammar.text)
        if places is None:
            found = _JSON_LINE.search(grammar.text)
            if found is None:
                return None
            schema = json.loads(found.group(1))
            schema.pop("x-guidance", None)
            places = _Places(schema)
            if len(_PLACES) >= 32:
                _PLACES.clear()
            _PLACES[grammar.text] = places
        return cls(places)

    def __init__(self, places):
        self.places = places
        self.stack = []          # frames, outermost first: [is array, places, unique, seen items, n, key, start,
        #                          the subschemas reached by the step into it, the _Choices of its string item]
        self.mode = _OUT
        self.escaped = False
        self.key_start = 0       # offset in buf of the key string being read
        self.n_unique = 0        # frames on the stack with unique items
        self.buf = bytearray()   # everything written so far

    def copy(self):
        c = self._fork()
        c.stack = [f[:_SEEN] + [set(f[_SEEN])] + f[_SEEN + 1:] for f in self.stack]
        c.buf = bytearray(self.buf)
        return c

    def _fork(self):
        """A copy for trying a token: frames copied, seen-sets and buf shared (a trial never writes them)."""
        c = UniqueItems.__new__(UniqueItems)
        c.places, c.mode, c.escaped = self.places, self.mode, self.escaped
        c.key_start, c.n_unique = self.key_start, self.n_unique
        c.stack = [f[:] for f in self.stack]
        c.buf = self.buf
        return c

    def feed(self, piece):
        """Advance past the bytes of a consumed token. False where it completes a repeat: the scanner stops there,
        spent (the sequence cannot go on; try a token on a copy() to keep going)."""
        return self._scan(piece, True)

    def forbid(self, mask, tokens):
        """Clear in mask ((n_words,) uint32 bits) every token that would complete a repeated item; tokens: the
        vocabulary's TokenBytes. Outside the arrays with unique items, only a token that opens one and holds two
        of its items could. In a string item whose values are a known finite set (_Choices), keep only the tokens
        that go on towards one not written yet: the item's content tokens that continue one, and those that close
        it on one (a quote in the piece)."""
        if not self.n_unique:
            ids = tokens.opening
        else:
            ids = tokens.quoted if self.mode in (_STR, _KEYSTR) else tokens.structural
        bits = np.unpackbits(mask.astype("<u4", copy=False).view(np.uint8), bitorder="little")
        ids = ids[bits[ids] != 0]
        ok = np.fromiter((self._fork()._scan(tokens.pieces[t], False) for t in ids), bool, len(ids))
        choices = self._choices()
        if choices is None:
            for t in ids[~ok]:
                mask[t >> 5] &= ~np.uint32(1 << (t & 31))
            return
        top = self.stack[-1]
        more = choices.continuations(bytes(self.buf[top[_START] + 1:]), top[_SEEN], tokens)
        keep = np.concatenate([ids[ok], more[bits[more] != 0]])
        mask[:] = 0
        np.bitwise_or.at(mask, keep >> 5, np.left_shift(np.uint32(1), (keep & 31).astype(np.uint32)))

    def _choices(self):
        """The _Choices of the string item being written, or None (not in one, or its values are not known)."""
        top = self.stack[-1] if self.stack else None
        if self.mode != _STR or top is None or not top[_ARR] or not top[_UNIQUE]:
            return None
        return top[_SET]

    def risky(self, tokens):
        """The ids after which the string item being written would equal an earlier item of its array: where the
        grammar then forces the string's end (a maxLength, a pattern), they lead nowhere, which Matcher finds by
        looking one token further (grammar._leads_nowhere). Pieces with escapes are not looked at."""
        top = self.stack[-1] if self.stack else None
        if self.mode != _STR or self.escaped or top is None or not top[_ARR] or not top[_UNIQUE]:
            return []
        if top[_SET] is not None:                 # forbid() keeps such an item on its unused values: no dead end
            return []
        try:
            partial = json.loads(bytes(self.buf[top[_START]:]) + b'"')
        except ValueError:                        # ends inside a UTF-8 sequence
            return []
        out = []
        for kind, value in top[_SEEN]:
            if kind == "str" and len(value) > len(partial) and value.startswith(partial):
                out += tokens.by_piece.get(value[len(partial):].encode("utf-8", "surrogatepass"), ())
        return out

    def _scan(self, piece, commit):
        """Run the bytes of piece; False at the first item equal to an earlier one (only where not commit)."""
        base = len(self.buf)
        if commit:
            self.buf += piece
        for i, c in enumerate(piece):
            pos = base + i
            mode = self.mode
            if mode == _STR or mode == _KEYSTR:
                if self.escaped:
                    self.escaped = False
                elif c == _BACKSLASH:
                    self.escaped = True
                elif c == _QUOTE:
                    self.mode = _OUT
                    if mode == _KEYSTR:
                        self.stack[-1][_KEY] = json.loads(self._text(piece, base, self.key_start, pos + 1))
                    elif not self._done(piece, base, pos + 1, commit):
                        return False
                continue
            if mode == _PRIM:
                if c not in _END:
                    continue
                self.mode = _OUT
                if not self._done(piece, base, pos, commit):
                    return False
            if not self._structure(c, pos, piece, base, commit):
                return False
        return self.mode != _STR or self._open(piece, base)

    def _open(self, piece, base):
        """Whether the string being written (the scan has ended in it) may still become a value of its item's
        _Choices not written yet, if it has any."""
        top = self.stack[-1] if self.stack else None
        if top is None or not top[_ARR] or not top[_UNIQUE] or top[_SET] is None:
            return True
        written = self._text(piece, base, top[_START] + 1, base + len(piece))
        return next(top[_SET].unused(written, top[_SEEN]), None) is not None

    def _structure(self, c, pos, piece, base, commit):
        """One byte outside strings and literals."""
        top = self.stack[-1] if self.stack else None
        if c in _WS or c == 0x3A:                                 # whitespace, ':'
            return True
        if c == 0x2C:                                             # ','
            if top is not None and not top[_ARR]:
                top[_KEY] = None
            elif top is not None and top[_UNIQUE]:                # no item may follow once all are written
                choices = self.places.choices(top[_ROOTS], top[_N])
                return choices is None or not choices.only or not choices.spent(top[_SEEN])
            return True
        if c == 0x7D or c == 0x5D:                                # '}' ']': an object or array ends
            if top is not None:
                self.stack.pop()
                self.n_unique -= top[_UNIQUE]
            return self._done(piece, base, pos + 1, commit)
        if c == _QUOTE and top is not None and not top[_ARR] and top[_KEY] is None:
            self.mode, self.key_start = _KEYSTR, pos
            return True
        if top is not None:
            top[_START] = pos
        if c == 0x7B or c == 0x5B:                                # '{' '['
            roots, cands = self._next_places(top)
            unique = c == 0x5B and self.places.unique(cands)
            self.stack.append([c == 0x5B, cands, unique, set(), 0, None, 0, roots, None])
            self.n_unique += unique
        elif c == _QUOTE:
            self.mode = _STR
            if top is not None and top[_UNIQUE]:                  # an item of an array of unique items
                top[_SET] = self.places.choices(top[_ROOTS], top[_N])
        else:
            self.mode = _PRIM
        return True

    def _next_places(self, top):
        """(the subschemas reached by the step into the value starting now, all that apply to it)."""
        if top is None:
            return ((),), self.places.root
        if not top[_CANDS]:
            return (), top[_CANDS]
        return self.places.child(top[_CANDS], top[_N] if top[_ARR] else top[_KEY])

    def _done(self, piece, base, end, commit):
        """A value ended at offset end: an item of the array on top (checked where its items are unique)."""
        top = self.stack[-1] if self.stack else None
        if top is None or not top[_ARR]:
            return True
        top[_N] += 1
        if not top[_UNIQUE]:
            return True
        item = _canon(json.loads(self._text(piece, base, top[_START], end)))
        if item in top[_SEEN]:
            return False
        if item[0] == "str" and top[_SET] is not None and item not in top[_SET].members:
            return False                          # a string its item's known values do not hold
        if commit:
            top[_SEEN].add(item)
        else:
            top[_SEEN] = top[_SEEN] | {item}
        return True

    def _text(self, piece, base, start, end):
        """Bytes [start, end) of what is written, piece being the bytes from offset base on."""
        if end <= len(self.buf):
            return bytes(self.buf[start:end])
        return bytes(self.buf[start:base]) + piece[max(start - base, 0):end - base]


class TokenBytes:
    """A vocabulary's pieces (specials, b"\xff..."-marked, left out), with the ids that can complete an item: in a
    string (a quote in the piece), elsewhere (a quote, ',', ']', '}' or whitespace), and where no array with unique
    items is open (a '[' with a ',' after it: an array opened and two of its items written in one token)."""

    def __init__(self, pieces):
        self.pieces = pieces
        text = [(i, p) for i, p in enumerate(pieces) if p and not p.startswith(b"\xff")]
        self.quoted = np.array([i for i, p in text if b'"' in p], np.int64)
        self.structural = np.array([i for i, p in text if b'"' in p or not _END.isdisjoint(p)], np.int64)
        self.opening = np.array([i for i, p in text if b"[" in p and b"," in p[p.index(b"["):]], np.int64)
        self.by_piece = {}       # piece -> ids, of the pieces that are string content as they are (no escapes)
        for i, p in text:
            if b'"' not in p and b"\\" not in p and min(p) >= 0x20:
                self.by_piece.setdefault(p, []).append(i)
        self.longest = max(map(len, self.by_piece), default=0)
