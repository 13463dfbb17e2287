"""Anthropic's Messages API over HTTP (POST /v1/messages, /v1/messages/count_tokens) with the official anthropic
client, on the default model (SmolLM2 135M): its text equals the same greedy chat completion's, streamed or not,
the stream is Anthropic's event sequence, tools come back as tool_use blocks, x-api-key is the key, and errors
are Anthropic's shape."""
import json

import jsonschema
import pytest

from conftest import API_KEY, http

anthropic = pytest.importorskip("anthropic")

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
           "additionalProperties": False}
TOOL = {"name": "get_weather", "description": "Current weather in a city", "input_schema": WEATHER}
# anthropic 2.x's create() has no temperature / top_p / top_k arguments any more: they go as extra_body (the server
# reads them; older clients send them as fields)
GREEDY = {"temperature": 0}
ASK = dict(system="Answer briefly.", messages=[{"role": "user", "content": "Name three colors."}], max_tokens=24,
           extra_body=GREEDY)


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.base, api_key=API_KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def chat_text(client, model_name):
    r = client.chat.completions.create(model=model_name, max_tokens=24, temperature=0, messages=[
        {"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name three colors."}])
    return r.choices[0].message.content, r.choices[0].finish_reason


def test_create_equals_chat(claude, model_name, chat_text):
    text, finish = chat_text
    m = claude.messages.create(model=model_name, **ASK)
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == text and text
    assert m.type == "message" and m.role == "assistant" and m.model == model_name
    assert m.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[finish]
    assert m.usage.output_tokens > 0
    assert claude.messages.count_tokens(model=model_name, system=ASK["system"],
                                        messages=ASK["messages"]).input_tokens == m.usage.input_tokens
    # system as text blocks, content as text blocks: the same prompt
    blocks = claude.messages.create(model=model_name, system=[{"type": "text", "text": "Answer briefly."}],
                                    messages=[{"role": "user", "content": [{"type": "text", "text": "Name three "},
                                                                           {"type": "text", "text": "colors."}]}],
                                    max_tokens=24, extra_body=GREEDY)
    assert blocks.content[0].text == text


def test_stream_events(claude, model_name, chat_text):
    text, finish = chat_text
    with claude.messages.stream(model=model_name, **ASK) as s:
        events = list(s)
        final = s.get_final_message()
    kinds = [e.type for e in events if e.type != "text"]  # "text": the helper's own event per text delta
    n = kinds.count("content_block_delta")
    assert n > 1 and kinds == ["message_start", "content_block_start", *["content_block_delta"] * n,
                               "content_block_stop", "message_delta", "message_stop"]
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == text
    assert final.content[0].text == text and final.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[finish]
    assert final.usage.output_tokens > 0
    raw = list(claude.messages.create(model=model_name, stream=True, **ASK))
    assert [e.type for e in raw] == kinds


def test_stop_sequences_top_k(claude, model_name):
    full = claude.messages.create(model=model_name, **ASK).content[0].text
    stop = full.split()[1]
    m = claude.messages.create(model=model_name, stop_sequences=[stop], **dict(ASK, extra_body={"top_k": 1,
                                                                                              "top_p": 0.5}))
    assert m.content[0].text == full[:full.index(stop)]
    assert (m.stop_reason, m.stop_sequence) == ("stop_sequence", stop)
    with claude.messages.stream(model=model_name, stop_sequences=["zzz-never", stop], **ASK) as s:
        m = s.get_final_message()
    assert (m.content[0].text, m.stop_reason, m.stop_sequence) == (full[:full.index(stop)], "stop_sequence", stop)


def test_tool_use_and_result(claude, model_name):
    ask = dict(model=model_name, max_tokens=60, extra_body=GREEDY, tools=[TOOL],
               tool_choice={"type": "any", "disable_parallel_tool_use": True},
               messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    m = claude.messages.create(**ask)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather"
    jsonschema.validate(uses[0].input, WEATHER)
    with claude.messages.stream(**ask) as s:
        streamed = s.get_final_message()
    assert [(b.type, b.name, b.input) for b in streamed.content] == [("tool_use", "get_weather", uses[0].input)]
    follow = claude.messages.create(model=model_name, max_tokens=8, extra_body=GREEDY, tools=[TOOL],
                                    tool_choice={"type": "none"}, messages=[
        ask["messages"][0], {"role": "assistant", "content": [u.model_dump() for u in uses]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}]}])
    assert [b.type for b in follow.content] == ["text"]


@pytest.mark.parametrize("stops", ["abc", {"a": 1}, ["ok", 3], [None]], ids=["string", "object", "number", "null"])
def test_stop_sequences_must_be_a_list_of_strings(server, model_name, stops):
    """stop_sequences that are not a list of strings are a 400 in Anthropic's shape naming the field, streamed or
    not, before anything is generated (a string ran, then came back as a TypeError's text; an object's keys became
    stops)."""
    for stream in (False, True):
        status, body, _ = http(server, "POST", "/v1/messages", {
            "model": model_name, "max_tokens": 4, "stream": stream, "stop_sequences": stops,
            "messages": [{"role": "user", "content": "hi"}]})
        assert status == 400 and body == {"type": "error", "error": {
            "type": "invalid_request_error", "message": "stop_sequences must be a list of strings"}}, (stream, body)


@pytest.mark.parametrize("field, extra", [
    ("disable_parallel_tool_use", {"tools": [TOOL], "tool_choice": {"type": "auto",
                                                                    "disable_parallel_tool_use": "no"}}),
    ("disable_parallel_tool_use", {"tools": [TOOL], "tool_choice": {"type": "any", "disable_parallel_tool_use": 0}}),
    ("output_config", {"output_config": "x"}),
    ("output_config", {"output_config": ["format"]}),
])
def test_lax_types_are_refused(server, model_name, field, extra):
    """A non-boolean disable_parallel_tool_use ("no" was taken as true by its truthiness) and a non-object
    output_config (ignored) are a 400 in Anthropic's shape naming the field."""
    status, body, _ = http(server, "POST", "/v1/messages", {
        "model": model_name, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], **extra})
    assert status == 400 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    assert field in body["error"]["message"], body


def test_output_config_json_schema(claude, model_name):
    pytest.importorskip("llguidance")
    m = claude.messages.create(model=model_name, max_tokens=40, messages=[
        {"role": "user", "content": "Weather in Paris as JSON."}], extra_body=dict(GREEDY, output_config={
            "format": {"type": "json_schema", "schema": WEATHER}}))
    jsonschema.validate(json.loads(m.content[0].text), WEATHER)


def test_errors_in_anthropic_shape(server, claude, model_name):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=model_name, max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
    assert e.value.body == {"type": "error", "error": {"type": "invalid_request_error",
                                                       "message": e.value.body["error"]["message"]}}
    assert "image" in e.value.body["error"]["message"]
    status, body, _ = http(server, "POST", "/v1/messages", {"model": model_name,
                                                            "messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and body["error"]["type"] == "invalid_request_error" and "max_tokens" in \
        body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as e:
        claude.messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "not_found_error"
    bad = anthropic.Anthropic(base_url=server.base, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad.messages.create(model=model_name, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "authentication_error"
    # x-api-key opens the OpenAI routes too; a wrong one does not
    assert http(server, "GET", "/v1/models", key=None, headers={"x-api-key": API_KEY})[0] == 200
    status, body, _ = http(server, "GET", "/v1/models", key=None, headers={"x-api-key": API_KEY + "x"})
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
