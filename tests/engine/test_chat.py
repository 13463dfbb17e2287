"""Chat templates (fastgguf.engine.chat): HF-compatible rendering of conversations, BOS handling, fallback, chat().
The sandbox itself (its environment, refusals and budgets) is tested in test_chat_template.py."""
import pytest

from fastgguf.engine.chat import (CHATML_STOP, CHATML_TEMPLATE, ChatTemplateError, apply_chat_template, chat,
                                  chat_prompt_ids, prepare_chat, render_template)
from fastgguf.engine.generate import generate
from fastgguf.engine.model import Model
from fastgguf.engine.params import SamplingParams
from gen_fakes import BOS, IM_END, IM_START, FakeTokenizer
import models

SMOL_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


@pytest.fixture(scope="module")
def smol_template(default_model_path):
    from fastgguf.gguf import GGUFFile
    with GGUFFile(default_model_path) as f:
        return f.metadata["tokenizer.chat_template"]


def test_smollm2_template_renders_as_expected(smol_template):
    msgs = [{"role": "user", "content": "Hi there"}]
    assert render_template(smol_template, msgs) == (
        SMOL_SYSTEM + "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")
    assert render_template(smol_template, msgs, add_generation_prompt=False) == (
        SMOL_SYSTEM + "<|im_start|>user\nHi there<|im_end|>\n")
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}]
    assert render_template(smol_template, msgs) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n")


def test_template_variables_and_the_sandbox():
    """render_template passes the conversation's variables and renders in the sandbox (test_chat_template.py)."""
    msgs = [{"role": "user", "content": "héllo"}]
    assert render_template("{{ bos_token }}|{{ eos_token }}|{{ foo }}", msgs, bos_token="<s>", eos_token="</s>",
                           foo="bar") == "<s>|</s>|bar"
    with pytest.raises(ChatTemplateError, match="sandbox"):
        render_template("{{ messages.__class__ }}", msgs)
    with pytest.raises(ChatTemplateError, match="syntax"):
        render_template("{% if %}", msgs)


def test_long_conversation_is_not_limited_by_the_output_budget():
    long = [{"role": "user", "content": "x" * 3_000_000}]
    assert len(render_template(CHATML_TEMPLATE, long)) > 3_000_000


@pytest.mark.parametrize("messages,exc", [
    ("hello", TypeError), ([["user", "hi"]], TypeError), ([{"content": "hi"}], ValueError),
    ([{"role": "", "content": "hi"}], ValueError), ([{"role": "user"}], ValueError),
    ([{"role": "user", "content": 3}], TypeError), ([{"role": "user", "content": [{"type": "text"}]}], TypeError),
])
def test_message_validation(messages, exc):
    with pytest.raises(exc):
        render_template(CHATML_TEMPLATE, messages)


def test_fallback_chatml_and_special_tokens():
    tok = FakeTokenizer(chat_template=None)
    msgs = [{"role": "user", "content": "hi"}]
    assert apply_chat_template(tok, msgs) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = chat_prompt_ids(tok, msgs)
    assert ids[0] == IM_START and IM_END in ids and BOS not in ids  # parse_special, no BOS from this tokenizer


def test_bos_added_once():
    msgs = [{"role": "user", "content": "hi"}]
    tok = FakeTokenizer(chat_template="{{ messages[0].content }}", add_bos=True)
    assert chat_prompt_ids(tok, msgs) == [BOS] + list(b"hi")  # tokenizer adds BOS, template has none
    tok = FakeTokenizer(chat_template="{{ bos_token }}{{ messages[0].content }}", add_bos=True)
    assert chat_prompt_ids(tok, msgs) == [BOS] + list(b"hi")  # template has it: not doubled
    tok = FakeTokenizer(chat_template="{{ messages[0].content }}", add_bos=False)
    assert chat_prompt_ids(tok, msgs) == list(b"hi")


@pytest.fixture(scope="module")
def tiny_smol(default_model_path, tmp_path_factory):
    """Random weights, the default model's tokenizer (its chat template, <|im_start|> a special token)."""
    return Model(models.build(tmp_path_factory.mktemp("chat") / "smol.gguf", "vocab", vocab=default_model_path,
                              seed=2), n_threads=1)


def test_chat_generates_reply(tiny_smol):
    m, msgs = tiny_smol, [{"role": "user", "content": "yo"}]
    r = chat(m, msgs, template="{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}", temperature=0.0,
             max_tokens=6)
    ids = m.tokenize("<|im_start|>yo", add_special=False, parse_special=True)
    assert len(ids) == 2 and r.usage.prompt_tokens == 2  # <|im_start|> parsed as its special token, no BOS
    assert r.token_ids == generate(m, ids, temperature=0.0, max_tokens=6).token_ids
    r = chat(m, msgs, temperature=0.0, max_tokens=6)  # the file's own template
    assert r.token_ids == generate(m, chat_prompt_ids(m, msgs), temperature=0.0, max_tokens=6).token_ids
    with pytest.raises(TypeError, match="add_special"):
        chat(m, msgs, add_special=True)


def test_chat_fallback_stops_at_im_end_text(tmp_path):
    """No template: ChatML, whose end marker is a stop string (its text ends the reply)."""
    m = Model(models.build(tmp_path / "gpt2.gguf", "vocab", vocab="gpt-2", seed=1), n_threads=1)
    assert not m.tokenizer.chat_template
    msgs = [{"role": "user", "content": "yo"}]
    ids, params = prepare_chat(m, msgs, SamplingParams(temperature=0.0, max_tokens=8, stop=("zz",)))
    assert ids == chat_prompt_ids(m, msgs) and params.stop == ("zz", CHATML_STOP)
    r = chat(m, msgs, temperature=0.0, max_tokens=8, stop="zz", stream=True)
    assert "".join(r) == generate(m, ids, params).text and r.finish_reason


def test_real_tokenizer_special_tokens(default_model_path, smol_template):
    from fastgguf.gguf import GGUFFile
    from fastgguf.tokenizer import Tokenizer
    with GGUFFile(default_model_path) as f:
        tok = Tokenizer.from_metadata(f.metadata)
    assert tok.chat_template == smol_template
    msgs = [{"role": "user", "content": "Hi"}]
    assert apply_chat_template(tok, msgs, template="{{ bos_token }}x{{ eos_token }}") == "<|im_start|>x<|im_end|>"
    ids = chat_prompt_ids(tok, msgs)
    # SmolLM2 adds no BOS of its own; the template's markers are single special tokens
    assert ids[0] == tok.bos_id == 1 and ids.count(1) == 3 and ids.count(2) == 2
    assert ids == tok.tokenize(apply_chat_template(tok, msgs), add_special=False, parse_special=True)
