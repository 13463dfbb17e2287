"""`fastgguf info` and `fastgguf pull` through fastgguf.cli.main."""

import json

import numpy as np
import pytest

from fastgguf import GGUFWriter, cli, hub


def _info_json(capsys, *argv):
    rc = cli.main(["info", *argv, "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    return json.loads(out)


def test_info_json_default_model(default_model_path, capsys):
    d = _info_json(capsys, default_model_path)
    assert d["architecture"] == "llama"
    assert d["gguf_version"] == 3 and d["file_size"] == 98362432
    hp = d["hyperparameters"]
    assert hp["block_count"] == 30 and hp["embedding_length"] == 576 and hp["attention.head_count_kv"] == 3
    t = d["tokenizer"]
    assert t == {"model": "gpt2", "pre": "smollm", "n_tokens": 49152, "n_merges": 48900, "bos_id": 1,
                 "eos_id": 2, "unknown_id": 0, "padding_id": 2, "add_bos_token": False,
                 "add_space_prefix": False}
    assert d["chat_template"]["present"] and d["chat_template"]["length"] > 100
    assert d["totals"]["n_tensors"] == len(d["tensors"]) == 272
    assert d["totals"]["nbytes"] == sum(x["nbytes"] for x in d["tensors"])
    assert d["totals"]["by_type"]["Q4_1"]["count"] == 210
    emb = d["tensors"][0]
    assert emb == {"name": "token_embd.weight", "type": "Q8_0", "shape": [49152, 576], "nbytes": 30081024,
                   "offset": 1785664}


def test_info_text(default_model_path, capsys):
    assert cli.main(["info", default_model_path]) == 0
    out = capsys.readouterr().out
    for fragment in ("architecture  llama", "block_count", "n_merges", "48900", "chat template yes",
                     "token_embd.weight", "Q8_0", "49152x576", "total: 272 tensors"):
        assert fragment in out, fragment


def test_info_without_file_uses_the_default_model(monkeypatch, tmp_path, capsys):
    w = GGUFWriter()
    w.add_string("general.architecture", "tiny")
    w.add_uint32("tiny.block_count", 1)
    w.add_tensor("x", np.zeros(4, np.float32))
    p = w.write(tmp_path / "m.gguf")
    monkeypatch.setattr(hub, "default_model_path", lambda download=True: p)
    d = _info_json(capsys)
    assert d["path"] == p and d["architecture"] == "tiny" and d["hyperparameters"] == {"block_count": 1}
    assert d["tokenizer"] == {} and d["chat_template"] == {"present": False, "length": 0}
    assert d["tensors"] == [{"name": "x", "type": "F32", "shape": [4], "nbytes": 16, "offset": d["data_offset"]}]


def test_info_bad_file_is_an_error_not_a_traceback(tmp_path, capsys):
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF\x01\x00\x00\x00" + bytes(16))
    assert cli.main(["info", str(p)]) == 1
    assert "v1" in capsys.readouterr().err
    assert cli.main(["info", str(tmp_path / "missing.gguf")]) == 1


def test_pull_prints_the_path(monkeypatch, capsys):
    monkeypatch.setattr(hub, "pull", lambda force=False: "/some/where/model.gguf")
    assert cli.main(["pull"]) == 0
    assert capsys.readouterr().out.strip() == "/some/where/model.gguf"


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "info" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--version"])


def test_command_modules_register():
    import importlib
    for name in cli.COMMAND_MODULES:
        assert callable(importlib.import_module(name).register)
