"""The package's shape (issue: one native core, subpackages, one owner per fact): each test pins a defect of 0.1.0.

- one native kernel module, so one kernel table: set_isa() / FASTGGUF_ISA reach the model's forward pass;
- a bad FASTGGUF_ISA fails `import fastgguf` itself, listing the valid values;
- an ISA is available only if its code was compiled in;
- no import cycles between fastgguf's modules, function-level imports included;
- imports run one way: server -> openai -> engine -> arch/tokenizer/gguf -> kernels (no lower layer imports a
  higher one), the extensions' Cython sources (.pyx and the .pxi files they include) read too;
- gguf/ imports nothing of engine/, and the extensions import nothing of fastgguf;
- the C type table is the one owner of format facts;
- a hyperparameter has one owner each side: an Hparams field and an fg_hparams field, handed over whole;
- the README's public names import."""
import ast
import dataclasses
import glob
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import fastgguf
from fastgguf import kernels
from fastgguf.gguf import GGML_TYPE_INFO, GGMLType

PKG = os.path.dirname(os.path.abspath(fastgguf.__file__))    # the package under test (installed, or in place)
ROOT = os.path.dirname(PKG)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the source tree these tests belong to
README = os.path.join(REPO, "README.md")


def _run(env_extra, code):
    """Run code in a fresh interpreter that imports the same fastgguf as this test run (installed or in place)."""
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_one_native_kernel_module():
    """0.1.0 had three extensions, each with its own copy of csrc/ and its own ISA choice."""
    ext = (".so", ".pyd")
    native = sorted(os.path.relpath(p, PKG) for p in glob.glob(os.path.join(PKG, "**", "*"), recursive=True)
                    if p.endswith(ext))
    names = sorted(re.sub(r"\..*$", "", n) for n in native)
    assert names == ["_native", os.path.join("tokenizer", "_bpe")], native


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("nm") is None, reason="needs Linux nm")
def test_native_module_exports_only_its_init():
    """Built with hidden visibility: the 0.1.0 extensions each exported the same ~49 fg_* symbols."""
    import fastgguf._native as nat
    out = subprocess.run(["nm", "-D", "--defined-only", nat.__file__], capture_output=True, text=True).stdout
    exported = [line.split()[-1] for line in out.splitlines() if line.split()[1:2] == ["T"]]
    assert exported == ["PyInit__native"], exported


def test_bogus_isa_fails_import_fastgguf():
    r = _run({"FASTGGUF_ISA": "bogus"}, "import fastgguf")
    assert r.returncode != 0
    assert "FASTGGUF_ISA='bogus'" in r.stderr
    for isa in kernels.available():  # the message lists the valid values
        assert repr(isa) in r.stderr


def test_available_means_compiled_in():
    """Under MSVC 0.1.0 compiled no SIMD code yet reported avx2 as available (its tests compared scalar with
    scalar). tests/c (FG_NO_SIMD build, run by .ci/kernels.sh) checks the scalar-only build; here the invariant."""
    assert set(kernels.available()) <= set(kernels.compiled())
    assert "scalar" in kernels.available()
    for t in kernels.type_table():
        assert set(t["kernels"]) == set(kernels.available()), t


@pytest.mark.skipif(len(kernels.available()) < 2, reason="one instruction set only")
def test_set_isa_reaches_the_model(default_model_path):
    """0.1.0: after kernels.set_isa("scalar") the model kept running AVX2. Scalar and SIMD kernels sum in different
    orders, so the logits differ in their last bits exactly when the switch reaches the forward pass."""
    m = fastgguf.Model(default_model_path, n_threads=1)
    ids = m.tokenize("The capital of France is")
    best = kernels.available()[-1]
    prev = kernels.set_isa(best)
    try:
        a = m.context(32).eval(ids)
        kernels.set_isa("scalar")
        assert kernels.active() == "scalar"
        b = m.context(32).eval(ids)
        kernels.set_isa(best)
        c = m.context(32).eval(ids)
    finally:
        kernels.set_isa(prev)
    assert not np.array_equal(a, b), "scalar and SIMD gave identical logits: set_isa did not reach the model"
    assert np.array_equal(a, c)
    # the same model, only rounding differs (amplified over 30 layers: up to ~1 logit, see tests/engine/test_model.py)
    assert a.argmax() == b.argmax() and np.corrcoef(a, b)[0, 1] > 0.99


@pytest.mark.skipif(len(kernels.available()) < 2, reason="one instruction set only")
def test_env_isa_reaches_the_model(default_model_path):
    code = ("import fastgguf, numpy as np; m = fastgguf.Model(%r, n_threads=1); "
            "print(fastgguf.kernels.active()); np.save(__import__('sys').stdout.buffer, "
            "m.context(16).eval(m.tokenize('Hello there')))") % default_model_path
    outs = {}
    for isa in ("scalar", kernels.available()[-1]):
        env = dict(os.environ, FASTGGUF_ISA=isa)
        r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        first, rest = r.stdout.split(b"\n", 1)
        assert first.decode() == isa
        import io
        outs[isa] = np.load(io.BytesIO(rest))
    a, b = outs.values()
    assert not np.array_equal(a, b)


def _absolute(pkg, level, base):
    """The module `from <level dots><base> import ...` names, inside package pkg."""
    if not level:
        return base
    parts = pkg.split(".")
    return ".".join(parts[:len(parts) - level + 1] + ([base] if base else []))


def _python_imports(path, pkg):
    deps = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):  # every level
        if isinstance(node, ast.Import):
            deps |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(pkg, node.level, node.module or "")
            deps.add(base)
            deps |= {f"{base}.{a.name}" for a in node.names}
    return deps


# a Cython import or cimport, at any indentation: `from X import a, b` / `from X import (a,\n b)` / `import X`
_CY_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+c?import[ \t]+(\([^)]*\)|[^\n#]*)"
                        r"|c?import[ \t]+([\w.]+))", re.M)
_CY_INCLUDE = re.compile(r"^[ \t]*include[ \t]+\"([^\"]+)\"", re.M)


def _cython_imports(path, pkg):
    """What a .pyx imports, the .pxi files it includes (they compile into its module) read as its own text. Cython is
    not Python, so a regex reads it: every `import` / `from ... import` / `cimport` line, at any indentation."""
    text = open(path, encoding="utf-8").read()
    for inc in _CY_INCLUDE.findall(text):
        text += "\n" + open(os.path.join(os.path.dirname(path), inc), encoding="utf-8").read()
    deps = set()
    for dots, base, names, plain in _CY_IMPORT.findall(text):
        if plain:
            deps.add(plain)
            continue
        base = _absolute(pkg, len(dots), base)
        deps.add(base)
        deps |= {f"{base}.{n.split()[0]}" for n in names.strip("()").replace("\n", " ").split(",") if n.strip()}
    return deps


def _raw_imports():
    """{module: every fastgguf module name it imports, anywhere in the file: a function-local import is still a
    dependency (0.2.0's engine/openai.py reached up into server/engine.py from inside functions, unseen)}. The
    extensions (.pyx, with the .pxi files they include) are modules too."""
    graph = {}
    for path in glob.glob(os.path.join(PKG, "**", "*.py"), recursive=True) + \
            glob.glob(os.path.join(PKG, "**", "*.pyx"), recursive=True):
        stem, ext = os.path.splitext(os.path.relpath(path, ROOT))
        rel = stem.replace(os.sep, ".")
        mod = rel[:-len(".__init__")] if rel.endswith(".__init__") else rel
        pkg = mod if rel.endswith(".__init__") else mod.rsplit(".", 1)[0]
        deps = _python_imports(path, pkg) if ext == ".py" else _cython_imports(path, pkg)
        graph[mod] = {d for d in deps if d == "fastgguf" or d.startswith("fastgguf.")}
    return graph


def _module_imports():
    """{module: the set of fastgguf's modules it imports} (_raw_imports, less names that are not modules)."""
    graph = _raw_imports()
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def _edges(graph, m):
    # a package's __init__ importing its own submodules is how packages re-export; `from fastgguf.x import y` also
    # names the package fastgguf.x, which is no dependency of x's own submodules.
    return {d for d in graph[m] if not (m.startswith(d + ".") and d in graph)}


def test_no_import_cycles():
    """0.1.0 had chat <-> generate (through a private _check_stop) and arch/__init__ <-> arch/llama. Imports inside
    functions count: one of them closing a loop is a cycle too."""
    graph = _module_imports()
    def edges(m):
        return _edges(graph, m)
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in edges(m):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert "fastgguf.engine.generate" not in graph["fastgguf.engine.params"]


# The layers, lowest first (ARCHITECTURE.md): a module is in the layer of its longest listed prefix.
LAYERS = [
    # _threads counts CPUs and imports nothing of fastgguf: the quantizer (gguf) uses it as well as the engine (whose
    # engine.threads is its public home)
    ("fastgguf.errors", "fastgguf.kernels", "fastgguf._native", "fastgguf._threads"),
    # convert writes GGUFs with gguf's writer; the hub's catalogue converts with it
    ("fastgguf.gguf", "fastgguf.tokenizer", "fastgguf.arch", "fastgguf.hub", "fastgguf.convert"),
    ("fastgguf.engine",),
    ("fastgguf.api",),
    ("fastgguf.server",),
    ("fastgguf.cli", "fastgguf.__main__", "fastgguf"),  # fastgguf/__init__.py: the public API, re-exports
]


def _layer(mod):
    best = None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and (best is None or len(p) > len(best[1])):
                best = (i, p)
    assert best is not None, f"{mod} is in no layer: add it to LAYERS"
    return best[0]


def test_imports_run_one_way():
    """No module imports a module of a higher layer (engine/openai.py imported server/engine.py; server/ray.py
    imported the CLI's load_model)."""
    graph = _module_imports()
    up = sorted(f"{m} (layer {_layer(m)}) imports {d} (layer {_layer(d)})"
                for m in graph for d in _edges(graph, m) if _layer(d) > _layer(m))
    assert not up, "\n".join(up)
    assert _layer("fastgguf.server.app") > _layer("fastgguf.api.openai.protocol") > _layer("fastgguf.engine.scheduler")
    # every dialect is one layer: the server's routes above, the engine below
    for dialect in ("fastgguf.api.openai.client", "fastgguf.api.anthropic", "fastgguf.api.ollama"):
        assert _layer("fastgguf.server.errors") > _layer(dialect) == _layer("fastgguf.api") > _layer("fastgguf.engine")


def test_gguf_does_not_import_the_engine():
    """gguf/ (files: reader, writer, quantizer) sits below engine/: the quantizer imported engine.threads, so
    loading a file dragged in the engine. Thread counts live in fastgguf._threads now."""
    graph = _module_imports()
    up = sorted(f"{m} imports {d}" for m in graph if m.startswith("fastgguf.gguf")
                for d in graph[m] if d.startswith("fastgguf.engine"))
    assert not up, "\n".join(up)


def test_extensions_import_nothing_of_fastgguf():
    """The compiled modules (_native.pyx with its .pxi files, tokenizer/_bpe.pyx) are the bottom of the graph: the
    Sampler takes plain values (fastgguf.engine.sampler builds it from SamplingParams) and thread counts arrive
    checked (fastgguf._threads), so nothing of fastgguf, not even fastgguf.errors, is imported from C's side."""
    raw = _raw_imports()
    native = sorted(m for m in raw if os.path.exists(os.path.join(ROOT, *m.split(".")) + ".pyx"))
    if not native:
        pytest.skip("no .pyx sources next to the package (an installed wheel without them)")
    assert "fastgguf._native" in native
    found = sorted(f"{m} imports {d}" for m in native for d in raw[m])
    assert not found, "\n".join(found)


@pytest.mark.parametrize("mod", ["fastgguf.engine.chat", "fastgguf.engine.generate", "fastgguf.arch.llama",
                                 "fastgguf.arch.qwen", "fastgguf.gguf.quantize", "fastgguf.cli", "fastgguf._native",
                                 "fastgguf.tokenizer.core", "fastgguf.engine.params"])
def test_each_module_imports_first(mod):
    r = _run({}, f"import {mod}")
    assert r.returncode == 0, r.stderr


def test_type_table_owns_format_facts():
    table = kernels.type_table()
    names = {t["name"] for t in table}
    assert {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0", "Q8_1"} <= names
    for t in table:
        if t["dot_type"] is not None:  # weight types: the file layout (activation-only types live in memory only)
            assert (t["block_size"], t["type_size"]) == GGML_TYPE_INFO[GGMLType(t["id"])], t
        assert kernels.block_size(t["name"]) == t["block_size"]
        if t["dot_type"] is not None:
            assert t["id"] in kernels.WEIGHT_TYPES
            assert kernels.vec_dot_type(t["name"]) == t["dot_type"]
        assert t["kernels"]["scalar"][:3] == ["quantize", "dequantize", "vec_dot"] or t["dot_type"] is None
    assert kernels.SUPPORTED_TYPES == {t["name"]: t["id"] for t in table}


def test_no_type_names_in_the_forward_pass():
    """A new quant type = one C file + one table row: nothing in the forward pass or the Python graph names one."""
    src = os.path.join(REPO, "csrc", "fg_forward.c")
    if not os.path.exists(src):
        pytest.skip("source tree not available")
    pkg = os.path.join(REPO, "fastgguf")
    files = [src] + glob.glob(os.path.join(pkg, "engine", "*.py")) + glob.glob(os.path.join(pkg, "arch", "*.py"))
    for path in files:
        text = open(path, encoding="utf-8").read()
        assert not re.search(r"\bFG_TYPE_Q|\bQ[0-9]_[0-9K]\b|GGMLType\.Q", text), path


def test_errors_share_a_base():
    from fastgguf import errors
    for name in ("GGUFError", "TokenizerError", "ChatTemplateError", "QuantizeError", "HubError", "GrammarError",
                 "StateError"):
        cls = getattr(errors, name)
        assert issubclass(cls, fastgguf.FastGGUFError), name
        assert getattr(fastgguf, name) is cls
    assert issubclass(fastgguf.GGUFError, ValueError)
    import importlib
    assert importlib.import_module("fastgguf.engine.chat").ChatTemplateError is errors.ChatTemplateError
    assert importlib.import_module("fastgguf.tokenizer").TokenizerError is errors.TokenizerError


def test_one_tokenizer_verb(default_model_path):
    """0.1.0: Model.tokenize but Tokenizer.encode. tokenize/detokenize everywhere; encode/decode are aliases."""
    tok = fastgguf.Tokenizer(default_model_path)
    m = fastgguf.Model(default_model_path)
    ids = tok.tokenize("Hello world")
    assert m.tokenize("Hello world") == ids == tok.encode("Hello world")
    assert tok.detokenize(ids) == m.detokenize(ids) == tok.decode(ids) == "Hello world"
    readme = open(README, encoding="utf-8").read() if os.path.exists(README) else ""
    assert ".encode(" not in readme and ".decode(" not in readme


def _readme_public_names():
    text = open(README, encoding="utf-8").read()
    block = text.split("<!-- public-api -->", 2)[1]
    return re.findall(r"`(fastgguf(?:\.\w+)+)`", block)


@pytest.mark.skipif(not os.path.exists(README), reason="README not available")
def test_readme_public_names_import():
    names = _readme_public_names()
    assert len(names) >= 10, names
    for dotted in names:
        parts = dotted.split(".")
        obj = fastgguf
        for p in parts[1:]:
            obj = getattr(obj, p)  # AttributeError names the missing one
        assert obj is not None, dotted
    for name in fastgguf.__all__:
        assert hasattr(fastgguf, name), name


@pytest.mark.skipif(not os.path.exists(README), reason="README not available")
def test_readme_lists_the_weight_formats_and_architectures():
    """The README's table of formats is the type table's runnable formats, and every architecture is listed."""
    from fastgguf import arch, kernels
    from fastgguf.gguf.constants import GGMLType
    text = open(README, encoding="utf-8").read()
    line = [ln for ln in text.split("## Supported models")[1].split("\n\n") if "Weight formats" in ln][0]
    listed = set(line.split("activation\nformats only):")[1].split(";")[0].replace("\n", " ").replace(" ", "").split(","))
    assert listed == {GGMLType(t).name for t in kernels.WEIGHT_TYPES}
    for name in arch.ARCHS:
        assert f"| `{name}` |" in text


@pytest.mark.skipif(not os.path.exists(os.path.join(REPO, "fastgguf")), reason="source tree not available")
def test_readme_layout_names_every_module_and_no_stale_one():
    """The README's Layout block names every package, module and C file of the source tree, and every file name it
    mentions exists (a module added or renamed without its line fails here)."""
    text = open(README, encoding="utf-8").read()
    block = text.split("## Layout", 1)[1].split("```")[1]
    src = os.path.join(REPO, "fastgguf")
    for d in sorted(glob.glob(os.path.join(src, "*", "__init__.py"))):
        assert f"fastgguf/{os.path.basename(os.path.dirname(d))}/" in block, d
    for pattern in ("**/*.py", "**/*.pyx", "**/*.pxi", "**/*.pxd"):
        for p in glob.glob(os.path.join(src, pattern), recursive=True):
            name = os.path.basename(p)
            if name not in ("__init__.py", "__main__.py"):
                assert re.search(rf"(?<![\w.]){re.escape(name)}\b", block), \
                    f"README Layout omits {os.path.relpath(p, REPO)}"
    for p in glob.glob(os.path.join(REPO, "csrc", "*.[ch]")):
        name = os.path.basename(p)
        assert name in block or name.startswith("fg_quant_") or name[:-2] + ".c" in block \
            or name[:-2] + ".h" in block, f"README Layout omits csrc/{name}"
    for name in set(re.findall(r"\b\w+\.(?:py|pyx|pxi|pxd|c|h)\b", block)):
        found = glob.glob(os.path.join(REPO, "**", name), recursive=True)
        assert found, f"README Layout names {name}, which does not exist"


def _declared(decls):
    """[(name, type)] of C declarations 'type a, *b' (pointers: type 'T *'); comments already removed."""
    out = []
    for decl in decls:
        typ, names = re.match(r"\s*((?:const\s+)?\w+)\s+(.*)", decl, re.S).groups()
        for n in names.split(","):
            n = n.strip()
            out.append((n.lstrip("*").strip(), typ + " *" * n.count("*")))
    return out


def _c_struct(name):
    """The fields of csrc/fg_forward.h's `typedef struct {...} name;`."""
    text = re.sub(r"/\*.*?\*/", "", open(os.path.join(REPO, "csrc", "fg_forward.h"), encoding="utf-8").read(),
                  flags=re.S)
    body = re.search(r"typedef struct \{([^{}]*)\} " + name + ";", text).group(1)
    return _declared(d for d in body.split(";") if d.strip())


def _pxd_struct(name):
    """The fields of fastgguf/_native.pxd's `ctypedef struct name:` block."""
    text = open(os.path.join(REPO, "fastgguf", "_native.pxd"), encoding="utf-8").read()
    body = re.search(r"\n    ctypedef struct " + name + r":\n((?:        .*\n)+)", text).group(1)
    return _declared(line.split("#")[0] for line in body.splitlines() if line.split("#")[0].strip())


def _c_defines(prefix):
    text = open(os.path.join(REPO, "csrc", "fg_forward.h"), encoding="utf-8").read()
    return {k: int(v) for k, v in re.findall(r"#define (" + prefix + r"\w+) (\d+)", text)}


@pytest.mark.skipif(not os.path.exists(os.path.join(REPO, "csrc", "fg_forward.h")), reason="source tree not available")
def test_hparams_have_one_owner(default_model_path):
    """A hyperparameter is one Hparams field (fastgguf/arch/base.py) and one fg_hparams field (csrc/fg_forward.h,
    declared again for Cython in _native.pxd): Hparams.as_c() gives the struct whole, which Weights assigns in one
    go. Before, each was also a copy line in Weights.__init__, and a forgotten one stayed 0 silently. Here: the
    header and the .pxd declare the same fields (names, types, order); fg_model's numbers are all in fg_hparams;
    as_c() fills every field and nothing else, with numbers; its codes are the header's FG_ACT_* and FG_GATING_*;
    and the C struct of a loaded model holds what as_c() gave."""
    from fastgguf.arch import base
    fields = _c_struct("fg_hparams")
    assert fields == _pxd_struct("fg_hparams")
    assert {t for _, t in fields} == {"int", "float"}, fields
    model = _c_struct("fg_model")
    assert model == _pxd_struct("fg_model")
    assert ("hp", "fg_hparams") in model and not [f for f in model if f[1] in ("int", "float", "double")], model
    names = [n for n, _ in fields]
    hp_fields = [f.name for f in dataclasses.fields(base.Hparams)]
    assert set(base.NOT_IN_C) <= set(hp_fields) and not set(base.NOT_IN_C) & set(names)
    dims = dict(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=16, n_ff=128, n_vocab=100, n_rot=16,
                rope_neox=False, norm_eps=1e-5, rope_base=1e4, rope_freq_scale=1.0, attn_scale=0.25, n_ctx_train=128)
    for hp in (base.Hparams(arch="llama", **dims),
               base.Hparams(arch="gpt-oss", **dims, n_expert=4, n_expert_used=2, n_ff_exp=32, n_swa=4,
                            swa_layers=(0,), moe_gating="softmax_weight", moe_act="swiglu_oai"),
               base.Hparams(arch="bert", **dims, causal=False, ffn_act="gelu_tanh", pooling="mean")):
        c = hp.as_c()
        assert sorted(c) == sorted(names), sorted(set(c) ^ set(names))
        assert all(isinstance(v, (int, float)) for v in c.values()), c
    assert _c_defines("FG_ACT_") == {f"FG_ACT_{a.upper()}": i for i, a in enumerate(base.ACTIVATIONS)}
    assert _c_defines("FG_GATING_") == {f"FG_GATING_{g.upper()}": i for i, g in enumerate(base.GATINGS)}
    m = fastgguf.Model(default_model_path)
    want = {k: float(np.float32(v)) if isinstance(v, float) else int(v) for k, v in m.hparams.as_c().items()}
    assert m.weights.c_hparams == want
