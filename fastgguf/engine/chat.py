"""Chat templates: messages -> prompt text, rendered like Hugging Face transformers does.

The template is the model's `tokenizer.chat_template` (GGUF metadata). Rendering follows transformers'
`apply_chat_template`, in the jinja2 sandbox of fastgguf.engine.chat_template (transformers' environment, filters and
globals; templates come from model files and are untrusted, so a render has time and size budgets, and every
failure is a ChatTemplateError), with the variables `messages`, `add_generation_prompt`, `bos_token`, `eos_token`
(plus `tools`/`documents` when given and any extra keyword). The size budget grows with the caller's input: the
messages, the extra keywords and the BOS/EOS texts.

Models without a template use CHATML_TEMPLATE (documented fallback); then "<|im_end|>" is also a stop string.

chat() tokenizes the rendered text with parse_special=True (the template's special tokens become their ids) and
add_special=False: the template is responsible for BOS. The one exception: if the tokenizer adds a BOS token on its
own (llama-style `add_bos_token`) and the rendered text does not start with the BOS token's text, BOS is prepended.
"""
from collections.abc import Mapping

from fastgguf.engine.generate import generate
from fastgguf.engine.params import SamplingParams
from fastgguf.engine.tools import detect_format, generic_system_prompt, prepare_tool_history
from fastgguf.errors import ChatTemplateError

__all__ = ["ChatTemplateError", "CHATML_TEMPLATE", "render_template", "apply_chat_template", "chat_prompt_ids",
           "chat", "validate_messages", "prepare_chat", "prompt_text_ids", "apply_tool_template",
           "tool_chat_prompt"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CHATML_STOP = "<|im_end|>"


def validate_messages(messages):
    """Check messages ([{"role": str, "content": str}, ...]); returns plain-dict copies."""
    if isinstance(messages, (str, bytes)) or not hasattr(messages, "__iter__"):
        raise TypeError(f"messages must be a list of {{'role': ..., 'content': ...}} dicts, "
                        f"got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise TypeError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{i}]['role'] must be a non-empty string, got {role!r}")
        if "content" not in m:
            raise ValueError(f"messages[{i}] has no 'content'")
        content = m["content"]
        if content is None and m.get("tool_calls"):
            pass  # an assistant message made only of tool calls
        elif not isinstance(content, str):
            raise TypeError(f"messages[{i}]['content'] must be a string, got {type(content).__name__}")
        out.append(dict(m))
    return out


def render_template(template, messages, *, add_generation_prompt=True, bos_token="", eos_token="", **extra):
    """Render a chat template string (see the module docstring for the variables and the budget)."""
    from fastgguf.engine import chat_template  # imports jinja2: on the first render, not with fastgguf
    if not isinstance(template, str):
        raise TypeError(f"template must be a string, got {type(template).__name__}")
    msgs = validate_messages(messages)
    tmpl = chat_template.compile_template(template)
    input_chars = (chat_template.input_size(msgs) + chat_template.input_size(extra) + len(bos_token or "")
                   + len(eos_token or ""))
    return chat_template.render(tmpl, dict(messages=msgs, add_generation_prompt=bool(add_generation_prompt),
                                           bos_token=bos_token, eos_token=eos_token, **extra), input_chars)


def _special_text(tokenizer, tid):
    """The vocabulary text of a special token ("<|im_start|>"), as HF's bos_token/eos_token."""
    if tid is None or tid < 0:
        return ""
    token_text = getattr(tokenizer, "token_text", None)
    if token_text is not None:
        return token_text(tid)
    return tokenizer.token_to_piece(tid).decode("utf-8", "replace")


def apply_chat_template(model_or_tokenizer, messages, *, add_generation_prompt=True, template=None, **extra):
    """Rendered prompt text for messages, with the model's template (or `template`, or the ChatML fallback)."""
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    return render_template(_template_of(tok, template), messages, add_generation_prompt=add_generation_prompt,
                           bos_token=_special_text(tok, getattr(tok, "bos_id", None)),
                           eos_token=_special_text(tok, getattr(tok, "eos_id", None)), **extra)


def chat_prompt_ids(model_or_tokenizer, messages, *, add_generation_prompt=True, template=None, **extra):
    """Token ids of the rendered prompt (special tokens parsed; BOS as described in the module docstring)."""
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    text = apply_chat_template(tok, messages, add_generation_prompt=add_generation_prompt, template=template,
                               **extra)
    return prompt_text_ids(tok, text)


def prompt_text_ids(model_or_tokenizer, text):
    """Token ids of rendered prompt text: special tokens parsed, BOS prepended as the module docstring says."""
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    ids = list(tok.tokenize(text, add_special=False, parse_special=True))
    bos = getattr(tok, "bos_id", None)
    if bos is not None and bos >= 0 and list(tok.tokenize("", add_special=True))[:1] == [bos]:
        bos_text = _special_text(tok, bos)
        if not (bos_text and text.startswith(bos_text)) and ids[:1] != [bos]:
            ids.insert(0, bos)
    return ids


def _template_of(tok, template):
    return template if template is not None else (getattr(tok, "chat_template", None) or CHATML_TEMPLATE)


def apply_tool_template(model_or_tokenizer, messages, config, *, add_generation_prompt=True, template=None,
                        **extra):
    """(prompt text, tool-call format) for a chat with tools (config: a tools.ToolConfig, or None).

    A template that renders `tools` itself (the rendering differs with and without them) and whose format
    tools.detect_format knows gets them; otherwise (no template, the ChatML fallback, templates that ignore tools)
    a system message lists the tools and the generic reply format (tools.generic_system_prompt), merged into the
    first system message, or into the first user message when the template refuses a system role (gemma).
    History is prepared by tools.prepare_tool_history (tool_calls' arguments as objects, developer -> system).
    With config None or tool_choice "none" the tools are left out of the prompt and the format is None."""
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    tmpl = _template_of(tok, template)
    fmt = detect_format(tmpl)
    msgs = prepare_tool_history(validate_messages(messages), fmt)

    def render(ms, **kw):
        return apply_chat_template(tok, ms, add_generation_prompt=add_generation_prompt, template=tmpl,
                                   **extra, **kw)

    if fmt != "generic":
        if config is None or config.choice == "none":
            return render(msgs), None
        with_tools = render(msgs, tools=config.tools())
        if with_tools != render(msgs):
            return with_tools, fmt
        msgs = prepare_tool_history(validate_messages(messages), "generic")   # it ignores tools after all
    if config is None or config.choice == "none":
        return render(msgs), None
    note = generic_system_prompt(config)
    if msgs and msgs[0].get("role") == "system":
        first = dict(msgs[0], content=f"{msgs[0].get('content') or ''}\n\n{note}")
        return render([first] + msgs[1:]), "generic"
    try:
        return render([{"role": "system", "content": note}] + msgs), "generic"
    except ChatTemplateError:
        for i, m in enumerate(msgs):
            if m.get("role") == "user":
                merged = dict(m, content=f"{note}\n\n{m.get('content') or ''}")
                return render(msgs[:i] + [merged] + msgs[i + 1:]), "generic"
        raise


def chat(model, messages, params=None, *, add_generation_prompt=True, template=None, tools=None, documents=None,
         **generate_kwargs):
    """Generate the assistant's reply to messages: render the chat template, then fastgguf.engine.generate.generate
    (same SamplingParams / keyword arguments and result; add_special/parse_special are decided here)."""
    for k in ("add_special", "parse_special"):
        if k in generate_kwargs:
            raise TypeError(f"chat() does not take {k}: it tokenizes the rendered template with special tokens")
    sampling = {k: generate_kwargs.pop(k) for k in SamplingParams.names() if k in generate_kwargs}
    params = SamplingParams.from_args(params, **sampling)
    extra = {}
    if tools is not None:
        extra["tools"] = tools
    if documents is not None:
        extra["documents"] = documents
    ids, params = prepare_chat(model, messages, params, add_generation_prompt=add_generation_prompt,
                               template=template, **extra)
    return generate(model, ids, params, **generate_kwargs)


def prepare_chat(model, messages, params, *, add_generation_prompt=True, template=None, **extra):
    """(prompt ids, params) for a chat without tools: see tool_chat_prompt. chat() starts here."""
    _, ids, params, _, _ = tool_chat_prompt(model, messages, params, None, add_generation_prompt=add_generation_prompt,
                                            template=template, **extra)
    return ids, params


def tool_chat_prompt(model, messages, params, config, *, add_generation_prompt=True, template=None, check_text=None,
                     continue_final=False, **extra):
    """A chat's prompt and what a caller needs to parse the reply: (prompt text, prompt ids, params, tool-call
    format or None, the template source used); tools (config: a tools.ToolConfig, or None) as apply_tool_template
    renders them (the caller constrains the reply with tools.tool_grammar and parses it in that format). The text tells whether the output starts inside a think block
    (reasoning.starts_inside); the source whether the model thinks (reasoning.detect_reasoning).
    check_text: called with the rendered text before it is tokenized (a server refuses a text that cannot fit its
    context there, before paying for the tokenization). continue_final: the last message is an assistant's reply
    to continue (a prefill): the prompt ends with its content, not with its end of turn (continued_text).
    The ChatML fallback template adds "<|im_end|>" to the stop strings, unless params carry a grammar (it ends the
    reply itself, where only end of generation may follow, and refuses stop strings)."""
    tok = model.tokenizer
    if template is None and not getattr(tok, "chat_template", None):
        template = CHATML_TEMPLATE
    if template is CHATML_TEMPLATE and CHATML_STOP not in params.stop and params.constraint() is None:
        params = params.replace(stop=params.stop + (CHATML_STOP,))
    tmpl = _template_of(tok, template)
    if continue_final:
        text, fmt = continued_text(tok, messages, config, template=tmpl, **extra)
    else:
        text, fmt = apply_tool_template(tok, messages, config, add_generation_prompt=add_generation_prompt,
                                        template=tmpl, **extra)
    if check_text is not None:
        check_text(text)
    return text, prompt_text_ids(tok, text), params, fmt, tmpl


CONTINUE_MARK = "[[fastgguf:continue-final-message]]"


def continued_text(tok, messages, config, *, template=None, **extra):
    """(prompt text, tool-call format) of a chat whose last message, an assistant's, the model continues: rendered
    without a generation prompt, with a mark for that message's content, cut at the mark and the content
    appended (what follows it, the end of the turn, left out). ValueError when the template drops the content."""
    last = messages[-1]
    text, fmt = apply_tool_template(tok, list(messages[:-1]) + [dict(last, content=CONTINUE_MARK)], config,
                                    add_generation_prompt=False, template=template, **extra)
    at = text.rfind(CONTINUE_MARK)
    if at < 0:
        raise ValueError("the chat template does not render the final assistant message's content: it cannot be "
                         "continued")
    return text[:at] + (last.get("content") or ""), fmt
