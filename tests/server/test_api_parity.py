"""One greedy conversation through the three chat APIs, sent at once (so they share batches): OpenAI's chat
completions, OpenAI's Responses and Anthropic's Messages give the same text, token for token (the same prompt and
completion token counts)."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import API_KEY

anthropic = pytest.importorskip("anthropic")

SYSTEM = "You are terse."
TURNS = [{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "Apple."},
         {"role": "user", "content": "And a vegetable?"}]
N = 20


@pytest.mark.parametrize("stream", [False, True])
def test_same_text_through_each_api(server, client, model_name, stream):
    claude = anthropic.Anthropic(base_url=server.base, api_key=API_KEY, max_retries=0, timeout=60)

    def chat():
        args = dict(model=model_name, messages=[{"role": "system", "content": SYSTEM}, *TURNS], max_tokens=N,
                    temperature=0)
        if not stream:
            r = client.chat.completions.create(**args)
            return r.choices[0].message.content, r.usage.prompt_tokens, r.usage.completion_tokens
        text, usage = "", None
        for c in client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}):
            text += c.choices[0].delta.content or "" if c.choices else ""
            usage = c.usage or usage
        return text, usage.prompt_tokens, usage.completion_tokens

    def responses():
        args = dict(model=model_name, instructions=SYSTEM, input=TURNS, max_output_tokens=N, temperature=0)
        r = list(client.responses.create(**args, stream=True))[-1].response if stream else \
            client.responses.create(**args)
        return r.output_text, r.usage.input_tokens, r.usage.output_tokens

    def messages():
        args = dict(model=model_name, system=SYSTEM, messages=TURNS, max_tokens=N, extra_body={"temperature": 0})
        if stream:
            with claude.messages.stream(**args) as s:
                m = s.get_final_message()
        else:
            m = claude.messages.create(**args)
        return m.content[0].text, m.usage.input_tokens, m.usage.output_tokens

    with ThreadPoolExecutor(3) as pool:
        got = [f.result() for f in [pool.submit(fn) for fn in (chat, responses, messages)]]
    assert got[0][0] and got[0][2] > 0
    assert got[1] == got[0] and got[2] == got[0]
