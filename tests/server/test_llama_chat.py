"""llama-server's chat extras and error shapes on a real server: an assistant prefill (a final assistant message
continued) and continue_final_message / add_generation_prompt, response_format json_object with a schema, a prompt
over the context (exceed_context_size_error with n_prompt_tokens and n_ctx), invalid message lists, `timings`,
`verbose` (__verbose), the stream's first chunk, POST /apply-template and /chat/completions/input_tokens."""
import json
import urllib.request

from conftest import API_KEY, http

BOOK = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]


def chat(server, **body):
    return http(server, "POST", "/v1/chat/completions", {"max_tokens": 4, "temperature": 0, **body})[:2]


def stream_chunks(server, **body):
    req = urllib.request.Request(server.base + "/v1/chat/completions", method="POST",
                                 data=json.dumps({"max_tokens": 4, "stream": True, **body}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        lines = [x.decode()[6:].strip() for x in r if x.startswith(b"data: ")]
    return [json.loads(x) for x in lines if x != "[DONE]"]


def test_prefill_and_continue_final_message(server):
    prefill = BOOK + [{"role": "assistant", "content": "The best book is"}]
    status, r = http(server, "POST", "/apply-template", {"messages": prefill})[:2]
    assert status == 200 and r["prompt"].endswith("<|im_start|>assistant\nThe best book is")  # no end of turn
    explicit = {"messages": prefill, "continue_final_message": True, "add_generation_prompt": False}
    assert http(server, "POST", "/apply-template", explicit)[1]["prompt"] == r["prompt"]
    assert chat(server, **explicit)[0] == 200
    # continue_final_message false: a new assistant turn after it
    status, r = http(server, "POST", "/apply-template", {"messages": prefill, "continue_final_message": False})[:2]
    assert r["prompt"].endswith("The best book is<|im_end|>\n<|im_start|>assistant\n")
    for bad, word in (({"messages": prefill, "continue_final_message": True}, "add_generation_prompt"),
                      ({"messages": BOOK, "continue_final_message": True, "add_generation_prompt": False},
                       "final assistant message"),
                      ({"messages": prefill + [{"role": "assistant", "content": "x"}]}, "2 or more assistant"),
                      ({"messages": BOOK, "add_generation_prompt": "yes"}, "boolean")):
        status, r = chat(server, **bad)
        assert status == 400 and word in r["error"]["message"], (bad, r)


def test_invalid_message_lists(server):
    for messages in (None, "string", [], [123], [{}], [{"role": 123}], [{"role": "system", "content": 123}]):
        status, r = chat(server, messages=messages)
        assert status == 400 and r["error"]["param"] == "messages", (messages, r)


def test_response_format_json_object_with_schema(server):
    status, r = chat(server, messages=BOOK, max_tokens=8,
                     response_format={"type": "json_object", "schema": {"const": "42"}})
    assert status == 200 and r["choices"][0]["message"]["content"] == '"42"'
    for schema in (123, {"type": 123}, {"type": "hiccup"}):
        status, r = chat(server, messages=BOOK, response_format={"type": "json_object", "schema": schema})
        assert status == 400 and r["error"]["param"] == "response_format", (schema, r)


def test_context_size_exceeded_shape(server):
    for stream in (False, True):
        status, r = chat(server, messages=BOOK * 100, stream=stream)
        e = r["error"]
        assert status == 400 and e["type"] == "exceed_context_size_error" and e["code"] == "context_length_exceeded"
        assert e["n_ctx"] == 512 and e["n_prompt_tokens"] > 512
    # a default max_tokens does not refuse a prompt that fits: the reply ends where the context does
    status, r = chat(server, messages=[{"role": "user", "content": "hi " * 400}], max_tokens=None)
    assert status == 200 and r["choices"][0]["finish_reason"] in ("stop", "length")
    status, r = chat(server, messages=[{"role": "user", "content": "hi " * 400}], max_tokens=400)
    assert status == 400 and r["error"]["n_prompt_tokens"] > 400


def test_timings_verbose_and_first_chunk(server):
    status, r = chat(server, messages=BOOK, verbose=True)
    assert status == 200 and "Book" in r["__verbose"]["prompt"]
    t = r["timings"]
    assert t["predicted_n"] == r["usage"]["completion_tokens"] and t["prompt_per_second"] >= 0
    assert "__verbose" not in chat(server, messages=BOOK)[1]
    chunks = stream_chunks(server, messages=BOOK, stream_options={"include_usage": True})
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert "timings" not in chunks[0] and chunks[-1]["choices"] == [] and chunks[-1]["timings"]["predicted_n"] <= 4


def test_input_tokens(server):
    for path in ("/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"):
        status, r = http(server, "POST", path, {"messages": BOOK})[:2]
        assert status == 200 and r["input_tokens"] > 5
    status, r = http(server, "POST", "/v1/chat/completions/input_tokens", {"messages": "x"})[:2]
    assert status == 400 and r["error"]["param"] == "messages"
    assert http(server, "POST", "/apply-template", {"messages": BOOK}, key=None)[0] == 401


def test_return_progress(server):
    """A streamed request with return_progress: chunks without choices report the prompt's evaluation, from the
    tokens reused (cache == processed) to the whole prompt; a second identical prompt reuses all but its last."""
    msgs = [{"role": "user", "content": "This is a test " * 40}]
    reports = []
    for _ in range(2):
        chunks = stream_chunks(server, messages=msgs, return_progress=True)
        reports.append([c["prompt_progress"] for c in chunks if "prompt_progress" in c])
        assert all(c["choices"] == [] for c in chunks if "prompt_progress" in c)
    first, again = reports
    total, cache = first[0]["total"], first[0]["cache"]
    assert cache == first[0]["processed"] and len(first) == 1 + -(-(total - cache) // 64)  # a report per chunk
    assert [r["processed"] for r in first] == sorted({r["processed"] for r in first})
    assert first[-1]["processed"] == first[-1]["total"] and again[-1]["total"] == first[-1]["total"]
    assert len(again) == 2 and again[0]["cache"] == again[0]["processed"] == again[0]["total"] - 1
    assert "prompt_progress" not in str(stream_chunks(server, messages=msgs))  # not asked: none
