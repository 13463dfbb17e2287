"""llama-server's extras on real servers: GET /props, GET /slots (a busy slot seen mid-stream; its prompt text only
with --slots-show-prompts), /tokenize with_pieces (llama-server's shape), --alias as the model's id."""
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import API_KEY, Server, http

TEXT = "Hello wörld 𝔘𝔫𝔦 ✓"


def call(server, path, body=None, key=API_KEY):
    return http(server, "GET" if body is None else "POST", path, body, key=key)[:2]


@pytest.fixture(scope="module")
def aliased(default_model_path):
    s = Server(default_model_path, "--parallel", "2", "--ctx-size", "256", "--alias", "my-model",
               "--strict-model-names", "--slots-show-prompts")
    yield s
    s.stop()


def test_props(server, model_name):
    status, p = call(server, "/props")
    assert status == 200 and p["total_slots"] == 5 and p["default_generation_settings"]["n_ctx"] == 512
    assert p["model_alias"] == model_name and "/" not in p["model_path"] and p["model_path"].endswith(".gguf")
    assert "<|im_start|>" in p["chat_template"] and p["build_info"].startswith("fastgguf ")
    assert p["default_generation_settings"]["params"]["temperature"] == 0.8  # SamplingParams' default
    assert call(server, "/props", key=None)[0] == 401


def _busy_slots(server, model, prompt):
    """/slots while a long stream of `prompt` runs (the stream cut as soon as a busy slot was seen)."""
    seen, started = [], threading.Event()

    def stream():
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 200,
                "stream": True, "temperature": 0}
        req = urllib.request.Request(server.base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {API_KEY}"})
        with urllib.request.urlopen(req, timeout=60) as r:
            r.readline()
            started.set()
            while not seen:
                if not r.readline():
                    break
    t = threading.Thread(target=stream)
    t.start()
    try:
        assert started.wait(60)
        for _ in range(200):
            slots = call(server, "/slots")[1]
            if any(s["is_processing"] for s in slots):
                seen.append(slots)
                break
            time.sleep(0.01)
    finally:
        seen.append(None)
        t.join(60)
    assert seen[0] is not None, "no busy slot seen"
    return seen[0]


def test_slots_idle_and_busy_without_prompt_text(server, model_name):
    status, slots = call(server, "/slots")
    assert status == 200 and [s["id"] for s in slots] == list(range(5))
    assert all(s["n_ctx"] == 512 and s["state"] in ("idle", "processing") for s in slots)
    busy = [s for s in _busy_slots(server, model_name, "Tell me a long story.") if s["is_processing"]]
    assert busy and busy[0]["n_prompt_tokens"] > 0 and busy[0]["n_past"] > 0 and "prompt" not in busy[0]


def test_alias_and_slots_show_prompts(aliased):
    status, models = call(aliased, "/v1/models")
    assert [m["id"] for m in models["data"]] == ["my-model"]
    status, r = call(aliased, "/v1/chat/completions", {"model": "my-model", "max_tokens": 2,
                                                       "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and r["model"] == "my-model"
    file_name = call(aliased, "/props")[1]["model_path"][:-5]
    assert call(aliased, "/v1/completions", {"model": file_name, "prompt": "a", "max_tokens": 1})[0] == 200
    assert call(aliased, "/v1/completions", {"model": "other", "prompt": "a", "max_tokens": 1})[0] == 404
    assert call(aliased, "/api/tags")[1]["models"][0]["name"] == "my-model"
    busy = [s for s in _busy_slots(aliased, "my-model", "Tell me about zebras.") if s["is_processing"]]
    assert "Tell me about zebras." in busy[0]["prompt"]


def test_tokenize_with_pieces(server, model):
    status, plain = call(server, "/tokenize", {"content": TEXT})
    status, r = call(server, "/tokenize", {"content": TEXT, "with_pieces": True})
    assert status == 200 and [t["id"] for t in r["tokens"]] == plain["tokens"]
    joined = b"".join(t["piece"].encode() if isinstance(t["piece"], str) else bytes(t["piece"]) for t in r["tokens"])
    assert joined.decode() == model.detokenize(plain["tokens"]) == TEXT
    split = [t["piece"] for t in r["tokens"] if isinstance(t["piece"], list)]
    assert split, "a character split over tokens gives byte lists"
    for b in split:
        with pytest.raises(UnicodeDecodeError):
            bytes(b).decode("utf-8")
