"""Ollama's API (/api/...) on the real server of tests/server/conftest.py, driven by the official `ollama` client:
list / show / ps / version, chat and generate streamed and not (the same greedy text as the OpenAI routes), NDJSON
streaming by default, timings and done_reason, format onto structured output, embed and the legacy embeddings, the
errors in Ollama's shape ({"error": message}) and the API key still required."""
import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import API_KEY

from fastgguf.api.ollama import Shaper

ollama = pytest.importorskip("ollama")

HI = [{"role": "user", "content": "Write a short story about a cat."}]
GREEDY = {"num_predict": 12, "temperature": 0}


@pytest.fixture(scope="module")
def oc(server):
    return ollama.Client(host=server.base, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)


def raw(server, path, body=None, key=API_KEY, method="POST"):
    """(status, content type, body bytes) of one raw request."""
    h = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.base + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers.get("content-type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("content-type"), e.read()


def test_list_show_ps_version(server, oc, model_name):
    models = oc.list().models
    assert [m.model for m in models] == [model_name]
    d = models[0].details
    assert d.format == "gguf" and d.family == "llama" and d.parameter_size == "135M" and d.quantization_level
    sh = oc.show(model_name + ":latest")  # Ollama's default tag is accepted
    status, _, by_name = raw(server, "/api/show", {"name": model_name})  # older clients' field
    assert status == 200 and json.loads(by_name)["template"] == sh.template
    assert sh.modelinfo["general.architecture"] == "llama" and sh.modelinfo["llama.context_length"] > 0
    assert "completion" in sh.capabilities and "im_start" in sh.template
    ps = oc.ps().models
    assert ps[0].model == model_name and ps[0].context_length == 512
    assert raw(server, "/api/version", method="GET")[0] == 200


def test_chat_streamed_equals_whole_equals_openai(oc, client, model_name):
    whole = oc.chat(model=model_name, messages=HI, options=GREEDY, stream=False, keep_alive="5m")
    assert whole.done and whole.done_reason == "length" and whole.eval_count == 12
    assert whole.prompt_eval_count > 0 and whole.total_duration >= whole.eval_duration > 0
    assert whole.load_duration == 0 and whole.prompt_eval_duration > 0
    parts = list(oc.chat(model=model_name, messages=HI, options=GREEDY, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done and parts[-1].done_reason == "length"
    assert parts[-1].eval_count == 12 and parts[-1].message.content == ""
    assert "".join(p.message.content for p in parts) == whole.message.content
    oa = client.chat.completions.create(model=model_name, messages=HI, max_tokens=12, temperature=0)
    assert oa.choices[0].message.content == whole.message.content
    assert oa.usage.prompt_tokens == whole.prompt_eval_count


def test_generate_templated_and_raw(oc, client, model_name):
    g = oc.generate(model=model_name, prompt=HI[0]["content"], options=GREEDY, stream=False)
    c = oc.chat(model=model_name, messages=HI, options=GREEDY, stream=False)
    assert g.response == c.message.content and g.done_reason == "length"
    opts = {"num_predict": 30, "temperature": 0, "stop": ["."]}
    r = oc.generate(model=model_name, prompt="The capital of France is", raw=True, options=opts, stream=False)
    oa = client.completions.create(model=model_name, prompt="The capital of France is", max_tokens=30,
                                   temperature=0, stop=["."])
    assert r.response == oa.choices[0].text and r.done_reason == "stop"
    parts = list(oc.generate(model=model_name, prompt="The capital of France is", raw=True, options=opts,
                             stream=True))
    assert "".join(p.response for p in parts) == r.response and parts[-1].eval_count == r.eval_count
    load = oc.generate(model=model_name, prompt="")  # Ollama's way to load a model
    assert load.done and load.done_reason == "load"


def test_stream_is_the_default_ndjson(server, model_name):
    status, ctype, body = raw(server, "/api/chat", {"model": model_name, "messages": HI,
                                                    "options": {"num_predict": 3, "temperature": 0}})
    assert status == 200 and ctype.startswith("application/x-ndjson")
    lines = [json.loads(x) for x in body.decode().splitlines()]
    assert len(lines) >= 2 and lines[-1]["done"] and not lines[0]["done"] and lines[-1]["eval_count"] == 3


@pytest.mark.parametrize("num_predict,stream", [(-1, False), (-2, True)])
def test_negative_num_predict_runs_to_the_context(server, oc, model_name, num_predict, stream):
    """num_predict -1 (no limit) and -2 (fill the context) generate until end of generation or a full context (the
    server's 512 tokens), not SamplingParams' default of 256: a counting prompt that does not stop early ends with
    done_reason "length" when prompt and reply fill the context (its last token, sampled from the full cache, is
    the one more)."""
    prompt = "1, 2, 3, 4, 5, 6, 7, 8,"
    opts = {"num_predict": num_predict, "temperature": 0}
    r = oc.generate(model=model_name, prompt=prompt, raw=True, options=opts, stream=stream)
    last = list(r)[-1] if stream else r
    assert last.done_reason == "length" and last.eval_count > 256, last
    assert last.prompt_eval_count + last.eval_count == 512 + 1, last


def test_format_is_structured_output(oc, client, model_name):
    """format (a JSON Schema, or "json") constrains the reply exactly as response_format does: the same text."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    msgs = [{"role": "user", "content": "Give a number as JSON."}]
    for fmt, rf in ((schema, {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}),
                    ("json", {"type": "json_object"})):
        r = oc.chat(model=model_name, messages=msgs, format=fmt, options={"num_predict": 24, "temperature": 0},
                    stream=False)
        oa = client.chat.completions.create(model=model_name, messages=msgs, max_tokens=24, temperature=0,
                                            response_format=rf)
        assert r.message.content == oa.choices[0].message.content and r.message.content.startswith("{")
        if r.done_reason == "stop":
            assert isinstance(json.loads(r.message.content), dict)


def test_tool_history_is_accepted(oc, model_name):
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "22 C, sunny", "tool_name": "get_weather"}]
    r = oc.chat(model=model_name, messages=msgs, options={"num_predict": 4}, stream=False)
    assert r.done and r.eval_count == 4


def test_embed_and_legacy_embeddings(oc, client, model_name):
    e = oc.embed(model=model_name, input=["red", "green"])
    assert len(e.embeddings) == 2 and e.prompt_eval_count > 0
    oa = client.embeddings.create(model=model_name, input=["red", "green"])
    np.testing.assert_allclose(e.embeddings[1], oa.data[1].embedding, rtol=1e-6)
    legacy = oc.embeddings(model=model_name, prompt="red")
    np.testing.assert_allclose(legacy.embedding, e.embeddings[0], rtol=1e-6)


@pytest.mark.parametrize("path,body,status,says", [
    ("/api/chat", {"model": "nope", "messages": HI}, 404, "model 'nope' not found"),
    ("/api/chat", {"messages": HI}, 400, "model is required"),
    ("/api/chat", {"model": "M", "messages": HI, "options": {"temperature": -1}}, 400, "temperature"),
    ("/api/chat", {"model": "M", "messages": HI, "options": {"mirostat_x": 1}}, 400, "options.mirostat_x"),
    ("/api/chat", {"model": "M", "messages": HI, "think": "maybe"}, 400, "think"),
    ("/api/chat", {"model": "M", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, 400,
     "images"),
    ("/api/generate", {"model": "M", "prompt": "x", "suffix": "y"}, 400, "suffix"),
    ("/api/embed", {"model": "M", "input": 3}, 400, "input"),
    ("/api/embeddings", {"model": "M", "prompt": ["a", "b"]}, 400, "prompt must be a string"),  # (only a's was sent)
    ("/api/generate", {"model": "M", "prompt": "x", "raw": "false"}, 400, "raw must be a boolean"),  # (was raw)
    ("/api/generate", {"model": "M", "prompt": "x", "system": 5}, 400, "system must be a string"),
    ("/api/show", {"name": "nope"}, 404, "model 'nope' not found"),
    ("/api/show", {}, 400, "model is required"),
    ("/api/chat", b"{not json", 400, "not valid JSON"),
])
def test_errors_in_ollama_shape(server, model_name, path, body, status, says):
    if isinstance(body, dict) and body.get("model") == "M":
        body = dict(body, model=model_name)
    got, _, text = raw(server, path, body)
    err = json.loads(text)["error"]
    assert got == status and isinstance(err, str) and says in err, (got, err)


def test_error_through_the_client_and_api_key(server, oc, model_name):
    with pytest.raises(ollama.ResponseError) as e:
        list(oc.chat(model=model_name, messages=HI, options={"top_k": -2}))
    assert e.value.status_code == 400
    assert raw(server, "/api/tags", key=None, method="GET")[0] == 401
    assert raw(server, "/api/chat", {"model": model_name, "messages": HI}, key="wrong")[0] == 401


def test_errors_before_the_route_in_ollama_shape(server, model_name):
    """Errors raised before an /api/ route runs (the API key's Guard, an unknown route) are Ollama's too."""
    got, _, text = raw(server, "/api/chat", {"model": model_name, "messages": HI}, key="wrong")
    assert got == 401 and isinstance(json.loads(text)["error"], str), (got, text)
    got, _, text = raw(server, "/api/x", {"model": model_name})
    assert got == 404 and json.loads(text) == {"error": "Unknown route POST /api/x"}, (got, text)


def test_bodies_are_parsed_and_shaped_off_the_event_loop(model, model_name, monkeypatch):
    """Every Ollama POST route parses its JSON and maps its fields in a worker thread, as the other routes prepare
    theirs (0.4 did both on the event loop: a 6.8 MB /api/chat stalled /health for most of a second). Checked where
    it runs, not by timing: the app in-process, json.loads and the mapping's model check recording whether an
    event loop runs in their thread."""
    import asyncio
    from fastapi.testclient import TestClient
    from fastgguf.api import ollama as O
    from fastgguf.server import create_app
    calls = []

    def spy(fn, name):
        def wrapped(*a, **kw):
            try:
                asyncio.get_running_loop()
                calls.append((name, "event loop"))
            except RuntimeError:
                calls.append((name, "worker"))
            return fn(*a, **kw)
        return wrapped
    monkeypatch.setattr(json, "loads", spy(json.loads, "json.loads"))
    monkeypatch.setattr(O, "check_model", spy(O.check_model, "check_model"))
    http = TestClient(create_app(model))  # (no lifespan: nothing here reaches the engine)
    bad = {"temperature": -1}  # refused by prepare_*, after the body was parsed and mapped
    for path, body in (("/api/chat", {"messages": HI, "options": bad}),
                       ("/api/generate", {"prompt": "x", "options": bad}),
                       ("/api/embed", {"input": "x", "dimensions": 7}),
                       ("/api/embeddings", {"prompt": "x", "dimensions": 7}), ("/api/show", {})):
        calls.clear()
        r = http.post(path, content=json.dumps(dict(body, model=model_name)),
                      headers={"Content-Type": "application/json"})
        assert r.status_code == (200 if path == "/api/show" else 400), (path, r.text)
        assert {name for name, _ in calls} == {"json.loads", "check_model"}, (path, calls)
        assert all(where == "worker" for _, where in calls), (path, calls)


def test_shaper_tool_calls_and_thinking():
    """The OpenAI chunks of a reply with reasoning and a streamed tool call -> Ollama's lines: thinking in
    message.thinking, the call whole (arguments an object) in the line where its choice finishes."""
    class M:
        path = "/x/model.gguf"
    s = Shaper(M(), chat=True, message=True)
    chunk = lambda delta, finish=None: {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # noqa
    lines = s.lines([chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "hmm"}),
                     chunk({"tool_calls": [{"index": 0, "id": "c", "type": "function",
                                            "function": {"name": "f", "arguments": "{\"a\": "}}]}),
                     chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
                     chunk({}, "tool_calls")])
    assert [ln["message"].get("thinking") for ln in lines] == ["hmm", None]
    assert lines[1]["message"]["tool_calls"] == [{"function": {"name": "f", "arguments": {"a": 1}}}]
    assert all(ln["model"] == "model" and ln["done"] is False for ln in lines)


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "top_k": 20, "top_p": 0.9, "seed": 7}],
                         ids=["greedy", "seeded"])
def test_same_request_same_text_through_both_apis(oc, client, model_name, sampling):
    """The same request through OpenAI's chat completions and Ollama's /api/chat (streamed) gives the same tokens:
    one prepare_chat, one Scheduler, one Sequence."""
    msgs = [{"role": "system", "content": "You are terse."}, *HI]
    oa = client.chat.completions.create(model=model_name, messages=msgs, max_tokens=40,
                                        extra_body={"top_k": sampling.get("top_k")} if "top_k" in sampling else None,
                                        **{k: v for k, v in sampling.items() if k != "top_k"})
    parts = list(oc.chat(model=model_name, messages=msgs, options={"num_predict": 40, **sampling}, stream=True))
    assert "".join(p.message.content for p in parts) == oa.choices[0].message.content
    assert parts[-1].eval_count == oa.usage.completion_tokens
    assert parts[-1].done_reason == oa.choices[0].finish_reason


def test_body_mapping(model, model_name):
    """Ollama's fields onto the OpenAI body prepare_chat / prepare_completion read."""
    from fastgguf.engine.scheduler import QueueFull
    from fastgguf.api.ollama import chat_body, generate_body
    from fastgguf.server.errors import error_response
    body, mode = chat_body({"model": model_name + ":latest", "messages": HI, "think": False, "keep_alive": 0,
                            "options": {"num_predict": -1, "num_ctx": 99999, "top_k": 3, "stop": ["x"]}}, model)
    assert body == {"stream": True, "max_tokens": None, "top_k": 3, "stop": ["x"], "messages": HI} and mode == "none"
    assert chat_body({"model": model_name, "messages": HI, "think": "high", "stream": False}, model)[1] == "parsed"
    kind, body, _ = generate_body({"model": model_name, "prompt": "p", "system": "s", "format": "json"}, model)
    assert kind == "chat" and body["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": "p"}]
    assert body["response_format"] == {"type": "json_object"}
    assert generate_body({"model": model_name, "prompt": "p", "raw": True}, model)[:2] == (
        "completion", {"stream": True, "prompt": "p"})
    r = error_response(QueueFull("busy", retry_after=2), "/api/chat")  # Ollama's "server busy"
    assert r.status_code == 503 and json.loads(r.body) == {"error": "busy"} and r.headers["retry-after"] == "2"
