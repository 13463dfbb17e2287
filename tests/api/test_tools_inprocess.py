"""Tool calls and reasoning through the in-process OpenAI API (Model.create_chat_completion) on random-weight
models that carry real vocabularies and real chat templates (tests/models.py "chat"): each template's own format
(hermes, llama3, mistral) end to end, and Qwen 3's think block. The replies are noise shaped by the grammar; what is
checked is the OpenAI layer: calls that parse and validate, finish_reason, streams that join to the whole answer."""
import json

import jsonschema
import pytest

import models

pytest.importorskip("llguidance")

import fastgguf  # noqa: E402
from fastgguf.engine.grammar import Matcher, vocabulary  # noqa: E402
from fastgguf.engine.reasoning import split_reasoning  # noqa: E402
from fastgguf.api.openai.protocol import prepare_chat, special_ids  # noqa: E402

MODELS = {   # name: (vocabulary, template, arch, tool-call format)
    "qwen25": ("qwen2", "Qwen-Qwen2.5-7B-Instruct", "qwen2", "hermes"),
    "llama31": ("llama-bpe", "meta-llama-Llama-3.1-8B-Instruct", "llama", "llama3"),
    "nemo": ("llama-spm", "mistralai-Mistral-Nemo-Instruct-2407", "llama", "mistral"),
    "qwen3": ("qwen2", "Qwen-Qwen3-0.6B", "qwen3", "hermes"),   # a random-weight qwen3 file
}
CONTROL = {"nemo": ("[TOOL_CALLS]",)}   # the marker is a control token, as in Mistral Nemo's tekken vocabulary
UNIT = {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1,
                                                                                "maximum": 9}},
        "required": ["unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": UNIT}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {},
                                                                         "additionalProperties": False}}}]
MSGS = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    root, cache = tmp_path_factory.mktemp("chat_models"), {}

    def get(name):
        if name not in cache:
            vocab, tmpl, arch, _ = MODELS[name]
            cache[name] = fastgguf.Model(models.build(root / f"{name}.gguf", "chat", vocab=vocab, template=tmpl,
                                                      arch=arch, control=CONTROL.get(name, ())))
        return cache[name]
    return get


def joined(chunks):
    """The message a stream's chunks add up to (content, reasoning_content, tool calls without their ids)."""
    content, reasoning, calls, finish = "", "", [], None
    for c in chunks:
        ch = c["choices"][0] if c["choices"] else None
        if ch is None:
            continue
        d = ch["delta"]
        content += d.get("content") or ""
        reasoning += d.get("reasoning_content") or ""
        for frag in d.get("tool_calls") or ():
            assert "index" in frag
            if "id" in frag:
                assert frag["index"] == len(calls) and frag["function"]["arguments"] == ""
                calls.append({"name": frag["function"]["name"], "arguments": ""})
            else:
                calls[frag["index"]]["arguments"] += frag["function"]["arguments"]
        finish = ch["finish_reason"] or finish
    return content, reasoning, calls, finish


def whole(message):
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in message.get("tool_calls") or ()]
    return message["content"] or "", message.get("reasoning_content") or "", calls


@pytest.mark.parametrize("name", ["qwen25", "llama31", "nemo"])
def test_required_call_in_the_templates_format(chat_model, name):
    model = chat_model(name)
    prep = prepare_chat(model, {"messages": MSGS, "tools": TOOLS, "tool_choice": "required",
                                "parallel_tool_calls": False}, 1024)
    assert prep.parser().tools.fmt == MODELS[name][3]
    kw = dict(tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=150, seed=11)
    r = model.create_chat_completion(MSGS, **kw)
    ch = r["choices"][0]
    assert ch["finish_reason"] == "tool_calls", ch
    msg = ch["message"]
    assert msg["content"] is None and len(msg["tool_calls"]) == 1
    (call,) = msg["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call["function"]["name"]]
    jsonschema.validate(json.loads(call["function"]["arguments"]), schema)
    content, reasoning, calls, finish = joined(model.create_chat_completion(MSGS, stream=True, **kw))
    assert (content, reasoning, calls) == whole(msg) and finish == "tool_calls"


def test_named_choice_with_parallel_calls_allowed(chat_model):
    model = chat_model("qwen25")
    r = model.create_chat_completion(MSGS, tools=TOOLS, max_tokens=150, seed=12,
                                     tool_choice={"type": "function", "function": {"name": "get_time"}})
    ch = r["choices"][0]
    assert ch["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in ch["message"]["tool_calls"]] == ["get_time"]
    assert json.loads(ch["message"]["tool_calls"][0]["function"]["arguments"]) == {}


def test_choice_none_has_no_grammar_and_no_calls(chat_model):
    model = chat_model("qwen25")
    prep = prepare_chat(model, {"messages": MSGS, "tools": TOOLS, "tool_choice": "none"}, 1024)
    assert prep.params.constraint() is None and prep.constraints is None and prep.parser is None
    r = model.create_chat_completion(MSGS, tools=TOOLS, tool_choice="none", max_tokens=8, seed=1)
    assert "tool_calls" not in r["choices"][0]["message"]


SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
          "additionalProperties": False}


def accepts(model, grammar, text):
    m = Matcher(vocabulary(model), grammar)
    for t in model.tokenizer.tokenize_raw(text):
        m.fill_mask()
        try:
            m.consume(t)
        except RuntimeError:
            return False
    return m.accepting()


def test_json_schema_under_reasoning_applies_after_the_think_block(chat_model):
    model = chat_model("qwen3")
    g = prepare_chat(model, {"messages": MSGS, "json_schema": SCHEMA}, 1024).params.constraint()
    assert accepts(model, g, '<think>\nmaybe {"ok": 1}\n</think>\n\n{"ok": true}')
    assert not accepts(model, g, '<think>\nhmm\n</think>\n\n{"ok": 1}')
    assert not accepts(model, g, '{"ok": true}'), "the think block comes first"
    # reasoning_format "none" asks the template not to think (enable_thinking=False): the schema alone
    none = prepare_chat(model, {"messages": MSGS, "json_schema": SCHEMA, "reasoning_format": "none"}, 1024)
    assert accepts(model, none.params.constraint(), '{"ok": true}')
    r = model.create_chat_completion(MSGS, json_schema=SCHEMA, reasoning_format="none", max_tokens=40, seed=3)
    jsonschema.validate(json.loads(r["choices"][0]["message"]["content"]), SCHEMA)


def test_reasoning_modes_split_the_same_text(chat_model):
    model = chat_model("qwen3")
    kw = dict(json_schema=SCHEMA, max_tokens=40, seed=5)   # the grammar opens the think block
    raw = model.create_chat_completion(MSGS, reasoning_format="raw", **kw)["choices"][0]["message"]
    assert raw["content"].startswith("<think>") and "reasoning_content" not in raw
    parsed = model.create_chat_completion(MSGS, **kw)["choices"][0]["message"]
    reasoning, content = split_reasoning(raw["content"], mode="parsed")
    assert (parsed.get("reasoning_content"), parsed["content"]) == (reasoning or None, content)
    assert parsed["reasoning_content"]
    content, reasoning, calls, _ = joined(model.create_chat_completion(MSGS, stream=True, **kw))
    assert (content, reasoning, calls) == whole(parsed)


class _Tok:
    """A vocabulary where <tool_call> is a control token (no text piece) and </tool_call> is ordinary text."""
    def tokenize(self, text, add_special=False, parse_special=True):
        return [7] if text == "<tool_call>" else [1, 2, 3]

    def token_to_piece(self, tid, special=False):
        return b"<tool_call>" if special else b""


def test_markers_that_are_control_tokens_are_named_by_id(chat_model):
    assert special_ids(_Tok(), "hermes") == {"<tool_call>": 7}
    assert special_ids(_Tok(), "generic") == {}
    nemo = chat_model("nemo")  # [TOOL_CALLS] is a control token there: its text reaches the parser all the same
    assert set(special_ids(nemo.tokenizer, "mistral")) == {"[TOOL_CALLS]"}


def test_chatml_fallback_stop_does_not_refuse_a_tool_grammar(chat_model):
    model = chat_model("qwen25")
    saved, model.tokenizer.chat_template = model.tokenizer.chat_template, None   # the ChatML fallback
    try:
        assert prepare_chat(model, {"messages": MSGS}, 1024).params.stop == ("<|im_end|>",)
        prep = prepare_chat(model, {"messages": MSGS, "tools": TOOLS, "tool_choice": "required"}, 1024)
        assert prep.params.stop == () and prep.parser().tools.fmt == "generic"
        r = model.create_chat_completion(MSGS, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                                         max_tokens=150, seed=2)
        assert r["choices"][0]["finish_reason"] == "tool_calls"
    finally:
        model.tokenizer.chat_template = saved
