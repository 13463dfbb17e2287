"""Structured output over HTTP (issue 20): response_format json_object / json_schema, llama.cpp's `json_schema` and
`grammar` extras, through the real server and the official openai client. The rule under test: output asked to
match a schema matches it whenever finish_reason is "stop"; a schema or grammar that cannot be enforced exactly is
a 400 naming the problem, and the Scheduler never sees the request (no token is generated)."""
import json
import re

import jsonschema
import pytest

from conftest import Server, http

pytest.importorskip("llguidance", reason="the structured extra is not installed: pip install 'fastgguf[structured]'")

MSGS = [{"role": "user", "content": "Describe a city as JSON."}]
CITY = {"type": "object", "additionalProperties": False, "required": ["name", "population", "tags"],
        "properties": {"name": {"type": "string", "maxLength": 24},
                       "population": {"type": "integer", "minimum": 0},
                       "tags": {"type": "array", "items": {"enum": ["old", "big", "green"]}, "maxItems": 3}}}


def _requests_total(server):
    text = http(server, "GET", "/metrics")[1]
    return int(re.search(r"^fastgguf_requests_total (\d+)$", text, re.M).group(1))


def test_json_schema_chat_and_completion_validate(server, client, model_name):
    rf = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
    for seed in (1, 2):
        r = client.chat.completions.create(model=model_name, messages=MSGS, response_format=rf, max_tokens=96,
                                           temperature=0.8, seed=seed)
        c = r.choices[0]
        assert c.finish_reason == "stop", c.message.content
        jsonschema.validate(json.loads(c.message.content), CITY)
    # strict false is enforced just the same; completions take response_format too; n=2 gets two matchers
    rf["json_schema"]["strict"] = False
    r = client.completions.create(model=model_name, prompt="City JSON:", max_tokens=96, n=2, seed=3,
                                  extra_body={"response_format": rf})
    for c in r.choices:
        assert c.finish_reason in ("stop", "length")
        if c.finish_reason == "stop":
            jsonschema.validate(json.loads(c.text), CITY)


def test_unique_items_over_http(client, model_name):
    """uniqueItems over free strings and numbers (enforced as the output is written: engine.unique_items), with
    n=2 (each choice its own scanner): every "stop" choice validates, repeats and all."""
    schema = {"type": "object", "additionalProperties": False, "required": ["words", "numbers"],
              "properties": {"words": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                       "uniqueItems": True, "minItems": 5, "maxItems": 5},
                             "numbers": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True,
                                         "minItems": 5, "maxItems": 5}}}
    rf = {"type": "json_schema", "json_schema": {"name": "lists", "schema": schema}}
    msgs = [{"role": "user", "content": 'Output {"words": ["yes", "yes", "yes", "yes", "yes"], '
                                        '"numbers": [7, 7, 7, 7, 7]}'}]
    r = client.chat.completions.create(model=model_name, messages=msgs, response_format=rf, max_tokens=120,
                                       temperature=0.9, seed=3, n=2)
    for c in r.choices:
        assert c.finish_reason == "stop", c.message.content
        jsonschema.validate(json.loads(c.message.content), schema)


def test_json_object_and_llama_cpp_extras(server, model_name):
    for extra in ({"response_format": {"type": "json_object"}}, {"json_schema": CITY},
                  {"grammar": 'root ::= "yes" | "no"'}):
        status, resp, _ = http(server, "POST", "/v1/chat/completions",
                               {"messages": MSGS, "max_tokens": 120, "temperature": 0, **extra})
        assert status == 200, resp
        c = resp["choices"][0]
        if "grammar" in extra:
            assert c["finish_reason"] == "stop" and c["message"]["content"] in ("yes", "no")
        elif c["finish_reason"] == "stop":
            value = json.loads(c["message"]["content"])
            if "json_schema" in extra:
                jsonschema.validate(value, CITY)
            else:
                assert isinstance(value, dict)


def test_stream_under_a_schema_equals_non_stream(client, model_name):
    rf = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}}
    kw = dict(model=model_name, messages=MSGS, response_format=rf, max_tokens=96, temperature=0.7, seed=5)
    whole = client.chat.completions.create(**kw).choices[0]
    parts, finish = [], None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
            finish = ch.finish_reason or finish
    assert "".join(parts) == whole.message.content and finish == whole.finish_reason


def test_openai_parse_with_a_pydantic_model(client, model_name):
    import openai
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        population: int
        coastal: bool

    r = client.chat.completions.parse(model=model_name, messages=MSGS, response_format=City, max_tokens=120,
                                      temperature=0)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(msg.parsed, City) and msg.parsed == City.model_validate_json(msg.content)
    with pytest.raises(openai.LengthFinishReasonError):  # cut mid-value: "length", never a broken .parsed
        client.chat.completions.parse(model=model_name, messages=MSGS, response_format=City, max_tokens=3)


FAIL_CLOSED = [  # (schema, a word the message must name); what schema_rewrite makes exact compiles (its tests)
    ({"not": {"pattern": "^a"}}, "not"),
    ({"if": {"pattern": "^a"}, "then": {"maxLength": 3}}, "if"),
    ({"type": "array", "contains": {"type": "integer"}}, "contains"),
    ({"type": "object", "propertyNames": {"maxLength": 3}}, "propertyNames"),
    ({"type": "string", "pattern": "(?=a)b"}, "regex"),
    ({"$ref": "https://example.com/schema.json"}, "https://example.com/schema.json"),  # a remote $ref
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf"),   # (a number that is not an integer)
]


@pytest.mark.parametrize("schema,word", FAIL_CLOSED, ids=[next(iter(s)) if len(s) == 1 else list(s)[1] for s, _ in FAIL_CLOSED])
def test_unenforceable_schema_is_400_before_any_token(server, schema, word):
    before = _requests_total(server)
    for body in ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}},
                 {"json_schema": schema}):
        status, resp, _ = http(server, "POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 8, **body})
        assert status == 400, resp
        err = resp["error"]
        assert err["param"] == next(iter(body)) and word.lower() in err["message"].lower(), err
    assert _requests_total(server) == before  # the Scheduler never saw them


@pytest.mark.parametrize("grammar", ['root ::= "a" | b', 'root ::= ("a"', 'root = "a"'])
def test_broken_gbnf_is_400(server, grammar):
    before = _requests_total(server)
    status, resp, _ = http(server, "POST", "/v1/completions", {"prompt": "x", "grammar": grammar})
    assert status == 400 and resp["error"]["param"] == "grammar" and "gbnf" in resp["error"]["message"], resp
    assert _requests_total(server) == before


def test_stop_with_a_schema_and_two_constraints_are_400(server):
    status, resp, _ = http(server, "POST", "/v1/chat/completions",
                           {"messages": MSGS, "json_schema": CITY, "stop": ["}"]})
    assert status == 400 and resp["error"]["param"] == "stop", resp
    status, resp, _ = http(server, "POST", "/v1/chat/completions",
                           {"messages": MSGS, "json_schema": CITY, "response_format": {"type": "json_object"}})
    assert status == 400 and resp["error"]["param"] == "response_format", resp


def test_without_llguidance_a_constrained_request_is_400_naming_the_extra(default_model_path, tmp_path):
    """llguidance made unimportable in the server process: a json_schema request is refused (400 naming the extra
    to install), never run unconstrained; plain requests still work."""
    blocker = tmp_path / "llguidance"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('llguidance is blocked for this test')\n")
    # (first on the path: where fastgguf is installed, llguidance usually is too)
    s = Server(default_model_path, "--ctx-size", "256", path_first=tmp_path)
    try:
        for body in ({"response_format": {"type": "json_object"}}, {"json_schema": CITY},
                     {"grammar": 'root ::= "a"'}):
            status, resp, _ = http(s, "POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 4, **body})
            assert status == 400, resp
            assert "fastgguf[structured]" in resp["error"]["message"], resp
        status, resp, _ = http(s, "POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 4})
        assert status == 200, resp
    finally:
        s.stop()


# -- issue 32: hostile grammars against the real server -------------------------------------------------------------

def _chain(n):
    defs = {f"a{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/a{i + 1}"}}} for i in range(n)}
    defs[f"a{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/a0", "$defs": defs}


def _hostile_bodies(schema):
    """(path, body, how its error names the field) for the five ways a schema reaches the server."""
    msgs = [{"role": "user", "content": "hi"}]
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    return [
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}, "response_format"),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "tools": [tool], "tool_choice": "required"},
         "tools"),
        ("/v1/messages", {"model": "x", "max_tokens": 4, "messages": msgs,
                          "output_config": {"format": {"type": "json_schema", "schema": schema}}}, None),
        ("/v1/responses", {"input": "hi", "max_output_tokens": 16, "text": {"format": {
            "type": "json_schema", "name": "x", "schema": schema}}}, None),
        ("/api/chat", {"model": "x", "messages": msgs, "stream": False, "format": schema,
                       "options": {"num_predict": 4}}, None),
    ]


@pytest.mark.parametrize("i", range(5), ids=["response_format", "tools", "messages", "responses", "ollama"])
def test_a_75_kB_ref_chain_is_400_and_the_server_lives(server, model_name, i):
    """Issue 32's crash: a 1,000-link $ref chain segfaulted the server inside llguidance; now a 400 in the
    dialect's shape naming the depth limit, and the server answers the next request."""
    path, body, param = _hostile_bodies(_chain(1000))[i]
    body["model"] = model_name
    status, resp, _ = http(server, "POST", path, body)
    assert status == 400, resp
    text = json.dumps(resp)
    assert "limit of 500" in text and "nest" in text, resp
    assert "<backtrace>" not in text and "<state>" not in text
    if param:
        assert resp["error"]["param"] == param, resp
    assert http(server, "GET", "/health", key=None)[0] == 200


@pytest.mark.parametrize("schema", [{"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
                                    {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"},
                                                                    "b": {"$ref": "#/$defs/a"}}}],
                         ids=["self", "a-b-a"])
def test_a_schema_nothing_matches_is_400_not_a_matcher_500(server, schema):
    status, resp, _ = http(server, "POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 8,
                                                                    "json_schema": schema})
    assert status == 400 and resp["error"]["param"] == "json_schema", resp
    assert "no document can match" in resp["error"]["message"]


@pytest.mark.parametrize("grammar,word", [('root ::= "a"{1000000}', "40000 symbols"),
                                          ("root ::= r0\n" + "".join(f'r{i} ::= "a" r{i + 1} | "b"\n'
                                                                     for i in range(10_000)) + 'r10000 ::= "c"',
                                           "rules"),
                                          ("root ::= a\na ::= root", "cannot produce")],
                         ids=["repeat", "10k-rules", "unproductive"])
def test_hostile_gbnf_is_400_naming_the_limit(server, grammar, word):
    status, resp, _ = http(server, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 4, "grammar": grammar})
    assert status == 400 and resp["error"]["param"] == "grammar" and word in resp["error"]["message"], resp
