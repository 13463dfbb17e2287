"""The reasoning channel (fastgguf.engine.reasoning): detection on real templates, the split into reasoning_content
and content (streamed and not, each mode), and the grammar wrapper that constrains only the answer."""
import random
from pathlib import Path

import pytest

from fastgguf.engine.chat import render_template
from fastgguf.engine.reasoning import (ReasoningSplitter, detect_reasoning, reasoning_grammar, split_reasoning,
                                       starts_inside, template_kwargs)
from fastgguf.engine.tools import ToolCallStream, parse, tool_grammar, validate_tools

TEMPLATES = Path(__file__).parent.parent / "data" / "templates"
MSGS = [{"role": "user", "content": "2+2?"}]


def template(name):
    return (TEMPLATES / f"{name}.jinja").read_text()


@pytest.mark.parametrize("name, thinks", [
    ("Qwen-Qwen3-0.6B", True), ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", True), ("HuggingFaceTB-SmolLM3-3B", True),
    ("Qwen-Qwen2.5-7B-Instruct", False), ("meta-llama-Llama-3.1-8B-Instruct", False),
    ("google-gemma-2-2b-it", False)])
def test_detect_reasoning(name, thinks):
    assert detect_reasoning(template(name)) is thinks


def test_starts_inside_from_the_rendered_prompt():
    r1 = template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
    assert starts_inside(render_template(r1, MSGS, enable_thinking=True))
    assert not starts_inside(render_template(r1, MSGS, enable_thinking=False))
    qwen3 = template("Qwen-Qwen3-0.6B")
    assert not starts_inside(render_template(qwen3, MSGS))                       # the model opens <think> itself
    assert not starts_inside(render_template(qwen3, MSGS, **template_kwargs("none")))   # an empty block is closed
    assert template_kwargs("parsed") == {} and template_kwargs("raw") == {}
    with pytest.raises(ValueError):
        template_kwargs("hidden")


def test_smollm3_thinking_modes():
    """SmolLM3 thinks by default (the model opens <think> itself); enable_thinking=False (reasoning "none") or
    /no_think in the system message puts an empty, closed block in the prompt; /think or /no_think is taken out of
    the system message."""
    smol = template("HuggingFaceTB-SmolLM3-3B")
    think = render_template(smol, MSGS, add_generation_prompt=True)
    assert "Reasoning Mode: /think" in think and think.endswith("<|im_start|>assistant\n")
    assert not starts_inside(think)
    for off in (render_template(smol, MSGS, add_generation_prompt=True, **template_kwargs("none")),
                render_template(smol, [{"role": "system", "content": "Be brief. /no_think"}] + MSGS,
                                add_generation_prompt=True)):
        assert "Reasoning Mode: /no_think" in off and off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n")
        assert not starts_inside(off)
    sys_think = render_template(smol, [{"role": "system", "content": "Be brief. /think"}] + MSGS,
                                add_generation_prompt=True, enable_thinking=False)
    assert "Reasoning Mode: /think" in sys_think and "Be brief.\n\n<|im_end|>" in sys_think
    assert split_reasoning("<think>\nSum.\n</think>\n4") == ("Sum.", "4")


QWEN3_REPLY = "<think>\nThe user asks 2+2.\nThat is 4.\n</think>\n\nIt is 4."
R1_REPLY = "Simple sum: 2+2=4.\n</think>\n\nThe answer is 4."


def test_split_modes():
    assert split_reasoning(QWEN3_REPLY) == ("The user asks 2+2.\nThat is 4.", "It is 4.")
    assert split_reasoning(R1_REPLY, inside=True) == ("Simple sum: 2+2=4.", "The answer is 4.")
    assert split_reasoning(QWEN3_REPLY, mode="none") == (None, "It is 4.")
    assert split_reasoning(QWEN3_REPLY, mode="raw") == (None, QWEN3_REPLY)
    assert split_reasoning("No thoughts, just 4.") == (None, "No thoughts, just 4.")
    assert split_reasoning("<think>\ncut off by max_tokens") == ("cut off by max_tokens", "")
    assert split_reasoning("a <think> inside text") == (None, "a <think> inside text")


def stream(text, inside, mode, cuts):
    s = ReasoningSplitter(inside, mode)
    reasoning = content = ""
    for end in sorted(cuts):
        r, c = s.update(text[:end])
        reasoning, content = reasoning + r, content + c
    r, c = s.finish(text)
    return (reasoning + r) or None, content + c


@pytest.mark.parametrize("text, inside", [
    (QWEN3_REPLY, False), (R1_REPLY, True), ("No thoughts.", False), ("<think>\nunfinished", False),
    ("<thin", False), ("  <think>x</think>y", False), ("x </thi", True)])
@pytest.mark.parametrize("mode", ["parsed", "none", "raw"])
def test_streamed_split_joins_to_the_split(text, inside, mode):
    expected = split_reasoning(text, inside, mode)
    assert stream(text, inside, mode, range(1, len(text))) == expected
    rng = random.Random(len(text))
    for _ in range(5):
        cuts = rng.sample(range(1, len(text)), min(len(text) - 1, 4))
        assert stream(text, inside, mode, cuts) == expected


def test_stream_holds_back_a_partial_marker():
    s = ReasoningSplitter()
    assert s.update("<thi") == ("", "")
    assert s.update("<think>\nhmm </th") == ("hmm", "")
    assert s.update("<think>\nhmm </think>\n\nOk") == ("", "Ok")
    assert s.answer == "Ok"


def test_reasoning_then_tool_calls_streamed():
    """The answer part feeds the tool-call parser: thoughts never reach content or the calls."""
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": 2}}\n</tool_call>'
    text = "<think>\nI should call get_time.\n</think>\n\n" + call
    splitter, tools = ReasoningSplitter(), ToolCallStream("hermes")
    reasoning, deltas = "", []
    for end in range(1, len(text) + 1):
        r, _ = splitter.update(text[:end]) if end < len(text) else splitter.finish(text)
        reasoning += r
        c, d = tools.update(splitter.answer) if end < len(text) else tools.finish(splitter.answer)
        assert c == ""
        deltas += d
    assert reasoning == "I should call get_time."
    content, calls = parse("hermes", call)
    assert content is None and "".join(d["function"]["arguments"] for d in deltas) == calls[0]["function"]["arguments"]


# ---------------------------------------------------------------------------------------------------------- grammar

llguidance = pytest.importorskip("llguidance")


from byte_tokenizer import accepts, byte_tok  # noqa: E402,F401 (a fixture)


SCHEMA_LARK = 'start: answer\nanswer: %json {"type": "object", "properties": {"a": {"type": "integer"}}, ' \
              '"required": ["a"]}\n'


def test_grammar_applies_after_the_think_block(byte_tok):
    lark = reasoning_grammar(SCHEMA_LARK)
    assert llguidance.LLMatcher.validate_grammar(lark) == ""
    assert not accepts(byte_tok, lark, '{"a": 1}')                               # the block comes first
    assert accepts(byte_tok, lark, '<think>\nfree {"a": "x"} text\n</think>\n\n{"a": 1}')
    assert not accepts(byte_tok, lark, '<think>\nok\n</think>\n\n{"a": "x"}')   # the answer is constrained
    assert not accepts(byte_tok, lark, "<think>\nnever closed")
    assert not accepts(byte_tok, lark, 'text {"a": 1}')


def test_grammar_when_the_output_starts_inside(byte_tok):
    lark = reasoning_grammar(SCHEMA_LARK, inside=True)
    assert accepts(byte_tok, lark, 'thinking {"a": "x"} <think>\n</think>\n\n{"a": 2}')
    assert accepts(byte_tok, lark, '</think>{"a": 2}')
    assert not accepts(byte_tok, lark, '{"a": 2}')                               # the block must close first
    assert not accepts(byte_tok, lark, 'hm</think>\n{"a": "x"}')


def test_grammar_wraps_a_tool_grammar(byte_tok):
    cfg = validate_tools([{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "integer"}}, "required": ["zone"]}}}])
    lark = reasoning_grammar(tool_grammar(cfg, "hermes"))
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": 2}}\n</tool_call>'
    assert accepts(byte_tok, lark, "<think>\nmaybe <tool_call> bad\n</think>\n\n" + call)
    assert accepts(byte_tok, lark, "<think>\nno call needed\n</think>\n\nIt is noon.")
    inside = reasoning_grammar(tool_grammar(cfg, "hermes"), inside=True)
    assert accepts(byte_tok, inside, "maybe <tool_call> bad\n</think>\n\n" + call)
    assert not accepts(byte_tok, lark, "<think>\nx\n</think>\n\n" + call.replace('"zone": 2', '"zone": "2"'))
    with pytest.raises(ValueError):
        reasoning_grammar("answer: /a/")
