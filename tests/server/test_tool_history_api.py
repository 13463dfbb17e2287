"""A chat history holding an assistant's tool calls with `content: null` (valid OpenAI history: the reply was only
calls) renders through the template (content "" for it) over HTTP; a malformed tool_calls entry is a 400 naming the
message, never a 500 from deep in the template code (issue 24, defect 10)."""
import openai
import pytest

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def history(**assistant):
    return [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL], **assistant},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_tool_call_history_with_null_content_renders(client, model_name, tools):
    extra = {"tools": tools} if tools else {}
    r = client.chat.completions.create(model=model_name, messages=history(), max_tokens=2, temperature=0, **extra)
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")


@pytest.mark.parametrize("calls", ["call_1", [1], [{"id": "c", "type": "function"}],
                                   [{"id": "c", "function": {"name": 3, "arguments": "{}"}}],
                                   [{"id": "c", "function": {"name": "f", "arguments": 3}}]])
def test_malformed_tool_calls_are_400_naming_the_message(client, model_name, calls):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_name, messages=history(tool_calls=calls), max_tokens=2)
    err = e.value.body
    assert err["param"] == "messages" and "messages[1].tool_calls" in err["message"]


def test_tool_calls_only_on_an_assistant_message(client, model_name):
    msgs = [{"role": "user", "content": "hi", "tool_calls": [CALL]}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_name, messages=msgs, max_tokens=2)
    assert "messages[0].tool_calls" in e.value.body["message"]
