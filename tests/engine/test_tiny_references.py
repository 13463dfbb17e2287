"""Tiny random-weight models of every architecture and RoPE variant against llama.cpp: references made once by
tools/make_tiny_references.py (llama.cpp through llama-cpp-python's bindings, flash attention on and off) and
committed in tests/data/tiny-references.json. The files are rebuilt here (tests/models.py), byte for byte, from
CASES, and run teacher-forced through both of fastgguf's paths: the prompt in one call, and one token per call.

Each case: F32 weights (llama-mxfp4: MXFP4 matrices, lfm2-q8_0 and qwen35-q8_0: Q8_0), 2-5 layers, n_embd 64, 4
query heads of 16, vocabulary 100; GQA (2 KV heads) or MHA, tied or untied output. The mixtures of experts (preset
"moe"): experts F32, Q8_0 or Q4_K (n_embd 256 there), 8 experts 2 used or 128 used 8; qwen35 / qwen35moe / qwen3next
(preset "qwen35": gated DeltaNet and gated attention layers). Tolerance: llama.cpp's own flash on/off spread on the same
file, see test_matches_llama_cpp.

Where llama.cpp is off, it is llama.cpp: both its attention paths round Q to F16 for the products with the F16 K
cache (ggml's vec_dot_type of F16 is F16; fastgguf keeps Q in F32), and its flash path also sums V in F16. On these
files fastgguf equals the float64 oracle (tests/oracle.py) to 1e-4; at llama-longrope n_ctx 256 position 5
llama.cpp is 0.116 (flash on) and 0.073 (flash off) from both, its own on/off spread there 0.045."""
import json
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from fastgguf.engine.model import Model  # noqa: E402
import models  # noqa: E402
from models import tie_router  # noqa: E402
from test_rope_scaling import llama3_factors, longrope_tensors  # noqa: E402

# the tiny files say context_length 128; the references run at llama.cpp's smallest context, 256 (and 512)
pytestmark = pytest.mark.filterwarnings("ignore:n_ctx=.*exceeds the model's training context:RuntimeWarning")
REFS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "tiny-references.json")
IDS = [int(t) for t in np.random.default_rng(7).integers(0, 100, 24)]
YARN = {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 4096}
# llama.cpp rounds n_ctx up to a multiple of 256, so the LongRoPE switch is tested at 256 (short) / 512 (long)
LONGROPE = {"rope.scaling.type": "longrope", "rope.scaling.original_context_length": 256,
            "rope.scaling.attn_factor": 1.19}

GRANITE_SCALES = {"embedding_scale": 2.0, "attention.scale": 0.2, "residual_scale": 0.5, "logit_scale": 3.0}

GEMMA4_MOE = {"ple": 0, "shared": 0, "double_ff": False, "no_v": (3, 5), "stale_kv": (), "n_expert": 4,
              "fused_exps": (1,)}
# name -> (models.build options, context sizes)
CASES = {
    "llama-gqa-tied": ({}, [256]),
    "llama-mha-untied": ({"tied": False, "n_head_kv": 4, "bias": True}, [256]),
    "llama3-rope-freqs": ({"tied": False, "rope_base": 500000.0,
                           "extra": {"rope_freqs.weight": llama3_factors(500000.0, 16, old_ctx=64)}}, [256]),
    "mistral-sliding-window": ({"tied": False, "meta": {"attention.sliding_window": 4}}, [256]),
    "llama-linear": ({"meta": {"rope.scaling.type": "linear", "rope.scaling.factor": 4.0}}, [256]),
    "llama-yarn": ({"meta": YARN}, [256]),
    "llama-longrope": ({"meta": LONGROPE, "extra": longrope_tensors(2)}, [256, 512]),
    "qwen2-gqa-untied": ({"arch": "qwen2", "tied": False}, [256]),
    "qwen2-yarn": ({"arch": "qwen2", "n_head_kv": 4, "meta": YARN}, [256]),
    "qwen3-gqa-tied": ({"arch": "qwen3"}, [256]),
    "gemma": ({"arch": "gemma", "n_head_kv": 4}, [256]),
    "gemma2": ({"arch": "gemma2", "n_layer": 3,
                "meta": {"attention.sliding_window": 5, "attn_logit_softcapping": 5.0,
                         "final_logit_softcapping": 8.0}}, [256]),
    "gemma3": ({"arch": "gemma3", "n_layer": 4, "n_head_kv": 4,
                "meta": {"attention.sliding_window": 4, "attention.sliding_window_pattern": 3,
                         "rope.freq_base_swa": 100.0}}, [256]),
    "phi3-mha": ({"arch": "phi3", "tied": False, "n_head_kv": 4}, [256]),
    "phi3-longrope": ({"arch": "phi3", "tied": False, "n_head_kv": 4, "meta": LONGROPE,
                       "extra": longrope_tensors()}, [256, 512]),
    # every matrix but the token embedding in MXFP4 (gpt-oss's expert format; llama.cpp takes it for any matrix)
    "llama-mxfp4": ({"tied": False, "wtype": "MXFP4"}, [256]),
    "granite": ({"arch": "granite", "tied": False, "meta": GRANITE_SCALES}, [256]),
    # NoPE in layer 3 of 5 (llama.cpp's fixed step 4), a RoPE layer after it
    "smollm3": ({"arch": "smollm3", "n_layer": 5}, [256]),
    # short-convolution layers 0, 1, 3 (3 taps), attention in layer 2; then every attention layer sliding-window
    "lfm2": ({"arch": "lfm2", "n_layer": 4, "conv_layers": (0, 1, 3)}, [256]),
    "lfm2-swa": ({"arch": "lfm2", "n_layer": 3, "conv_layers": (1,), "l_cache": 4,
                  "meta": {"attention.sliding_window": 5}}, [256]),
    # Q8_0 matrices (in_proj, out_proj among them; the conv kernel F32): activations quantized as llama.cpp's
    "lfm2-q8_0": ({"arch": "lfm2", "n_layer": 4, "conv_layers": (0, 1, 3), "wtype": "Q8_0"}, [256]),
    # gated DeltaNet, gated attention, DeltaNet (preset "qwen35": 4 conv taps, S 16, 2 q/k heads, 4 v heads; rope
    # on 8 of 16 dims); the MoE one (4 experts 2 used, a shared expert of 32); Q8_0 matrices
    "qwen35": ({"preset": "qwen35"}, [256]),
    "qwen35moe": ({"preset": "qwen35", "arch": "qwen35moe", "n_expert": 4, "shared": 32}, [256]),
    "qwen35-q8_0": ({"preset": "qwen35", "wtype": "Q8_0"}, [256]),
    # qwen3next: qwen35moe's layers with plain NEOX RoPE, v head h on q/k head h // 2 (repeat-interleave), q|k|v|z
    # in ssm_in and beta|alpha in ssm_ba per q/k head group (legacy files); then attn_qkv / attn_gate (the
    # current converter's)
    "qwen3next": ({"preset": "qwen35", "arch": "qwen3next", "n_expert": 4, "shared": 32}, [256]),
    "qwen3next-qkv": ({"preset": "qwen35", "arch": "qwen3next", "n_expert": 4, "shared": 32, "fused": True}, [256]),
    # gemma4 (preset "gemma4", tests/models.py GEMMA4): sliding layers 0-2 and 4 (window 4, head 16, 2 KV heads),
    # full layers 3 and 5 (head 32, 1 KV head, 8 of 16 pairs rotated via rope_freqs), layers 4-5 reusing layers
    # 2-3's K/V with a doubled FFN, per-layer inputs of 32, no attn_v in layer 1; then Q8_0 matrices and embeddings;
    # and without per-layer inputs or K/V sharing (the 31B's dense layout, here with attn_v)
    "gemma4": ({"preset": "gemma4"}, [256]),
    "gemma4-q8_0": ({"preset": "gemma4", "wtype": "Q8_0"}, [256]),
    "gemma4-plain": ({"preset": "gemma4", "gemma4": {"ple": 0, "shared": 0, "double_ff": False, "no_v": (),
                                                     "stale_kv": ()}}, [256]),
    # the MoE layout (26B-A4B's: no per-layer inputs or K/V sharing, no attn_v in the full layers): 4 experts of 32,
    # 2 used, beside the dense FFN, gate|up fused in layer 1; F32, then Q8_0 matrices and experts
    "gemma4-moe": ({"preset": "gemma4", "gemma4": GEMMA4_MOE}, [256]),
    "gemma4-moe-q8_0": ({"preset": "gemma4", "wtype": "Q8_0", "gemma4": GEMMA4_MOE}, [256]),
}
# mixtures of experts (models.build options of preset "moe" under "moe"): 8 experts, 2 used unless said
CASES.update({
    "llama-moe-8x2": ({"moe": {"arch": "llama"}}, [256]),
    "qwen3moe-8x2": ({"moe": {}}, [256]),
    "qwen3moe-q8_0": ({"moe": {"wtype": "Q8_0"}}, [256]),
    "qwen3moe-q4_k": ({"moe": {"wtype": "Q4_K", "n_embd": 256, "n_ff_exp": 256}}, [256]),
    "qwen3moe-128x8": ({"moe": {"n_expert": 128, "n_used": 8, "n_ff_exp": 16}}, [256]),
    "qwen3moe-ties": ({"moe": {"router": tie_router, "n_used": 3}}, [256]),
    "qwen2moe-shared": ({"moe": {"arch": "qwen2moe", "shared": 48}}, [256]),
    "olmoe-mha": ({"moe": {"arch": "olmoe", "n_head_kv": 4}}, [256]),
    "granitemoe-shared": ({"moe": {"arch": "granitemoe", "shared": 40, "meta": GRANITE_SCALES}}, [256]),
})
# lfm2moe: lfm2's layers, the first dense(s), then 8 experts 2 used chosen with a selection bias: sigmoid gating
# (LFM2-8B-A1B's) after one dense layer (conv, then conv, attention, conv with experts), and softmax without any.
# There the router's near one-hot softmax and the bias often choose two experts of probability < 2^-14 together,
# whose weights then are p / 2^-14 (llama.cpp's clamp of the sum): a 1e-7 change of p moves them, hence llama.cpp's
# spread of 1.2e-2 on that file
CASES.update({
    "lfm2moe-sigmoid": ({"moe": {"arch": "lfm2moe", "n_layer": 4, "conv_layers": (0, 1, 3), "n_dense_lead": 1}},
                        [256]),
    "lfm2moe-softmax": ({"moe": {"arch": "lfm2moe", "n_layer": 3, "conv_layers": (1,), "n_dense_lead": 0,
                                 "meta": {"expert_gating_func": 1}}}, [256]),
})
# granitehybrid: Mamba-2 layers (inner 128, 8 heads in 2 groups, state 16, 4 taps) beside attention, granite's scales;
# Mamba-2, attention, Mamba-2 with RoPE; and attention, Mamba-2, attention without RoPE (Granite 4.0 H's
# rope.scaling.finetuned false) with 8 experts and a shared expert
CASES.update({
    "granitehybrid": ({"arch": "granitehybrid", "n_layer": 3, "ssm_layers": (0, 2), "meta": GRANITE_SCALES}, [256]),
    "granitehybrid-moe-nope": ({"moe": {"arch": "granitehybrid", "n_layer": 3, "ssm_layers": (1,), "shared": 40,
                                        "meta": {**GRANITE_SCALES, "rope.scaling.finetuned": False}}}, [256]),
})
# gpt-oss: 4 experts 2 used, a window of 5 on the even layers (shorter than IDS), YaRN as the real files have
GPTOSS_META = {"attention.sliding_window": 5, **YARN}
CASES.update({
    "gpt-oss-f32": ({"moe": {"arch": "gpt-oss", "n_expert": 4, "meta": GPTOSS_META}}, [256]),
    "gpt-oss-mxfp4": ({"moe": {"arch": "gpt-oss", "n_expert": 4, "wtype": "MXFP4", "n_layer": 3,
                               "meta": GPTOSS_META}}, [256]),
})


def build(name, path):
    opts, _ = CASES[name]
    if "moe" in opts:
        return models.build(path, "moe", seed=11, **opts["moe"])
    opts = dict(opts)
    return models.build(path, opts.pop("preset", "tiny"), vocab="no_vocab", seed=11, **opts)


@pytest.fixture(scope="module")
def refs():
    with open(REFS) as f:
        return json.load(f)


def test_references_cover_the_cases(refs):
    assert sorted(refs["cases"]) == sorted(CASES)
    assert refs["ids"] == IDS


def teacher_forced(m, n_ctx, path):
    """fastgguf's logits (len(IDS), n_vocab) of IDS at positions 0..: "batch" in one call (the prompt path),
    "decode" one token per call (the one-row path)."""
    ctx = m.context(n_ctx)
    if path == "batch":
        return ctx.eval(IDS, all_logits=True)
    return np.array([ctx.runner.step_py(t) for t in IDS])


@pytest.mark.parametrize("path", ["batch", "decode"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_llama_cpp(tmp_path, refs, name, path):
    """Over llama.cpp's top-10 ids at each position, d = max |fastgguf - llama.cpp (flash on)|; s = llama.cpp's
    own largest flash on/off difference on the file (fa_spread). The median d over positions <= s, the largest
    <= 3 s + 1e-3 (measured: medians 0.2-0.65 s, largest 0.85-2.5 s; a RoPE slip such as a missing YaRN ramp or
    magnitude, or the other LongRoPE factors, is 40-1600 s), and the same top-1 wherever llama.cpp's top two are
    further apart than that bound. fastgguf's both paths against llama.cpp's batch."""
    m = Model(build(name, tmp_path / f"{name}.gguf"), n_threads=2)
    for run in refs["cases"][name]:
        got = teacher_forced(m, run["n_ctx"], path)
        s = run["fa_spread"]
        d = []
        for p in run["positions"]:
            row, ids, want = got[p["pos"]], p["top_ids"], np.array(p["top_logits"])
            d.append(np.max(np.abs(row[ids] - want)))
            assert d[-1] <= 3 * s + 1e-3, (name, run["n_ctx"], p["pos"], d[-1], s)
            if want[0] - want[1] > 3 * s + 1e-3:
                assert int(np.argmax(row)) == ids[0], (name, run["n_ctx"], p["pos"])
        assert np.median(d) <= s, (name, run["n_ctx"], np.median(d), s)
