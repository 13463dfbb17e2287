"""Tool calls over HTTP with the official openai client, on the default model (SmolLM2 135M: its template knows no
tools, so the generic format). At 135M it does not choose tools itself under "auto", so the calls are forced
(tool_choice "required" or named); the grammar makes them valid whatever the model prefers."""
import json

import jsonschema
import pytest

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                             "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}}, "required": ["zone"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Current time in a zone",
                                           "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def create(client, model_name):
    return lambda **kw: client.chat.completions.create(model=model_name, **kw)


def check_calls(calls):
    assert calls
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_") and len(c.id) == 29
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def test_required_single_call(create):
    r = create(messages=MSGS, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=80, seed=1)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content is None
    assert len(ch.message.tool_calls) == 1
    check_calls(ch.message.tool_calls)


def test_named_choice_calls_that_function(create):
    r = create(messages=MSGS, tools=TOOLS, max_tokens=80, seed=2,
                                       tool_choice={"type": "function", "function": {"name": "get_time"}})
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert [c.function.name for c in ch.message.tool_calls] == ["get_time"]
    check_calls(ch.message.tool_calls)


def test_choice_none_answers_in_text(create):
    r = create(messages=MSGS, tools=TOOLS, tool_choice="none", max_tokens=12, seed=3)
    ch = r.choices[0]
    assert not ch.message.tool_calls
    assert isinstance(ch.message.content, str) and ch.finish_reason in ("stop", "length")


class GetWeather(pydantic.BaseModel):
    """Current weather in a city."""
    city: str = pydantic.Field(max_length=12)
    unit: str = pydantic.Field(pattern="^(celsius|fahrenheit)$")


def test_stream_helper_parses_a_strict_tool(client, model_name):
    tool = openai.pydantic_function_tool(GetWeather)
    assert tool["function"]["strict"]
    with client.chat.completions.stream(model=model_name, messages=MSGS, tools=[tool], tool_choice="required",
                                        parallel_tool_calls=False, max_tokens=80, seed=4) as s:
        events = [e.type for e in s]
        final = s.get_final_completion()
    assert "tool_calls.function.arguments.done" in events
    ch = final.choices[0]
    assert ch.finish_reason == "tool_calls"
    (call,) = ch.message.tool_calls
    assert call.function.name == "GetWeather"
    assert isinstance(call.function.parsed_arguments, GetWeather)
    assert call.function.parsed_arguments == GetWeather.model_validate_json(call.function.arguments)


def test_raw_stream_fragments_carry_their_index(create):
    calls, finish = {}, None
    for chunk in create(messages=MSGS, tools=TOOLS, tool_choice="required", max_tokens=120,
                                                seed=5, stream=True):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        for frag in ch.delta.tool_calls or ():
            assert frag.index is not None
            if frag.id is not None:
                assert frag.index == len(calls) and frag.function.arguments == "" and frag.type == "function"
                calls[frag.index] = [frag.function.name, ""]
            else:
                calls[frag.index][1] += frag.function.arguments
        finish = ch.finish_reason or finish
    assert calls and finish in ("tool_calls", "length")
    done = list(calls.values()) if finish == "tool_calls" else list(calls.values())[:-1]
    for name, args in done:
        jsonschema.validate(json.loads(args), SCHEMAS[name])


def test_second_turn_with_the_tool_result(create):
    first = create(messages=MSGS, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=80, seed=6).choices[0].message
    (call,) = first.tool_calls
    history = MSGS + [first.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'}]
    r = create(messages=[{"role": "developer", "content": "Be brief."}] + history,
                                       tools=TOOLS, max_tokens=10, seed=7)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.usage.prompt_tokens > 0


@pytest.mark.parametrize("extra,param", [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}}}],
      "tool_choice": "required"}, "tools"),
    ({"tools": TOOLS, "tool_choice": "required", "stop": ["\n"]}, "stop"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": TOOLS, "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"reasoning_format": "loud"}, "reasoning_format"),
])
def test_refused(create, extra, param):
    with pytest.raises(openai.BadRequestError) as e:
        create(messages=MSGS, max_tokens=4, extra_body=extra)
    assert e.value.body["param"] == param, e.value.body
    if param == "tools":
        assert "'f'" in e.value.body["message"]
