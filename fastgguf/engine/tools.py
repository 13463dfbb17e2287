"""OpenAI tool calls: request validation, the model's call format, the grammar that constrains it, and the parsers.

Four formats cover the models fastgguf runs; detect_format() picks one from the chat template's source:

    hermes   Qwen 2.5 / 3       text, then <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call> blocks
    llama3   Llama 3.1-3.3      {"name": ..., "parameters": {...}} (optionally "type": "function" first), calls
                                separated by "; "
    mistral  Mistral 7B v0.3,   [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "<9 alphanumerics>"}, ...]
             Nemo, Small
    generic  anything else      the whole reply is JSON: {"tool_calls": [{"name", "arguments"}, ...]} or
                                {"response": "..."}; the prompt describes it (generic_system_prompt)

tool_grammar() writes the constraint as llguidance Lark text (the caller wraps it, e.g. Grammar.lark(text)): a
call's JSON is `%json {...}` built from the tools' parameter schemas, so an unknown tool name or arguments that
break the schema cannot be generated. tool_choice "auto" leaves free text open and switches to the call grammar
at a lazy trigger; "required" allows calls only; a named choice exactly one call of that tool;
parallel_tool_calls=False at most one call; "none" has no grammar.

Parsing re-scans the whole reply each time (ToolCallStream.update): a reply is a prefix of its final self, and every
scan of a prefix is a prefix of the scan of the whole, so the deltas of a stream join to exactly what parse()
returns for the finished text. Text that may be the start of a trigger is held back like a partial stop string.
A call's "arguments" is the model's own JSON text for them (as OpenAI sends it): it can be streamed as it grows.
"""
import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from fastgguf.engine.grammar import compile_source, exact_formats, json_options
from fastgguf.engine.grammar_limits import check_schema
from fastgguf.engine.schema_rewrite import rewrite
from fastgguf.errors import GrammarError

__all__ = ["ToolError", "ToolConfig", "FORMATS", "validate_tools", "detect_format", "tool_grammar",
           "generic_system_prompt", "prepare_tool_history", "parse", "ToolCallStream", "new_call_id"]

FORMATS = ("hermes", "llama3", "mistral", "generic")

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
LLAMA3_TAG = "<|python_tag|>"
LLAMA3_SEP = "; "
MISTRAL_TAG = "[TOOL_CALLS]"
_ARGS_KEY = {"hermes": "arguments", "llama3": "parameters", "mistral": "arguments", "generic": "arguments"}
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")   # OpenAI's rule for function names
_MISTRAL_ID_RE = re.compile(r"^[A-Za-z0-9]{9}$")


class ToolError(ValueError):
    """A bad `tools` / `tool_choice` / `parallel_tool_calls` field; `param` names it (for the HTTP error)."""

    def __init__(self, message, param="tools"):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ToolConfig:
    """A validated tool request. functions: ({"name", "description", "parameters"}, ...) in request order;
    choice: "auto" | "none" | "required" | a function name; parallel: several calls allowed in one reply."""
    functions: tuple
    choice: str = "auto"
    parallel: bool = True

    @property
    def names(self):
        return tuple(f["name"] for f in self.functions)

    @property
    def named(self):
        """The one function a named tool_choice forces, else None."""
        return self.choice if self.choice not in ("auto", "none", "required") else None

    def tools(self):
        """The OpenAI-shaped tool list, as chat templates expect it."""
        return [{"type": "function", "function": dict(f)} for f in self.functions]


def validate_tools(tools, tool_choice=None, parallel_tool_calls=None):
    """Check OpenAI's tools / tool_choice / parallel_tool_calls; a ToolConfig, or None when there are no tools.
    Raises ToolError (a ValueError) with .param set."""
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise ToolError("parallel_tool_calls must be a boolean", "parallel_tool_calls")
    if tools is None or (isinstance(tools, list) and not tools):
        if tool_choice not in (None, "none", "auto"):
            raise ToolError("tool_choice needs tools", "tool_choice")
        return None
    if not isinstance(tools, list):
        raise ToolError("tools must be a list of {'type': 'function', 'function': {...}} objects")
    functions = []
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping) or t.get("type") != "function" or not isinstance(t.get("function"), Mapping):
            raise ToolError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., ...}}}}")
        fn = t["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ToolError(f"tools[{i}].function.name must be 1-64 letters, digits, '_', '.' or '-', got {name!r}")
        if name in (f["name"] for f in functions):
            raise ToolError(f"tools[{i}]: duplicate function name {name!r}")
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise ToolError(f"tools[{i}].function.description must be a string")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, Mapping):
            raise ToolError(f"tools[{i}].function.parameters must be a JSON schema object")
        try:
            check_schema(params)        # the grammar limits, before a template renders it into the prompt
        except GrammarError as e:
            raise ToolError(f"tools[{i}].function.parameters: {str(e).removeprefix('json_schema: ')}") from None
        f = {"name": name}
        if desc is not None:
            f["description"] = desc
        f["parameters"] = json.loads(json.dumps(params))   # a private, plain copy
        functions.append(f)
    names = [f["name"] for f in functions]
    if tool_choice is None:
        choice = "auto"
    elif tool_choice in ("auto", "none", "required"):
        choice = tool_choice
    elif (isinstance(tool_choice, Mapping) and tool_choice.get("type") == "function"
          and isinstance(tool_choice.get("function"), Mapping)):
        choice = tool_choice["function"].get("name")
        if choice not in names:
            raise ToolError(f"tool_choice names function {choice!r}, which is not in tools", "tool_choice")
    else:
        raise ToolError("tool_choice must be 'auto', 'none', 'required' or "
                        "{'type': 'function', 'function': {'name': ...}}", "tool_choice")
    return ToolConfig(tuple(functions), choice, True if parallel_tool_calls is None else parallel_tool_calls)


def detect_format(template_source):
    """The tool-call format a chat template speaks: "hermes", "llama3", "mistral" or "generic"."""
    src = template_source or ""
    if HERMES_OPEN in src:
        return "hermes"
    if "<|start_header_id|>ipython<|end_header_id|>" in src:
        return "llama3"
    if MISTRAL_TAG in src:
        return "mistral"
    return "generic"


# ---------------------------------------------------------------------------------------------------------- prompt

def generic_system_prompt(config):
    """The system text that lists the tools and the generic reply format, for templates that ignore `tools`."""
    lines = ["You can call these functions (JSON schemas of their arguments):"]
    lines += [json.dumps(f, ensure_ascii=False) for f in config.functions]
    call = '{"tool_calls": [{"name": "<function name>", "arguments": {<arguments>}}]}'
    if config.choice == "required" or config.named:
        lines.append(f"Reply with JSON only, in this format: {call}")
    else:
        lines.append(f"Reply with JSON only: to call functions, {call}; to answer directly, "
                     '{"response": "<your answer>"}')
    if not config.parallel:
        lines.append("Call at most one function.")
    return "\n".join(lines)


def _mistral_id(call_id):
    """Mistral's templates demand 9-alphanumeric ids; any other id maps to one, the same one every time."""
    if isinstance(call_id, str) and _MISTRAL_ID_RE.match(call_id):
        return call_id
    return hashlib.sha1(str(call_id).encode()).hexdigest()[:9]


def prepare_tool_history(messages, fmt):
    """Messages as chat templates expect them: role "developer" as "system"; an assistant's tool_calls with their
    arguments as objects (templates `tojson` them; a JSON string would be quoted twice) and content "" rather than
    None; ids kept, except that the mistral format maps them (and tool messages' tool_call_id) to 9 alphanumerics.
    The generic format is for templates that know no tools: a call becomes the assistant's JSON reply (as the model
    wrote it) and tool results a user message (consecutive ones merged, so user/assistant turns still alternate).
    Returns new dicts."""
    if fmt == "generic":
        return _generic_history(messages)
    out = []
    for m in messages:
        m = dict(m)
        if m.get("role") == "developer":
            m["role"] = "system"
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                c = dict(c)
                fn = dict(c.get("function") or {})
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args) if args.strip() else {}
                    except ValueError:
                        pass   # not JSON: the template gets the text as it is
                c["function"] = fn
                c.setdefault("type", "function")
                if fmt == "mistral":
                    c["id"] = _mistral_id(c.get("id"))
                calls.append(c)
            m["tool_calls"] = calls
            if m.get("content") is None:
                m["content"] = ""   # templates test `'</think>' in message.content` (Qwen 3)
        if fmt == "mistral" and m.get("role") == "tool" and "tool_call_id" in m:
            m["tool_call_id"] = _mistral_id(m["tool_call_id"])
        out.append(m)
    return out


def _generic_history(messages):
    out = []
    for m in messages:
        m = dict(m)
        role = m.get("role")
        if role == "developer":
            m["role"] = "system"
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function") or {}
                args = fn.get("arguments")
                try:
                    args = json.loads(args) if isinstance(args, str) else args
                except ValueError:
                    pass
                calls.append({"name": fn.get("name"), "arguments": {} if args in (None, "") else args})
            m = {"role": "assistant", "content": json.dumps({"tool_calls": calls}, ensure_ascii=False)}
        elif role == "tool":
            result = m.get("content")
            text = f"Result of tool call {m.get('tool_call_id', '')}: {result if result is not None else ''}"
            if out and out[-1].get("fg_tool_results"):
                out[-1]["content"] += "\n" + text
                continue
            m = {"role": "user", "content": text, "fg_tool_results": True}
        out.append(m)
    for m in out:
        m.pop("fg_tool_results", None)
    return out


# --------------------------------------------------------------------------------------------------------- grammar

def _rebase_refs(schema, base):
    """A copy of schema with every local "$ref" ("#/...") pointing below `base` (a JSON pointer, "#/$defs/x"), so
    the schema still resolves once it is moved there."""
    if isinstance(schema, Mapping):
        out = {}
        for k, v in schema.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#"):
                out[k] = base + v[1:]
            else:
                out[k] = _rebase_refs(v, base)
        return out
    if isinstance(schema, list):
        return [_rebase_refs(v, base) for v in schema]
    return schema


def _call_schema(fmt, functions):
    """One JSON schema matching one call of any of `functions` in format fmt: each tool's parameters sit in $defs
    (their local $refs rebased), the call is anyOf one object per tool with its name as a const."""
    defs, variants = {}, []
    for i, f in enumerate(functions):
        key = f"fg_tool_{i}"
        # made compilable: exactly, or accepting fewer instances where a oneOf's overlap is excluded in part
        defs[key] = _rebase_refs(rewrite(f["parameters"], narrowed=[]), f"#/$defs/{key}")
        props = {}
        if fmt == "llama3":
            props["type"] = {"const": "function"}
        props["name"] = {"const": f["name"]}
        props[_ARGS_KEY[fmt]] = {"$ref": f"#/$defs/{key}"}
        required = ["name", _ARGS_KEY[fmt]]
        if fmt == "mistral":
            props["id"] = {"type": "string", "pattern": "^[A-Za-z0-9]{9}$"}
            required.append("id")
        variants.append({"type": "object", "properties": props, "required": required,
                         "additionalProperties": False})
    return {"$defs": defs, "anyOf": variants}


def _check_functions(fmt, functions):
    """Each tool's schema alone, within the grammar limits and compiled in the sandbox (grammar.compile_source),
    so the error names the tool llguidance refuses."""
    for f in functions:
        what = f"tools: function {f['name']!r}'s parameters"
        try:
            schema = _call_schema(fmt, [f])
            check_schema(schema)
            compile_source("lark", "start: j\nj: %json " + json.dumps(schema))
        except GrammarError as e:
            msg = re.sub(r"^(lark|json_schema): ", "", str(e))
            raise ToolError(f"{what} cannot be used as a constraint: {msg}") from None


def _lit(s):
    return json.dumps(s)


def _json(schema):
    """A %json body with fastgguf's JSON options (bounded whitespace: a model cannot spin in it until max_tokens)."""
    return json.dumps({**exact_formats(schema), "x-guidance": json_options()}, ensure_ascii=False)


def _calls_array(fmt, functions, many):
    """($defs, schema of a JSON array of calls): one or more calls (at most one unless `many`), each call's schema
    kept in $defs as fg_call (its own $refs already point at the root's $defs)."""
    calls = {"type": "array", "items": {"$ref": "#/$defs/fg_call"}, "minItems": 1}
    if not many:
        calls["maxItems"] = 1
    schema = _call_schema(fmt, functions)
    defs = schema.pop("$defs")
    defs["fg_call"] = schema
    return defs, calls


def tool_grammar(config, fmt, special_ids=None):
    """llguidance Lark text constraining a reply to config's tool choice in format fmt, or None (choice "none").
    special_ids maps a marker ("[TOOL_CALLS]", "<tool_call>", "</tool_call>") to its token id when the vocabulary
    has it as a special (control) token, which text cannot spell: the grammar then names the token (<[id]>).
    Raises ToolError naming a tool whose parameters schema llguidance refuses."""
    if config is None or config.choice == "none":
        return None
    special_ids = special_ids or {}

    def mark(s):
        return f"<[{int(special_ids[s])}]>" if s in special_ids else _lit(s)

    def trigger(m):
        """Free text, then marker m: a special token ends the text by itself; a text marker needs a lazy lexeme
        (the text stops at the first m)."""
        lazy = "" if m.startswith("<[") else "[lazy]"
        return f"trig{lazy}: TEXT {m}\nTEXT: /(.|\\n)*/\n"

    if fmt not in FORMATS:
        raise ValueError(f"unknown tool-call format {fmt!r} (one of {', '.join(FORMATS)})")
    functions = config.functions
    if config.named:
        functions = tuple(f for f in functions if f["name"] == config.named)
    _check_functions(fmt, functions)
    call = _json(_call_schema(fmt, functions))
    many = config.parallel and not config.named
    only_calls = config.choice == "required" or config.named is not None
    if fmt == "generic":
        defs, calls = _calls_array(fmt, functions, many)
        shapes = [{"type": "object", "properties": {"tool_calls": calls}, "required": ["tool_calls"],
                   "additionalProperties": False}]
        if not only_calls:
            shapes.append({"type": "object", "properties": {"response": {"type": "string"}},
                           "required": ["response"], "additionalProperties": False})
        lark = "start: reply\nreply: %json " + _json({"$defs": defs, "anyOf": shapes})
    elif fmt == "mistral":
        defs, items = _calls_array(fmt, functions, many)
        arr = _json({"$defs": defs, **items})
        tag = mark(MISTRAL_TAG)
        if only_calls:
            lark = f"start: {tag} calls\n"
        else:
            lark = "start: TEXT | trig calls\n" + trigger(tag)
        lark += f"calls: %json {arr}\n"
    elif fmt == "hermes":
        opn, cls = mark(HERMES_OPEN), mark(HERMES_CLOSE)
        block = f'{opn} "\\n" call "\\n" {cls}'
        more = f' ("\\n" {block})*' if many else ""
        if only_calls:
            lark = f"start: {block}{more}\n"
        else:
            lark = (f'start: TEXT | trig "\\n" call "\\n" {cls}{more}\n' + trigger(opn))
        lark += f"call: %json {call}\n"
    else:   # llama3: a reply that starts with "{" is a call
        more = f" ({_lit(LLAMA3_SEP)} call)*" if many else ""
        if only_calls:
            lark = f"start: call{more}\n"
        else:
            lark = f"start: TEXT | call{more}\nTEXT: /([^{{ \\t\\n](.|\\n)*)?/\n"
        lark += f"call: %json {call}\n"
    try:
        compile_source("lark", lark)
    except GrammarError as e:
        raise ToolError(f"tools cannot be used as a constraint: {str(e).removeprefix('lark: ')}") from None
    return lark


# ---------------------------------------------------------------------------------------------------------- parsing

def new_call_id():
    return "call_" + uuid.uuid4().hex[:24]


class _Bad(Exception):
    """The text cannot be what the scanner expected."""


class _Incomplete(Exception):
    """The text ends before the scanned item does."""


def _ws(text, i):
    n = len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    return i


def _string_end(text, i):
    """Index just past the JSON string starting at text[i] == '"'."""
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
        elif c == '"':
            return j + 1
        elif c < " ":
            raise _Bad("control character in a string")
        else:
            j += 1
    raise _Incomplete


def _value_end(text, i):
    """Index just past the JSON value starting at text[i] (checked with json.loads once complete)."""
    n = len(text)
    if i >= n:
        raise _Incomplete
    c = text[i]
    if c == '"':
        end = _string_end(text, i)
    elif c in "{[":
        depth, j = 0, i
        while True:
            if j >= n:
                raise _Incomplete
            c = text[j]
            if c == '"':
                j = _string_end(text, j)
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    end = j + 1
                    break
            j += 1
    else:   # a number or a literal: ends at the first character that cannot continue it
        j = i
        while j < n and (text[j].isalnum() or text[j] in "+-."):
            j += 1
        if j == n:
            raise _Incomplete
        end = j
    try:
        json.loads(text[i:end])
    except ValueError:
        raise _Bad("not JSON") from None
    return end


def _expect(text, i, s):
    """Index past literal s at text[i]; _Incomplete when the text ends inside it, _Bad when it differs."""
    part = text[i:i + len(s)]
    if part == s:
        return i + len(s)
    if s.startswith(part):
        raise _Incomplete
    raise _Bad(f"expected {s!r}")


class _Call:
    """One call as scanned so far: name (None until its string is complete) and its arguments' text so far."""
    __slots__ = ("name", "args")

    def __init__(self):
        self.name, self.args = None, ""


def _scan_call(text, i, args_key, calls):
    """Scan the call object at text[i] ('{'), appending a _Call to calls once it opens (so a partial call is kept
    when the text ends); returns the index past its '}'. The arguments' text grows as the text does."""
    i = _expect(text, i, "{")
    call = _Call()
    calls.append(call)
    i = _ws(text, i)
    if i < len(text) and text[i] == "}":
        call.args = "{}"
        return i + 1
    while True:
        if i >= len(text):
            raise _Incomplete
        if text[i] != '"':
            raise _Bad("expected a key")
        end = _string_end(text, i)
        key = json.loads(text[i:end])
        i = _expect(text, _ws(text, end), ":")
        i = _ws(text, i)
        if i >= len(text):
            raise _Incomplete
        if key == "name":
            if text[i] != '"':
                raise _Bad("name must be a string")
            end = _string_end(text, i)
            call.name = json.loads(text[i:end])
        elif key in (args_key, "arguments", "parameters"):
            try:
                end = _value_end(text, i)
            except _Incomplete:
                call.args = text[i:]
                raise
            call.args = text[i:end]
        else:
            end = _value_end(text, i)
        i = _ws(text, end)
        if i >= len(text):
            raise _Incomplete
        if text[i] == "}":
            if not call.args:
                call.args = "{}"
            return i + 1
        i = _ws(text, _expect(text, i, ","))


def _array_of_calls(text, i, args_key, calls):
    """Scan '[' call (',' call)* ']' at text[i]; returns the index past ']'."""
    i = _ws(text, _expect(text, i, "["))
    while True:
        i = _ws(text, _scan_call(text, i, args_key, calls))
        if i >= len(text):
            raise _Incomplete
        if text[i] == "]":
            return i + 1
        i = _ws(text, _expect(text, i, ","))


def _held(text, trigger):
    """How many trailing characters of text could be the start of trigger (held back until decided)."""
    for k in range(min(len(trigger) - 1, len(text)), 0, -1):
        if trigger.startswith(text[-k:]):
            return k
    return 0


def _json_string_prefix(text, i):
    """The decoded characters of the JSON string opened at text[i] == '"', as far as they are complete."""
    j, n = i + 1, len(text)
    while j < n:
        c = text[j]
        if c == '"':
            break
        if c == "\\":
            need = 6 if text[j + 1:j + 2] == "u" else 2
            if j + need > n:
                break
            if need == 6 and 0xD800 <= int(text[j + 2:j + 6], 16) < 0xDC00:   # a surrogate pair: both halves
                if j + 12 > n:
                    break
                need = 12
            j += need
        else:
            j += 1
    try:
        return json.loads('"' + text[i + 1:j] + '"')
    except ValueError:
        raise _Bad("bad string") from None


def _scan(fmt, text, final):
    """(content, [_Call]) for text as far as it is decided: the scan of a prefix of a reply is always a prefix of
    the scan of the whole. Before final, text that may begin a trigger is held back."""
    calls = []
    if fmt == "hermes":
        parts, pos = [], 0
        while True:
            k = text.find(HERMES_OPEN, pos)
            if k < 0:
                rest = text[pos:]
                parts.append(rest if final else rest[:len(rest) - _held(rest, HERMES_OPEN)])
                break
            parts.append(text[pos:k])
            n_before = len(calls)
            try:
                i = _ws(text, _scan_call(text, _ws(text, k + len(HERMES_OPEN)), "arguments", calls))
                pos = _expect(text, i, HERMES_CLOSE)
            except _Incomplete:
                break
            except _Bad:
                if len(calls) > n_before and calls[-1].name is not None:
                    break          # a started call stays as it is; the rest is dropped
                del calls[n_before:]
                parts.append(text[k:])   # never a call: it was text
                break
        return "".join(parts), calls
    if fmt == "llama3":
        i = _ws(text, 0)
        if text.startswith(LLAMA3_TAG, i):
            i = _ws(text, i + len(LLAMA3_TAG))
        elif not final and LLAMA3_TAG.startswith(text[i:]):
            return "", calls
        if i >= len(text):
            return (text if final else ""), calls
        if text[i] != "{":
            return text, calls
        try:
            while True:
                i = _ws(text, _scan_call(text, i, "parameters", calls))
                if i < len(text) and text[i] == ";":
                    i = _ws(text, i + 1)
                if i >= len(text) or text[i] != "{":
                    break
        except _Incomplete:
            pass
        except _Bad:
            if not calls or calls[0].name is None:
                return text, []
        return "", calls
    if fmt == "mistral":
        k = text.find(MISTRAL_TAG)
        if k < 0:
            return (text if final else text[:len(text) - _held(text, MISTRAL_TAG)]), calls
        try:
            _array_of_calls(text, _ws(text, k + len(MISTRAL_TAG)), "arguments", calls)
        except (_Incomplete, _Bad):
            pass
        return text[:k], calls
    # generic: the whole reply is a JSON envelope, or plain text when it is not one
    i = _ws(text, 0)
    if i >= len(text):
        return (text if final else ""), calls
    if text[i] != "{":
        return text, calls
    try:
        i = _ws(text, i + 1)
        if i >= len(text):
            raise _Incomplete
        if text[i] != '"':
            raise _Bad("not an envelope")
        end = _string_end(text, i)
        key = json.loads(text[i:end])
        if key not in ("response", "tool_calls"):
            raise _Bad("not an envelope")
        i = _ws(text, _expect(text, _ws(text, end), ":"))
        if key == "response":
            if i >= len(text):
                raise _Incomplete
            if text[i] != '"':
                raise _Bad("response must be a string")
            return _json_string_prefix(text, i), calls
        _array_of_calls(text, i, "arguments", calls)
    except _Incomplete:
        if not calls:
            return (text if final else ""), calls
    except _Bad:
        if not calls:
            return text, []
    return "", calls


def _content(raw, final, has_calls):
    """Content as sent: stripped at both ends (trailing whitespace is held back until something follows it)."""
    text = raw.strip() if final else raw.lstrip()
    if not final:
        text = text.rstrip()
    if final and not text and has_calls:
        return None
    return text


class ToolCallStream:
    """Incremental parse of one choice's reply. update(text) takes the whole text so far and returns
    (content_delta, tool_call_deltas); finish(text) the last ones. Tool-call deltas are OpenAI's streaming shape:
    {"index", "id", "type": "function", "function": {"name", "arguments": ""}} on a call's first fragment, then
    {"index", "function": {"arguments": "<more>"}}. result() is (content, calls) like parse()."""

    def __init__(self, fmt, new_id=new_call_id):
        if fmt not in FORMATS:
            raise ValueError(f"unknown tool-call format {fmt!r} (one of {', '.join(FORMATS)})")
        self.fmt = fmt
        self._new_id = new_id
        self.content = ""
        self.calls = []     # [{"id", "type", "function": {"name", "arguments"}}] as sent so far
        self._final_content = ""

    def update(self, text, final=False):
        raw, scanned = _scan(self.fmt, text, final)
        content = _content(raw, final, any(c.name is not None for c in scanned))
        delta = ""
        if content and content.startswith(self.content):
            delta = content[len(self.content):]
            self.content = content
        self._final_content = content
        out = []
        for index, c in enumerate(scanned):
            if c.name is None:
                break
            if index == len(self.calls):
                self.calls.append({"id": self._new_id(), "type": "function",
                                   "function": {"name": c.name, "arguments": ""}})
                out.append({"index": index, "id": self.calls[index]["id"], "type": "function",
                            "function": {"name": c.name, "arguments": ""}})
            fn = self.calls[index]["function"]
            if len(c.args) > len(fn["arguments"]) and c.args.startswith(fn["arguments"]):
                more = c.args[len(fn["arguments"]):]
                fn["arguments"] = c.args
                out.append({"index": index, "function": {"arguments": more}})
        return delta, out

    def finish(self, text):
        return self.update(text, final=True)

    def result(self):
        content = self._final_content
        if self.calls and not content:
            content = None
        return content, [dict(c, function=dict(c["function"])) for c in self.calls]


def parse(fmt, text, new_id=new_call_id):
    """(content or None, calls) of a finished reply in format fmt; calls are OpenAI dicts
    {"id": "call_<24 hex>", "type": "function", "function": {"name", "arguments": "<JSON text>"}}."""
    stream = ToolCallStream(fmt, new_id)
    stream.finish(text)
    return stream.result()
