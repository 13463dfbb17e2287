"""What a grammar may be before llguidance sees it: static limits, checked in linear time, each refusal a GrammarError
naming the limit; and llama.cpp's GBNF converted to llguidance's Lark in linear time.

llguidance's compiler recurses once per nested subschema / referenced rule on the native stack (a 1,000-link `$ref`
chain overflowed the 8 MiB main thread; 5,000 chained Lark rules too), and llguidance.gbnf_to_lark's resolve is
quadratic in the rule count (2,500 chained rules: 4 CPU-s). So, before compiling:

| limit | value | measured wall (the margin) |
|---|---|---|
| MAX_SCHEMA_BYTES: a schema's JSON | 4 MiB | JSONSchemaBench's largest real schema: 1.3 MB |
| MAX_GRAMMAR_BYTES: GBNF / Lark / regex | 1 MiB | |
| MAX_DEPTH: subschemas nested, `$ref`s followed; | 500 | real schemas: at most 41; a crash from ~1,800 (900 |
|   GBNF rule references | | links) / 5,000 rules on 8 MiB; the worker's job stack is 16 MiB, the compile's 256 |
| MAX_RULES: GBNF rules | 10,000 | |
| MAX_EXPANDED: GBNF symbols, `x{n,m}` expanded | 40,000 | `"a"{60000}` fails at its first token (llguidance's |
|   | | 50,000 Earley items per step) |

A grammar that can produce no text at all (a `$ref` cycle that never reaches a value, `a -> b -> a`; a GBNF root
whose every alternative recurses forever) is refused too: llguidance would compile it and fail at the first tokens.
Productivity is a least fixpoint over an AND/OR graph (Horn propagation, linear).
"""
import json
import re
from collections.abc import Mapping

from fastgguf.errors import GrammarError

__all__ = ["SUB", "SUB_LIST", "SUB_DICT", "MAX_SCHEMA_BYTES", "MAX_GRAMMAR_BYTES", "MAX_DEPTH", "MAX_RULES",
           "MAX_EXPANDED", "check_schema", "check_text", "gbnf_to_lark"]

MAX_SCHEMA_BYTES = 4 << 20
MAX_GRAMMAR_BYTES = 1 << 20
MAX_DEPTH = 500
MAX_RULES = 10_000
MAX_EXPANDED = 40_000
_CAMEL = re.compile(r"([a-z])([A-Z])")    # gbnf_to_lark's fooBar -> foo_bar

# keywords whose value is a subschema, a list of them, or a dict name -> subschema
SUB = ("items", "additionalProperties", "not", "contains", "propertyNames", "additionalItems", "unevaluatedItems",
       "unevaluatedProperties", "if", "then", "else")
SUB_LIST = ("anyOf", "allOf", "oneOf", "prefixItems", "items")
SUB_DICT = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def check_text(kind, text):
    """A GBNF / Lark / regex text within MAX_GRAMMAR_BYTES (GrammarError otherwise)."""
    n = len(text.encode("utf-8", "surrogatepass"))
    if n > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"{kind}: the grammar is {n} bytes, over the limit of {MAX_GRAMMAR_BYTES}")


# -- JSON schemas ---------------------------------------------------------------------------------------------------

def _pointer(root, ref):
    """The subschema a local `$ref` ("#", "#/$defs/a", "#/properties/x/items/0") names, or None."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node if isinstance(node, (Mapping, bool)) else None


def _children(node):
    """The direct subschemas of a schema dict (a $ref's target is followed separately)."""
    for k in SUB:
        v = node.get(k)
        if isinstance(v, (Mapping, bool)):
            yield v
    for k in SUB_LIST:
        v = node.get(k)
        if isinstance(v, list):
            yield from (s for s in v if isinstance(s, (Mapping, bool)))
    for k in SUB_DICT:
        v = node.get(k)
        if isinstance(v, Mapping):
            yield from (s for s in v.values() if isinstance(s, (Mapping, bool)))


def _longest(root, succ, key=id):
    """The longest chain of nested nodes from root (succ(node) -> its successors), a cycle cut where it closes:
    iterative (no Python recursion), each node expanded once (memo by key(node))."""
    memo, active = {}, {key(root)}
    stack = [[root, iter(succ(root)), 0]]
    while stack:
        top = stack[-1]
        for child in top[1]:
            k = key(child)
            if k in memo:
                top[2] = max(top[2], memo[k])
            elif k not in active:
                active.add(k)
                stack.append([child, iter(succ(child)), 0])
                break
        else:
            stack.pop()
            k = key(top[0])
            active.discard(k)
            memo[k] = top[2] + 1
            if stack:
                stack[-1][2] = max(stack[-1][2], memo[k])
    return memo[key(root)]


class _Horn:
    """An AND/OR graph's least fixpoint: which nodes can be satisfied (here: produce at least one document/text).
    AND of nothing is true, OR of nothing false."""

    def __init__(self):
        self.kind, self.kids = [], []

    def node(self, kind, kids=()):
        self.kind.append(kind)
        self.kids.append(list(kids))
        return len(self.kind) - 1

    def solve(self):
        n = len(self.kind)
        need = [len(k) if kind == "and" else 1 for kind, k in zip(self.kind, self.kids)]
        parents = [[] for _ in range(n)]
        for p, kids in enumerate(self.kids):
            for c in kids:
                parents[c].append(p)
        done = [False] * n
        todo = [i for i in range(n) if self.kind[i] == "and" and not self.kids[i]]
        while todo:
            j = todo.pop()
            if done[j]:
                continue
            done[j] = True
            for p in parents[j]:
                need[p] -= 1
                if need[p] <= 0 and not done[p]:
                    todo.append(p)
        return done


def _schema_graph(root):
    """The schema's AND/OR graph: a schema needs its $ref target, allOf branches, one anyOf/oneOf branch and, when
    its type is object (array) only, each required property's subschema (its first minItems items); everything
    else can be left out of a document. Conservative: what it cannot follow counts as satisfiable."""
    g, ids, todo = _Horn(), {}, [root]

    def nid(s):
        if id(s) not in ids:
            ids[id(s)] = g.node("and")
            todo.append(s)
        return ids[id(s)]

    ids[id(root)] = g.node("and")
    while todo:
        s = todo.pop()
        i = ids[id(s)]
        if s is False:
            g.kind[i] = "or"
            continue
        if not isinstance(s, Mapping):
            continue
        kids = g.kids[i]
        target = _pointer(root, s.get("$ref"))
        if target is not None:
            kids.append(nid(target))
        kids += [nid(b) for b in s.get("allOf", ()) if isinstance(b, (Mapping, bool))]
        for k in ("anyOf", "oneOf"):
            if isinstance(s.get(k), list):
                kids.append(g.node("or", [nid(b) for b in s[k] if isinstance(b, (Mapping, bool))]))
        if _only(s, "object"):       # required binds objects only: a schema that allows other types is met by them
            kids += _required(s, nid)
        if _only(s, "array"):
            kids += _first_items(s, nid)
    return g


def _only(s, kind):
    """The schema allows values of this JSON type only."""
    t = s.get("type")
    return t == kind or t == [kind]


def _required(s, nid):
    """The subschemas of an object schema's required properties."""
    kids = []
    props = s.get("properties") if isinstance(s.get("properties"), Mapping) else {}
    extra = s.get("additionalProperties", True)
    if isinstance(s.get("patternProperties"), Mapping) and s["patternProperties"]:
        extra = True        # a required name outside properties may match a pattern: not followed
    for name in s.get("required", ()) if isinstance(s.get("required"), list) else ():
        sub = props.get(name, extra) if isinstance(name, str) else True
        if isinstance(sub, (Mapping, bool)):
            kids.append(nid(sub))
    return kids


def _first_items(s, nid):
    """The item schemas an array must hold (its first minItems)."""
    n = s.get("minItems", 0)
    if not isinstance(n, int) or n < 1:
        return []
    prefix = [p for p in s.get("prefixItems", ()) if isinstance(p, (Mapping, bool))] \
        if isinstance(s.get("prefixItems"), list) else []
    out = [nid(p) for p in prefix[:n]]
    items = s.get("items", True)
    if n > len(prefix) and isinstance(items, (Mapping, bool)):
        out.append(nid(items))
    return out


def check_schema(schema):
    """A JSON schema (a dict) within the limits, one that can describe at least one document; its JSON text.
    GrammarError naming the limit otherwise."""
    try:
        text = json.dumps(schema, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise GrammarError(f"json_schema is not JSON: {e}") from None
    n = len(text.encode("utf-8", "surrogatepass"))
    if n > MAX_SCHEMA_BYTES:
        raise GrammarError(f"json_schema: the schema is {n} bytes, over the limit of {MAX_SCHEMA_BYTES}")

    def succ(s):
        if not isinstance(s, Mapping):
            return ()
        target = _pointer(schema, s.get("$ref"))
        return [*_children(s), *([target] if target is not None else [])]

    depth = _longest(schema, succ)
    if depth > MAX_DEPTH:
        raise GrammarError(f"json_schema: subschemas nest {depth} deep (following $ref), over the limit of "
                           f"{MAX_DEPTH}")
    if not _schema_graph(schema).solve()[0]:
        raise GrammarError("json_schema: no document can match the schema (a $ref cycle that never reaches a "
                           "value, or a required false subschema)")
    return text


# -- GBNF -----------------------------------------------------------------------------------------------------------

def _parts(node):
    """(kind, children, repeat) of one of llguidance.gbnf_to_lark's AST nodes: how many copies of each child the
    expanded grammar holds, and what producing the node needs ("and": every child, "or": one, "opt": nothing)."""
    name = type(node).__name__
    if name == "SequenceNode":
        return "and", node.nodes, 1
    if name == "AlternativeNode":
        return "or", node.alternatives, 1
    if name == "RepetitionNode":
        return ("and" if node.min_times > 0 else "opt"), [node.node], max(node.min_times, node.max_times or 0, 1)
    if name == "RuleNode":
        return "and", [node.alternatives], 1
    return "and", [], 1


def _check_rules(rules):
    """Rule count, expanded size, reference depth and productivity of parsed GBNF rules (name -> RuleNode, every
    reference resolved)."""
    if len(rules) > MAX_RULES:
        raise GrammarError(f"gbnf: {len(rules)} rules, over the limit of {MAX_RULES}")
    g = _Horn()
    ids = {name: g.node("and") for name in rules}
    refs = {name: [] for name in rules}     # rule -> the rules it references
    size = 0
    for name, rule in rules.items():
        todo = [(rule, ids[name], 1)]       # (AST node, its graph node or None under an optional, copies)
        while todo:
            node, gid, mult = todo.pop()
            if type(node).__name__ == "RuleRefNode":
                refs[name].append(node.name)
                if gid is not None:
                    g.kids[gid].append(ids[node.name])
                continue
            kind, kids, rep = _parts(node)
            size += 0 if kids else mult
            if size > MAX_EXPANDED:
                raise GrammarError(f"gbnf: over {MAX_EXPANDED} symbols once repetitions x{{n,m}} are expanded")
            if gid is not None and kind != "opt":
                g.kind[gid] = kind
            for c in kids:
                cid = g.node("and") if gid is not None and kind != "opt" else None
                if cid is not None:
                    g.kids[gid].append(cid)
                todo.append((c, cid, mult * rep))
    depth = _longest("root", lambda r: refs[r], key=str)
    if depth > MAX_DEPTH:
        raise GrammarError(f"gbnf: rule references nest {depth} deep, over the limit of {MAX_DEPTH}")
    if not g.solve()[ids["root"]]:
        raise GrammarError("gbnf: the root rule cannot produce any text (every alternative recurses forever)")


def _terminal_rules(rules):
    """The rules llguidance.gbnf_to_lark makes terminals (upper-case): the least fixpoint of "not root, and every
    rule it references is terminal", by propagation from the rules that reference none (linear; its own loop
    re-scans every rule per change: quadratic)."""
    refs = {}
    for name, rule in rules.items():
        todo, out = [rule.alternatives], []
        while todo:
            node = todo.pop()
            if type(node).__name__ == "RuleRefNode":
                out.append(node.name)
            else:
                todo += node.children()
        refs[name] = out
    need = {name: len(r) for name, r in refs.items()}
    users = {name: [] for name in rules}
    for name, r in refs.items():
        for t in r:
            users[t].append(name)
    todo = [name for name, n in need.items() if n == 0 and name != "root"]
    terminal = set()
    while todo:
        t = todo.pop()
        terminal.add(t)
        for u in users[t]:
            need[u] -= 1
            if need[u] == 0 and u != "root":
                todo.append(u)
    return terminal


def gbnf_to_lark(text):
    """llama.cpp GBNF -> llguidance Lark, as llguidance.gbnf_to_lark writes it (its parser and AST, the same names
    and output), in linear time, after the limits above. GrammarError for a malformed or oversized grammar."""
    from llguidance import gbnf_to_lark as g2l
    check_text("gbnf", text)
    try:
        rules = g2l.GrammarParser().parse(text)
    except Exception as e:    # noqa: BLE001 - GbnfToLarkError and the parser's other complaints
        raise GrammarError(f"gbnf: {e}") from None
    if "root" not in rules:
        raise GrammarError("gbnf: no 'root' rule")
    for i, r in enumerate(rules.values()):
        r.order = i
        r.alternatives = r.alternatives.simplify()
        todo = [r.alternatives]
        while todo:
            node = todo.pop()
            if type(node).__name__ == "RuleRefNode":
                if node.name not in rules:
                    raise GrammarError(f"gbnf: rule '{node.name}' is not defined")
                node.target = rules[node.name]
            else:
                todo += node.children()
    _check_rules(rules)
    terminal = _terminal_rules(rules)
    current = set(rules)                    # the names taken, as llguidance's resolve renames them one by one
    for r in [rules["root"], *(r for r in rules.values() if r.name != "root")]:
        new = "start" if r.name == "root" else _CAMEL.sub(r"\1_\2", r.name.replace("-", "_")).lower()
        r.rule_is_terminal = r.name in terminal
        new = new.upper() if r.rule_is_terminal else new
        if new != r.name:
            if new in current:
                raise GrammarError(f"gbnf: rule '{new}' already exists")
            current.discard(r.name)
            current.add(new)
            r.name = new
    out, prev_nl = ["%llguidance {}\n\n"], True
    for r in sorted(rules.values(), key=lambda r: r.order):
        s = str(r)
        if not prev_nl and "\n" in s:
            out.append("\n")
        out.append(s + "\n")
        prev_nl = "\n" in s
        if prev_nl:
            out.append("\n")
    return "".join(out)
