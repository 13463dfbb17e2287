"""API details (issue 24, defect 12): request fields are typed strictly (pydantic's lax mode turned `n: true` into 1
and `max_tokens: "5"` into 5 before fastgguf's checks), and the model card answers only to the served id, never to
the server's path of the file."""
import urllib.parse

import pytest

from conftest import http


def _call(server, path, body=None):
    return http(server, "GET" if body is None else "POST", path, body, key=server.api_key)[:2]


@pytest.mark.parametrize("route,field,value", [
    ("/v1/completions", "n", True), ("/v1/completions", "max_tokens", "5"), ("/v1/completions", "max_tokens", 5.0),
    ("/v1/chat/completions", "temperature", "0.5"), ("/v1/chat/completions", "stream", 1),
    ("/v1/chat/completions", "logprobs", "true"), ("/v1/completions", "seed", False),
    ("/tokenize", "add_special", "no"), ("/detokenize", "tokens", [1, True]),
])
def test_lax_values_are_400_naming_the_field(server, route, field, value):
    base = {"/v1/completions": {"prompt": "Hi", "max_tokens": 1},
            "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1},
            "/tokenize": {"content": "Hi"}, "/detokenize": {"tokens": [1]}}[route]
    status, body = _call(server, route, {**base, field: value})
    assert status == 400 and body["error"]["param"] == field, body


def test_a_json_integer_is_still_a_float(server):
    status, body = _call(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 1, "temperature": 0, "top_p": 1})
    assert status == 200, body


def test_the_model_card_answers_only_to_the_served_id(server, default_model_path, model_name):
    assert _call(server, f"/v1/models/{model_name}")[0] == 200
    assert _call(server, f"/v1/models/{model_name}.gguf")[0] == 200
    status, body = _call(server, "/v1/models/" + urllib.parse.quote(default_model_path))
    assert status == 404 and body["error"]["code"] == "model_not_found"
    # nor in a body: answering 200 to the right path and 404 to others would let a client probe for it
    status, body = _call(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 1, "model": default_model_path})
    assert status == 404 and body["error"]["param"] == "model"
