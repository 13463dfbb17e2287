"""The reasoning channel: models that think before they answer, in <think> ... </think> or in harmony's analysis
channel.

Qwen 3 opens the block itself ("<think>\\n...\\n</think>\\n\\n" then the answer); DeepSeek-R1 distills' templates
open it in the prompt, so their output starts inside it (starts_inside). detect_reasoning() tells from the template
source whether a model thinks, starts_inside() from the rendered prompt whether its output begins inside the block.

gpt-oss speaks harmony (is_harmony): the prompt ends with "<|start|>assistant" and the reply is messages,
"<|channel|>analysis<|message|>thoughts<|end|><|start|>assistant<|channel|>final<|message|>answer" (then <|return|>,
end of generation). analysis bodies are the reasoning; final bodies, and commentary ones without a recipient (a
preamble for the user), the answer; a message to a recipient (" to=functions.NAME": harmony's own tool call) is
left out of both, as llama.cpp does without tools (tool calls with a gpt-oss template go through the generic JSON
format of tools.py, in the final channel: harmony_grammar). Text that is not a harmony message is answer.

Modes (what a reply's thoughts become):
    "parsed" (default)  split off into reasoning_content; content is the answer after </think>
    "raw"               left in content as generated (no split)
    "none"              dropped: content is the answer only (and template_kwargs asks templates that can, such as
                        Qwen 3's enable_thinking, not to think at all)

ReasoningSplitter re-scans the whole text at each update, like tools.ToolCallStream: a partial "<think>" or
"</think>" is held back, and the deltas joined equal split_reasoning() of the finished text. The answer part is
what a tool-call parser (or the client) sees.

A grammar or tool constraint applies to the answer only: reasoning_grammar() wraps a Lark grammar so the think
block is free text up to "</think>" (a lazy lexeme) and the wrapped grammar starts after it (harmony: an analysis
message, then the grammar in the final channel).
"""
import re

__all__ = ["MODES", "THINK_OPEN", "THINK_CLOSE", "HARMONY_START", "detect_reasoning", "is_harmony", "starts_inside",
           "template_kwargs", "split_reasoning", "ReasoningSplitter", "reasoning_grammar"]

MODES = ("none", "parsed", "raw")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# harmony's markers (control tokens of gpt-oss's vocabulary that are rendered as text, as llama.cpp renders them)
HARMONY_START, H_CHANNEL, H_MESSAGE, H_END = "<|start|>assistant", "<|channel|>", "<|message|>", "<|end|>"
H_TO = " to="


def detect_reasoning(template_source):
    """True when the chat template speaks the <think> channel (Qwen 3, QwQ, DeepSeek-R1 distills) or harmony's
    analysis channel (gpt-oss)."""
    return THINK_CLOSE in (template_source or "") or is_harmony(template_source)


def is_harmony(template_source):
    """True when the chat template writes harmony's channels (gpt-oss)."""
    src = template_source or ""
    return H_CHANNEL in src and HARMONY_START in src


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


def _split_harmony(text, final):
    """(reasoning or None, answer) of harmony messages as far as decided (see the module doc). A partial marker at
    the end is held back unless final; a header cut off at the end of a finished reply is dropped (markup)."""
    reasoning, answer = [], []
    pos, n = 0, len(text)
    while pos < n:
        if text.startswith(HARMONY_START, pos):     # the next message's role header
            pos += len(HARMONY_START)
            continue
        rest = text[pos:]
        k = text.find(H_MESSAGE, pos)
        head = rest if k < 0 else text[pos:k]
        header = head.startswith((H_CHANNEL, H_TO))
        partial = not final and any(m.startswith(rest) for m in (H_CHANNEL, H_TO, HARMONY_START))
        if (not header and not partial) or H_END in head:
            answer.append(rest)                     # not a message: the text as it stands
            break
        if k < 0:
            break                                   # a header still being written
        channel = head.split(H_CHANNEL, 1)[1] if H_CHANNEL in head else ""
        channel = channel.split("<|")[0].split(" ")[0]
        b = k + len(H_MESSAGE)
        e = text.find(H_END, b)
        if e >= 0:
            body = text[b:e]
        else:
            body = text[b:] if final else text[b:n - _held(text, H_END)]
        if H_TO not in head:                        # a message to a recipient (a tool call) belongs to neither
            (reasoning if channel == "analysis" else answer).append(body)
        if e < 0:
            break
        pos = e + len(H_END)
    thought = "".join(reasoning).strip()
    return (thought if reasoning else None), "".join(answer)


def split_reasoning(text, inside=False, mode="parsed", harmony=False):
    """(reasoning_content or None, content) of a finished reply (harmony: gpt-oss's channels)."""
    check_mode(mode)
    if mode == "raw":
        return None, text
    reasoning, answer = _split_harmony(text, True) if harmony else _split(text, inside, True)
    return (None if mode == "none" else reasoning), answer


class ReasoningSplitter:
    """update(text) takes the whole text so far and returns (reasoning_delta, answer_delta); .answer is the
    answer text so far (what a tool-call parser reads). finish(text) at the end. harmony: gpt-oss's channels."""

    def __init__(self, inside=False, mode="parsed", harmony=False):
        self.inside = inside
        self.mode = check_mode(mode)
        self.harmony = harmony
        self.reasoning = ""
        self.answer = ""

    def update(self, text, final=False):
        if self.mode == "raw":
            reasoning, answer = None, text
        elif self.harmony:
            reasoning, answer = _split_harmony(text, final)
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


def reasoning_grammar(lark, inside=False, harmony=False):
    """Wrap Lark grammar text so it applies after the think block: "<think>" (unless the output starts inside the
    block), free text up to "</think>", whitespace, then the wrapped grammar, whose `start` rule is renamed
    fg_answer (it must not refer to `start` itself). The block is required: an optional one would let a lazy
    trigger of the wrapped grammar ("<tool_call>") fire inside the thoughts. So wrap only when the model thinks in
    this request (detect_reasoning, and a prompt that does not close the block, e.g. not enable_thinking=False).
    harmony: an analysis message (free text up to "<|end|>"), then the wrapped grammar as the final message."""
    body, n = _START_RULE.subn(r"fg_answer\1", lark, count=1)
    if not n:
        raise ValueError("the grammar has no start rule")
    if harmony:
        return (f'start: fg_think "{HARMONY_START}{H_CHANNEL}final{H_MESSAGE}" fg_answer\n'
                f'fg_think[lazy]: "{H_CHANNEL}analysis{H_MESSAGE}" /(.|\\n)*/ "{H_END}"\n' + body)
    opener = "" if inside else '"<think>" '
    return ("start: fg_think FG_WS fg_answer\n"
            f'fg_think[lazy]: {opener}/(.|\\n)*/ "</think>"\n'
            "FG_WS: /[ \\t\\n]*/\n" + body)
