"""llama-server's native completion (POST /completion and /completions, fastgguf.api.llama) on real servers: the
result's shape, a stream of per-token results and its final one, token-id and mixed prompts, several prompts, n_probs,
logit_bias in its list and object forms, ignore_eos, response_fields, server defaults (--seed, --n-predict), and bad
requests in llama-server's error shape. Also llama-server's other conventions: --alias a,b with --tags, --no-slots,
--pooling, embedding inputs of text parts, and the Responses stream's timings and prompt_progress."""
import json
import urllib.request

import pytest

from conftest import API_KEY, Server, http

PROMPT = "I believe the meaning of life is"


def post(server, body, path="/completion"):
    return http(server, "POST", path, body)[:2]


def stream(server, body):
    """The data events of a streamed /completion (no [DONE]: the stream just ends)."""
    req = urllib.request.Request(server.base + "/completion", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
    out = []
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            line = line.decode().strip()
            assert line != "data: [DONE]"
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


@pytest.fixture(scope="module")
def llama_like(default_model_path):
    """A server started with llama-server's flags: request defaults, several aliases and tags, no /slots."""
    s = Server(default_model_path, "--parallel", "2", "--ctx-size", "256", "--seed", "42", "--n-predict", "16",
               "--temp", "0", "--alias", "tiny,fim,code", "--tags", "chat,small", "--no-slots", "--pooling", "none")
    yield s
    s.stop()


def test_result_shape(server):
    status, r = post(server, {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "return_tokens": True})
    assert status == 200, r
    assert isinstance(r["content"], str) and r["stop"] is True and r["stop_type"] in ("limit", "eos")
    assert len(r["tokens"]) == r["tokens_predicted"] == r["timings"]["predicted_n"] <= 8
    assert r["tokens_evaluated"] == len(http(server, "POST", "/tokenize", {"content": PROMPT})[1]["tokens"])
    assert r["timings"]["prompt_n"] + r["timings"]["cache_n"] == r["tokens_evaluated"]
    assert r["truncated"] is False and isinstance(r["has_new_line"], bool) and r["prompt"].endswith(PROMPT)
    g = r["generation_settings"]
    assert g["n_predict"] == 8 and g["temperature"] == 0 and g["logit_bias"] == [] and g["ignore_eos"] is False
    assert g["mirostat"] == 0 and g["samplers"] == ["penalties", "top_k", "top_p", "min_p", "temperature"]
    # without return_tokens the final result's tokens are empty; /completions is the same endpoint
    status, r2 = post(server, {"prompt": PROMPT, "n_predict": 8, "temperature": 0}, "/completions")
    assert status == 200 and r2["tokens"] == [] and r2["content"] == r["content"]


def test_stream_matches_non_stream(server):
    body = {"prompt": PROMPT, "n_predict": 8, "temperature": 0}
    events = stream(server, body)
    *partials, final = events
    assert partials and all(e["stop"] is False and len(e["tokens"]) == 1 for e in partials)
    assert final["stop"] is True and final["stop_type"] in ("limit", "eos") and "generation_settings" in final
    assert final["timings"]["predicted_n"] == len(partials)
    assert "".join(e["content"] for e in events) == post(server, body)[1]["content"]


def test_token_ids_mixed_and_several_prompts(server):
    ids = http(server, "POST", "/tokenize", {"content": PROMPT, "add_special": True})[1]["tokens"]
    body = {"n_predict": 4, "temperature": 0}
    one = post(server, {**body, "prompt": ids})[1]
    assert isinstance(one["content"], str)
    status, many = post(server, {**body, "prompt": [ids, PROMPT, {"prompt_string": PROMPT}]})
    assert status == 200 and [r["index"] for r in many] == [0, 1, 2]
    assert len({r["content"] for r in many}) == 1 and many[0]["content"] == one["content"]
    status, mixed = post(server, {**body, "prompt": [1, 2, 3, PROMPT, 4, PROMPT]})
    assert status == 200 and mixed["tokens_evaluated"] > 6


def test_n_probs(server):
    r = post(server, {"prompt": PROMPT, "n_predict": 3, "temperature": 0, "n_probs": 5})[1]
    probs = r["completion_probabilities"]
    assert len(probs) == r["tokens_predicted"]
    for p in probs:
        assert set(p) == {"id", "token", "bytes", "logprob", "top_logprobs"} and p["logprob"] <= 0
        assert len(p["top_logprobs"]) == 5 and p["top_logprobs"][0]["id"] == p["id"]  # greedy: the best one
        assert bytes(p["bytes"]).decode("utf-8", "ignore") == p["token"]
    events = stream(server, {"prompt": PROMPT, "n_predict": 3, "temperature": 0, "n_probs": 2})
    assert all(len(e["completion_probabilities"]) == 1 for e in events[:-1])


@pytest.mark.parametrize("form", ["ids-list", "ids-object", "text-list", "text-object"])
def test_logit_bias_forms(server, form):
    base = {"prompt": PROMPT, "n_predict": 1, "temperature": 0, "n_probs": 1}
    first = post(server, base)[1]["completion_probabilities"][0]
    tid, text = first["id"], first["token"]
    key = tid if form.startswith("ids") else text
    bias = {str(key): -100} if form.endswith("object") else [[key, False]]
    r = post(server, {**base, "logit_bias": bias})[1]
    assert r["completion_probabilities"][0]["id"] != tid
    assert any(b["token"] == tid for b in r["generation_settings"]["logit_bias"])


def test_ignore_eos_bans_end_of_generation(server):
    r = post(server, {"prompt": PROMPT, "n_predict": 4, "ignore_eos": True})[1]
    bias = r["generation_settings"]["logit_bias"]
    assert bias and all(b["bias"] is None for b in bias)  # -inf: null in JSON
    assert r["generation_settings"]["ignore_eos"] is True and r["stop_type"] == "limit"


def test_response_fields(server):
    fields = ["content", "generation_settings/n_predict", "no/such"]
    r = post(server, {"prompt": PROMPT, "n_predict": 2, "response_fields": fields})[1]
    assert set(r) == {"content", "generation_settings/n_predict"} and r["generation_settings/n_predict"] == 2


@pytest.mark.parametrize("body,param", [
    ({}, "prompt"),
    ({"prompt": "x " * 600}, "prompt"),
    ({"prompt": [1, 10 ** 9]}, "prompt"),
    ({"prompt": {"prompt_string": "hi", "multimodal_data": ["AAAA"]}}, "prompt"),
    ({"prompt": "hi", "logit_bias": [[1, "x"]]}, "logit_bias"),
    ({"prompt": "hi", "logit_bias": [[10 ** 9, -1]]}, "logit_bias"),
    ({"prompt": "hi", "logit_bias": 5}, "logit_bias"),
    ({"prompt": "hi", "n_predict": -2}, "n_predict"),
    ({"prompt": "hi", "mirostat": 2}, "mirostat"),
    ({"prompt": "hi", "post_sampling_probs": True}, "post_sampling_probs"),
    ({"prompt": "hi", "samplers": ["temperature", "top_k"]}, "samplers"),
    ({"prompt": "hi", "temperature": -1}, "temperature"),
    ({"prompt": "hi", "n_probs": 10 ** 6}, "n_probs"),
])
def test_bad_requests(server, body, param):
    status, r = post(server, body)
    assert status == 400, r
    e = r["error"]
    assert e["code"] == 400 and e["type"] and e["message"] and e["param"] == param
    assert "Traceback" not in e["message"]


def test_llama_server_flags(llama_like):
    r = post(llama_like, {"prompt": PROMPT})[1]
    g = r["generation_settings"]
    assert g["seed"] == 42 and g["n_predict"] == 16 and g["temperature"] == 0 and r["tokens_predicted"] <= 16
    p = http(llama_like, "GET", "/props")[1]
    assert p["default_generation_settings"]["params"]["seed"] == 42 and p["total_slots"] == 2
    status, s = http(llama_like, "GET", "/slots")[:2]
    assert status == 501 and s["error"]["type"] == "not_supported_error"
    m = http(llama_like, "GET", "/v1/models")[1]["data"][0]
    assert m["id"] == "code" and m["aliases"] == ["code", "fim", "tiny"] and m["tags"] == ["chat", "small"]
    assert http(llama_like, "POST", "/v1/completions", {"model": "fim", "prompt": "hi", "max_tokens": 1})[0] == 200


def test_v1_completions_is_still_openai(server, model_name):
    status, r = http(server, "POST", "/v1/completions", {"model": model_name, "prompt": PROMPT, "max_tokens": 2})[:2]
    assert status == 200 and r["object"] == "text_completion" and len(r["choices"]) == 1


def test_pooling_none_is_refused_by_v1_embeddings(llama_like):
    status, r = http(llama_like, "POST", "/v1/embeddings", {"input": "hello"})[:2]
    assert status == 400 and "Pooling type 'none'" in r["error"]["message"]
    assert http(llama_like, "GET", "/v1/models")[1]["data"][0]["pooling"] == "none"


def test_embedding_text_parts(server):
    parts = {"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]}
    status, r = http(server, "POST", "/v1/embeddings", {"input": ["hello world", parts]})[:2]
    assert status == 200 and r["data"][0]["embedding"] == r["data"][1]["embedding"]
    image = {"content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    for bad in ([parts["content"]], [{"content": "hello"}], [image], image):
        status, r = http(server, "POST", "/v1/embeddings", {"input": bad})[:2]
        assert status == 400 and r["error"]["param"] == "input", r


def test_responses_stream_timings_and_progress(server, model_name):
    body = {"model": model_name, "input": "Say hi", "max_output_tokens": 4, "stream": True,
            "timings_per_token": True, "return_progress": True}
    req = urllib.request.Request(server.base + "/v1/responses", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        events = [json.loads(line[6:]) for line in (x.decode().strip() for x in r) if line.startswith("data: ")]
    progress = [e for e in events if "prompt_progress" in e]
    assert len(progress) == 1 and progress[0]["type"] == "response.in_progress"
    p = progress[0]["prompt_progress"]
    assert p["total"] == p["processed"] > 0 and 0 <= p["cache"] <= p["processed"]
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all("predicted_per_second" in e["timings"] for e in deltas)
    done = events[-1]
    assert done["type"] in ("response.completed", "response.incomplete")
    assert done["timings"]["predicted_n"] == done["response"]["usage"]["output_tokens"]
