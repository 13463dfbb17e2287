"""OpenAI's Responses API over HTTP (POST /v1/responses) with the official openai client, on the default model
(SmolLM2 135M): its text equals the same greedy chat completion's, streamed or not, the event sequence is
Responses', function tools come back as function_call items, and the fields it refuses name themselves."""
import json

import jsonschema
import pytest

from conftest import http

openai = pytest.importorskip("openai")

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
           "additionalProperties": False}
TOOL = {"type": "function", "name": "get_weather", "description": "Current weather in a city", "parameters": WEATHER}
GREEDY = dict(temperature=0, max_output_tokens=24)


@pytest.fixture(scope="module")
def chat_text(client, model_name):
    """The greedy chat completion of the system + user turn the Responses tests send."""
    r = client.chat.completions.create(model=model_name, max_tokens=24, temperature=0, messages=[
        {"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name three colors."}])
    return r.choices[0].message.content, r.choices[0].finish_reason


def test_create_equals_chat(client, model_name, chat_text):
    text, finish = chat_text
    r = client.responses.create(model=model_name, instructions="Answer briefly.", input="Name three colors.",
                                **GREEDY)
    assert r.output_text == text and text
    assert r.object == "response" and r.id.startswith("resp_") and r.model == model_name
    assert r.status == ("incomplete" if finish == "length" else "completed")
    assert [o.type for o in r.output] == ["message"] and r.output[0].role == "assistant"
    assert r.usage.output_tokens > 0 and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    # the same conversation as items with input_text parts
    items = [{"role": "system", "content": "Answer briefly."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Name three "},
                                                              {"type": "input_text", "text": "colors."}]}]
    assert client.responses.create(model=model_name, input=items, **GREEDY).output_text == text


def test_stream_events(client, model_name, chat_text):
    text, finish = chat_text
    events = list(client.responses.create(model=model_name, instructions="Answer briefly.",
                                          input="Name three colors.", stream=True, **GREEDY))
    kinds = [e.type for e in events]
    last = "response.incomplete" if finish == "length" else "response.completed"
    n = kinds.count("response.output_text.delta")
    assert n > 1 and kinds == ["response.created", "response.in_progress", "response.output_item.added",
                               "response.content_part.added", *["response.output_text.delta"] * n,
                               "response.output_text.done", "response.content_part.done",
                               "response.output_item.done", last]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[2].item.model_dump(exclude_none=True) == {"id": events[2].item.id, "type": "message",
                                                            "role": "assistant", "status": "in_progress",
                                                            "content": []}
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == text
    assert events[-1].response.output_text == text and events[-1].response.usage.output_tokens > 0
    # the stream helper accumulates the same events
    with client.responses.stream(model=model_name, instructions="Answer briefly.", input="Name three colors.",
                                 **GREEDY) as s:
        deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
        if finish != "length":
            assert s.get_final_response().output_text == text
    assert "".join(deltas) == text


def test_function_call_and_its_output(client, model_name):
    r = client.responses.create(model=model_name, input="What is the weather in Paris?", tools=[TOOL],
                                tool_choice="required", parallel_tool_calls=False, max_output_tokens=60,
                                temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and r.status == "completed"
    assert calls[0].name == "get_weather" and calls[0].call_id.startswith("call_")
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    events = list(client.responses.create(model=model_name, input="What is the weather in Paris?", tools=[TOOL],
                                          tool_choice="required", parallel_tool_calls=False, max_output_tokens=60,
                                          temperature=0,
                                          stream=True))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert args == calls[0].arguments
    assert [o.arguments for o in events[-1].response.output] == [calls[0].arguments]
    # the call and its output sent back as items: the model answers in text (tool_choice none)
    follow = [{"role": "user", "content": "What is the weather in Paris?"},
              {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
               "arguments": calls[0].arguments},
              {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"}]
    r2 = client.responses.create(model=model_name, input=follow, tools=[TOOL], tool_choice="none",
                                 max_output_tokens=8, temperature=0)
    assert [o.type for o in r2.output] == ["message"] and r2.output_text


def test_text_format_json_schema(client, model_name):
    pytest.importorskip("llguidance")
    r = client.responses.create(model=model_name, input="Weather in Paris as JSON.", max_output_tokens=40,
                                temperature=0, text={"format": {"type": "json_schema", "name": "w",
                                                                "schema": WEATHER, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), WEATHER)


@pytest.mark.parametrize("body, param, says", [
    ({"input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": 5, "output": "ok"}]}, "input", "call_id"),
    ({"input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "output": "ok"}]}, "input", "call_id"),
    ({"input": [{"type": "function_call", "call_id": ["c1"], "name": "f", "arguments": "{}"}]}, "input", "call_id"),
    ({"input": "hi", "text": "x"}, "text", "text must be an object"),
    ({"input": "hi", "text": ["format"]}, "text", "text must be an object"),
])
def test_lax_types_are_refused(server, model_name, body, param, says):
    """A function_call_output's call_id must be a string (5 ran; a missing one became ""), and `text` an object
    (a string was ignored): a 400 naming the field."""
    status, resp, _ = http(server, "POST", "/v1/responses", {"model": model_name, "max_output_tokens": 2, **body})
    assert status == 400 and resp["error"]["param"] == param and says in resp["error"]["message"], resp


def test_refused_fields(server, client, model_name):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model_name, input="hi", previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id"
    status, body, _ = http(server, "POST", "/v1/responses", {"model": model_name, "input": [
        {"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]})
    assert status == 400 and body["error"]["param"] == "input" and "input_image" in body["error"]["message"]
    status, body, _ = http(server, "POST", "/responses", {"model": model_name, "input": "hi",
                                                          "max_output_tokens": -1})
    assert status == 400 and body["error"]["param"] == "max_output_tokens"
    status, body, _ = http(server, "POST", "/v1/responses", {"model": "nope", "input": "hi"})
    assert status == 404 and body["error"]["code"] == "model_not_found"
    assert http(server, "POST", "/v1/responses", {"input": "hi"}, key="wrong")[0] == 401
