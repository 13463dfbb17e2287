"""Speculative decoding over HTTP: the `speculative` / `draft_max` request fields (the official openai client's
extra_body), the /metrics counters, and `fastgguf serve --speculative`'s default for requests that do not say."""
import re

import openai
import pytest

from conftest import API_KEY, http
from fastgguf.cli import build_parser
from fastgguf.api.openai.protocol import APIError, sampling_params

PROMPT = ("Copy the list exactly. List: red, orange, yellow, green, blue, indigo, violet, white, black, grey. "
          "Copy: red, orange, yellow,")


def _metric(server, name):
    text = http(server, "GET", "/metrics", key=API_KEY)[1]
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


def test_speculative_field_same_text(client, server, model_name):
    before = _metric(server, "fastgguf_draft_accepted_total")
    kw = dict(model=model_name, prompt=PROMPT, max_tokens=24, temperature=0)
    plain = client.completions.create(**kw)
    assert _metric(server, "fastgguf_draft_accepted_total") == before  # no drafts without speculation
    spec = client.completions.create(**kw, extra_body={"speculative": "prompt_lookup", "draft_max": 8})
    assert spec.choices[0].text == plain.choices[0].text
    assert spec.usage.completion_tokens == plain.usage.completion_tokens
    assert _metric(server, "fastgguf_draft_accepted_total") > before
    assert _metric(server, "fastgguf_draft_tokens_total") >= _metric(server, "fastgguf_draft_accepted_total")
    msgs = [{"role": "user", "content": "Repeat exactly: one two three four five six seven eight"}]
    chat = [client.chat.completions.create(model=model_name, messages=msgs, max_tokens=16, temperature=0,
                                           extra_body=extra).choices[0].message.content
            for extra in ({}, {"speculative": "prompt_lookup"}, {"speculative": "none"})]
    assert chat[0] == chat[1] == chat[2]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(**kw, extra_body={"speculative": "ngram"})
    assert e.value.body["param"] == "speculative"


def test_serve_defaults():
    """`fastgguf serve --speculative prompt_lookup --draft-max 4` sets what a request that does not say gets; a
    request's own field wins, "none" included."""
    args = build_parser().parse_args(["serve", "--speculative", "prompt_lookup", "--draft-max", "4"])
    assert (args.speculative, args.draft_max, args.draft_model) == ("prompt_lookup", 4, None)
    defaults = {"speculative": "prompt_lookup", "draft_max": 4}
    p = sampling_params({}, 1000, defaults)
    assert (p.speculative, p.draft_max) == ("prompt_lookup", 4)
    assert sampling_params({"speculative": "none"}, 1000, defaults).speculative is None
    assert sampling_params({"draft_max": 2}, 1000, defaults).draft_max == 2
    with pytest.raises(APIError):
        sampling_params({"draft_max": 0}, 1000, defaults)


def test_create_app_sets_the_default(default_model_path):
    """create_app(sampling_defaults=) (what serve's flags build) reaches every request of that model."""
    import fastgguf
    from fastgguf.api.openai.protocol import prepare_completion
    from fastgguf.server import create_app
    m = fastgguf.Model(default_model_path)  # its own: the default is set on the model
    create_app(m, n_ctx=256, sampling_defaults={"speculative": "prompt_lookup", "draft_max": 4})
    p = prepare_completion(m, {"prompt": "Hi", "max_tokens": 4}, 256).params
    assert (p.speculative, p.draft_max) == ("prompt_lookup", 4)
    assert prepare_completion(m, {"prompt": "Hi", "speculative": None, "max_tokens": 4}, 256).params.speculative \
        == "prompt_lookup"  # null: not said
    assert prepare_completion(m, {"prompt": "Hi", "speculative": "none", "max_tokens": 4}, 256).params.speculative \
        is None
    with pytest.raises(ValueError, match="draft_max"):
        create_app(fastgguf.Model(default_model_path), sampling_defaults={"draft_max": 100})
