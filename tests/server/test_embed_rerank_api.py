"""Embeddings and rerank over HTTP, on real servers of tiny random-weight qwen3 files whose pooling the file says
(tests/models.py "chat"): the official `openai` client's embeddings.create on a last-pooled model (list input, base64
== float == in-process), /v1/rerank and /rerank (Jina/Cohere shape, as llama-server), the errors in OpenAI's shape,
and /v1/models saying what each model is for."""
import base64

import numpy as np
import pytest

import fastgguf
from conftest import API_KEY, Server, http

import models

DOCS = ["Paris is the capital of France.", "Rust is a programming language.", "The Eiffel tower is in Paris."]


def post(server, path, body, key=API_KEY):
    """(status, parsed JSON) of one raw POST."""
    return http(server, "POST", path, body, key=key)[:2]


def get(server, path):
    status, body, _ = http(server, "GET", path)
    assert status == 200, body
    return body


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("embed_rerank")
    out = {}
    for name, pooling, head in (("embed-last", 3, None), ("rerank-qwen3", 4, "qwen3"), ("per-token", 0, None)):
        out[name] = models.build(root / f"{name}.gguf", "chat", vocab="qwen2", template="Qwen-Qwen3-0.6B", arch="qwen3",
                                 seed=5, pooling=pooling, head=head)
    return out


@pytest.fixture(scope="module")
def servers(files):
    started = {name: Server(path, "--parallel", "4", "--ctx-size", "256") for name, path in files.items()}
    yield started
    for s in started.values():
        s.stop()


def test_openai_client_embeddings_on_a_last_pooled_model(servers, files):
    import openai
    s = servers["embed-last"]
    client = openai.OpenAI(base_url=s.base + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    fl = client.embeddings.create(model="embed-last", input=DOCS, encoding_format="float")
    b64 = client.embeddings.create(model="embed-last", input=DOCS, encoding_format="base64")
    local = fastgguf.Model(files["embed-last"]).embed(DOCS)
    assert [d.index for d in fl.data] == [0, 1, 2]
    for f, b, want in zip(fl.data, b64.data, local):
        vb = b.embedding if isinstance(b.embedding, list) else \
            np.frombuffer(base64.b64decode(b.embedding), "<f4").tolist()
        assert f.embedding == vb == want   # same pooling (last), same bits, whichever route
        assert abs(np.linalg.norm(f.embedding) - 1) < 1e-5
    assert fl.usage.prompt_tokens == sum(len(fastgguf.Model(files["embed-last"]).tokenize(d)) for d in DOCS)
    card = get(s, "/v1/models")["data"][0]
    assert card["pooling"] == "last" and card["embedding"] is True and card["rerank"] is False
    assert card.get("note") is None


def test_rerank_route(servers, files):
    s = servers["rerank-qwen3"]
    local = fastgguf.Model(files["rerank-qwen3"]).rerank("Where is Paris?", DOCS)
    for path in ("/v1/rerank", "/rerank"):
        st, r = post(s, path, {"query": "Where is Paris?", "documents": DOCS})
        assert st == 200, r
        assert r["object"] == "list" and r["model"] == "rerank-qwen3"
        assert r["results"] == local   # sorted, best first: the same scores as in-process
        assert r["usage"]["prompt_tokens"] == r["usage"]["total_tokens"] > 0
    st, r = post(s, "/v1/rerank", {"query": "Where is Paris?", "documents": DOCS, "top_n": 1,
                                   "return_documents": True})
    assert st == 200 and r["results"] == [dict(local[0], document={"text": DOCS[local[0]["index"]]})]
    card = get(s, "/v1/models")["data"][0]
    assert card["pooling"] == "rank" and card["rerank"] is True and card["embedding"] is False
    st, r = post(s, "/v1/rerank", {"query": "q", "documents": DOCS}, key=None)
    assert st == 401 and set(r["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("server_name,path,body,param,code,says", [
    ("rerank-qwen3", "/v1/rerank", {"query": "q", "documents": []}, "documents", None, "non-empty"),
    ("rerank-qwen3", "/v1/rerank", {"query": "q"}, "documents", None, "non-empty"),
    ("rerank-qwen3", "/v1/rerank", {"documents": ["d"]}, "query", None, "query"),
    ("rerank-qwen3", "/v1/rerank", {"query": "q", "documents": ["d"], "top_n": 0}, "top_n", None, "top_n"),
    ("rerank-qwen3", "/rerank", {"query": "word " * 300, "documents": ["d"]}, "documents",
     "context_length_exceeded", "maximum context length is 256"),
    ("rerank-qwen3", "/v1/embeddings", {"input": "x"}, "model", None, "/v1/rerank"),
    ("embed-last", "/v1/rerank", {"query": "q", "documents": ["d"]}, "model", "model_not_reranker",
     "pooling 'last'"),
    ("per-token", "/v1/embeddings", {"input": "x"}, "input", None, "not OAI compatible"),
])
def test_errors_in_openai_shape(servers, server_name, path, body, param, code, says):
    st, r = post(servers[server_name], path, body)
    assert st == 400, r
    err = r["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert err["param"] == param and err["code"] == code and says in err["message"]


def test_models_note_on_a_chat_model(server):
    card = get(server, "/v1/models")["data"][0]   # SmolLM2: no pooling_type
    assert card["pooling"] is None and card["embedding"] is False and card["rerank"] is False
    assert "not meant for retrieval" in card["note"]
