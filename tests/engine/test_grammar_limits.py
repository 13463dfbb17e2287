"""The grammar front end's guard (issue 32): static limits before llguidance (grammar_limits), the compile sandbox
(a worker process under CPU, memory and stack limits), its cache, and the linear GBNF converter, which must write
exactly what llguidance's own gbnf_to_lark writes."""
import glob
import json
import os
import threading
import time

import pytest

pytest.importorskip("llguidance")

from fastgguf.engine import grammar as G  # noqa: E402
from fastgguf.engine import grammar_limits as L  # noqa: E402
from fastgguf.engine import sandbox  # noqa: E402
from fastgguf.engine.grammar import Grammar, GrammarError  # noqa: E402

GRAMMARS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "grammars")


def ref_chain(n):
    """The crash of issue 32: $defs a0..an, each an object whose one property $refs the next (n=1000: 75 kB)."""
    defs = {f"a{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/a{i + 1}"}}} for i in range(n)}
    defs[f"a{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/a0", "$defs": defs}


def rule_chain(n):
    return "root ::= r0\n" + "".join(f'r{i} ::= "a" r{i + 1} | "b"\n' for i in range(n)) + f'r{n} ::= "c"\n'


def test_a_1000_link_ref_chain_is_refused_naming_the_limit():
    """It segfaulted llguidance's compile (and the server with it); now a GrammarError naming the depth limit."""
    assert len(json.dumps(ref_chain(1000))) > 70_000
    with pytest.raises(GrammarError, match=rf"nest 2002 deep.*limit of {L.MAX_DEPTH}"):
        Grammar.json_schema(ref_chain(1000))
    Grammar.json_schema(ref_chain(200))     # 401 deep: compiles


@pytest.mark.parametrize("n,word", [(10_000, "10002 rules"), (2_500, "nest 2502 deep")])
def test_long_gbnf_rule_chains_are_refused_quickly(n, word):
    """(llguidance's quadratic converter spent 7-15 CPU-s on 2,500 rules before its compile crashed on 10,000;
    the figures are bench_grammar_guard.py's)"""
    with pytest.raises(GrammarError, match=word):
        Grammar.gbnf(rule_chain(n))


@pytest.mark.parametrize("schema", [{"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
                                    {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"},
                                                                    "b": {"$ref": "#/$defs/a"}}},
                                    {"type": "object", "properties": {"x": False}, "required": ["x"]},
                                    {"type": "array", "minItems": 1, "items": {"$ref": "#"}}])
def test_a_schema_no_document_matches_is_refused(schema):
    """It compiled, then failed at the first tokens with llguidance's state dump (a 500 over HTTP)."""
    with pytest.raises(GrammarError, match="no document can match"):
        Grammar.json_schema(schema)


@pytest.mark.parametrize("schema", [{"$ref": "#/$defs/t", "$defs": {"t": {"anyOf": [{"type": "null"}, {
    "type": "array", "items": {"$ref": "#/$defs/t"}}]}}},
    {"type": "object", "properties": {"next": {"$ref": "#"}}},
    {"type": "object", "patternProperties": {"^line[1-3]$": {"type": "string"}}, "additionalProperties": False,
     "required": ["line1"]},
    {"type": "array", "minItems": 1, "items": {"anyOf": [{"$ref": "#"}, {"type": "integer"}]}}])
def test_recursive_schemas_that_reach_a_value_compile(schema):
    Grammar.json_schema(schema)


@pytest.mark.parametrize("gbnf,word", [('root ::= "a"{1000000}', "40000 symbols"),
                                       ('root ::= ("ab"{1000}){1000}', "40000 symbols"),
                                       ("root ::= a\na ::= b\nb ::= a", "cannot produce any text"),
                                       ('root ::= "x" root', "cannot produce any text"),
                                       ('root ::= "a" b', "'b' is not defined")])
def test_hostile_gbnf_is_refused_at_compile_time(gbnf, word):
    with pytest.raises(GrammarError, match=word):
        Grammar.gbnf(gbnf)


def test_sizes_over_the_limits_are_refused():
    with pytest.raises(GrammarError, match="over the limit"):
        Grammar.gbnf("root ::= " + " | ".join(f'"w{i}"' for i in range(100_000)))
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 1000}
                                            for i in range(L.MAX_SCHEMA_BYTES // 1000)}}
    with pytest.raises(GrammarError, match="over the limit"):
        Grammar.json_schema(big)


def test_our_gbnf_converter_writes_what_llguidance_writes():
    from llguidance.gbnf_to_lark import gbnf_to_lark
    texts = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(GRAMMARS, "*.gbnf")))]
    texts += [rule_chain(300), 'root ::= fooBar "x"?\nfooBar ::= [a-z]+ | "q" root\n',
              'root ::= item ("," item){0,4}\nitem ::= "a" | nested\nnested ::= "(" root ")"\n']
    assert len(texts) > 8
    for text in texts:
        assert L.gbnf_to_lark(text) == gbnf_to_lark(text)


def test_panic_and_state_text_never_reach_a_message():
    assert G._message("panic: assertion failed: x\n<backtrace>\n  0: <unknown>") == "panic: assertion failed: x"
    assert G._message("grammar matcher failed: NoExtensionBias\n<state>\nTokens: ...") == \
        "grammar matcher failed: NoExtensionBias"
    assert G._message("Parser Error: Current row has 40001 items\n<non-verbose/>") == \
        "Parser Error: Current row has 40001 items"


def test_the_sandbox_survives_a_crashing_job_and_names_it():
    with pytest.raises(sandbox.SandboxError, match="died"):
        sandbox.run("os:abort", [])
    assert sandbox.run("math:gcd", [12, 18]) == 6       # a fresh worker takes the next job


def test_the_worker_imports_this_fastgguf_whatever_the_working_directory(tmp_path, monkeypatch):
    """CI runs pytest in a source checkout (no built extensions) against an installed wheel: a worker started with
    `python -m` found the checkout's package first and died at import, and every compile was refused."""
    (tmp_path / "fastgguf").mkdir()
    (tmp_path / "fastgguf" / "__init__.py").write_text("raise ImportError('the shadowing checkout')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sandbox, "_POOL", [None])       # fresh workers, started from here
    assert sandbox.run("math:gcd", [12, 18]) == 6
    assert sandbox.run("os:getcwd", []) == str(tmp_path)


def test_a_worker_that_fails_to_start_says_why(monkeypatch):
    monkeypatch.setattr(sandbox, "_BOOT", "raise SystemExit('no interpreter here: ' + {root!r}[:0] + 'boot failed')")
    monkeypatch.setattr(sandbox, "_POOL", [None])
    with pytest.raises(sandbox.SandboxError, match=r"exit status 1: no interpreter here: boot failed"):
        sandbox.run("math:gcd", [1, 1])


def test_an_idle_worker_killed_from_outside_is_replaced():
    sandbox.run("math:gcd", [2, 4])
    for w in sandbox._pool().idle:
        w.proc.kill()
        w.proc.wait()
    assert sandbox.run("math:gcd", [6, 9]) == 3


def test_the_sandbox_enforces_its_cpu_budget(monkeypatch):
    monkeypatch.setattr(sandbox, "CPU_SECONDS", 1)
    with pytest.raises(sandbox.SandboxError, match="CPU budget of 1 s|wall time"):
        sandbox.run("math:factorial", [10 ** 8])


def test_a_cancelled_compile_is_killed():
    ev = threading.Event()
    threading.Timer(0.3, ev.set).start()
    with sandbox.cancel_on(ev), pytest.raises(sandbox.Cancelled):    # (a 60 s job would return None, not raise)
        sandbox.run("time:sleep", [60])


def test_errors_come_back_as_their_class():
    with pytest.raises(GrammarError, match="is not defined"):
        sandbox.run("fastgguf.engine.grammar:build", ["gbnf", 'root ::= "a" b', False])
    with pytest.raises(ValueError):
        sandbox.run("math:sqrt", [-1])


def test_full_compile_queue_is_busy(monkeypatch):
    """MAX_WORKERS jobs running and MAX_WAITING waiting: the next is refused at once (HTTP 429), not queued."""
    monkeypatch.setattr(sandbox, "MAX_WORKERS", 1)
    monkeypatch.setattr(sandbox, "MAX_WAITING", 0)
    monkeypatch.setattr(sandbox, "_POOL", [None])
    ev, out = threading.Event(), []

    def hold():
        with sandbox.cancel_on(ev):
            try:
                sandbox.run("time:sleep", [60])
            except sandbox.Cancelled as e:
                out.append(e)
    t = threading.Thread(target=hold)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while not sandbox._POOL[0] or sandbox._POOL[0].slots._value:   # until the first job holds the worker
            assert time.monotonic() < deadline and t.is_alive(), "the first job never took the worker"
            time.sleep(0.01)
        with pytest.raises(sandbox.Busy, match="retry later"):
            sandbox.run("math:gcd", [1, 1])
    finally:
        ev.set()
        t.join()
    assert out and sandbox.run("math:gcd", [4, 6]) == 2


def test_a_grammar_is_compiled_once(monkeypatch):
    calls = []
    real = sandbox.run
    monkeypatch.setattr(sandbox, "run", lambda *a: calls.append(a) or real(*a))
    schema = {"type": "object", "properties": {"once": {"type": "integer", "minimum": 7919}}}
    assert Grammar.json_schema(schema) == Grammar.json_schema(json.dumps(schema))
    assert len(calls) == 1
    with pytest.raises(GrammarError):
        Grammar.gbnf('root ::= "a" undefinedrule')
    with pytest.raises(GrammarError):
        Grammar.gbnf('root ::= "a" undefinedrule')
    assert len(calls) == 2      # a refusal is remembered too
