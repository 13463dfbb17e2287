"""Load time of the default model: fastgguf's GGUFFile against gguf-py's GGUFReader on the same file.

    pytest benchmarks/bench_load.py --benchmark-only

- fastgguf_parse: header, all metadata, all tensor descriptors (string arrays scanned and validated,
  big ones decoded on first access), then close().
- fastgguf_parse_and_decode: the same plus decoding the 49,152 tokens and 48,900 merges to str.
- gguf_py_reader: gguf.GGUFReader(path) (parses everything eagerly; slow, so 3 rounds).
"""

import pytest

from fastgguf import GGUFFile
from fastgguf.hub import default_model_path


@pytest.fixture(scope="module")
def model():
    return default_model_path(download=True)


def test_fastgguf_parse(benchmark, model):
    def run():
        f = GGUFFile(model)
        f.close()
        return f
    f = benchmark(run)
    assert len(f.tensors) == 272


def test_fastgguf_parse_and_decode(benchmark, model):
    def run():
        with GGUFFile(model) as f:
            md = f.metadata
            return len(md["tokenizer.ggml.tokens"]) + len(md["tokenizer.ggml.merges"])
    assert benchmark(run) == 49152 + 48900


def test_gguf_py_reader(benchmark, model):
    gguf = pytest.importorskip("gguf")
    r = benchmark.pedantic(lambda: gguf.GGUFReader(model), rounds=3, iterations=1)
    assert len(r.tensors) == 272
