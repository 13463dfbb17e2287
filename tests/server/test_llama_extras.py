"""llama-server's extras on real servers: GET /props, GET /slots (a busy slot seen mid-stream; its prompt text only
with --slots-show-prompts), /tokenize with_pieces (llama-server's shape), --alias as the model's id, POST
/slots/{id}?action=save|restore|erase with --slot-save-path."""
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


@pytest.fixture(scope="module")
def slot_server(default_model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("slots")
    s = Server(default_model_path, "--parallel", "2", "--ctx-size", "256", "--slot-save-path", str(folder))
    s.folder = folder
    yield s
    s.stop()


def test_slot_save_erase_restore(slot_server):
    """Slot 0's cache saved, erased, restored into slot 1: the same request then reuses its prompt (cached_tokens)
    and answers the same text."""
    body = {"prompt": "The capital of France is a city named", "max_tokens": 8, "temperature": 0}
    status, first = call(slot_server, "/v1/completions", body)
    assert status == 200
    n_past = call(slot_server, "/slots")[1][0]["n_past"]
    status, saved = call(slot_server, "/slots/0?action=save", {"filename": "fr.bin"})
    assert status == 200 and saved["n_saved"] == n_past > 0 and saved["id_slot"] == 0
    assert saved["n_written"] == (slot_server.folder / "fr.bin").stat().st_size and "save_ms" in saved["timings"]
    assert call(slot_server, "/slots/0?action=erase", {}) == (200, {"id_slot": 0, "n_erased": n_past})
    status, restored = call(slot_server, "/slots/1?action=restore", {"filename": "fr.bin"})
    assert status == 200 and restored["n_restored"] == n_past and restored["n_read"] == saved["n_written"]
    assert [s["n_past"] for s in call(slot_server, "/slots")[1]] == [0, n_past]
    status, again = call(slot_server, "/v1/completions", body)
    assert again["choices"][0]["text"] == first["choices"][0]["text"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_slot_action_errors(slot_server, server):
    (slot_server.folder / "junk.bin").write_bytes(b"not a state " * 20)
    cases = [("/slots/0?action=save", {"filename": "../x.bin"}, 400, "Invalid filename"),
             ("/slots/0?action=save", {"filename": "a/b"}, 400, "Invalid filename"),
             ("/slots/0?action=save", {}, 400, "Invalid filename"),
             ("/slots/0?action=bogus", {}, 400, "Invalid action"),
             ("/slots/x?action=erase", {}, 400, "Invalid slot ID"),
             ("/slots/5?action=erase", {}, 400, "slot 5 does not exist"),
             ("/slots/0?action=restore", {"filename": "missing.bin"}, 404, "no file missing.bin"),
             ("/slots/0?action=restore", {"filename": "junk.bin"}, 400, "not a fastgguf state")]
    for path, body, want, message in cases:
        status, r = call(slot_server, path, body)
        assert status == want and message in r["error"]["message"], (path, body, r)
    status, r = call(server, "/slots/0?action=erase", {})  # no --slot-save-path
    assert status == 501 and "--slot-save-path" in r["error"]["message"]
    assert call(slot_server, "/slots/0?action=erase", {}, key=None)[0] == 401

