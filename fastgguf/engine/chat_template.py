"""The chat template sandbox: jinja2 set up as Hugging Face transformers' `apply_chat_template` does, with budgets,
for templates that come from model files (untrusted code).

The environment is transformers': `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with the
loopcontrols extension, the `{% generation %}` block (a no-op here), the `tojson` filter (json.dumps with
ensure_ascii=False and indent/separators/sort_keys) and the globals `raise_exception(msg)` and `strftime_now(fmt)`.
A template touching unsafe attributes (`__class__`, `__globals__`, ...) or mutating its inputs raises
ChatTemplateError. A render has budgets (RENDER_TIME_LIMIT_S = 1 s; MAX_TEMPLATE_CHARS = 1 MB plus twice the input's
characters for the output and for any value it builds; range() of at most MAX_RANGE items; integers of at most
MAX_INT_BITS bits from * and **): loops, operators, string methods and filters check them before building, and every
overrun or Python error inside the template (RecursionError, OverflowError, TypeError, ...) is raised as
ChatTemplateError.

compile_template(source) compiles a template (the last 16 sources are cached); render(template, variables,
input_chars) renders it under the budgets, the size allowance growing with input_chars (the caller's input, counted
by input_size). fastgguf.engine.chat renders conversations with them.

This module imports jinja2; fastgguf.engine.chat imports it on its first render, so `import fastgguf` does not.
"""
import json
import re
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache, wraps

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.filters import make_attrgetter
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter, SecurityError
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

from fastgguf.errors import ChatTemplateError

__all__ = ["RENDER_TIME_LIMIT_S", "MAX_TEMPLATE_CHARS", "MAX_RANGE", "MAX_INT_BITS", "MAX_JSON_INDENT",
           "compile_template", "render", "input_size"]


# Rendering budgets: a template is untrusted code, so a render is bounded in time and in the size of everything it
# builds. Every overrun raises ChatTemplateError. The size limits grow with the caller's own input (2x its characters),
# so a long conversation still renders; a template cannot build more than that on its own.
RENDER_TIME_LIMIT_S = 1.0        # wall-clock deadline of one render, checked from the sandbox's hooks
MAX_TEMPLATE_CHARS = 1_000_000   # output and any intermediate str/list/... (items), before the input allowance
MAX_RANGE = 100_000              # range() length
MAX_INT_BITS = 1 << 16           # integers built by * and **
MAX_JSON_INDENT = 64             # tojson(indent=...)

_budget = threading.local()      # per render: .deadline (monotonic s), .limit (items); unset outside render


def _limit():
    return getattr(_budget, "limit", MAX_TEMPLATE_CHARS)


def _tick():
    deadline = getattr(_budget, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise ChatTemplateError(f"chat template exceeded its time budget ({RENDER_TIME_LIMIT_S:g} s)")


def _too_big(n, what="value"):
    raise ChatTemplateError(f"chat template would build a {what} of about {n} items (limit {_limit()})")


def _check_est(n, what="value"):
    if n > _limit():
        _too_big(n, what)


def _check_size(x, what="value"):
    if isinstance(x, (str, bytes, bytearray, list, tuple, dict, set, frozenset)) and len(x) > _limit():
        _too_big(len(x), what)
    return x


def _seq_len(x):
    return len(x) if isinstance(x, (str, bytes, bytearray, list, tuple)) else None


def _deep_len(x, budget=None):
    """About len(str(x)), found without building it: lists, dicts, namespaces, ... are walked (each container
    counted per reference, so shared references count as often as str() would print them); stops once over
    budget (default: the size limit). A template can nest references to one big string; this bounds its text."""
    if isinstance(x, (str, bytes)):
        return len(x)
    budget = _limit() if budget is None else budget
    total = 0
    stack = [x]
    while stack:
        v = stack.pop()
        if isinstance(v, (str, bytes, bytearray)):
            total += len(v) + 2
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += 2 + 2 * len(v)
            if total <= budget:
                stack.extend(v)
        elif isinstance(v, Mapping):
            total += 2 + 4 * len(v)
            if total <= budget:
                stack.extend(v.keys())
                stack.extend(v.values())
        elif isinstance(v, Namespace):
            total += 16
            stack.append(object.__getattribute__(v, "_Namespace__attrs"))
        elif isinstance(v, int):
            total += v.bit_length() // 3 + 2
        else:
            total += 32
        if total > budget:
            break
    return total


def _str_len(x):
    return len(x) if isinstance(x, (str, bytes)) else _deep_len(x)


def _finalize(value):
    """environment.finalize: every printed value ({{ x }}) is bounded before str() builds its text."""
    if not isinstance(value, (str, int, float, bool, type(None))):
        _check_est(_deep_len(value), "printed value")
    return value


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)


def _check_percent(fmt, args):
    """'fmt % args' with fmt a string: bound its result before it is built (widths, '%s' repeated over big args)."""
    if not isinstance(fmt, (str, bytes)):
        return
    if isinstance(fmt, bytes):
        fmt = fmt.decode("latin-1")
    n = 0
    widest = 0
    for m in _PERCENT_SPEC.finditer(fmt):
        width, prec, conv = m.group(1), m.group(2), m.group(3)
        if conv == "%":
            continue
        if width == "*" or prec == "*":
            raise ChatTemplateError("chat template: '*' widths in % formatting are not allowed")
        widest = max(widest, int(width or 0), int(prec or 0))
        n += 1
    if widest > _limit():
        _too_big(widest, "formatted field")
    if n:
        vals = args.values() if isinstance(args, Mapping) else (args if isinstance(args, tuple) else (args,))
        biggest = max((_deep_len(v) for v in vals), default=0)
        _check_est(len(fmt) + n * (widest + biggest + 32), "formatted string")


def _checked_binop(op, fn, left, right):
    _tick()
    if op == "*":
        if isinstance(right, int) and _seq_len(left) is not None:
            _check_est(_deep_len(left) * max(right, 0), "repeated sequence")
        elif isinstance(left, int) and _seq_len(right) is not None:
            _check_est(_deep_len(right) * max(left, 0), "repeated sequence")
        elif isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise ChatTemplateError(f"chat template: integer product too large (limit {MAX_INT_BITS} bits)")
    elif op == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            if left.bit_length() * right > MAX_INT_BITS:
                raise ChatTemplateError(f"chat template: integer power too large (limit {MAX_INT_BITS} bits)")
    elif op == "+":
        a, b = _seq_len(left), _seq_len(right)
        if a is not None and b is not None:
            _check_est(a + b, "concatenation")
    elif op == "%":
        _check_percent(left, right)
    return _check_size(fn(left, right))


def _checked_join(sep, items):
    items = list(items)
    total = len(sep) * len(items)
    _check_est(total, "joined string")
    for x in items:
        total += _str_len(x)
        _check_est(total, "joined string")
    return items


def _check_str_method(obj, args, kwargs):
    """Bound the result of str/bytes methods that can grow their string (center, replace, join, ...)."""
    fn = obj.__name__
    s = obj.__self__
    if fn in ("center", "ljust", "rjust", "zfill"):
        width = args[0] if args else kwargs.get("width", 0)
        if isinstance(width, int):
            _check_est(width, "padded string")
    elif fn == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(tab, int):
            _check_est(len(s) + s.count("\t" if isinstance(s, str) else b"\t") * max(tab, 0), "expanded string")
    elif fn == "replace" and len(args) >= 2 and isinstance(args[0], type(s)) and isinstance(args[1], type(s)):
        old, new = args[0], args[1]
        n = s.count(old) if old else len(s) + 1
        count = args[2] if len(args) > 2 else kwargs.get("count", -1)
        if isinstance(count, int) and count >= 0:
            n = min(n, count)
        _check_est(len(s) + n * max(0, len(new) - len(old)), "replaced string")
    elif fn == "join" and args:
        items = _checked_join(s, args[0])
        return (items,) + tuple(args[1:])
    elif fn == "translate" and isinstance(s, str):
        table = args[0] if args else None
        if isinstance(table, Mapping):
            widest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
            _check_est(len(s) * max(widest, 1), "translated string")
    return args


def _bounded_concat(parts):
    """environment.concat: joins template output (the whole render, blocks, macros) within the size limit."""
    buf = []
    total = 0
    limit = _limit()
    for part in parts:
        _tick()
        total += len(part)
        if total > limit:
            raise ChatTemplateError(f"chat template output exceeds {limit} characters")
        buf.append(part)
    return "".join(buf)


def _bounded_range(*args):
    try:
        r = range(*args)
        n = len(r)
    except OverflowError:
        n = MAX_RANGE + 1
    if n > MAX_RANGE:
        raise ChatTemplateError(f"chat template: range() of more than {MAX_RANGE} items")
    return r


def input_size(x, depth=0):
    """Characters in the caller's input (messages, tools, ...), for the size allowance."""
    if isinstance(x, (str, bytes)):
        return len(x)
    if depth > 32:
        return 0
    if isinstance(x, Mapping):
        return sum(input_size(k, depth + 1) + input_size(v, depth + 1) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return sum(input_size(v, depth + 1) for v in x)
    return 0


_GROWING_METHODS = frozenset(["center", "ljust", "rjust", "zfill", "expandtabs", "replace", "join", "translate"])


def _short(e, n=300):
    try:
        text = str(e)
    except Exception:
        text = "?"
    return text if len(text) <= n else text[:n] + "..."


def _raise_exception(message):
    raise ChatTemplateError(f"chat template error: {message}")


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    if indent is None:
        return _check_size(json.dumps(x, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys),
                           "JSON string")
    if (len(indent) if isinstance(indent, str) else indent) > MAX_JSON_INDENT:
        raise ChatTemplateError(f"chat template: tojson indent larger than {MAX_JSON_INDENT}")
    enc = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    return _bounded_concat(enc.iterencode(x))   # the same text as json.dumps, stopped at the size limit


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


class _GenerationBlock(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %} (marks assistant text): rendered as its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


class _BudgetTransformer(NodeTransformer):
    """Every for-loop iterates through _fg_iter (deadline per item); every `~` goes through _fg_concat (size)."""

    def visit_For(self, node):
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, "_fg_iter", [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node):
        self.generic_visit(node)
        return nodes.Filter(nodes.List(node.nodes, lineno=node.lineno), "_fg_concat", [], [], None, None,
                            lineno=node.lineno)


class _BoundedFormatter(SandboxedFormatter):
    """str.format in the sandbox, with field widths and the total length bounded."""

    def vformat(self, format_string, args, kwargs):
        self._fg_total = len(format_string)
        return super().vformat(format_string, args, kwargs)

    def format_field(self, value, format_spec):
        _tick()
        widest = max((int(d) for d in re.findall(r"\d+", format_spec)), default=0)
        _check_est(widest, "formatted field")
        _check_est(_deep_len(value), "formatted field")
        out = super().format_field(value, format_spec)
        self._fg_total += len(out)
        _check_est(self._fg_total, "formatted string")
        return out


class _StrictSandbox(ImmutableSandboxedEnvironment):
    """Any unsafe attribute access raises at once (jinja2 would print it as an empty string). Operators, calls,
    attribute lookups and loop iterations check the render's time and size budgets."""
    intercepted_binops = frozenset(["+", "*", "**", "%"])

    def unsafe_undefined(self, obj, attribute):
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe.")

    def _parse(self, source, name, filename):
        tree = _BudgetTransformer().visit(super()._parse(source, name, filename))
        tree.set_environment(self)
        return tree

    def call_binop(self, context, operator, left, right):
        return _checked_binop(operator, self.binop_table[operator], left, right)

    def getattr(self, obj, attribute):
        _tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj, argument):
        _tick()
        return super().getitem(obj, argument)

    def wrap_str_format(self, value):
        wrapper = super().wrap_str_format(value)
        if wrapper is None or type(value.__self__) is not str:
            return wrapper
        f_self, is_map = value.__self__, value.__name__ == "format_map"

        def bounded(*args, **kwargs):
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one positional argument")
                args, kwargs = (), args[0]
            return _BoundedFormatter(self).vformat(f_self, args, kwargs)
        return bounded

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's signature)
        _tick()
        if (getattr(__obj, "__name__", None) in _GROWING_METHODS
                and isinstance(getattr(__obj, "__self__", None), (str, bytes))):
            args = _check_str_method(__obj, args, kwargs)
        return _check_size(super().call(__context, __obj, *args, **kwargs))


def _bounded_lipsum(lipsum):
    """jinja2's lipsum() global with the deadline and its arguments and result bounded."""
    @wraps(lipsum)
    def bounded_lipsum(n=5, html=True, min=20, max=100):  # noqa: A002 (jinja2's names)
        _tick()
        for v in (n, min, max):
            if not isinstance(v, int) or v > MAX_RANGE:
                raise ChatTemplateError(f"chat template: lipsum() arguments must be integers up to {MAX_RANGE}")
        _check_est(n * max * 16, "lorem ipsum")
        return lipsum(n, html, min, max)
    return bounded_lipsum


# filters that turn their arguments into text: the arguments' printed size is bounded first
_STRINGIFYING = {"string", "pprint", "e", "escape", "forceescape", "upper", "lower", "title", "capitalize", "trim",
                 "striptags", "wordcount", "center", "indent", "wordwrap", "replace", "truncate", "urlize",
                 "format", "xmlattr", "safe", "list", "reverse", "unique", "int", "float"}


def _bounded_filter(f, pre=None, stringify=False):
    """A filter with the deadline, an optional pre-check of its arguments, and a size check of its result;
    a filter that turns its arguments into text first bounds their printed size."""
    @wraps(f)
    def g(*args, **kwargs):
        _tick()
        if stringify:
            for a in args:
                if not isinstance(a, (str, int, float, bool, type(None))):
                    _check_est(_deep_len(a), "value turned into text")
        if pre is not None:
            pre(*args, **kwargs)
        return _check_size(f(*args, **kwargs))
    return g


def _arg(args, kwargs, i, name, default):
    return args[i] if len(args) > i else kwargs.get(name, default)


def _pre_ints(*args, **kwargs):  # center(width), batch(linecount), slice(slices), ...: no huge counts
    for v in list(args[1:]) + list(kwargs.values()):
        if isinstance(v, int) and not isinstance(v, bool):
            _check_est(v, "padded or batched value")


def _pre_indent(s, *args, **kwargs):
    w = _arg(args, kwargs, 0, "width", 4)
    w = len(w) if isinstance(w, str) else w if isinstance(w, int) else 0
    _check_est(len(str(s)) + (str(s).count("\n") + 1) * max(w, 0), "indented string")


def _pre_wordwrap(environment, s, *args, **kwargs):
    width = _arg(args, kwargs, 0, "width", 79)
    wrap = _arg(args, kwargs, 2, "wrapstring", None) or "\n"
    n = len(str(s))
    _check_est(n + (2 * n // max(width if isinstance(width, int) else 1, 1) + 2) * len(str(wrap)),
               "wrapped string")


def _pre_replace(eval_ctx, s, old, new, count=None):
    s, old, new = str(s), str(old), str(new)
    n = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    _check_est(len(s) + n * max(0, len(new) - len(old)), "replaced string")


def _pre_format(value, *args, **kwargs):
    _check_percent(str(value), kwargs or args)


def _pre_urlize(eval_ctx, value, *args, **kwargs):
    extra = sum(len(str(v)) for v in list(args) + list(kwargs.values()) if isinstance(v, str))
    n = len(str(value))
    _check_est(n + (n // 4 + 1) * (64 + extra), "urlized string")


_PRE_CHECKS = (("center", _pre_ints), ("batch", _pre_ints), ("slice", _pre_ints), ("truncate", _pre_ints),
               ("indent", _pre_indent), ("wordwrap", _pre_wordwrap), ("replace", _pre_replace),
               ("format", _pre_format), ("urlize", _pre_urlize))


def _bound_filters(filters):
    """Wrap every filter of a new environment in place (_bounded_filter); those that can grow their result get a
    pre-check of their arguments, join and sum are rewritten to bound each step, tojson is _tojson."""
    orig_join, orig_sum = filters["join"], filters["sum"]

    @wraps(orig_join)
    def join(eval_ctx, value, d="", attribute=None):
        _tick()
        if attribute is not None:
            value = map(make_attrgetter(eval_ctx.environment, attribute), value)
        return orig_join(eval_ctx, _checked_join(str(d), value), d)

    @wraps(orig_sum)
    def sum_(environment, iterable, attribute=None, start=0):
        if isinstance(start, str):
            raise TypeError("sum() can't sum strings")
        if attribute is not None:
            iterable = map(make_attrgetter(environment, attribute), iterable)
        total = start
        for x in iterable:
            total = _checked_binop("+", environment.binop_table["+"], total, x)
        return total

    for name, f in list(filters.items()):
        filters[name] = _bounded_filter(f, stringify=name in _STRINGIFYING)
    for name, pre in _PRE_CHECKS:
        filters[name] = _bounded_filter(filters[name].__wrapped__, pre, stringify=True)
    filters["join"], filters["sum"] = join, sum_
    filters["tojson"] = _bounded_filter(_tojson, stringify=True)


@jinja2.pass_context  # not folded at compile time
def _fg_iter(context, iterable):
    for x in iterable:
        _tick()
        yield x


@jinja2.pass_context
def _fg_concat(context, parts):
    return "".join(map(str, _checked_join("", parts)))


def _environment():
    """A new _StrictSandbox as transformers sets up its environment, with every output, global and filter bounded."""
    env = _StrictSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols])
    env.concat = _bounded_concat
    env.finalize = _finalize
    env.globals["range"] = _bounded_range
    env.globals["lipsum"] = _bounded_lipsum(env.globals["lipsum"])
    _bound_filters(env.filters)
    env.filters["_fg_iter"], env.filters["_fg_concat"] = _fg_iter, _fg_concat
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=16)
def compile_template(template):
    """The jinja2 Template of a template source, in a new sandbox environment; a syntax error, or any error while
    compiling (RecursionError on deep nesting, ...), is a ChatTemplateError."""
    env = _environment()
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template syntax error (line {e.lineno}): {e.message}") from None
    except ChatTemplateError:
        raise
    except Exception as e:  # RecursionError (deep nesting), MemoryError, ...
        raise ChatTemplateError(f"chat template could not be compiled: {type(e).__name__}: {_short(e)}") from None


def render(template, variables, input_chars=0):
    """Text of a compiled template (compile_template) rendered with variables ({name: value}) under the budgets: the
    size limit is MAX_TEMPLATE_CHARS plus twice input_chars (the caller's input, see input_size). Every failure,
    the sandbox's refusals included, is a ChatTemplateError."""
    saved = getattr(_budget, "deadline", None), getattr(_budget, "limit", None)
    _budget.limit = MAX_TEMPLATE_CHARS + 2 * input_chars
    _budget.deadline = time.monotonic() + RENDER_TIME_LIMIT_S
    try:
        return _bounded_concat(template.generate(**variables))
    except SecurityError as e:
        raise ChatTemplateError(f"chat template rejected by the sandbox (unsafe operation): {e}") from None
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {_short(e)}") from None
    except Exception as e:  # RecursionError, OverflowError, MemoryError, TypeError, ZeroDivisionError, ...
        raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {_short(e)}") from None
    finally:
        _budget.deadline, _budget.limit = saved
        if saved[1] is None:
            del _budget.limit
