"""The reasoning channel: models that think before they answer, in <think> ... </think>.

Qwen 3 opens the block itself ("<think>\\n...\\n</think>\\n\\n" then the answer); DeepSeek-R1 distills' templates
open it in the prompt, so their output starts inside it (starts_inside). detect_reasoning() tells from the template
source whether a model thinks, starts_inside() from the rendered prompt whether its output begins inside the block.

Modes (what a reply's thoughts become):
    "parsed" (default)  split off into reasoning_content; content is the answer after </think>
    "raw"               left in content as generated (no split)
    "none"              dropped: content is the answer only (and template_kwargs asks templates that can, such as
                        Qwen 3's enable_thinking, not to think at all)

ReasoningSplitter re-scans the whole text at each update, like tools.ToolCallStream: a partial "<think>" or
"</think>" is held back, and the deltas joined equal split_reasoning() of the finished text. The answer part is
what a tool-call parser (or the client) sees.

A grammar or tool constraint applies to the answer only: reasoning_grammar() wraps a Lark grammar so the think
block is free text up to "</think>" (a lazy lexeme) and the wrapped grammar starts after it.
"""
import re

__all__ = ["MODES", "THINK_OPEN", "THINK_CLOSE", "detect_reasoning", "starts_inside", "template_kwargs",
           "split_reasoning", "ReasoningSplitter", "reasoning_grammar"]

MODES = ("none", "parsed", "raw")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def detect_reasoning(template_source):
    """True when the chat template speaks the <think> channel (Qwen 3, QwQ, DeepSeek-R1 distills)."""
    return THINK_CLOSE in (template_source or "")


def starts_inside(prompt_text):
    """True when the rendered prompt leaves a <think> block open, so the output starts inside it."""
    return prompt_text.rfind(THINK_OPEN) > prompt_text.rfind(THINK_CLOSE)


def template_kwargs(mode):
    """Extra chat-template variables for a mode: "none" asks templates that read enable_thinking not to think."""
    check_mode(mode)
    return {"enable_thinking": False} if mode == "none" else {}


def check_mode(mode):
    if mode not in MODES:
        raise ValueError(f"reasoning mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def _held(text, marker):
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


def _split(text, inside, final):
    """(reasoning or None, answer) as far as decided. reasoning is None when there is no think block."""
    if not inside:
        i = len(text) - len(text.lstrip())
        head = text[i:i + len(THINK_OPEN)]
        if head != THINK_OPEN:
            if not final and THINK_OPEN.startswith(head):
                return None, ""        # may still become "<think>"
            return None, text
        text = text[i + len(THINK_OPEN):]
    k = text.find(THINK_CLOSE)
    if k < 0:
        thought = text if final else text[:len(text) - _held(text, THINK_CLOSE)]
        return thought.strip(), ""
    return text[:k].strip(), text[k + len(THINK_CLOSE):].lstrip()


def split_reasoning(text, inside=False, mode="parsed"):
    """(reasoning_content or None, content) of a finished reply."""
    check_mode(mode)
    if mode == "raw":
        return None, text
    reasoning, answer = _split(text, inside, True)
    return (None if mode == "none" else reasoning), answer


class ReasoningSplitter:
    """update(text) takes the whole text so far and returns (reasoning_delta, answer_delta); .answer is the
    answer text so far (what a tool-call parser reads). finish(text) at the end."""

    def __init__(self, inside=False, mode="parsed"):
        self.inside = inside
        self.mode = check_mode(mode)
        self.reasoning = ""
        self.answer = ""

    def update(self, text, final=False):
        if self.mode == "raw":
            reasoning, answer = None, text
        else:
            reasoning, answer = _split(text, self.inside, final)
        r_delta = a_delta = ""
        if reasoning and self.mode == "parsed" and reasoning.startswith(self.reasoning):
            r_delta, self.reasoning = reasoning[len(self.reasoning):], reasoning
        if answer.startswith(self.answer):
            a_delta, self.answer = answer[len(self.answer):], answer
        return r_delta, a_delta

    def finish(self, text):
        return self.update(text, final=True)


_START_RULE = re.compile(r"^start(\s*(\[[^\]\n]*\])?\s*:)", re.M)


def reasoning_grammar(lark, inside=False):
    """Wrap Lark grammar text so it applies after the think block: "<think>" (unless the output starts inside the
    block), free text up to "</think>", whitespace, then the wrapped grammar, whose `start` rule is renamed
    fg_answer (it must not refer to `start` itself). The block is required: an optional one would let a lazy
    trigger of the wrapped grammar ("<tool_call>") fire inside the thoughts. So wrap only when the model thinks in
    this request (detect_reasoning, and a prompt that does not close the block, e.g. not enable_thinking=False)."""
    body, n = _START_RULE.subn(r"fg_answer\1", lark, count=1)
    if not n:
        raise ValueError("the grammar has no start rule")
    opener = "" if inside else '"<think>" '
    return ("start: fg_think FG_WS fg_answer\n"
            f'fg_think[lazy]: {opener}/(.|\\n)*/ "</think>"\n'
            "FG_WS: /[ \\t\\n]*/\n" + body)
