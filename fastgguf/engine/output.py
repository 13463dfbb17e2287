"""A chat reply's output parser: the reasoning channel and tool calls, split as the text streams.

    parser = ChatOutputParser(tool_format="hermes", reasoning=("parsed", False))   # one per choice
    parser.feed(text) -> [ChatDelta]        # Sequence feeds every emitted piece (Step.parsed / Delta.parsed)
    parser.flush() -> [ChatDelta]           # at the end: what was held back (a partial "</think>", "<tool_call>")

The text goes first through reasoning.ReasoningSplitter (when the template thinks), whose answer part goes through
tools.ToolCallStream (when the request has tools): each re-scans the whole text at every update, so the deltas joined
are exactly the parse of the finished reply (reasoning.split_reasoning, then tools.parse). Joining them is what the
API layer does for a non-streamed answer, so a stream and a whole response never disagree.
"""
from dataclasses import dataclass
from typing import Optional

from fastgguf.engine.reasoning import ReasoningSplitter, check_mode
from fastgguf.engine.tools import ToolCallStream, new_call_id

__all__ = ["ChatDelta", "ChatOutputParser"]


@dataclass(frozen=True)
class ChatDelta:
    """One piece of a reply: answer text (content), thought text (reasoning), or tool-call fragments in OpenAI's
    streaming shape ({"index", "id", "type", "function": {"name", "arguments": ""}} on a call's first fragment, then
    {"index", "function": {"arguments": "<more>"}}). Exactly one of the three is set."""
    content: Optional[str] = None
    reasoning: Optional[str] = None
    tool_calls: Optional[list] = None


class ChatOutputParser:
    """tool_format: a tools.FORMATS name, or None (no tool calls: the answer is content). reasoning: (mode, inside) or
    (mode, inside, harmony) when the model thinks (mode: reasoning.MODES; inside: the output starts inside the think
    block; harmony: gpt-oss's channels instead of <think>), else None."""

    def __init__(self, tool_format=None, reasoning=None, new_id=new_call_id, special_text=False):
        self.text = ""
        # the tool-call markers are control tokens of the vocabulary (Mistral's [TOOL_CALLS] in tekken): the
        # sequence's decoder must render special tokens as text for this parser to see them (the grammar allows
        # no other control token than those markers and end of generation)
        self.special_text = bool(special_text)
        self.splitter = None
        if reasoning is not None:
            mode, inside, harmony = (*reasoning, False)[:3]
            self.splitter = ReasoningSplitter(inside=inside, mode=check_mode(mode), harmony=harmony)
        self.tools = ToolCallStream(tool_format, new_id) if tool_format is not None else None
        self.n_calls = 0

    def _update(self, final):
        out = []
        if self.splitter is not None:
            r_delta, a_delta = self.splitter.update(self.text, final)
            if r_delta:
                out.append(ChatDelta(reasoning=r_delta))
            answer = self.splitter.answer
        else:
            a_delta, answer = "", self.text     # no splitter means tools (feed() passes plain text itself)
        if self.tools is None:
            if a_delta:
                out.append(ChatDelta(content=a_delta))
            return out
        content, calls = self.tools.update(answer, final)
        if content:
            out.append(ChatDelta(content=content))
        if calls:
            out.append(ChatDelta(tool_calls=calls))
            self.n_calls = len(self.tools.calls)
        return out

    def feed(self, text):
        if self.splitter is None and self.tools is None:
            return [ChatDelta(content=text)] if text else []
        self.text += text
        return self._update(False)

    def flush(self):
        if self.splitter is None and self.tools is None:
            return []
        return self._update(True)
