"""The OpenAI-compatible server, end to end: a real uvicorn server (conftest) driven by the official openai client.

Every text is checked against the same request run alone in-process through model.generate / model.chat with the
same SamplingParams and seed: batching changes who waits, never what is computed."""
import asyncio
import json
import time
from typing import List, Optional, Union
import urllib.error
import urllib.request

import pytest

from conftest import API_KEY, Server, http

MSGS = [{"role": "user", "content": "Name three colors."}]


def solo_chat(model, messages, **kw):
    return model.chat(messages, **kw)


# -- basics --------------------------------------------------------------------------------------------------------

def test_health_models_and_unknown_model(server, client, model_name):
    assert http(server, "GET", "/health", key=None)[:2] == (200, {"status": "ok"})
    assert [m.id for m in client.models.list().data] == [model_name]
    assert client.models.retrieve(model_name).id == model_name
    for path in ("/models", "/v1/models"):
        assert http(server, "GET", path)[1]["data"][0]["id"] == model_name
    status, body, _ = http(server, "GET", "/v1/models/no-such-model")
    assert status == 404 and body["error"]["code"] == "model_not_found"


def test_chat_matches_solo_run_and_usage(client, model, model_name):
    from fastgguf.engine.chat import chat_prompt_ids
    r = client.chat.completions.create(model=model_name, messages=MSGS, max_tokens=10, temperature=0)
    solo = solo_chat(model, MSGS, max_tokens=10, temperature=0)
    assert r.object == "chat.completion" and r.model == model_name and r.id.startswith("chatcmpl-")
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content == solo.text
    assert c.finish_reason == solo.finish_reason
    assert r.usage.prompt_tokens == len(chat_prompt_ids(model, MSGS)) == solo.usage.prompt_tokens
    assert r.usage.completion_tokens == solo.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_matches_solo_run_seeded(client, model, model_name):
    r = client.completions.create(model=model_name, prompt="The sky is", max_tokens=8, temperature=0.9, seed=7,
                                  extra_body={"top_k": 0, "min_p": 0.1})
    solo = model.generate("The sky is", max_tokens=8, temperature=0.9, seed=7, top_k=0, min_p=0.1)
    assert r.object == "text_completion" and r.choices[0].text == solo.text
    assert r.usage.prompt_tokens == solo.usage.prompt_tokens
    assert r.usage.completion_tokens == solo.usage.completion_tokens


def test_stream_joined_equals_non_stream(client, model_name):
    kw = dict(model=model_name, messages=MSGS, max_tokens=12, temperature=0)
    full = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason is not None]
    assert len(finals) == 1 and finals[0] is chunks[-2]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert finals[0].choices[0].finish_reason == full.choices[0].finish_reason

    ckw = dict(model=model_name, prompt="Once upon a time", max_tokens=12, temperature=0)
    cfull = client.completions.create(**ckw)
    cchunks = list(client.completions.create(stream=True, **ckw))
    assert "".join(c.choices[0].text for c in cchunks) == cfull.choices[0].text
    assert [c.choices[0].finish_reason for c in cchunks].count(None) == len(cchunks) - 1


def test_stop_strings(client, model, model_name):
    base = model.generate("Once upon a time", max_tokens=16, temperature=0).text
    stop = base[len(base) // 2:len(base) // 2 + 3]
    assert stop.strip()
    r = client.completions.create(model=model_name, prompt="Once upon a time", max_tokens=16, temperature=0,
                                  stop=[stop, "zzzz"])
    solo = model.generate("Once upon a time", max_tokens=16, temperature=0, stop=[stop, "zzzz"])
    assert r.choices[0].text == solo.text == base[:base.index(stop)]
    assert r.choices[0].finish_reason == "stop"
    # streamed: the stop string never appears, even split across chunks
    chunks = list(client.completions.create(model=model_name, prompt="Once upon a time", max_tokens=16,
                                            temperature=0, stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == solo.text


def test_logprobs(client, model_name):
    r = client.chat.completions.create(model=model_name, messages=MSGS, max_tokens=5, temperature=0, logprobs=True,
                                       top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for e in content:
        assert len(e.top_logprobs) == 3 and e.logprob <= 0
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == pytest.approx(e.logprob)
    assert "".join(e.token for e in content) == r.choices[0].message.content
    c = client.completions.create(model=model_name, prompt="Hello", max_tokens=4, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == c.usage.completion_tokens
    assert all(len(t) <= 2 for t in lp.top_logprobs) and lp.text_offset[0] == 0


def test_n2_choices_and_cached_prompt(client, model, model_name):
    r = client.chat.completions.create(model=model_name, messages=MSGS, max_tokens=6, temperature=1.0, seed=11, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].message.content == solo_chat(model, MSGS, max_tokens=6, temperature=1.0, seed=11).text
    assert r.choices[1].message.content == solo_chat(model, MSGS, max_tokens=6, temperature=1.0, seed=12).text
    again = client.chat.completions.create(model=model_name, messages=MSGS, max_tokens=2, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_echo_and_token_prompt(client, model, model_name):
    ids = list(model.tokenize("Hello there"))
    r = client.completions.create(model=model_name, prompt=ids, max_tokens=4, temperature=0, echo=True)
    solo = model.generate(ids, max_tokens=4, temperature=0)
    assert r.choices[0].text == model.detokenize(ids) + solo.text


def metric(server, name):
    text = http(server, "GET", "/metrics")[1]
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def wait_for_metric(server, name, ok, timeout=60):
    """/metrics' `name` once ok(value) holds, polled: a test waits for the server's state, never a fixed time. The
    deadline is generous (a loaded machine is slow, not wrong); past it the test fails with the last value."""
    deadline = time.time() + timeout
    while True:
        value = metric(server, name)
        if ok(value):
            return value
        assert time.time() < deadline, f"{name} is still {value} after {timeout} s"
        time.sleep(0.05)


def test_n2_evaluates_the_prompt_once(server, client, model, model_name):
    ids = list(model.tokenize("A prompt that nobody has sent before, about seven green fruits:"))
    before = metric(server, "fastgguf_prompt_tokens_evaluated_total")
    copied = metric(server, "fastgguf_prompt_tokens_copied_total")
    r = client.completions.create(model=model_name, prompt=ids, max_tokens=5, temperature=0.9, seed=5, n=2)
    cached = r.usage.prompt_tokens_details.cached_tokens
    assert metric(server, "fastgguf_prompt_tokens_evaluated_total") - before == len(ids) - cached
    assert metric(server, "fastgguf_prompt_tokens_copied_total") - copied == len(ids)
    assert r.usage.prompt_tokens == len(ids) and cached < len(ids)
    for j in range(2):
        assert r.choices[j].text == model.generate(ids, max_tokens=5, temperature=0.9, seed=5 + j).text


def test_echo_logprobs_of_the_prompt(client, model, model_name):
    """echo + logprobs: the prompt tokens' logprobs too (the first null, as OpenAI and llama-cpp-python), equal to
    a full recompute; then the generated tokens'."""
    import numpy as np
    ids = list(model.tokenize("The capital of France is"))
    r = client.completions.create(model=model_name, prompt=ids, max_tokens=3, temperature=0, echo=True, logprobs=1)
    c, solo = r.choices[0], model.generate(ids, max_tokens=3, temperature=0)
    assert c.text == model.detokenize(ids) + solo.text
    lp = c.logprobs
    assert len(lp.tokens) == len(ids) + 3 and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.text_offset[0] == 0 and lp.text_offset[len(ids)] == len(model.detokenize(ids))
    full = model.context(64).eval(ids + solo.token_ids[:2], all_logits=True).astype(np.float64)
    m = full.max(1, keepdims=True)
    want = full - m - np.log(np.exp(full - m).sum(1, keepdims=True))
    seq = ids + solo.token_ids[:3]
    for i in range(1, len(seq)):
        assert abs(lp.token_logprobs[i] - want[i - 1, seq[i]]) < 1e-6, i
    chunks = list(client.completions.create(model=model_name, prompt=ids, max_tokens=3, temperature=0, echo=True,
                                            logprobs=1, stream=True))
    first = chunks[0].choices[0]
    assert first.text == model.detokenize(ids) and first.logprobs.token_logprobs == lp.token_logprobs[:len(ids)]
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == c.text


# -- embeddings ----------------------------------------------------------------------------------------------------

PARAPHRASES = ["The cat sat on the mat.", "A cat was sitting on the rug."]
UNRELATED = "Quarterly earnings of the bank fell sharply."


def test_embeddings_openai_client(server, client, model, model_name):
    import base64
    import numpy as np
    r = client.embeddings.create(model=model_name, input=PARAPHRASES + [UNRELATED])
    assert r.object == "list" and r.model == model_name and [d.index for d in r.data] == [0, 1, 2]
    v = np.array([d.embedding for d in r.data])
    assert v.shape == (3, model.n_embd) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-6)
    assert v[0] @ v[1] > max(v[0] @ v[2], v[1] @ v[2])
    n = sum(len(model.tokenize(t)) for t in PARAPHRASES + [UNRELATED])
    assert r.usage.prompt_tokens == r.usage.total_tokens == n
    st, fl, _ = http(server, "POST", "/v1/embeddings", {"input": UNRELATED, "encoding_format": "float"})
    st2, b64, _ = http(server, "POST", "/embeddings", {"input": UNRELATED, "encoding_format": "base64"})
    assert st == st2 == 200
    dec = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    assert dec.tolist() == fl["data"][0]["embedding"] and np.array_equal(dec.astype(np.float64), v[2])
    ids = list(model.tokenize(UNRELATED))
    by_ids = client.embeddings.create(model=model_name, input=[ids], encoding_format="float").data[0].embedding
    assert by_ids == fl["data"][0]["embedding"]
    assert model.create_embedding(UNRELATED)["data"][0]["embedding"] == by_ids == model.embed(UNRELATED)


def test_embedding_while_streams_run_equals_alone(server, client, model, model_name):
    """An embedding asked while 4 streams decode equals the one asked alone. It is sent once /metrics shows the 4
    streams in their slots (was: a fixed 0.3 s sleep, after which the streams could be done, or not yet started);
    the streams cannot end early (200 tokens, end-of-generation banned) and are closed once the embedding is back."""
    import openai
    alone = client.embeddings.create(model=model_name, input=PARAPHRASES[0], encoding_format="float").data[0]
    ban = {str(int(t)): -100.0 for t in model.tokenizer.eog_ids}

    async def stream(ac, i):
        s = await ac.completions.create(model=model_name, prompt=f"Tale {i}:", max_tokens=200, temperature=0,
                                        logit_bias=ban, stream=True)
        async with s:
            async for _ in s:
                pass

    async def main():
        ac = openai.AsyncOpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        tasks = [asyncio.create_task(stream(ac, i)) for i in range(4)]
        try:
            await asyncio.to_thread(wait_for_metric, server, "fastgguf_requests_running", lambda v: v >= 4)
            emb = await ac.embeddings.create(model=model_name, input=PARAPHRASES[0], encoding_format="float")
            return emb, sum(not t.done() for t in tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await ac.close()
    emb, running = asyncio.run(main())
    wait_for_metric(server, "fastgguf_requests_running", lambda v: v == 0)  # the closed streams are freed
    assert running == 4 and emb.data[0].embedding == alone.embedding


# -- concurrency ---------------------------------------------------------------------------------------------------

def test_16_concurrent_streams_equal_solo_runs(server, model, model_name):
    import openai
    prompts = [f"Story number {i}: once" for i in range(16)]
    kws = [dict(max_tokens=8, temperature=0 if i % 2 else 0.8, seed=100 + i) for i in range(16)]

    async def one(ac, i):
        stream = await ac.completions.create(model=model_name, prompt=prompts[i], stream=True, **kws[i])
        return "".join([c.choices[0].text async for c in stream])

    async def main():
        ac = openai.AsyncOpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        try:
            return await asyncio.gather(*(one(ac, i) for i in range(16)))
        finally:
            await ac.close()
    got = asyncio.run(main())
    for i in range(16):
        assert got[i] == model.generate(prompts[i], **kws[i]).text, i


def test_disconnect_frees_the_sequence(server, client, model_name):
    stream = client.chat.completions.create(model=model_name, messages=MSGS, max_tokens=200, temperature=0,
                                            stream=True)
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()
    wait_for_metric(server, "fastgguf_requests_running", lambda v: v == 0)
    r = client.chat.completions.create(model=model_name, messages=MSGS, max_tokens=3, temperature=0)
    assert r.choices[0].message.content


# -- errors --------------------------------------------------------------------------------------------------------

BAD = [
    ("/v1/chat/completions", {"messages": MSGS, "temperature": -1}, 400, "temperature", None),
    ("/v1/chat/completions", {"messages": MSGS, "top_p": 2}, 400, "top_p", None),
    ("/v1/chat/completions", {"messages": MSGS, "temperature": "hot"}, 400, "temperature", None),
    ("/v1/chat/completions", {"messages": MSGS, "max_tokens": -3}, 400, "max_tokens", None),
    ("/v1/chat/completions", {"messages": MSGS, "seed": 1.5}, 400, "seed", None),
    ("/v1/chat/completions", {"messages": MSGS, "logit_bias": {"999999": 1}}, 400, "logit_bias", None),
    ("/v1/chat/completions", {"messages": MSGS, "n": 0}, 400, "n", None),
    ("/v1/completions", {"prompt": "hi", "repeat_last_n": "5"}, 400, "repeat_last_n", None),
    ("/v1/chat/completions", {"messages": MSGS, "draft_ngram_min": 1.5}, 400, "draft_ngram_min", None),
    ("/v1/chat/completions", {}, 400, "messages", None),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages", None),
    ("/v1/chat/completions", {"messages": MSGS, "tools": [{"type": "function", "function": {"name": "f g"}}]},
     400, "tools", None),
    ("/v1/chat/completions", {"messages": MSGS, "tools": [{"type": "function", "function": {"name": "f"}}],
                              "tool_choice": {"type": "function", "function": {"name": "g"}}}, 400, "tool_choice", None),
    ("/v1/completions", {"prompt": "hi", "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools",
     None),
    ("/v1/chat/completions", {"messages": MSGS, "response_format": {"type": "xml"}}, 400, "response_format", None),
    ("/v1/chat/completions", {"messages": MSGS, "response_format": {"type": "json_schema", "json_schema": {}}}, 400,
     "response_format", None),
    ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 100000}, 400, "messages", "context_length_exceeded"),
    ("/v1/chat/completions", {"messages": MSGS, "model": "gpt-9"}, 404, "model", "model_not_found"),
    ("/v1/completions", {"prompt": [1, 2, 10 ** 9]}, 400, "prompt", None),
    ("/v1/completions", {"prompt": "hi", "logprobs": 99}, 400, "logprobs", None),
    ("/v1/completions", {"prompt": "hi", "stream_options": {"include_usage": True}}, 400, "stream_options", None),
    ("/v1/completions", {"prompt": "x " * 600}, 400, "messages", "context_length_exceeded"),
    ("/v1/embeddings", {"input": ""}, 400, "input", None),
    ("/v1/embeddings", {"input": []}, 400, "input", None),
    ("/v1/embeddings", {"input": ["fine", ""]}, 400, "input", None),
    ("/v1/embeddings", {"input": [1, 10 ** 9]}, 400, "input", None),
    ("/v1/embeddings", {"input": [[1, 2], [-1]]}, 400, "input", None),
    ("/v1/embeddings", {"input": 5}, 400, "input", None),
    ("/v1/embeddings", {"input": ["ok", 3]}, 400, "input", None),
    ("/v1/embeddings", {"input": {"text": "hi"}}, 400, "input", None),
    ("/embeddings", {"input": "x " * 600}, 400, "input", "context_length_exceeded"),
    ("/v1/embeddings", {"input": "hi", "encoding_format": "hex"}, 400, "encoding_format", None),
    ("/v1/embeddings", {"input": "hi", "dimensions": 7}, 400, "dimensions", "unsupported_parameter"),
    ("/v1/embeddings", {"input": "hi", "model": "gpt-9"}, 404, "model", "model_not_found"),
    ("/v1/embeddings", {}, 400, "input", None),
    ("/v1/nothing-here", {}, 404, None, "not_found"),
]


@pytest.mark.parametrize("path,body,status,param,code", BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_bad_requests(server, path, body, status, param, code):
    got, resp, _ = http(server, "POST", path, body)
    assert got == status, resp
    err = resp["error"]
    # OpenAI's fields (a chat or completion prompt over the context: llama-server's n_prompt_tokens and n_ctx too)
    assert set(err) - {"n_prompt_tokens", "n_ctx"} == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param and err["code"] == code


def test_every_json_route_refuses_a_body_that_is_not_an_object(server, model):
    """Every POST route of the app (enumerated from create_app's routes through its OpenAPI schema: OpenAI's,
    Anthropic's, Ollama's, the extras, with and without /v1) answers a JSON body that is not an object (an array,
    a string, a number, null, a bool) with a 400 in its dialect's error shape saying so, never a 5xx or a Python
    exception's text (/api/show: 500 AttributeError)."""
    from fastgguf.api import anthropic
    from fastgguf.server import create_app
    paths = sorted(p for p, ops in create_app(model).app.openapi()["paths"].items() if "post" in ops)
    assert {"/v1/chat/completions", "/v1/messages", "/v1/responses", "/api/chat", "/api/show"} <= set(paths)
    for path in paths:
        for raw in (b"[1, 2]", b'"x"', b"3", b"null", b"true"):
            status, body, _ = http(server, "POST", path, raw=raw)
            assert status == 400, (path, raw, status, body)
            if path in anthropic.PATHS:
                assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", (path, body)
                message = body["error"]["message"]
            elif path.startswith("/api/"):
                assert set(body) == {"error"} and isinstance(body["error"], str), (path, body)
                message = body["error"]
            else:
                assert set(body["error"]) == {"message", "type", "param", "code"}, (path, body)
                message = body["error"]["message"]
            assert message == "the request body must be a JSON object", (path, raw, message)


def test_request_models_carry_every_sampling_field(model):
    """server/schemas.py listed the sampling fields by hand and had lost repeat_last_n, draft_ngram_max and
    draft_ngram_min: every field the API reads into SamplingParams (all of SamplingParams' fields, and the aliases)
    is now a field of both generation request models and of their OpenAPI schemas (/docs)."""
    from fastgguf.engine.params import SamplingParams
    from fastgguf.api.openai.protocol import SAMPLING_FIELDS
    from fastgguf.server import create_app, schemas
    accepted = {api for api, _ in SAMPLING_FIELDS}
    assert set(SamplingParams.names()) <= accepted
    components = create_app(model).app.openapi()["components"]["schemas"]
    for cls in (schemas.ChatCompletionRequest, schemas.CompletionRequest):
        for where, fields in (("model", cls.model_fields), ("OpenAPI", components[cls.__name__]["properties"])):
            missing = sorted(accepted - set(fields))
            assert not missing, f"{cls.__name__} ({where}) lacks {missing}"
    props = components["CompletionRequest"]["properties"]
    assert {"repeat_last_n", "draft_ngram_max", "draft_ngram_min"} <= set(props)
    assert schemas.CompletionRequest.model_fields["stop"].annotation == Optional[Union[str, List[str]]]


def test_bad_json_and_body_limit_and_openai_client_errors(server, client, model_name):
    import openai
    status, resp, _ = http(server, "POST", "/v1/chat/completions", raw=b"{not json")
    assert status == 400 and "JSON" in resp["error"]["message"]
    status, resp, _ = http(server, "POST", "/v1/completions", {"prompt": "x" * 3_000_000})
    assert status == 413 and resp["error"]["code"] == "request_too_large"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_name, messages=MSGS, temperature=-2)
    assert e.value.status_code == 400 and e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=MSGS)


def test_error_before_first_token_is_http_status(server, model):
    banned = {str(i): float("-inf") for i in range(model.n_vocab)}  # json: -Infinity, which Python's parser reads
    for stream in (False, True):
        status, resp, _ = http(server, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2, "stream": stream,
                                                                   "logit_bias": banned, "temperature": 0})
        assert status == 400 and "no token can be sampled" in resp["error"]["message"], (stream, resp)


def test_api_key(server, model_name):
    import openai
    for key in (None, "wrong"):
        status, resp, _ = http(server, "GET", "/v1/models", key=key)
        # OpenAI's code, llama-server's type (its clients read the type, OpenAI's the status and code)
        assert status == 401 and resp["error"]["code"] == "invalid_api_key"
        assert resp["error"]["type"] == "authentication_error"
    status, resp, _ = http(server, "POST", "/api/chat", {"model": model_name, "messages": []}, key="wrong")
    assert status == 401 and isinstance(resp["error"], str)  # Ollama's shape
    bad = openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_tokenize_roundtrip_and_metrics(server, model):
    text = "Hello world, tokenize me!"
    status, resp, _ = http(server, "POST", "/tokenize", {"content": text})
    assert status == 200 and resp["tokens"] == list(model.tokenize(text))
    status, resp2, _ = http(server, "POST", "/v1/detokenize", {"tokens": resp["tokens"]})
    assert status == 200 and resp2["content"] == text
    assert http(server, "POST", "/detokenize", {"tokens": [-1]})[0] == 400
    status, metrics, hdrs = http(server, "GET", "/metrics")
    assert status == 200 and hdrs["Content-Type"].startswith("text/plain")
    for name in ("fastgguf_prompt_tokens_total", "fastgguf_completion_tokens_total", "fastgguf_requests_running",
                 "fastgguf_requests_queued", "fastgguf_batch_size_sum", "fastgguf_time_to_first_token_seconds_count"):
        assert f"\n{name} " in "\n" + metrics, name


def test_queue_full_is_429_and_pings_while_queued(default_model_path, model_name):
    s = Server(default_model_path, "--parallel", "1", "--max-queue", "1", "--ctx-size", "512", "--ping-interval",
               "0.2", api_key=None)
    try:
        import openai
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=60)
        # long enough (seconds) that it still runs when the next request arrives on a loaded machine; closed below
        running = c.completions.create(model=model_name, prompt="Count: 1, 2,", max_tokens=480, temperature=0,
                                       stream=True)
        body = json.dumps({"prompt": "Count: 1, 2,", "max_tokens": 2, "stream": True}).encode()
        queued = urllib.request.urlopen(urllib.request.Request(
            s.base + "/v1/completions", data=body, headers={"Content-Type": "application/json"}), timeout=60)
        assert queued.readline() == b": ping\n"  # it waits behind the running one
        status, resp, hdrs = http(s, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1}, key=None)
        assert status == 429 and resp["error"]["type"] == "rate_limit_error" and hdrs["Retry-After"]
        running.close()
        rest = queued.read().decode()
        assert '"finish_reason": "length"' in rest and rest.endswith("data: [DONE]\n\n")
    finally:
        s.stop()


# -- in-process API: the same dicts --------------------------------------------------------------------------------

def test_in_process_api_same_shapes(client, model, model_name):
    r = model.create_chat_completion(MSGS, max_tokens=6, temperature=0)
    h = client.chat.completions.create(model=model_name, messages=MSGS, max_tokens=6, temperature=0).model_dump()
    assert r["choices"][0]["message"]["content"] == h["choices"][0]["message"]["content"]
    assert set(r) <= set(h) and r["usage"]["completion_tokens"] == h["usage"]["completion_tokens"]
    chunks = list(model.create_completion("Once upon a time", max_tokens=6, temperature=0, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == \
        model.create_completion("Once upon a time", max_tokens=6, temperature=0)["choices"][0]["text"]
