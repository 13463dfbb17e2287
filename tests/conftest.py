import os
import sys

import pytest

# tests/ mirrors the package (gguf/, tokenizer/, engine/, cli/); its shared helpers (gen_fakes, oracle) live here
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def vocab_path(tmp_path_factory):
    """name -> path of the decompressed ggml-vocab-<name>.gguf (decompressed once per session)."""
    from vocab_files import unpack_vocab
    root = tmp_path_factory.mktemp("vocab")
    done = {}

    def get(name):
        if name not in done:
            done[name] = unpack_vocab(name, root / f"ggml-vocab-{name}.gguf")
        return done[name]
    return get


@pytest.fixture(scope="session")
def default_model_path():
    """Path of the default model (SmolLM2-135M-Instruct Q4_1), downloaded once if needed.

    With FASTGGUF_TEST_NO_DOWNLOAD=1 and no cached copy, tests that use it are skipped."""
    from fastgguf import hub
    path = hub.default_model_path(download=False)
    if not os.path.exists(path):
        if os.environ.get("FASTGGUF_TEST_NO_DOWNLOAD") == "1":
            pytest.skip("default model not cached and FASTGGUF_TEST_NO_DOWNLOAD=1")
        path = hub.default_model_path(download=True)
    return path


def pytest_report_header(config):
    import fastgguf
    from fastgguf import kernels
    where = os.path.dirname(fastgguf.__file__)
    return [f"fastgguf {fastgguf.__version__} from {where}",
            f"kernels: compiled {kernels.compiled()}, available {kernels.available()}, active {kernels.active()}"]


@pytest.fixture()
def repack_copies():
    """Whether Model(repack=True) makes a format's packed copy under the active kernels: the type has a packed layout
    and the active ISA a packed gemv of its own, not the scalar reference's (fastgguf/_runner.pxi's _pack)."""
    from fastgguf import kernels

    def copies(fmt):
        row = next(t for t in kernels.type_table() if t["name"] == fmt)
        isa = kernels.active()
        return bool(row["packed_size"]) and isa != "scalar" and "gemv_packed" in row["kernels"].get(isa, [])
    return copies


def catalogue_model(name):
    """Path of a catalogue model (fastgguf.hub.CATALOGUE), pulled once if needed; skipped when
    FASTGGUF_TEST_NO_DOWNLOAD=1 and it is not cached."""
    from fastgguf import hub
    if not hub.is_cached(name):
        if os.environ.get("FASTGGUF_TEST_NO_DOWNLOAD") == "1":
            pytest.skip(f"{name} not cached and FASTGGUF_TEST_NO_DOWNLOAD=1")
        return hub.pull(name)
    return hub.model_path(name, download=False)


@pytest.fixture(scope="session")
def gemma3_path():
    """The real Gemma 3 270M (Q4_K_M), from the catalogue."""
    return catalogue_model("gemma3-270m")


def pytest_collection_modifyitems(config, items):
    """FASTGGUF_TEST_ISAS=best (or a comma list of ISAs) keeps, of the tests parametrized over instruction sets,
    only those ISAs: the sanitizer leg of CI runs the whole suite on the best ISA (the scalar leg covers scalar).
    FASTGGUF_TEST_ISAS=none keeps none of them: CI's scalar leg (FASTGGUF_ISA=scalar) runs the rest of the suite on
    the scalar kernels, where a test parametrized over ISAs sets its ISA itself and would repeat the first leg."""
    want = os.environ.get("FASTGGUF_TEST_ISAS")
    if not want:
        return
    from fastgguf import kernels
    keep = {kernels.available()[-1]} if want == "best" else set() if want == "none" else set(want.split(","))
    selected, deselected = [], []
    for item in items:
        isa = getattr(item, "callspec", None) and item.callspec.params.get("isa")
        name = isa[0] if isinstance(isa, tuple) else isa
        (deselected if isinstance(name, str) and name not in keep else selected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
