"""Tiny random-weight models of every architecture and RoPE variant against llama.cpp: references made once by
tools/make_tiny_references.py (llama.cpp through llama-cpp-python's bindings, flash attention on and off) and
committed in tests/data/tiny-references.json. The files are rebuilt here, byte for byte, from CASES.

Each case: F32 weights, 2-4 layers, n_embd 64, 4 query heads of 16, vocabulary 100; GQA (2 KV heads) or MHA,
tied or untied output. Tolerance: llama.cpp's own flash on/off spread on the same file (its flash path rounds Q
and the softmax-weighted V sum to F16; both keep K/V in F16 as fastgguf does), see test_matches_llama_cpp."""
import json
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from fastgguf.engine.model import Model  # noqa: E402
from test_model import make_tiny  # noqa: E402
from test_rope_scaling import llama3_factors, longrope_tensors  # noqa: E402

REFS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "tiny-references.json")
IDS = [int(t) for t in np.random.default_rng(7).integers(0, 100, 24)]
YARN = {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 4096}
# llama.cpp rounds n_ctx up to a multiple of 256, so the LongRoPE switch is tested at 256 (short) / 512 (long)
LONGROPE = {"rope.scaling.type": "longrope", "rope.scaling.original_context_length": 256,
            "rope.scaling.attn_factor": 1.19}

# name -> (make_tiny options, context sizes)
CASES = {
    "llama-gqa-tied": ({}, [256]),
    "llama-mha-untied": ({"tied": False, "n_head_kv": 4, "bias": True}, [256]),
    "llama3-rope-freqs": ({"tied": False, "rope_base": 500000.0,
                           "extra": {"rope_freqs.weight": llama3_factors(500000.0, 16, old_ctx=64)}}, [256]),
    "mistral-sliding-window": ({"tied": False, "meta": {"attention.sliding_window": 4}}, [256]),
    "llama-linear": ({"scale_linear": 4.0}, [256]),
    "llama-yarn": ({"meta": YARN}, [256]),
    "qwen2-gqa-untied": ({"arch": "qwen2", "bias": True, "tied": False}, [256]),
    "qwen2-yarn": ({"arch": "qwen2", "bias": True, "n_head_kv": 4, "meta": YARN}, [256]),
    "qwen3-gqa-tied": ({"arch": "qwen3", "qk_norm": True}, [256]),
    "gemma": ({"arch": "gemma", "n_head_kv": 4}, [256]),
    "gemma2": ({"arch": "gemma2", "post_norms": True, "n_layer": 3,
                "meta": {"attention.sliding_window": 5, "attn_logit_softcapping": 5.0,
                         "final_logit_softcapping": 8.0}}, [256]),
    "gemma3": ({"arch": "gemma3", "post_norms": True, "qk_norm": True, "n_layer": 4, "n_head_kv": 4,
                "meta": {"attention.sliding_window": 4, "attention.sliding_window_pattern": 3,
                         "rope.freq_base_swa": 100.0}}, [256]),
    "phi3-mha": ({"arch": "phi3", "fused": True, "tied": False, "n_head_kv": 4}, [256]),
    "phi3-longrope": ({"arch": "phi3", "fused": True, "tied": False, "n_head_kv": 4, "meta": LONGROPE,
                       "extra": longrope_tensors()}, [256, 512]),
}


def build(name, path):
    opts, _ = CASES[name]
    return make_tiny(path, no_vocab=True, seed=11, **opts)


@pytest.fixture(scope="module")
def refs():
    with open(REFS) as f:
        return json.load(f)


def test_references_cover_the_cases(refs):
    assert sorted(refs["cases"]) == sorted(CASES)
    assert refs["ids"] == IDS


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_llama_cpp(tmp_path, refs, name):
    """At every position, over llama.cpp's top-10 ids: |fastgguf - llama.cpp (flash on)| <= 2 x llama.cpp's own
    largest flash on/off difference on this file + 1e-3 (F16 rounding of K/V computed in a different order), and
    the same top-1 wherever llama.cpp's top two are further apart than that tolerance."""
    path = build(name, tmp_path / f"{name}.gguf")
    m = Model(path, n_threads=2)
    for run in refs["cases"][name]:
        got = m.context(run["n_ctx"]).eval(IDS, all_logits=True)
        tol = 2 * run["fa_spread"] + 1e-3
        for p in run["positions"]:
            row, ids, want = got[p["pos"]], p["top_ids"], np.array(p["top_logits"])
            diff = np.max(np.abs(row[ids] - want))
            assert diff <= tol, (name, run["n_ctx"], p["pos"], diff, tol)
            if want[0] - want[1] > tol:
                assert int(np.argmax(row)) == ids[0], (name, run["n_ctx"], p["pos"])
