"""Pooling read from the file ({arch}.pooling_type, the rank classifier head) and what embed / rerank make of it:
tiny random-weight qwen3 files (tests/models.py "chat") against the float64 oracle's final hidden states
(tests/oracle.py), pooled here the plain way; batched == one by one, bit for bit."""
import json
import os

import numpy as np
import pytest

import fastgguf
from fastgguf.engine.pooling import max_input_tokens
from fastgguf.engine.scheduler import Scheduler
from fastgguf.errors import GGUFError
from fastgguf.api.openai.client import create_embedding, embed, rerank
from fastgguf.api.openai.protocol import APIError, rerank_tokens

from models import QWEN3_RERANK_TEMPLATE, build as build_model
from oracle import Oracle

POOLINGS = {"none": 0, "mean": 1, "cls": 2, "last": 3}
TEXTS = ["The cat sat on the mat.", "Quantum chromodynamics", "a", "naïve café — ünïcode ✓ 東京",
         "def f(x):\n    return x * 2\n"]


# the cases llama.cpp's llama-embedding also ran (tools/make_tiny_references.py --pooling): its qwen3 loader takes
# cls.output.weight only, so the full head ("rank_full") is checked against the oracle alone
LLAMA_CASES = ("none", "mean", "cls", "last", "rank_qwen3")
REF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "pooling-references.json")


def build(name, path):
    """The tiny random qwen3 file of a case (deterministic: seeded weights, the gguf writer); returns its path."""
    pooling = POOLINGS.get(name, 4 if name.startswith("rank") else None)
    head = {"rank_qwen3": "qwen3", "rank_full": "full"}.get(name)
    return build_model(path, "chat", vocab="qwen2", template="Qwen-Qwen3-0.6B", arch="qwen3", seed=3, pooling=pooling,
                       head=head)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root, cache = tmp_path_factory.mktemp("pooling_models"), {}

    def get(name):
        if name not in cache:
            path = build(name, root / f"{name}.gguf")
            # the oracle reads a copy without the 151k-token vocabulary (gguf-py parses it slowly; it needs none)
            bare = _rewrite(path, root / f"{name}-oracle.gguf", drop="tokenizer.")
            cache[name] = (fastgguf.Model(path), Oracle(bare))
        return cache[name]
    return get


@pytest.fixture(scope="module")
def engine_of():
    engines = {}

    def get(model):
        if id(model) not in engines:
            engines[id(model)] = (Scheduler(model, parallel=4, n_ctx=256), model)
        return engines[id(model)][0]
    yield get
    for eng, _ in engines.values():
        eng.stop()


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def oracle_rows(oracle, ids):
    oracle.forward(ids)
    return oracle.last_hidden


def unit(v):
    return v / np.linalg.norm(v)


# ---- the file's keys -> Hparams, model.classifier ----

def test_pooling_and_head_read_from_the_file(models):
    for name, pooling in [("none", "none"), ("mean", "mean"), ("cls", "cls"), ("last", "last"),
                          ("rank_qwen3", "rank"), ("chat", None)]:
        m, _ = models(name)
        assert m.pooling == m.hparams.pooling == pooling
        assert m.hparams.causal is True
    m, _ = models("rank_qwen3")
    assert m.hparams.n_cls_out == 2 and m.hparams.rank_softmax
    assert set(m.classifier) == {"cls.output.weight"} and m.classifier["cls.output.weight"].shape == (2, 32)
    assert m.classifier["cls.output.weight"].dtype == np.float32
    m, _ = models("rank_full")
    assert set(m.classifier) == {"cls.weight", "cls.bias", "cls.output.weight", "cls.output.bias"}
    assert m.hparams.n_cls_out == 1 and m.classifier["cls.output.weight"].shape == (2, 32)
    assert models("chat")[0].classifier is None


def test_bad_pooling_type_and_causal_are_gguf_errors(tmp_path):
    from fastgguf import GGUFFile
    src = build_model(tmp_path / "m.gguf", "chat", vocab="qwen2", template="Qwen-Qwen3-0.6B", arch="qwen3")
    with GGUFFile(src) as g:
        from fastgguf.arch.base import get as arch_get
        a = arch_get(g)
        assert a.hparams().pooling is None
    for key, value, add, what in [("qwen3.pooling_type", 5, "add_uint32", "pooling_type"),
                                  ("qwen3.attention.causal", 1, "add_uint32", "attention.causal")]:
        path = tmp_path / f"bad-{what}.gguf"
        _rewrite(src, path, key, value, add)
        with pytest.raises(GGUFError, match=what):
            fastgguf.Model(path)
    path = tmp_path / "noncausal.gguf"
    _rewrite(src, path, "qwen3.attention.causal", False, "add_bool")
    m = fastgguf.Model(path)
    assert m.hparams.causal is False
    assert max_input_tokens(m, 4096) == 1024 and max_input_tokens(m, 100) == 100   # context_length 1024
    assert max_input_tokens(models_chat := fastgguf.Model(src), 4096) == 4096  # causal: the engine's n_ctx
    del models_chat


def _is_text(g, k):
    from fastgguf.gguf.constants import GGUFValueType as V
    vtype, etype = g.value_type(k)
    return vtype == V.STRING or (vtype == V.ARRAY and etype == V.STRING)


def _rewrite(src, dst, key=None, value=None, add=None, drop=None):
    """A copy of src at dst with one more metadata key (w.<add>(key, value)), or without the keys starting with
    `drop`; returns dst."""
    from fastgguf import GGUFFile, GGUFWriter
    w = GGUFWriter()
    with GGUFFile(src) as g:
        for k in g.metadata:
            if drop and k.startswith(drop):
                continue
            w.add_value(k, g.metadata_raw(k) if _is_text(g, k) else g.metadata[k], *g.value_type(k))
        if add:
            getattr(w, add)(key, value)
        for name in g.tensors:
            w.add_tensor(name, np.array(g.tensor(name)))
        w.write(str(dst))
    return str(dst)


def test_cls_without_weight_is_refused(tmp_path):
    from fastgguf import GGUFFile, GGUFWriter
    src = build_model(tmp_path / "m.gguf", "chat", vocab="qwen2", template="Qwen-Qwen3-0.6B", arch="qwen3", pooling=4)
    with GGUFFile(src) as g:   # src's keys and tensors, and a bias without its weight
        w = GGUFWriter()
        for k in g.metadata:
            w.add_value(k, g.metadata_raw(k) if _is_text(g, k) else g.metadata[k], *g.value_type(k))
        for name in g.tensors:
            w.add_tensor(name, np.array(g.tensor(name)))
    w.add_tensor("cls.output.bias", np.zeros(2, np.float32))
    w.write(str(tmp_path / "bad.gguf"))
    with pytest.raises(GGUFError, match="cls.output.bias without cls.output.weight"):
        fastgguf.Model(tmp_path / "bad.gguf")
    # rank without any head loads, as in llama.cpp (its score: the pooled row's first value)
    m = fastgguf.Model(src)
    assert m.pooling == "rank" and m.classifier is None


# ---- embed / rerank against the float64 oracle ----

@pytest.mark.parametrize("name", ["mean", "cls", "last", "chat"])
def test_pooled_embeddings_match_oracle(models, engine_of, name):
    m, o = models(name)
    got = embed(m, TEXTS, engine=engine_of(m))
    for text, v in zip(TEXTS, got):
        rows = oracle_rows(o, m.tokenize(text))
        want = unit({"mean": rows.mean(0), "cls": rows[0], "last": rows[-1], "chat": rows.mean(0)}[name])
        assert len(v) == 32 and abs(np.linalg.norm(v) - 1) < 1e-5
        assert cosine(v, want) >= 0.9999, (name, text)
    mean = embed(models("mean")[0], TEXTS[0], engine=engine_of(models("mean")[0]))   # same weights (seed)
    if name == "chat":   # no pooling_type: mean pooling, as before the key was read
        assert got[0] == mean
    elif name != "mean":   # the pooling really differs (the inputs have several tokens)
        assert cosine(got[0], mean) < 0.999


def test_pooling_none_gives_per_token_vectors(models, engine_of):
    m, o = models("none")
    eng = engine_of(m)
    got = embed(m, TEXTS[:2], engine=eng)
    for text, v in zip(TEXTS[:2], got):
        rows = oracle_rows(o, m.tokenize(text))
        assert np.asarray(v).shape == rows.shape
        for a, b in zip(v, rows):   # each token's vector, not normalised
            assert cosine(a, b) >= 0.9999 and abs(np.linalg.norm(a) / np.linalg.norm(b) - 1) < 1e-3
    with pytest.raises(APIError, match="not OAI compatible"):
        create_embedding(m, TEXTS[0], engine=eng)


def oracle_rank(m, o, ids):
    rows = oracle_rows(o, ids)
    x, head = rows[-1], m.classifier   # causal: the last row
    if "cls.weight" in head:
        x = np.tanh(head["cls.weight"] @ x + head["cls.bias"])
    x = head["cls.output.weight"] @ x + head.get("cls.output.bias", 0)
    if m.hparams.arch == "qwen3":
        x = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    return float(x[0])


@pytest.mark.parametrize("name", ["rank_qwen3", "rank_full"])
def test_rerank_matches_oracle(models, engine_of, name):
    m, o = models(name)
    docs = TEXTS[1:]
    res = rerank(m, TEXTS[0], docs, engine=engine_of(m))
    assert sorted(r["index"] for r in res) == list(range(len(docs)))
    scores = [r["relevance_score"] for r in res]
    assert scores == sorted(scores, reverse=True)
    for r in res:
        want = oracle_rank(m, o, rerank_tokens(m, TEXTS[0], docs[r["index"]]))
        assert abs(r["relevance_score"] - want) < 1e-4, (r, want)
    assert all(0 < s < 1 for s in scores) and len(set(scores)) == len(scores)   # qwen3: a softmax's first value
    top = rerank(m, TEXTS[0], docs, top_n=2, return_documents=True, engine=engine_of(m))
    assert top == [dict(r, document={"text": docs[r["index"]]}) for r in res[:2]]


def test_rerank_tokens(models):
    m, _ = models("rank_qwen3")   # the file's rerank template, special tokens parsed, none added
    text = QWEN3_RERANK_TEMPLATE.replace("{query}", "q?").replace("{document}", "d.")
    ids = rerank_tokens(m, "q?", "d.")
    assert ids == m.tokenize(text, add_special=False, parse_special=True)
    assert m.tokenizer.special_ids["eos"] is None or ids.count(m.tokenize("<|im_start|>", False, True)[0]) == 3
    m, _ = models("rank_full")   # no template: query then document (this vocabulary adds no BOS/EOS/SEP)
    assert not m.tokenizer.add_bos and not m.tokenizer.add_eos
    assert rerank_tokens(m, "q?", "d.") == m.tokenize("q?", False) + m.tokenize("d.", False)


def test_rerank_errors(models, engine_of):
    m, _ = models("mean")
    with pytest.raises(APIError, match="pooling 'mean'") as e:
        rerank(m, "q", ["d"], engine=engine_of(m))
    assert e.value.status == 400 and e.value.param == "model"
    with pytest.raises(APIError, match="no pooling_type"):
        rerank(models("chat")[0], "q", ["d"])
    r, _ = models("rank_qwen3")
    for docs in ([], None, ["ok", 3]):
        with pytest.raises(APIError, match="documents must be a non-empty list of strings"):
            rerank(r, "q", docs, engine=engine_of(r))
    with pytest.raises(APIError) as e:
        rerank(r, "word " * 300, ["d"], engine=engine_of(r))   # past the engine's 256-token context
    assert e.value.code == "context_length_exceeded" and e.value.param == "documents"
    with pytest.raises(APIError, match="reranker"):
        embed(r, "x", engine=engine_of(r))


# ---- batching changes nothing ----

def test_batched_equals_one_by_one_bit_for_bit(models, engine_of):
    for name in ("last", "rank_full", "none"):
        m, _ = models(name)
        eng = engine_of(m)
        if name.startswith("rank"):
            together = rerank(m, "query", TEXTS, engine=eng)
            alone = [rerank(m, "query", [t], engine=eng)[0]["relevance_score"] for t in TEXTS]
            assert {r["index"]: r["relevance_score"] for r in together} == dict(enumerate(alone))
        else:
            together = embed(m, TEXTS + TEXTS, engine=eng)   # 10 inputs over 4 slots: batched steps
            alone = [embed(m, t, engine=eng) for t in TEXTS]
            assert together == alone + alone


# ---- against llama.cpp's llama-embedding (references made by tools/make_tiny_references.py --pooling) ----

@pytest.mark.parametrize("name", LLAMA_CASES)
def test_matches_llama_embedding(models, engine_of, name):
    with open(REF) as f:
        ref = json.load(f)
    case = ref["cases"][name]
    m, _ = models(name)
    eng = engine_of(m)
    if name == "rank_qwen3":   # llama-embedding's query<TAB>document pairs, through the file's rerank template
        for (query, doc), want in zip(ref["pairs"], case):
            got = rerank(m, query, [doc], engine=eng)[0]["relevance_score"]
            assert abs(got - want[0]) < 1e-4, (query, doc, got, want)
        return
    got = embed(m, ref["texts"], engine=eng)
    if name == "none":   # llama-embedding lists every token's row, input after input (normalised: L2 each)
        got = [row for rows in got for row in rows]
    assert len(got) == len(case)
    for g, want in zip(got, case):
        assert cosine(g, want) >= 0.9999


# ---- a non-causal model's input goes to the forward pass whole (the contract with fg_forward) ----

@pytest.mark.filterwarnings("ignore:n_ctx=2048 exceeds")
def test_non_causal_input_runs_whole_in_one_call(tmp_path, monkeypatch):
    from fastgguf.engine import batch as _batch
    src = build("mean", tmp_path / "causal.gguf")
    models = {"causal": fastgguf.Model(src),
              "non-causal": fastgguf.Model(_rewrite(src, tmp_path / "nc.gguf", "qwen3.attention.causal", False,
                                                    "add_bool"))}
    calls = []
    real = _batch.forward_batch

    def spy(model, items, n_threads=None, outputs=None):
        calls.append([(len(ids), ctx.n_past) for ctx, ids in items])
        return real(model, items, n_threads, outputs)
    monkeypatch.setattr(_batch, "forward_batch", spy)
    text = "one two three four five six seven eight nine ten " * 15   # > 64 tokens: two chunks when causal
    for name, m in models.items():
        eng = Scheduler(m, parallel=2, n_ctx=2048, chunk=64)
        try:
            calls.clear()
            n = len(m.tokenize(text))
            assert n > 64
            embed(m, [text, "short"], engine=eng)
            mine = [c for step in calls for c in step if c[0] > 2]   # the long input's rows per call
            want = [(n, 0)] if name == "non-causal" else [(min(64, n - p), p) for p in range(0, n, 64)]
            assert mine == want
            if name == "non-causal":   # at most its training context (1024), whatever the engine's n_ctx
                with pytest.raises(APIError, match="maximum context length is 1024"):
                    embed(m, "word " * 1100, engine=eng)
        finally:
            eng.stop()


def test_quantized_head_is_dequantized_once(models, tmp_path):
    from fastgguf.gguf.quantize import quantize_file
    m, _ = models("rank_qwen3")
    q = tmp_path / "q8.gguf"
    quantize_file(m.path, str(q), "q8_0")
    mq = fastgguf.Model(q)
    assert mq.file.tensors["cls.output.weight"].type == 8   # Q8_0 in the file
    w, wq = m.classifier["cls.output.weight"], mq.classifier["cls.output.weight"]
    assert wq.dtype == np.float32 and wq.shape == w.shape
    assert 0 < np.abs(w - wq).max() <= np.abs(w).max() / 127   # Q8_0's rounding, no more
