"""Many models, one server (issue 37): a real `fastgguf serve -m a.gguf -m b.gguf -m broken.gguf` with two tiny random
models, driven by the official openai and ollama clients. Models load on the first request that names them and run
side by side; /v1/models, /api/ps and /api/tags tell the truth; Ollama's keep_alive 0 and llama-server's
/models/unload unload; an unknown name is a 404 in each dialect's shape; a file that fails to load gives its error
and the others still serve; /api/pull streams Ollama's progress lines from a local cache (no network); --models-dir
under a --max-memory that holds one model, and a short --keep-alive.
The registry's own logic (keep-alive expiry, the memory budget, waiters) is tests/server/test_model_registry.py."""
import concurrent.futures
import json
import os
import time
import urllib.request

import pytest

import models
from conftest import API_KEY, Server, http

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
ollama = pytest.importorskip("ollama")

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def cache(tmp_path_factory, default_model_path):
    """A catalogue cache holding the default model (a link to the test run's copy, with its checksum marker): a
    pull of smollm2-135m finds it there and fetches nothing."""
    from fastgguf import hub
    d = tmp_path_factory.mktemp("cache")
    os.symlink(default_model_path, d / hub.DEFAULT_MODEL_FILE)
    (d / (hub.DEFAULT_MODEL_FILE + ".sha256")).write_text(f"{hub.DEFAULT_MODEL_SHA256}  {hub.DEFAULT_MODEL_FILE}\n")
    return d


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi")
    for seed, name in enumerate(("alpha", "beta"), 1):
        models.build(root / f"{name}.gguf", "chat", vocab="qwen2", template="Qwen-Qwen3-0.6B", arch="qwen3", seed=seed)
    return root


@pytest.fixture(scope="module")
def multi(files, cache):
    root = files
    a, b = root / "alpha.gguf", root / "beta.gguf"
    (root / "broken.gguf").write_bytes(b"GGUF but not really")
    old = os.environ.get("FASTGGUF_CACHE")
    os.environ["FASTGGUF_CACHE"] = str(cache)
    try:
        s = Server(str(a), "-m", str(b), "-m", str(root / "broken.gguf"), "--parallel", "2", "--ctx-size", "256")
    finally:
        if old is None:
            del os.environ["FASTGGUF_CACHE"]
        else:
            os.environ["FASTGGUF_CACHE"] = old
    yield s
    s.stop()


def statuses(server):
    status, body, _ = http(server, "GET", "/v1/models")
    assert status == 200, body
    return {m["id"]: m["status"]["value"] for m in body["data"]}


def ps(server):
    status, body, _ = http(server, "GET", "/api/ps")
    assert status == 200, body
    return {m["name"]: m for m in body["models"]}


def test_models_load_on_demand_side_by_side(multi):
    assert statuses(multi) == {"alpha": "unloaded", "beta": "unloaded", "broken": "unloaded"}
    oa = openai.OpenAI(base_url=multi.base + "/v1", api_key=API_KEY, max_retries=0, timeout=60)

    def ask(name):
        return oa.chat.completions.create(model=name, messages=HI, max_tokens=4, temperature=0)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(ask, ["alpha", "beta", "alpha", "beta"]))
    assert [r.model for r in replies] == ["alpha", "beta", "alpha", "beta"]
    assert all(r.choices[0].message.content is not None for r in replies)
    assert replies[0].choices[0].message.content == replies[2].choices[0].message.content   # greedy, same model
    assert statuses(multi) == {"alpha": "loaded", "beta": "loaded", "broken": "unloaded"}
    loaded = ps(multi)
    assert set(loaded) == {"alpha", "beta"}
    assert loaded["alpha"]["context_length"] == 256 and loaded["alpha"]["expires_at"] < "9999"
    claude = anthropic.Anthropic(base_url=multi.base, api_key=API_KEY, max_retries=0, timeout=60)
    assert claude.messages.create(model="beta", max_tokens=2, messages=HI).model == "beta"
    tags = {m["name"] for m in http(multi, "GET", "/api/tags")[1]["models"]}
    assert tags == {"alpha", "beta", "broken"}


def test_ollama_client_and_keep_alive_zero_unloads(multi):
    oc = ollama.Client(host=multi.base, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
    r = oc.chat(model="beta", messages=HI, options={"num_predict": 3, "temperature": 0})
    assert r.model == "beta" and r.message.content is not None
    assert oc.show("alpha:latest").details.family == "qwen3"
    assert oc.generate(model="beta", prompt="", keep_alive=0).done_reason == "unload"
    assert "beta" not in ps(multi) and statuses(multi)["beta"] == "unloaded"
    assert oc.generate(model="beta", prompt="", keep_alive=0).done_reason == "unload"   # not loaded to unload it
    assert "beta" not in ps(multi)
    for bad in ("5 parsecs", 1e12):
        with pytest.raises(ollama.ResponseError) as e:
            oc.chat(model="beta", messages=HI, keep_alive=bad)
        assert e.value.status_code == 400 and "keep_alive" in e.value.error
    assert "beta" not in ps(multi)                                     # a refused request loads nothing


def test_router_load_and_unload(multi):
    assert http(multi, "POST", "/models/unload", {"model": "alpha"})[:2] == (200, {"success": True})
    assert "alpha" not in ps(multi)
    assert http(multi, "POST", "/models/load", {"model": "alpha"})[:2] == (200, {"success": True})
    assert "alpha" in ps(multi)


def test_unknown_name_is_404_in_each_dialect(multi):
    oa = openai.OpenAI(base_url=multi.base + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    with pytest.raises(openai.NotFoundError) as e:
        oa.chat.completions.create(model="gpt-3.5-turbo", messages=HI, max_tokens=2)
    assert e.value.body["code"] == "model_not_found" and "gpt-3.5-turbo" in e.value.body["message"]
    oc = ollama.Client(host=multi.base, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
    with pytest.raises(ollama.ResponseError) as e:
        oc.chat(model="llama3", messages=HI)
    assert e.value.status_code == 404 and e.value.error == "model 'llama3' not found"
    status, body, _ = http(multi, "POST", "/v1/messages", {"model": "claude-x", "max_tokens": 2, "messages": HI},
                           headers={"anthropic-version": "2023-06-01"})
    assert status == 404 and body["type"] == "error" and "claude-x" in body["error"]["message"]
    status, body, _ = http(multi, "POST", "/v1/chat/completions", {"messages": HI, "max_tokens": 2})
    assert status == 400 and body["error"]["param"] == "model"          # several models: a name is needed


def test_a_model_that_fails_to_load_gives_its_error(multi):
    for _ in range(2):  # tried again on the next request, failing the same way
        status, body, _ = http(multi, "POST", "/v1/chat/completions",
                               {"model": "broken", "messages": HI, "max_tokens": 2})
        assert status == 500 and "broken" in body["error"]["message"]
    card = next(m for m in http(multi, "GET", "/v1/models")[1]["data"] if m["id"] == "broken")
    assert card["status"]["value"] == "unloaded" and card["status"]["failed"] is True
    status, body, _ = http(multi, "POST", "/v1/chat/completions", {"model": "alpha", "messages": HI, "max_tokens": 2})
    assert status == 200                                                 # the others still serve


def test_pull_streams_progress_and_delete_keeps_given_files(multi):
    req = urllib.request.Request(multi.base + "/api/pull", data=json.dumps({"model": "smollm2-135m"}).encode(),
                                 headers={"Authorization": f"Bearer {API_KEY}"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        lines = [json.loads(x) for x in r.read().decode().splitlines()]
    assert lines[0] == {"status": "pulling manifest"} and lines[-1] == {"status": "success"}
    assert any(x.get("total") and x.get("completed") == x["total"] for x in lines)
    status, body, _ = http(multi, "POST", "/api/pull", {"model": "no-such-model"})
    assert status == 404 and "no-such-model" in body["error"]
    status, body, _ = http(multi, "DELETE", "/api/delete", {"model": "alpha"})
    assert status == 400 and "command line" in body["error"]
    assert http(multi, "DELETE", "/api/delete", {"model": "nope"})[0] == 404


def test_models_dir_under_a_memory_budget(files):
    """--models-dir with a budget that holds one model: loading the other unloads the idle one first; a keep-alive
    of a second unloads the last one soon after its request."""
    import fastgguf
    m = fastgguf.Model(str(files / "alpha.gguf"))
    one = m.memory(128)["weights"] + m.memory(128)["cache"]
    s = Server(None, "--models-dir", str(files), "--parallel", "1", "--ctx-size", "128",
               "--max-memory", str(int(one * 1.5)), "--keep-alive", "1s")
    try:
        for name in ("alpha", "beta"):
            status, body, _ = http(s, "POST", "/v1/completions", {"model": name, "prompt": "Hi", "max_tokens": 2})
            assert status == 200 and body["model"] == name
            assert set(ps(s)) == {name}                                  # the other was unloaded for it
        got = statuses(s)
        assert (got["alpha"], got["beta"]) == ("unloaded", "loaded")
        deadline = time.monotonic() + 10
        while ps(s) and time.monotonic() < deadline:                     # the reaper looks every second
            time.sleep(0.2)
        assert ps(s) == {}
    finally:
        s.stop()
