"""Completions' echo with logprobs (issue 24, defect 9): text_offset is where each token's text starts in the
returned text, counted by what the token adds to it: special tokens (which the text skips) add nothing, a UTF-8
character split over tokens counts once. Offsets never go backwards nor past the text, and each ordinary token's
string is found at its offset."""
import pytest

import fastgguf


@pytest.fixture(scope="module")
def model(default_model_path):
    return fastgguf.Model(default_model_path)


def _collect(r, stream):
    if not stream:
        ch = r["choices"][0]
        return ch["text"], ch["logprobs"]["tokens"], ch["logprobs"]["text_offset"]
    text, toks, offs = "", [], []
    for c in r:
        ch = c["choices"][0]
        text += ch["text"]
        if ch["logprobs"]:
            toks += ch["logprobs"]["tokens"]
            offs += ch["logprobs"]["text_offset"]
    return text, toks, offs


@pytest.mark.parametrize("stream", [False, True])
def test_offsets_agree_with_the_echoed_text_around_special_tokens(model, stream):
    eos = model.tokenizer.eos_id
    prompt = [eos] + list(model.tokenize("Hello there")) + [eos] + list(model.tokenize(" é and 😀 emoji"))
    r = model.create_completion(prompt, max_tokens=6, echo=True, logprobs=1, temperature=0, stream=stream)
    text, toks, offs = _collect(r, stream)
    assert text.startswith("Hello there é and 😀 emoji") and len(toks) == len(offs) == len(prompt) + 6
    assert offs == sorted(offs) and all(0 <= o <= len(text) for o in offs), (offs, len(text))
    special = model.tokenizer.token_to_piece(eos, special=True).decode()
    assert toks[0] == special
    assert offs[:3] == [0, 0, len("Hello")]  # the skipped special token takes no room
    for t, o in zip(toks, offs):
        if t != special and "\ufffd" not in t:
            assert text.startswith(t, o), (t, o, text)
    emoji = text.index("😀")
    assert emoji in offs  # the token completing the split character starts where it stands
