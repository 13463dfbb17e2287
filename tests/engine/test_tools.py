"""Tool calls (fastgguf.engine.tools, engine.chat.apply_tool_template): request validation, format detection on real
templates, prompting, the Lark grammars (run through llguidance over a byte-level tokenizer), parsing and streaming."""
import json
import random
import re
from pathlib import Path

import pytest

from fastgguf.engine.chat import ChatTemplateError, apply_tool_template, render_template
from fastgguf.engine.tools import (FORMATS, ToolCallStream, ToolConfig, ToolError, detect_format, parse,
                                   prepare_tool_history, tool_grammar, validate_tools)
from gen_fakes import FakeTokenizer

llguidance = pytest.importorskip("llguidance")

TEMPLATES = Path(__file__).parent.parent / "data" / "templates"


def template(name):
    return (TEMPLATES / f"{name}.jinja").read_text()


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"enum": ["c", "f"]}},
                   "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "integer"}},
                                       "required": ["zone"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]


# ------------------------------------------------------------------------------------------------------ validation

def test_validate_tools_shapes():
    cfg = validate_tools(TOOLS)
    assert cfg.names == ("get_weather", "get_time") and cfg.choice == "auto" and cfg.parallel
    assert validate_tools(TOOLS, "required", False) == ToolConfig(cfg.functions, "required", False)
    named = validate_tools(TOOLS, {"type": "function", "function": {"name": "get_time"}})
    assert named.named == "get_time"
    assert validate_tools(None) is None and validate_tools([], "none") is None
    assert cfg.tools()[0] == {"type": "function", "function": WEATHER["function"]}
    # parameters default to an empty object schema
    bare = validate_tools([{"type": "function", "function": {"name": "ping"}}])
    assert bare.functions[0]["parameters"] == {"type": "object", "properties": {}}


@pytest.mark.parametrize("tools, choice, param, message", [
    ([{"type": "function", "function": {"name": "x"}}] * 2, None, "tools", "duplicate"),
    ([{"type": "retrieval"}], None, "tools", "tools[0]"),
    ([{"type": "function", "function": {"name": "bad name!"}}], None, "tools", "name"),
    ([{"type": "function", "function": {"name": "x", "parameters": []}}], None, "tools", "parameters"),
    ("get_weather", None, "tools", "list"),
    (TOOLS, {"type": "function", "function": {"name": "nope"}}, "tool_choice", "'nope'"),
    (TOOLS, "sometimes", "tool_choice", "tool_choice"),
    (None, "required", "tool_choice", "needs tools"),
])
def test_validate_tools_errors(tools, choice, param, message):
    with pytest.raises(ToolError, match=re.escape(message)) as e:
        validate_tools(tools, choice)
    assert e.value.param == param and isinstance(e.value, ValueError)


def test_parallel_tool_calls_must_be_bool():
    with pytest.raises(ToolError) as e:
        validate_tools(TOOLS, None, "yes")
    assert e.value.param == "parallel_tool_calls"


# ------------------------------------------------------------------------------------------------ templates, prompt

@pytest.mark.parametrize("name, fmt", [
    ("Qwen-Qwen2.5-7B-Instruct", "hermes"), ("Qwen-Qwen3-0.6B", "hermes"),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3"), ("mistralai-Mistral-Nemo-Instruct-2407", "mistral"),
    ("google-gemma-2-2b-it", "generic"), ("microsoft-Phi-3.5-mini-instruct", "generic")])
def test_detect_format_on_real_templates(name, fmt):
    assert detect_format(template(name)) == fmt
    assert detect_format(None) == "generic"


MSGS = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize("name", ["google-gemma-2-2b-it", "microsoft-Phi-3.5-mini-instruct"])
def test_templates_that_ignore_tools_get_the_generic_prompt(name):
    src = template(name)
    tok = FakeTokenizer(src)
    assert render_template(src, MSGS, tools=validate_tools(TOOLS).tools()) == render_template(src, MSGS)
    text, fmt = apply_tool_template(tok, MSGS, validate_tools(TOOLS))
    assert fmt == "generic"
    assert '"tool_calls"' in text and '"get_time"' in text and "Weather in Paris?" in text
    # gemma refuses a system role: the tool list went into the user's turn instead
    if name.startswith("google"):
        assert text.index('"get_time"') > text.index("<start_of_turn>user")


@pytest.mark.parametrize("name, fmt, marker", [
    ("Qwen-Qwen2.5-7B-Instruct", "hermes", "<tools>"), ("Qwen-Qwen3-0.6B", "hermes", "<tools>"),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3", "Environment: ipython"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral", "[AVAILABLE_TOOLS]")])
def test_templates_that_use_tools_get_them(name, fmt, marker):
    tok = FakeTokenizer(template(name))
    text, got = apply_tool_template(tok, MSGS, validate_tools(TOOLS))
    assert got == fmt and marker in text and '"get_time"' in text
    plain, none_fmt = apply_tool_template(tok, MSGS, validate_tools(TOOLS, "none"))
    assert none_fmt is None and marker not in plain


HISTORY = [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0123456789abcdef01234567", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_0123456789abcdef01234567", "content": "18 C, sunny"},
]


@pytest.mark.parametrize("name, call_text, result_text", [
    ("Qwen-Qwen2.5-7B-Instruct", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "<tool_response>\n18 C, sunny\n</tool_response>"),
    ("Qwen-Qwen3-0.6B", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "<tool_response>\n18 C, sunny\n</tool_response>"),
    ("meta-llama-Llama-3.1-8B-Instruct", '{"name": "get_weather", "parameters": {"city": "Paris"}}',
     '<|start_header_id|>ipython<|end_header_id|>\n\n"18 C, sunny"'),   # the template tojsons strings
    ("mistralai-Mistral-Nemo-Instruct-2407", None, '[TOOL_RESULTS]{"content": 18 C, sunny, "call_id": "'),
])
def test_tool_history_rendered_by_the_template(name, call_text, result_text):
    tok = FakeTokenizer(template(name))
    text, _ = apply_tool_template(tok, HISTORY, validate_tools(TOOLS))
    if call_text:
        assert call_text in text            # arguments as an object: not quoted twice
    assert result_text in text
    if not name.startswith("mistral"):      # Nemo shows the system text only with the last user message
        assert "Be brief." in text          # developer -> system


def test_mistral_history_ids_become_nine_alphanumerics():
    msgs = prepare_tool_history(HISTORY, "mistral")
    call_id = msgs[2]["tool_calls"][0]["id"]
    assert re.fullmatch(r"[A-Za-z0-9]{9}", call_id) and msgs[3]["tool_call_id"] == call_id
    assert prepare_tool_history([{"role": "tool", "tool_call_id": "abcDEF123", "content": ""}],
                                "mistral")[0]["tool_call_id"] == "abcDEF123"
    assert HISTORY[2]["tool_calls"][0]["id"].startswith("call_")   # inputs untouched


def test_generic_history_on_a_template_without_tools():
    src = template("google-gemma-2-2b-it")
    msgs = HISTORY[1:] + [{"role": "tool", "tool_call_id": "b", "content": "more"}]
    text, fmt = apply_tool_template(FakeTokenizer(src), msgs, validate_tools(TOOLS))
    assert fmt == "generic"
    assert '<start_of_turn>model\n{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}' in text
    assert "18 C, sunny" in text and "more" in text
    with pytest.raises(ChatTemplateError):   # without the conversion gemma refuses the roles
        render_template(src, HISTORY[1:])


# ---------------------------------------------------------------------------------------------------------- grammar

from byte_tokenizer import ByteTokenizer, accepts, byte_tok  # noqa: E402,F401 (a fixture)


def call_json(fmt, name, args, *, id_="a1B2c3D4e"):
    key = "parameters" if fmt == "llama3" else "arguments"
    d = {"name": name, key: args}
    if fmt == "mistral":
        d["id"] = id_
    return json.dumps(d)


def reply(fmt, calls, text=""):
    """A reply in fmt: text, then calls [(name, args)]."""
    if fmt == "hermes":
        return text + "\n".join(f"<tool_call>\n{call_json(fmt, n, a)}\n</tool_call>" for n, a in calls)
    if fmt == "llama3":
        return "; ".join(call_json(fmt, n, a) for n, a in calls) if calls else text
    if fmt == "mistral":
        return text + ("[TOOL_CALLS][" + ", ".join(call_json(fmt, n, a) for n, a in calls) + "]" if calls else "")
    if calls:
        return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in calls]})
    return json.dumps({"response": text})


ONE = [("get_weather", {"city": "Paris"})]
TWO = [("get_weather", {"city": "Paris", "unit": "c"}), ("get_time", {"zone": 2})]


@pytest.mark.parametrize("fmt", FORMATS)
def test_auto_grammar_accepts_text_and_calls(fmt, byte_tok):
    lark = tool_grammar(validate_tools(TOOLS), fmt)
    assert accepts(byte_tok, lark, reply(fmt, [], "It is sunny in Paris."))
    assert accepts(byte_tok, lark, reply(fmt, ONE))
    assert accepts(byte_tok, lark, reply(fmt, TWO))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bad", [
    [("get_wether", {"city": "Paris"})],             # unknown tool
    [("get_weather", {"city": 5})],                  # wrong argument type
    [("get_weather", {"unit": "c"})],                # missing required argument
    [("get_time", {"zone": 1, "extra": True})],      # argument the schema forbids
])
def test_grammar_refuses_bad_calls(fmt, bad, byte_tok):
    for choice in ("auto", "required"):
        lark = tool_grammar(validate_tools(TOOLS, choice), fmt)
        assert not accepts(byte_tok, lark, reply(fmt, bad))
        assert not accepts(byte_tok, lark, reply(fmt, ONE + bad))


@pytest.mark.parametrize("fmt", FORMATS)
def test_required_named_and_single_call_grammars(fmt, byte_tok):
    required = tool_grammar(validate_tools(TOOLS, "required"), fmt)
    assert not accepts(byte_tok, required, reply(fmt, [], "No call needed."))
    assert accepts(byte_tok, required, reply(fmt, ONE)) and accepts(byte_tok, required, reply(fmt, TWO))
    named = tool_grammar(validate_tools(TOOLS, {"type": "function", "function": {"name": "get_time"}}), fmt)
    assert accepts(byte_tok, named, reply(fmt, [("get_time", {"zone": 3})]))
    assert not accepts(byte_tok, named, reply(fmt, ONE))
    assert not accepts(byte_tok, named, reply(fmt, [("get_time", {"zone": 3})] * 2))
    assert not accepts(byte_tok, named, reply(fmt, [], "Text."))
    single = tool_grammar(validate_tools(TOOLS, "auto", False), fmt)
    assert accepts(byte_tok, single, reply(fmt, ONE))
    assert not accepts(byte_tok, single, reply(fmt, TWO))


def test_mistral_ids_must_be_nine_alphanumerics(byte_tok):
    lark = tool_grammar(validate_tools(TOOLS), "mistral")
    good = "[TOOL_CALLS][" + call_json("mistral", "get_time", {"zone": 1}) + "]"
    assert accepts(byte_tok, lark, good)
    assert not accepts(byte_tok, lark, good.replace("a1B2c3D4e", "short"))


def test_choice_none_has_no_grammar():
    assert tool_grammar(validate_tools(TOOLS, "none"), "hermes") is None
    assert tool_grammar(None, "generic") is None


def test_local_refs_in_parameters_still_resolve(byte_tok):
    tools = [{"type": "function", "function": {"name": "paint", "parameters": {
        "type": "object", "$defs": {"Color": {"enum": ["red", "blue"]}},
        "properties": {"color": {"$ref": "#/$defs/Color"}}, "required": ["color"]}}}]
    lark = tool_grammar(validate_tools(tools, "required"), "hermes")
    assert accepts(byte_tok, lark, reply("hermes", [("paint", {"color": "red"})]))
    assert not accepts(byte_tok, lark, reply("hermes", [("paint", {"color": "green"})]))


def test_a_schema_llguidance_refuses_names_the_tool():
    tools = [WEATHER, {"type": "function", "function": {"name": "broken", "parameters": {
        "type": "object", "properties": {"x": {"type": "strng"}}}}}]
    with pytest.raises(ToolError, match="'broken'") as e:
        tool_grammar(validate_tools(tools), "hermes")
    assert e.value.param == "tools"


# ---------------------------------------------------------------------------------------------------------- parsing

def ids():
    n = iter(range(1000))
    return lambda: f"call_{next(n):024x}"


def calls_of(pairs, fmt=None):
    return [{"id": f"call_{i:024x}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(pairs)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_parse_text_one_and_two_calls(fmt):
    assert parse(fmt, reply(fmt, [], "It is sunny."), ids()) == ("It is sunny.", [])
    assert parse(fmt, reply(fmt, ONE), ids()) == (None, calls_of(ONE))
    assert parse(fmt, reply(fmt, TWO), ids()) == (None, calls_of(TWO))


def test_parse_keeps_text_before_calls_and_real_ids():
    content, calls = parse("hermes", "Let me check.\n" + reply("hermes", ONE))
    assert content == "Let me check."
    assert re.fullmatch(r"call_[0-9a-f]{24}", calls[0]["id"])
    assert parse("mistral", "Sure. " + reply("mistral", ONE), ids()) == ("Sure.", calls_of(ONE))
    assert parse("llama3", "<|python_tag|>" + reply("llama3", ONE), ids()) == (None, calls_of(ONE))
    typed = '{"type": "function", "name": "get_time", "parameters": {"zone": 1}}'
    assert parse("llama3", typed, ids()) == (None, calls_of([("get_time", {"zone": 1})]))


def test_parse_arguments_are_the_models_json_text():
    text = '<tool_call>\n{"name":"get_time","arguments":{"zone":  7}}\n</tool_call>'
    assert parse("hermes", text)[1][0]["function"]["arguments"] == '{"zone":  7}'


def test_parse_malformed_calls_stay_text():
    assert parse("hermes", "a <tool_call> not json", ids()) == ("a <tool_call> not json", [])
    assert parse("llama3", "{not a call}", ids()) == ("{not a call}", [])
    assert parse("generic", '{"answer": 1}', ids()) == ('{"answer": 1}', [])
    assert parse("generic", '{"response": "caf\\u00e9 \\ud83d\\ude00"}', ids()) == ("café 😀", [])


def stream_all(fmt, text, cuts):
    """Feed text in pieces ending at cuts; the joined deltas as (content, calls)."""
    s = ToolCallStream(fmt, ids())
    content, calls = "", []
    for end in sorted(cuts) + [None]:
        c, deltas = s.finish(text) if end is None else s.update(text[:end])
        content += c
        for d in deltas:
            assert set(d) >= {"index", "function"}
            if d["index"] == len(calls):
                assert d["type"] == "function" and d["function"]["arguments"] == ""
                assert re.fullmatch(r"call_[0-9a-f]{24}", d["id"])
                calls.append({"id": d["id"], "type": "function", "function": dict(d["function"])})
            else:
                assert "id" not in d and set(d["function"]) == {"arguments"}
                calls[d["index"]]["function"]["arguments"] += d["function"]["arguments"]
    return content or None, calls


STREAM_CASES = [(fmt, reply(fmt, pairs, text)) for fmt in FORMATS
                for pairs, text in [([], "Hi there, it is 18 C."), (ONE, ""), (TWO, "")]]
STREAM_CASES += [("hermes", "Checking.\n" + reply("hermes", TWO)), ("mistral", "Ok " + reply("mistral", ONE)),
                 ("generic", '{"response": "caf\\u00e9 \\ud83d\\ude00 \\"q\\""}'),
                 ("hermes", "a <tool_call> oops not json"), ("hermes", "less < more <tool_"),
                 ("llama3", "<|python_tag|>" + reply("llama3", ONE))]


@pytest.mark.parametrize("fmt, text", STREAM_CASES)
def test_streamed_deltas_join_to_the_parse(fmt, text):
    expected = parse(fmt, text, ids())
    assert stream_all(fmt, text, range(1, len(text))) == expected        # one character at a time
    rng = random.Random(len(text))
    for _ in range(5):
        cuts = rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 8)))
        assert stream_all(fmt, text, cuts) == expected


def test_stream_holds_back_a_partial_trigger():
    s = ToolCallStream("hermes", ids())
    assert s.update("Sure <tool") == ("Sure", [])
    content, deltas = s.update('Sure <tool_call>\n{"name": "get_time", "arguments": {"zo')
    assert content == "" and deltas == [
        {"index": 0, "id": "call_" + "0" * 24, "type": "function", "function": {"name": "get_time", "arguments": ""}},
        {"index": 0, "function": {"arguments": '{"zo'}}]


class ByteTokenizerWithControl(ByteTokenizer):
    """Mistral's vocabulary has [TOOL_CALLS] as a control token (257), which text cannot spell."""
    tokens = ByteTokenizer.tokens + [b"[TOOL_CALLS]"]
    special_token_ids = [256, 257]


def test_markers_that_are_special_tokens():
    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(ByteTokenizerWithControl()))
    body = list(("[" + call_json("mistral", "get_time", {"zone": 1}) + "]").encode())

    def run(lark, ids):
        m = llguidance.LLMatcher(tok, lark, log_level=0)
        assert not m.is_error(), m.get_error()
        return all(m.consume_token(t) for t in ids) and m.is_accepting()

    special = {"[TOOL_CALLS]": 257}
    required = tool_grammar(validate_tools(TOOLS, "required"), "mistral", special)
    assert run(required, [257] + body)
    assert not run(required, list(b"[TOOL_CALLS]") + body)       # the text is not the token
    auto = tool_grammar(validate_tools(TOOLS), "mistral", special)
    assert run(auto, list(b"Sure. ") + [257] + body) and run(auto, list(b"Just text."))
    bad = list(("[" + call_json("mistral", "nope", {"zone": 1}) + "]").encode())
    assert not run(auto, list(b"Sure. ") + [257] + bad)
