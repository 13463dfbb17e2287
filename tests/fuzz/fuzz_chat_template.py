"""Fuzz target: chat templates (untrusted code) under the renderer's budgets.

Each input becomes a template: either its raw text, or (first byte even) a sequence of template fragments picked
by the input bytes (loops, big ranges, *, **, ~, %, format, filters, macros, recursion, sandbox escapes, ...).
Rendering may only raise ChatTemplateError; each render ends within
fastgguf.engine.chat_template.RENDER_TIME_LIMIT_S plus a small slack, and the process stays under a memory ceiling.
The time budget is lowered to 0.25 s here so that a run spends its time on many templates rather than on a few that
loop until the deadline.

    python tests/fuzz/fuzz_chat_template.py -max_total_time=60 tests/fuzz/corpus/chat_template
"""
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

with _harness.instrumented():
    _harness.import_fastgguf()
    from fastgguf.engine import chat_template  # noqa: E402
    from fastgguf.engine.chat import ChatTemplateError, render_template  # noqa: E402

chat_template.RENDER_TIME_LIMIT_S = 0.25
SLACK_S = 0.75                     # the deadline is checked between operations; one bounded operation may overrun
MAX_RSS_KB = 1_500_000             # ~1.5 GB for the whole fuzzing process
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "a" * 50}]

FRAGMENTS = [
    "{% for i in range(", "100000", "10**9", ") %}", "{% endfor %}", "{{ ", " }}", "'a'", " * ", " ** ", " ~ ",
    " + ", " % ", " // ", "messages", "[0]", "['content']", ".content", "|join", "|join(", "|tojson",
    "|tojson(indent=", "|center(", "|format(", "|replace('a', 'aaaa')", "|sum(start=[])", "|list", "|length",
    "|batch(", "|wordwrap(", "|indent(", "lipsum(", "{% set ns = namespace(s='xy') %}",
    "{% set ns.s = ns.s ~ ns.s %}", "{% set ns.s = ns.s + ns.s %}", "{% macro m(n) %}", "{{ m(n + 1) }}",
    "{% endmacro %}", "{{ m(0) }}", "{% if ", " %}", "{% endif %}", "{% else %}", "(", ")", "[", "]", ", ", "1",
    "2", "9", "0", "-1", "x", "loop.index", "'%s'", "'%0999d'", "'{:>9}'.format(", "'{}'.format(", ".center(",
    ".ljust(", ".zfill(", ".replace(", ".join(", ".expandtabs(", ".translate(", "raise_exception('x')",
    "{{ messages|tojson }}", "{% for m in messages %}", "{{ m.role }}", "{{ m['content'] }}",
    "add_generation_prompt", "'\\n'", "strftime_now('%Y')", "{% generation %}", "{% endgeneration %}",
    "{% break %}", "{% continue %}", "{% set x = ", "{{ x }}", "cycler(1, 2).next()", "namespace()",
    "dict(a=1)", "|items", "|map('upper')", "|map('center', 99999)", "|select", "|unique", "|sort", "|reverse",
    "|first", "|string", "|int", "|float", "|abs", "|round", "'a' * 999999", "range(99999)", "|slice(",
    "|truncate(", "|urlize", "|pprint", "joiner()", "}}", "{{", "%}", "{%", ".__class__", "|attr('__class__')",
    "{% for a in messages recursive %}{{ loop(messages) }}{% endfor %}", "{% set y %}", "{% endset %}",
    "{% filter upper %}", "{% endfilter %}", "{% call m(1) %}", "{% endcall %}", "caller()", " if ", " else ",
    " and ", " or ", " not ", " is defined", " in ", "==", "True", "none", "1e308", "2.0", "'\\x1b'",
]


def template_from(data):
    if not data or data[0] & 1:
        return data[1:].decode("utf-8", "replace")
    return "".join(FRAGMENTS[b % len(FRAGMENTS)] for b in data[1:])


def test_one_input(data):
    template = template_from(data)
    t0 = time.monotonic()
    try:
        chat_template.compile_template(template)
    except ChatTemplateError:
        return
    t1 = time.monotonic()
    assert t1 - t0 < 5.0, f"compiling took {t1 - t0:.1f} s: {template!r}"
    try:
        render_template(template, MESSAGES, bos_token="<s>", eos_token="</s>")
    except ChatTemplateError:
        pass
    elapsed = time.monotonic() - t1
    assert elapsed < chat_template.RENDER_TIME_LIMIT_S + SLACK_S, f"render took {elapsed:.2f} s: {template!r}"
    rss = _rss_kb()
    assert rss < MAX_RSS_KB, f"RSS {rss} kB after {template!r}"


def _rss_kb():
    """Resident memory now (/proc/self/statm), else the peak (getrusage's ru_maxrss also counts what a parent had
    at fork time, so it is only the fallback). Under atheris, libFuzzer's -rss_limit_mb watches the peak too."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


if __name__ == "__main__":
    _harness.run(test_one_input)
