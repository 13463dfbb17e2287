"""The chat template sandbox (fastgguf.engine.chat_template): templates are untrusted code, so unsafe constructs are
refused, every render is bounded in time and memory, and every failure is a ChatTemplateError; transformers'
environment (filters, globals, extensions) is there for the templates that need it."""
import json
import time
import tracemalloc

import pytest

from fastgguf.engine import chat_template
from fastgguf.errors import ChatTemplateError

MSGS = [{"role": "user", "content": "hi"}]


def render(template, messages=MSGS, **variables):
    """compile_template + render with the variables fastgguf.engine.chat passes, without an input allowance."""
    return chat_template.render(chat_template.compile_template(template),
                                dict(messages=messages, add_generation_prompt=True, bos_token="", eos_token="",
                                     **variables))


BIG = "{% set s = 'a' * 900000 %}"

HOSTILE = {
    "nested_range": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "nested_loops_over_strings": BIG + "{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
    "lipsum_huge": "{{ lipsum(n=10**7) }}",
    "quadratic_concat": "{% set ns = namespace(s='') %}{% for i in range(100000) %}"
                        "{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' %}{% endfor %}{{ ns.s }}",
    "quadratic_plus": "{% set ns = namespace(s='') %}{% for i in range(100000) %}"
                      "{% set ns.s = ns.s + 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' %}{% endfor %}{{ ns.s }}",
    "str_times_huge": "{{ 'a' * 600000000 }}",
    "list_times_huge": "{{ ([1] * 600000000) | length }}",
    "int_pow": "{{ 10 ** 100000 }}",
    "int_pow_nested": "{{ 9 ** (9 ** 9) }}",
    "int_product": "{% set x = 2 ** 60000 %}{{ (x * x * x * x) > 1 }}",
    "float_overflow": "{{ 2.0 ** 10000 }}",
    "range_overflow": "{{ range(10**30) | length }}",
    "range_big": "{{ range(10**9) | length }}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "type_error": "{{ 1 + 'a' }}",
    "zero_division": "{{ 1 // 0 }}",
    "deep_nesting": "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    "center_filter": "{{ 'x' | center(10**9) }}",
    "center_method": "{{ 'x'.center(10**9) }}",
    "ljust_method": "{{ 'x'.ljust(10**9) }}",
    "zfill_method": "{{ '1'.zfill(10**9) }}",
    "expandtabs": "{{ ('\t' * 1000).expandtabs(10**6) }}",
    "percent_width": "{{ '%999999999d' % 1 }}",
    "percent_star": "{{ '%*d' % (10**9, 1) }}",
    "percent_repeat": BIG + "{{ ('%(a)s' * 1000) % {'a': s} }}",
    "format_filter": "{{ '%999999999s' | format('x') }}",
    "str_format_width": "{{ '{:>999999999}'.format(1) }}",
    "str_format_nested": "{{ '{:{}}'.format(1, 999999999) }}",
    "str_format_repeat": BIG + "{{ ('{0}' * 1000).format(s) }}",
    "replace_method": "{% set s = 'a' * 500000 %}{{ s.replace('a', 'aaaa') }}",
    "replace_filter": "{% set s = 'a' * 500000 %}{{ s | replace('a', 'aaaa') }}",
    "join_filter": BIG + "{{ [s, s, s, s] | join }}",
    "join_method": BIG + "{{ ''.join([s, s, s, s]) }}",
    "join_attribute": BIG + "{{ [{'a': s}, {'a': s}, {'a': s}] | join(attribute='a') }}",
    "tilde_concat": BIG + "{{ s ~ s ~ s ~ s }}",
    "output_loop": BIG + "{% for i in range(100) %}{{ s }}{% endfor %}",
    "macro_body": BIG + "{% macro m() %}{% for i in range(5000) %}{{ s }}{% endfor %}{% endmacro %}"
                        "{% set y = m() %}{{ y | length }}",
    "set_block": BIG + "{% set y %}{% for i in range(5000) %}{{ s }}{% endfor %}{% endset %}{{ y | length }}",
    "sum_lists": "{{ ([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]] * 100000) | sum(start=[]) | length }}",
    "indent_filter": "{{ 'a\nb' | indent(10**9, true) }}",
    "tojson_indent": "{{ messages | tojson(indent=10**9) }}",
    "batch_fill": "{{ range(3) | batch(10**9, 'x') | list | length }}",
    "slice_many": "{{ range(3) | slice(10**9) | list | length }}",
    "wordwrap": "{% set s = 'a ' * 300000 %}{{ s | wordwrap(1, wrapstring='x' * 1000) }}",
    "translate": "{% set s = 'a' * 100000 %}{{ s.translate({97: 'x' * 100000}) }}",
    "map_center": "{{ ['x'] | map('center', 10**9) | list }}",
    "int_to_str_limit": "{{ 10 ** 5000 }}",
    "undefined_call": "{{ nothing() }}",
    "list_repeat_of_big_string": BIG + "{{ [s] * 1000000 }}",
}
# nested lists of references to one big string: tiny to build, huge once turned into text
NESTED = BIG + ("{% set a = [s, s, s, s, s, s, s, s, s, s] %}{% set b = [a, a, a, a, a, a, a, a, a, a] %}"
                "{% set c = [b, b, b, b, b, b, b, b, b, b] %}{% set d = [c, c, c, c, c, c, c, c, c, c] %}"
                "{% set ns = namespace(x=d, y=d) %}")
for _name, _use in {"print": "{{ d }}", "tojson": "{{ d | tojson }}", "tilde": "{{ d ~ '' }}",
                    "percent": "{{ '%s' % (d,) }}", "format_method": "{{ '{}'.format(d) }}",
                    "string_filter": "{{ d | string | length }}", "join": "{{ [d, d] | join }}",
                    "upper": "{{ d | upper | length }}", "namespace": "{{ ns }}",
                    "format_filter": "{{ '%s' | format(d) }}", "pprint": "{{ d | pprint | length }}"}.items():
    HOSTILE[f"nested_refs_{_name}"] = NESTED + _use


@pytest.mark.parametrize("template", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('echo pwned').read() }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ messages.__class__ }}",
    "{% for m in messages %}{{ m.__class__.__base__ }}{% endfor %}",
    "{{ messages.append({'role': 'x'}) }}",        # immutable sandbox: inputs cannot be mutated
    "{{ messages[0].update({'role': 'x'}) }}",
    "{{ (lipsum.__globals__)['os'] }}",
])
def test_sandbox_escape_raises(template):
    with pytest.raises(ChatTemplateError, match="sandbox"):
        render(template, [{"role": "user", "content": "hi"}])


def test_hf_environment_features():
    msgs = [{"role": "user", "content": "héllo"}]
    assert render("{{ messages | tojson }}", msgs) == '[{"role": "user", "content": "héllo"}]'
    assert render("{{ messages[0] | tojson(indent=2) }}", msgs) == json.dumps(msgs[0], indent=2, ensure_ascii=False)
    with pytest.raises(ChatTemplateError, match="only user roles"):
        render("{{ raise_exception('only user roles') }}", msgs)
    assert len(render("{{ strftime_now('%Y-%m-%d') }}", msgs)) == 10
    # trim_blocks + lstrip_blocks as transformers: block tags leave no stray newlines/indent
    t = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}\n"
    assert render(t, msgs) == "[héllo]\n"
    assert render("{% for m in messages %}{% break %}{% endfor %}ok", msgs) == "ok"  # loopcontrols
    assert render("{% generation %}{{ messages[0].content }}{% endgeneration %}", msgs) == "héllo"


def test_compile_errors_and_cache():
    with pytest.raises(ChatTemplateError, match="syntax"):
        chat_template.compile_template("{% if %}")
    t = "{{ messages[0].content }}"
    assert chat_template.compile_template(t) is chat_template.compile_template(t)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_fails_fast_with_bounded_memory(name):
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(ChatTemplateError):
            render(HOSTILE[name])
        elapsed = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 5.0, f"{name} took {elapsed:.1f} s"        # 1 s budget; tracemalloc slows rendering
    assert peak < 64 << 20, f"{name} peaked at {peak >> 20} MiB"


def test_budget_errors_are_value_errors_with_a_clear_message():
    with pytest.raises(ValueError, match="time budget"):
        render(HOSTILE["nested_range"])
    with pytest.raises(ChatTemplateError, match="limit"):
        render(HOSTILE["str_times_huge"])
    with pytest.raises(ChatTemplateError, match="output exceeds"):
        render(HOSTILE["output_loop"])
    with pytest.raises(ChatTemplateError, match="RecursionError"):
        render(HOSTILE["recursion"])
    with pytest.raises(ChatTemplateError, match="range"):
        render(HOSTILE["range_overflow"])


def test_benign_templates_still_render():
    assert render("{{ 'ab' * 3 }}{{ 2 ** 10 }}{{ '%05d|%s' % (42, 'x') }}{{ '{:>4}'.format(7) }}") \
        == "ababab102400042|x   7"
    assert render("{{ range(3) | join(',') }}|{{ [[1], [2]] | sum(start=[]) }}|{{ 'a' ~ 1 ~ 'b' }}") \
        == "0,1,2|[1, 2]|a1b"
    assert render("{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ '!' if loop.last }}"
                  "{% else %}none{% endfor %}") == "1/1!"
    assert render("{% for m in [] %}x{% else %}none{% endfor %}") == "none"
    assert render("{{ messages | tojson(indent=2) }}") == '[\n  {\n    "role": "user",\n' \
        '    "content": "hi"\n  }\n]'
    assert len(render("{{ lipsum(2) }}")) > 0
    assert render("{{ 'a-b' | replace('-', '+') }}{{ 'x' | center(5) }}{{ 'a b' | wordwrap(1) }}") \
        == "a+b  x  a\nb"


def test_the_size_limit_grows_with_the_callers_input():
    t = chat_template.compile_template("{{ 'x' * n }}")
    n = chat_template.MAX_TEMPLATE_CHARS + 10
    with pytest.raises(ChatTemplateError, match="limit"):
        chat_template.render(t, {"n": n})
    assert len(chat_template.render(t, {"n": n}, input_chars=5)) == n     # twice the input's characters
    assert chat_template.input_size([{"role": "user", "content": "hi"}]) == len("role" "user" "content" "hi")


def test_the_time_budget_is_read_at_each_render(monkeypatch):
    """The fuzz target lowers RENDER_TIME_LIMIT_S to spend its time on many templates."""
    monkeypatch.setattr(chat_template, "RENDER_TIME_LIMIT_S", 0.05)
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError, match=r"time budget \(0.05 s\)"):
        render(HOSTILE["nested_range"])
    assert time.monotonic() - t0 < 0.9
