"""gpt-oss's harmony channels (fastgguf.engine.reasoning, harmony=True): the analysis channel is reasoning_content,
the final channel (and commentary preambles) content, messages to a recipient (harmony's own tool calls) neither;
streamed at every cut point as split whole; the template's history (earlier thoughts dropped, as it does); the
grammar wrapper that puts a constraint in the final channel; the in-process OpenAI API on random-weight models
(qwen2 and gpt-oss) with a harmony vocabulary (tests/models.py build_harmony). The same over HTTP:
tests/server/test_harmony_api.py."""
import json
import random
from pathlib import Path

import pytest

import fastgguf
from models import build_harmony, harmony_steering
from fastgguf.engine.chat import render_template
from fastgguf.engine.output import ChatDelta, ChatOutputParser
from fastgguf.engine.reasoning import (ReasoningSplitter, detect_reasoning, is_harmony, reasoning_grammar,
                                       split_reasoning, starts_inside)

TEMPLATES = Path(__file__).parent.parent / "data" / "templates"
GPT_OSS = (TEMPLATES / "openai-gpt-oss-120b.jinja").read_text()

REPLY = ("<|channel|>analysis<|message|>The user asks 2+2. Simple.<|end|>"
         "<|start|>assistant<|channel|>final<|message|>It is 4.")
PREAMBLE = ("<|channel|>analysis<|message|>Need the time.<|end|>"
            "<|start|>assistant<|channel|>commentary<|message|>Checking the clock.<|end|>"
            "<|start|>assistant to=functions.get_time<|channel|>commentary <|constrain|>json<|message|>{\"zone\": 2}"
            "<|end|><|start|>assistant<|channel|>analysis<|message|> It is noon.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Noon.")


def test_detect_harmony():
    assert is_harmony(GPT_OSS) and detect_reasoning(GPT_OSS)
    assert not is_harmony((TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text())
    prompt = render_template(GPT_OSS, [{"role": "user", "content": "2+2?"}])
    assert prompt.endswith("<|start|>assistant") and not starts_inside(prompt)


@pytest.mark.parametrize("text, reasoning, content", [
    (REPLY, "The user asks 2+2. Simple.", "It is 4."),
    (PREAMBLE, "Need the time. It is noon.", "Checking the clock.Noon."),   # bodies joined, as llama.cpp does
    ("<|channel|>final<|message|>Just 4.", None, "Just 4."),
    ("<|channel|>analysis<|message|>cut off by max_tok", "cut off by max_tok", ""),
    ("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>fin", "x", ""),  # a header cut off
    ("No channels at all.", None, "No channels at all."),
    ("<|channel|>analysis<|message|>a<|end|>then stray text", "a", "then stray text"),
])
def test_split(text, reasoning, content):
    assert split_reasoning(text, harmony=True) == (reasoning, content)
    assert split_reasoning(text, mode="none", harmony=True) == (None, content)
    assert split_reasoning(text, mode="raw", harmony=True) == (None, text)


def stream(text, mode, cuts):
    s = ReasoningSplitter(mode=mode, harmony=True)
    reasoning = content = ""
    for end in sorted(cuts):
        r, c = s.update(text[:end])
        reasoning, content = reasoning + r, content + c
    r, c = s.finish(text)
    return (reasoning + r) or None, content + c


@pytest.mark.parametrize("text", [REPLY, PREAMBLE, "No channels.", "<|chan", "<|channel|>final<|message|>a <|en"])
@pytest.mark.parametrize("mode", ["parsed", "none", "raw"])
def test_streamed_split_joins_to_the_split(text, mode):
    want = split_reasoning(text, mode=mode, harmony=True)
    want = (want[0] or None, want[1])
    assert stream(text, mode, range(1, len(text))) == want
    rng = random.Random(len(text))
    for _ in range(5):
        assert stream(text, mode, rng.sample(range(1, len(text)), min(len(text) - 1, 6))) == want


def test_stream_holds_back_partial_markers():
    s = ReasoningSplitter(harmony=True)
    assert s.update("<|chan") == ("", "")
    assert s.update("<|channel|>analysis<|message|>hmm <|en") == ("hmm", "")
    assert s.update("<|channel|>analysis<|message|>hmm <|end|><|start|>assis") == ("", "")
    assert s.update(REPLY.replace("The user asks 2+2. Simple.", "hmm ")) == ("", "It is 4.")
    assert s.answer == "It is 4."


def test_output_parser_takes_the_harmony_flag():
    p = ChatOutputParser(None, ("parsed", False, True))
    deltas = [d for i in range(0, len(REPLY), 7) for d in p.feed(REPLY[i:i + 7])] + p.flush()
    assert "".join(d.reasoning or "" for d in deltas) == "The user asks 2+2. Simple."
    assert "".join(d.content or "" for d in deltas) == "It is 4."
    think = ChatOutputParser(None, ("parsed", False))        # (mode, inside): the <think> channel, as before
    assert think.feed("<think>a</think>b") + think.flush() == [ChatDelta(reasoning="a"), ChatDelta(content="b")]


def test_history_drops_earlier_thoughts():
    """The template renders an earlier assistant turn as its final message only (reasoning_content is not sent
    back to the model), as gpt-oss was trained."""
    msgs = [{"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "simple sum"},
            {"role": "user", "content": "3+3?"}]
    text = render_template(GPT_OSS, msgs)
    assert "<|start|>assistant<|channel|>final<|message|>4<|end|><|start|>user<|message|>3+3?<|end|>" in text
    assert "simple sum" not in text and text.endswith("<|start|>assistant")


# ---------------------------------------------------------------------------------------------------------- grammar

llguidance = pytest.importorskip("llguidance")

from byte_tokenizer import accepts, byte_tok  # noqa: E402,F401 (a fixture)

SCHEMA_LARK = 'start: answer\nanswer: %json {"type": "object", "properties": {"a": {"type": "integer"}}, ' \
              '"required": ["a"]}\n'


def test_grammar_puts_the_constraint_in_the_final_channel(byte_tok):
    lark = reasoning_grammar(SCHEMA_LARK, harmony=True)
    assert llguidance.LLMatcher.validate_grammar(lark) == ""
    ok = '<|channel|>analysis<|message|>free {"a": "x"} <|message|> text<|end|>' \
         '<|start|>assistant<|channel|>final<|message|>{"a": 1}'
    assert accepts(byte_tok, lark, ok)
    assert not accepts(byte_tok, lark, ok.replace('{"a": 1}', '{"a": "x"}'))    # the answer is constrained
    assert not accepts(byte_tok, lark, '<|channel|>final<|message|>{"a": 1}')   # the analysis comes first
    assert not accepts(byte_tok, lark, '{"a": 1}')


# ------------------------------------------------------------------------------------- the in-process OpenAI API

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
          "additionalProperties": False}
MSGS = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module", params=["qwen2", "gpt-oss"])
def harmony_model(tmp_path_factory, request):
    """The harmony vocabulary and template on a random qwen2 layer, and on a random gpt-oss layer (sinks, a
    sliding window shorter than the prompt, experts): the channels come apart whatever runs underneath."""
    return fastgguf.Model(build_harmony(tmp_path_factory.mktemp("harmony") / "h.gguf", arch=request.param))


def test_in_process_api_splits_the_channels(harmony_model):
    kw = dict(harmony_steering(harmony_model), json_schema=SCHEMA)
    raw = harmony_model.create_chat_completion(MSGS, reasoning_format="raw", **kw)["choices"][0]
    assert raw["finish_reason"] == "stop" and raw["message"]["content"].startswith("<|channel|>analysis<|message|>")
    reasoning, content = split_reasoning(raw["message"]["content"], harmony=True)
    assert "sunny" in reasoning and json.loads(content) in ({"ok": True}, {"ok": False})
    msg = harmony_model.create_chat_completion(MSGS, **kw)["choices"][0]["message"]
    assert (msg["reasoning_content"], msg["content"]) == (reasoning, content)
    chunks = list(harmony_model.create_chat_completion(MSGS, stream=True, **kw))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == reasoning
    assert "".join(d.get("content") or "" for d in deltas) == content
    none = harmony_model.create_chat_completion(MSGS, reasoning_format="none", **kw)["choices"][0]["message"]
    assert "reasoning_content" not in none and none["content"] == content


def test_tool_call_in_the_final_channel(harmony_model):
    """Tools with gpt-oss's template take the generic JSON format (tools.py), constrained into the final channel
    after the analysis message: the thoughts stay in reasoning_content, the call is parsed, content is empty."""
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}}}]
    kw = dict(harmony_steering(harmony_model), max_tokens=120, tools=tools, tool_choice="required",
              parallel_tool_calls=False)
    ch = harmony_model.create_chat_completion(MSGS, **kw)["choices"][0]
    msg = ch["message"]
    assert ch["finish_reason"] == "tool_calls" and msg["content"] is None and "sunny" in msg["reasoning_content"]
    (call,) = msg["tool_calls"]
    assert call["function"]["name"] == "get_time"
    assert json.loads(call["function"]["arguments"])["zone"] in ("UTC", "CET")
