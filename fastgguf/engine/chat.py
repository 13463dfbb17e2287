"""Chat templates: messages -> prompt text, rendered like Hugging Face transformers does, in a jinja2 sandbox.

The template is the model's `tokenizer.chat_template` (GGUF metadata). Rendering follows transformers'
`apply_chat_template`: `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with the loopcontrols
extension, the `{% generation %}` block (a no-op here), the `tojson` filter (json.dumps with ensure_ascii=False and
indent/separators/sort_keys), the globals `raise_exception(msg)` and `strftime_now(fmt)`, and the variables
`messages`, `add_generation_prompt`, `bos_token`, `eos_token` (plus `tools`/`documents` when given and any extra
keyword). A template touching unsafe attributes (`__class__`, `__globals__`, ...) or mutating its inputs raises
ChatTemplateError: templates come from model files and are untrusted.

Models without a template use CHATML_TEMPLATE (documented fallback); then "<|im_end|>" is also a stop string.

chat() tokenizes the rendered text with parse_special=True (the template's special tokens become their ids) and
add_special=False: the template is responsible for BOS. The one exception: if the tokenizer adds a BOS token on its
own (llama-style `add_bos_token`) and the rendered text does not start with the BOS token's text, BOS is prepended.
"""
import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache

from fastgguf.engine.generate import generate
from fastgguf.engine.params import SamplingParams
from fastgguf.errors import ChatTemplateError

__all__ = ["ChatTemplateError", "CHATML_TEMPLATE", "render_template", "apply_chat_template", "chat_prompt_ids",
           "chat", "validate_messages", "prepare_chat"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CHATML_STOP = "<|im_end|>"


def _raise_exception(message):
    raise ChatTemplateError(f"chat template error: {message}")


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def _compile(template):
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

    class GenerationBlock(Extension):
        """transformers' {% generation %}...{% endgeneration %} (marks assistant text): rendered as its body."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class StrictSandbox(ImmutableSandboxedEnvironment):
        """Any unsafe attribute access raises at once (jinja2 would print it as an empty string)."""

        def unsafe_undefined(self, obj, attribute):
            raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe.")

    env = StrictSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template syntax error (line {e.lineno}): {e.message}") from None


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
    """Render a chat template string (see the module docstring for the environment)."""
    import jinja2
    from jinja2.sandbox import SecurityError
    if not isinstance(template, str):
        raise TypeError(f"template must be a string, got {type(template).__name__}")
    msgs = validate_messages(messages)
    tmpl = _compile(template)
    try:
        return tmpl.render(messages=msgs, add_generation_prompt=bool(add_generation_prompt), bos_token=bos_token,
                           eos_token=eos_token, **extra)
    except SecurityError as e:
        raise ChatTemplateError(f"chat template rejected by the sandbox (unsafe operation): {e}") from None
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {e}") from None


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
    tmpl = template if template is not None else (getattr(tok, "chat_template", None) or CHATML_TEMPLATE)
    return render_template(tmpl, messages, add_generation_prompt=add_generation_prompt,
                           bos_token=_special_text(tok, getattr(tok, "bos_id", None)),
                           eos_token=_special_text(tok, getattr(tok, "eos_id", None)), **extra)


def chat_prompt_ids(model_or_tokenizer, messages, *, add_generation_prompt=True, template=None, **extra):
    """Token ids of the rendered prompt (special tokens parsed; BOS as described in the module docstring)."""
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    text = apply_chat_template(tok, messages, add_generation_prompt=add_generation_prompt, template=template,
                               **extra)
    ids = list(tok.tokenize(text, add_special=False, parse_special=True))
    bos = getattr(tok, "bos_id", None)
    if bos is not None and bos >= 0 and list(tok.tokenize("", add_special=True))[:1] == [bos]:
        bos_text = _special_text(tok, bos)
        if not (bos_text and text.startswith(bos_text)) and ids[:1] != [bos]:
            ids.insert(0, bos)
    return ids


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
    """(prompt ids, params) for a chat: the rendered template's ids, and params with "<|im_end|>" added to the stop
    strings when the ChatML fallback template is used. chat() and the server both start here."""
    tok = model.tokenizer
    if template is None and not getattr(tok, "chat_template", None):
        template = CHATML_TEMPLATE
    if template is CHATML_TEMPLATE and CHATML_STOP not in params.stop:
        params = params.replace(stop=params.stop + (CHATML_STOP,))
    ids = chat_prompt_ids(tok, messages, add_generation_prompt=add_generation_prompt, template=template, **extra)
    return ids, params
