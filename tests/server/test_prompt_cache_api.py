"""`fastgguf serve --prompt-cache DIR` (issue 37): a real server stores a long prompt's state in DIR; a later
request sharing its prefix reports the restored tokens in cached_tokens, also after the server restarts (a new
process finds the file), and answers the text of a cold run. A tiny random chat model, prompts of token ids,
--prompt-cache-min-tokens 16. (A folder that cannot be written: tests/engine/test_prompt_cache.py, the warning
Model gives, which is the server's.)"""
import os
import time

import numpy as np
import pytest

import fastgguf
import models
from conftest import Server, http

FLAGS = ("--parallel", "1", "--ctx-size", "256", "--prompt-cache-min-tokens", "16")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return models.build(tmp_path_factory.mktemp("pc") / "m.gguf", "chat", vocab="qwen2", template="Qwen-Qwen3-0.6B",
                        arch="qwen3", seed=5)


def complete(server, ids):
    status, body, _ = http(server, "POST", "/v1/completions", {"prompt": ids, "max_tokens": 3, "temperature": 0})
    assert status == 200, body
    return body["usage"]["prompt_tokens_details"]["cached_tokens"], body["choices"][0]["text"]


def test_cached_tokens_across_requests_and_restarts(model_path, tmp_path):
    p = np.random.default_rng(0).integers(100, 5000, 40).tolist()
    s = Server(model_path, *FLAGS, "--prompt-cache", str(tmp_path / "pc"))
    try:
        assert complete(s, p)[0] == 0
        assert complete(s, p + [11, 12])[0] == 40
        deadline = time.time() + 30  # a writer thread writes the files (and finishes at exit)
        while len([n for n in os.listdir(tmp_path / "pc") if n.endswith(".fgstate")]) < 2 and time.time() < deadline:
            time.sleep(0.05)
    finally:
        s.stop()
    assert len([n for n in os.listdir(tmp_path / "pc") if n.endswith(".fgstate")]) == 2
    s = Server(model_path, *FLAGS, "--prompt-cache", str(tmp_path / "pc"))
    try:
        cached, text = complete(s, p + [13])
    finally:
        s.stop()
    assert cached == 40
    cold = fastgguf.Model(model_path).create_completion(p + [13], max_tokens=3, temperature=0)
    assert text == cold["choices"][0]["text"]


def test_flags_become_model_options():
    """What `fastgguf serve` passes to every fastgguf.Model it loads, one -m or many (serve.model_options)."""
    from fastgguf.cli import build_parser
    from fastgguf.cli.serve import model_options
    args = build_parser().parse_args(["serve", "--prompt-cache", "d", "--prompt-cache-size", "64",
                                      "--prompt-cache-min-tokens", "32"])
    assert model_options(args) == {"prompt_cache": "d", "prompt_cache_size": 64.0, "prompt_cache_min_tokens": 32}
    assert model_options(build_parser().parse_args(["serve"])) == {}


def test_a_served_models_size_counts_its_packed_copy():
    """--max-memory's accounting (server.models._measured): a loaded model's size holds its repack=True copies."""
    from fastgguf.server.models import _measured

    class M:
        def memory(self, n_ctx):
            return {"weights": 1000, "packed": 300, "cache": 10}

    class E:
        n_ctx, parallel = 64, 4

    assert _measured(M(), E(), 1) == 1000 + 300 + 4 * 10
