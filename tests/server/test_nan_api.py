"""A model that produces NaN is the server's fault, not the client's (issue 24, defect 5): 500 server_error in
OpenAI's shape on completions, logprobs and embeddings, while a healthy request beside it is answered. 0.2 answered
400 ('is every token banned by logit_bias?') and returned NaN embeddings."""
import pytest

from conftest import Server, http
import models

BAD, GOOD = 1000, [300, 301, 302]


@pytest.fixture(scope="module")
def nan_server(tmp_path_factory):
    path = models.build(tmp_path_factory.mktemp("nan") / "m.gguf", "vocab", vocab="llama-bpe", nan_embd=[BAD])
    s = Server(path, "--parallel", "2", "--ctx-size", "64", "--threads", "1", api_key=None)
    yield s
    s.stop()


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": GOOD + [BAD], "max_tokens": 3, "temperature": 0}),
    ("/v1/completions", {"prompt": GOOD, "max_tokens": 3, "temperature": 0, "logit_bias": {str(BAD): 100}}),
    ("/v1/completions", {"prompt": GOOD + [BAD], "max_tokens": 1, "logprobs": 2, "echo": True}),
    ("/v1/embeddings", {"input": [GOOD, GOOD + [BAD]]}),
])
def test_nan_is_a_server_error(nan_server, path, body):
    status, resp, _ = http(nan_server, "POST", path, body, key=None)
    assert status == 500, resp
    assert resp["error"]["type"] == "server_error" and "NaN" in resp["error"]["message"]
    status, resp, _ = http(nan_server, "POST", "/v1/completions", {"prompt": GOOD, "max_tokens": 2}, key=None)
    assert status == 200 and resp["choices"][0]["finish_reason"] == "length"
