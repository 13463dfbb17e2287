"""Model names as llama-server takes them (issue 37): a server with one model serves any name a client sends
("gpt-3.5-turbo", a Claude name, an Ollama tag), in every dialect, and reports its own id; `--strict-model-names`
gives a 404 in the dialect's shape instead (the session `server` fixture runs strict: test_server_api and the
dialects' tests check those 404s)."""
import pytest

from conftest import API_KEY, Server, http

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
ollama = pytest.importorskip("ollama")

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def lenient(default_model_path):
    s = Server(default_model_path, "--parallel", "2", "--ctx-size", "256")
    yield s
    s.stop()


def test_any_name_is_served_in_every_dialect(lenient, model_name):
    oa = openai.OpenAI(base_url=lenient.base + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    for name in ("gpt-3.5-turbo", "test", model_name):
        r = oa.chat.completions.create(model=name, messages=HI, max_tokens=2, temperature=0)
        assert r.choices[0].message.content is not None
    assert oa.completions.create(model="davinci-002", prompt="Hi", max_tokens=2).choices[0].text is not None
    assert len(oa.embeddings.create(model="text-embedding-3-small", input="hi").data[0].embedding) > 0
    assert [m.id for m in oa.models.list().data] == [model_name]          # the listing tells the truth
    claude = anthropic.Anthropic(base_url=lenient.base, api_key=API_KEY, max_retries=0, timeout=60)
    assert claude.messages.create(model="claude-3-5-sonnet-latest", max_tokens=2, messages=HI).content is not None
    oc = ollama.Client(host=lenient.base, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
    assert oc.chat(model="llama3:latest", messages=HI, options={"num_predict": 2}).message is not None
    status, body, _ = http(lenient, "POST", "/v1/chat/completions", {"model": 7, "messages": HI, "max_tokens": 2})
    assert status == 400 and body["error"]["param"] == "model"        # still a string


def test_strict_names_get_404_in_each_dialect(server, client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-3.5-turbo", messages=HI, max_tokens=2)
    assert e.value.body["code"] == "model_not_found" and "gpt-3.5-turbo" in e.value.body["message"]
    status, body, _ = http(server, "POST", "/v1/messages", {"model": "claude-x", "max_tokens": 2, "messages": HI},
                           headers={"anthropic-version": "2023-06-01"})
    assert status == 404 and body["type"] == "error" and body["error"]["type"] == "not_found_error"
    status, body, _ = http(server, "POST", "/api/chat", {"model": "llama3", "messages": HI})
    assert status == 404 and body == {"error": "model 'llama3' not found"}
