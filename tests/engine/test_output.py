"""ChatOutputParser: the reasoning split and the tool-call parse of a reply fed in pieces join to the parse of the
whole reply, whatever the cuts."""
import random

import pytest

from fastgguf.engine.output import ChatOutputParser
from fastgguf.engine.reasoning import split_reasoning
from fastgguf.engine.tools import parse

REPLIES = [
    ("hermes", '<think>\nLet me see.\n</think>\n\nSure.\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n'
               '</tool_call>\n<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>'),
    ("hermes", "<think>\nno calls</think>\nJust text with a < and a </thi"),
    ("generic", '<think>hmm</think>{"tool_calls": [{"name": "f", "arguments": {"x": "y"}}]}'),
    (None, "<think>a</think>b"),
]


def ids():
    n = iter(range(100))
    return lambda: f"call_{next(n)}"


def run(fmt, text, cuts, mode):
    p = ChatOutputParser(fmt, (mode, False), new_id=ids())
    pos, deltas = 0, []
    for c in sorted(cuts) + [len(text)]:
        deltas += p.feed(text[pos:c])
        pos = c
    deltas += p.flush()
    content = "".join(d.content for d in deltas if d.content)
    reasoning = "".join(d.reasoning for d in deltas if d.reasoning)
    calls = []
    for d in deltas:
        for f in d.tool_calls or ():
            assert set(f) >= {"index", "function"}
            if "id" in f:
                calls.append(dict(f, function=dict(f["function"])))
            else:
                calls[f["index"]]["function"]["arguments"] += f["function"]["arguments"]
    for d in deltas:
        assert [d.content is not None, d.reasoning is not None, d.tool_calls is not None].count(True) == 1, d
    return content, reasoning, [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls]


@pytest.mark.parametrize("fmt,text", REPLIES)
@pytest.mark.parametrize("mode", ["parsed", "raw", "none"])
def test_pieces_join_to_the_whole_parse(fmt, text, mode):
    reasoning, answer = split_reasoning(text, mode=mode)
    if fmt is None:
        want_content, want_calls = answer, []
    else:
        want_content, calls = parse(fmt, answer, new_id=ids())
        want_calls = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls]
    rng = random.Random(len(text))
    for _ in range(20):
        cuts = rng.sample(range(1, len(text)), rng.randint(0, min(12, len(text) - 1)))
        content, got_reasoning, got_calls = run(fmt, text, cuts, mode)
        assert content == (want_content or "")
        assert got_reasoning == (reasoning or "")
        assert got_calls == want_calls


def test_plain_parser_passes_text_through():
    p = ChatOutputParser()
    assert [d.content for d in p.feed("<think>x")] == ["<think>x"] and p.flush() == []

