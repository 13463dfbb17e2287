"""`fastgguf info` / `tokenize` / `quantize` on hostile files: any GGUF value type under any key prints (no
traceback), terminal control characters from the file are escaped, and a zero-size tensor quantizes."""
import json

import numpy as np
import pytest

from fastgguf import GGUFFile, GGUFWriter, cli
from fastgguf.gguf import GGUFValueType as V


def _byte_symbols():
    """GPT-2's bytes_to_unicode symbols: a complete byte-level BPE alphabet."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


TOKENS = _byte_symbols() + ["ĠĠ", "<|endoftext|>"]
BASE = {
    "general.architecture": (V.STRING, "llama"), "general.name": (V.STRING, "tiny"),
    "llama.block_count": (V.UINT32, 1), "llama.context_length": (V.UINT32, 16),
    "tokenizer.ggml.model": (V.STRING, "gpt2"), "tokenizer.ggml.pre": (V.STRING, "default"),
    "tokenizer.ggml.tokens": (V.ARRAY, TOKENS, V.STRING),
    "tokenizer.ggml.token_type": (V.ARRAY, [1] * (len(TOKENS) - 1) + [3], V.INT32),
    "tokenizer.ggml.merges": (V.ARRAY, ["Ġ Ġ"], V.STRING),
    "tokenizer.ggml.bos_token_id": (V.UINT32, len(TOKENS) - 1),
    "tokenizer.ggml.eos_token_id": (V.UINT32, len(TOKENS) - 1),
    "tokenizer.ggml.add_bos_token": (V.BOOL, False), "tokenizer.chat_template": (V.STRING, "{{ messages }}"),
}
EXTRA_KEYS = ["llama.rope.freq_base", "general.license", "tokenizer.ggml.scores", "tokenizer.ggml.unknown_token_id",
              "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix"]
ESC = "x\x1b[31m\x07\x9b\u202ey\r"
VARIANTS = {f"scalar_{t.name}": (t, ESC if t == V.STRING else (True if t == V.BOOL else 7))
            for t in V if t != V.ARRAY}
VARIANTS.update({
    "scalar_nan": (V.FLOAT32, float("nan")),
    "array_uint32": (V.ARRAY, [1, 2, 3], V.UINT32), "array_int64": (V.ARRAY, list(range(20)), V.INT64),
    "array_float32": (V.ARRAY, [1.5, 2.5], V.FLOAT32), "array_bool": (V.ARRAY, [True, False], V.BOOL),
    "array_string": (V.ARRAY, ["a", ESC], V.STRING), "array_empty": (V.ARRAY, [], V.INT32),
})


def _build(path, override=None, tensor_name="x"):
    w = GGUFWriter()
    kv = dict(BASE)
    kv.update(override or {})
    for k, v in kv.items():
        w.add_value(k, v[1], v[0], v[2] if len(v) > 2 else None)
    w.add_tensor(tensor_name, np.zeros(4, np.float32))
    return w.write(path)


def _run(capsys, argv):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    assert isinstance(rc, int), argv
    assert "Traceback" not in err, err
    return rc, out, err


@pytest.mark.parametrize("key", list(BASE) + EXTRA_KEYS)
def test_any_value_type_under_any_key_prints(tmp_path, capsys, key):
    for vname, value in VARIANTS.items():
        path = _build(tmp_path / f"{vname}.gguf", {key: value})
        rc, out, err = _run(capsys, ["info", path])
        assert rc == 0 and "total: 1 tensors" in out, (key, vname, err)
        assert not any(c in out for c in "\x1b\x07\x9b\u202e\r"), (key, vname, out)
        rc, out, err = _run(capsys, ["info", path, "--json"])
        assert rc == 0, (key, vname, err)
        json.loads(out)
        rc, out, err = _run(capsys, ["tokenize", "-m", path, "hello  world"])
        assert rc in (0, 1), (key, vname, err)
        if rc == 1:
            assert "error:" in err and key in err, (key, vname, err)
        assert not any(c in err for c in "\x1b\x07\x9b\u202e"), (key, vname, err)


def test_info_escapes_control_characters(tmp_path, capsys):
    path = _build(tmp_path / "esc.gguf", {"general.name": (V.STRING, "evil\x1b]0;title\x07\x1b[2J"),
                                         "llama.rope.scaling.type": (V.STRING, "a\x1b[31mb")},
                  tensor_name="t\x1b[1m")
    rc, out, _ = _run(capsys, ["info", path])
    assert rc == 0 and "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b]0;title\\x07\\x1b[2J" in out and "a\\x1b[31mb" in out and "t\\x1b[1m" in out
    rc, out, _ = _run(capsys, ["info", path, "--json"])
    assert "\x1b" not in out and json.loads(out)["name"] == "evil\x1b]0;title\x07\x1b[2J"


def test_info_reports_type_confused_values(tmp_path, capsys):
    path = _build(tmp_path / "tc.gguf", {"general.architecture": (V.UINT32, 42),
                                        "tokenizer.ggml.tokens": (V.UINT32, 7),
                                        "tokenizer.chat_template": (V.UINT32, 3)})
    rc, out, _ = _run(capsys, ["info", path, "--json"])
    d = json.loads(out)
    assert d["architecture"] == 42 and d["hyperparameters"] == {}
    assert d["tokenizer"]["n_tokens"] == "not an array: 7"
    assert d["chat_template"]["present"] and d["chat_template"]["length"] is None
    rc, out, err = _run(capsys, ["tokenize", "-m", path, "hi"])
    assert rc == 1 and "tokenizer.ggml.tokens should be an array of strings" in err


def test_quantize_zero_size_tensor(tmp_path, capsys):
    w = GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_tensor("blk.0.attn_q.weight", np.zeros((0, 64), np.float32))
    w.add_tensor("blk.0.ffn_up.weight", np.ones((4, 64), np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.zeros((0,), np.float32))
    src = w.write(tmp_path / "z.gguf")
    dst = str(tmp_path / "zq.gguf")
    rc, out, err = _run(capsys, ["quantize", src, dst, "--type", "q4_0", "--quiet"])
    assert rc == 0, err
    with GGUFFile(dst) as f:
        assert f.tensors["blk.0.attn_q.weight"].shape == (0, 64) and f.tensor("blk.0.attn_q.weight").size == 0
        assert f.tensors["blk.0.ffn_up.weight"].type.name == "Q4_0"
