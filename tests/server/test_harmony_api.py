"""gpt-oss's harmony channels over HTTP with the official openai client: a random-weight model with a harmony
vocabulary and gpt-oss's template, steered as tests/engine/test_harmony.py steers it in process (a few analysis
words, then the schema's JSON in the final channel: tests/models.py harmony_steering). message.reasoning_content
holds the analysis channel and content the final one, streamed and not, and neither carries harmony's markers."""
import json

import pytest

from conftest import API_KEY, Server

openai = pytest.importorskip("openai")
pytest.importorskip("llguidance")

from fastgguf.engine.reasoning import split_reasoning  # noqa: E402

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
          "additionalProperties": False}
MSGS = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def harmony(tmp_path_factory):
    import fastgguf
    from models import build_harmony, harmony_steering
    path = build_harmony(tmp_path_factory.mktemp("harmony_api") / "h.gguf")
    kw = harmony_steering(fastgguf.Model(path))
    s = Server(path, "--parallel", "2", "--ctx-size", "1024")
    client = openai.OpenAI(base_url=s.base + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    yield client, kw
    s.stop()


def test_reasoning_content_and_content_come_apart(harmony):
    client, kw = harmony
    args = dict(kw, model="h", messages=MSGS,
                response_format={"type": "json_schema", "json_schema": {"name": "ok", "schema": SCHEMA}})
    raw = client.chat.completions.create(**args, extra_body={"reasoning_format": "raw"}).choices[0]
    assert raw.finish_reason == "stop" and raw.message.content.startswith("<|channel|>analysis<|message|>")
    reasoning, content = split_reasoning(raw.message.content, harmony=True)
    assert "sunny" in reasoning and "<|" not in reasoning + content
    assert json.loads(content) in ({"ok": True}, {"ok": False})
    msg = client.chat.completions.create(**args).choices[0].message
    assert (msg.reasoning_content, msg.content) == (reasoning, content)
    r = c = ""
    for chunk in client.chat.completions.create(**args, stream=True):
        if chunk.choices:
            r += getattr(chunk.choices[0].delta, "reasoning_content", None) or ""
            c += chunk.choices[0].delta.content or ""
    assert (r, c) == (reasoning, content)


def test_reasoning_items_and_thinking_blocks(harmony):
    """The same steered request through the Responses API (a reasoning item, then the message) and Anthropic's
    Messages API (a thinking block, then the text), streamed and not: the chat completion's reasoning_content and
    content."""
    anthropic = pytest.importorskip("anthropic")
    client, kw = harmony
    msg = client.chat.completions.create(**kw, model="h", messages=MSGS, response_format={
        "type": "json_schema", "json_schema": {"name": "ok", "schema": SCHEMA}}).choices[0].message
    assert msg.reasoning_content and msg.content
    extra = {k: v for k, v in kw.items() if k not in ("max_tokens", "temperature")}
    ask = dict(model="h", input=MSGS, max_output_tokens=kw["max_tokens"], temperature=0, extra_body=extra,
               text={"format": {"type": "json_schema", "name": "ok", "schema": SCHEMA}})
    r = client.responses.create(**ask)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert (r.output[0].content[0].text, r.output_text) == (msg.reasoning_content, msg.content)
    events = list(client.responses.create(**ask, stream=True))
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == msg.reasoning_content
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == msg.content
    assert events[-1].type == "response.completed" and events[-1].response.output_text == msg.content

    claude = anthropic.Anthropic(base_url=str(client.base_url).removesuffix("/v1/"), api_key=API_KEY,
                                 max_retries=0)
    m_ask = dict(model="h", messages=MSGS, max_tokens=kw["max_tokens"], thinking={"type": "enabled",
                                                                                   "budget_tokens": 1024},
                 extra_body=dict(extra, temperature=0, output_config={"format": {"type": "json_schema",
                                                                                 "schema": SCHEMA}}))
    def blocks(m):
        return [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in m.content]
    m = claude.messages.create(**m_ask)
    assert blocks(m) == [("thinking", msg.reasoning_content), ("text", msg.content)]
    with claude.messages.stream(**m_ask) as s:
        assert blocks(s.get_final_message()) == blocks(m)
