"""Fuzz target: hyperparameter validation (fastgguf.arch), on a tiny well-formed model whose metadata the input
rewrites: any GGUF value type (scalars, strings, arrays) under any of the keys an architecture reads, with edge
values (0, negative, NaN, inf, huge). Loading may only succeed or raise GGUFError; a model that loads must run a
token and give finite logits (or FloatingPointError for NaN ones). Nothing else may escape: no
ZeroDivisionError, OverflowError, TypeError, KeyError, MemoryError or crash.

    python tests/fuzz/fuzz_hparams.py -max_total_time=60 tests/fuzz/corpus/hparams
"""
import math
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

with _harness.instrumented():
    _harness.import_fastgguf()
    import fastgguf  # noqa: E402
    from fastgguf.gguf import GGUFError, GGUFValueType, GGUFWriter  # noqa: E402

E, H, KVH, HD, F, NV = 32, 2, 1, 16, 32, 16
# new ones last (the corpus)
ARCHS = ("llama", "qwen2", "qwen3", "qwen3moe", "granitemoe", "gpt-oss", "lfm2", "qwen35", "lfm2moe", "granitehybrid",
         "gemma4", "qwen3next")
NE = 4  # experts of the mixture-of-experts archs
KEYS = ("expert_count", "expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length",
        "logit_scale", "residual_scale", "embedding_scale", "attention.scale", "block_count", "context_length",
        "embedding_length", "feed_forward_length", "attention.head_count",
        "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
        "rope.freq_base", "attention.layer_norm_rms_epsilon", "rope.scaling.type", "rope.scaling.factor",
        "rope.scale_linear", "attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa",
        "shortconv.l_cache", "ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank",
        "ssm.inner_size", "full_attention_interval", "attention.recurrent_layers", "rope.dimension_sections",
        "nextn_predict_layers", "leading_dense_block_count", "expert_gating_func", "expert_group_count",
        "rope.scaling.finetuned", "attention.key_length_swa", "attention.value_length_swa",
        "rope.dimension_count_swa", "attention.shared_kv_layers", "embedding_length_per_layer_input",
        "final_logit_softcapping")
BASE = {"block_count": 1, "context_length": 64, "embedding_length": E, "feed_forward_length": F,
        "attention.head_count": H, "attention.head_count_kv": KVH, "rope.dimension_count": HD,
        "rope.freq_base": 10000.0, "attention.layer_norm_rms_epsilon": 1e-5}
INTS = (0, 1, 2, 16, 32, 64, -1, -2, 2**31 - 1, 2**31, 2**32 - 1, 2**40, 2**63 - 1)
FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, math.nan, math.inf, -math.inf, 10000.0, 1e-5)
V = GGUFValueType
SCALAR_TYPES = (V.UINT8, V.INT8, V.UINT16, V.INT16, V.UINT32, V.INT32, V.UINT64, V.INT64, V.FLOAT32, V.FLOAT64,
                V.BOOL, V.STRING)
RANGES = {V.UINT8: (0, 255), V.INT8: (-128, 127), V.UINT16: (0, 65535), V.INT16: (-32768, 32767),
          V.UINT32: (0, 2**32 - 1), V.INT32: (-2**31, 2**31 - 1), V.UINT64: (0, 2**64 - 1),
          V.INT64: (-2**63, 2**63 - 1)}
_RNG = np.random.default_rng(0)
_TENSORS = {"token_embd.weight": (NV, E), "output_norm.weight": (E,), "blk.0.attn_norm.weight": (E,),
            "blk.0.attn_q.weight": (H * HD, E), "blk.0.attn_k.weight": (KVH * HD, E),
            "blk.0.attn_v.weight": (KVH * HD, E), "blk.0.attn_output.weight": (E, H * HD),
            "blk.0.ffn_norm.weight": (E,), "blk.0.ffn_gate.weight": (F, E), "blk.0.ffn_up.weight": (F, E),
            "blk.0.ffn_down.weight": (E, F)}
# the mixtures of experts: a router and 3-D expert stacks instead of the dense FFN, and their keys
_MOE_TENSORS = {n: s for n, s in _TENSORS.items() if not n.startswith("blk.0.ffn_") or n.endswith("norm.weight")}
_MOE_TENSORS.update({"blk.0.ffn_gate_inp.weight": (NE, E), "blk.0.ffn_gate_exps.weight": (NE, F, E),
                     "blk.0.ffn_up_exps.weight": (NE, F, E), "blk.0.ffn_down_exps.weight": (NE, E, F)})
MOE_BASE = {"expert_count": NE, "expert_used_count": 2, "expert_feed_forward_length": F}
# gpt-oss: its FFN norm is post_attention_norm; q/k/v/o biases, sinks, router and expert biases; a window
_OSS_TENSORS = {n.replace("ffn_norm", "post_attention_norm"): s for n, s in _MOE_TENSORS.items()}
_OSS_TENSORS.update({"blk.0.attn_q.bias": (H * HD,), "blk.0.attn_k.bias": (KVH * HD,), "blk.0.attn_v.bias": (KVH * HD,),
                     "blk.0.attn_output.bias": (E,), "blk.0.attn_sinks.weight": (H,), "blk.0.ffn_gate_inp.bias": (NE,),
                     "blk.0.ffn_gate_exps.bias": (NE, F), "blk.0.ffn_up_exps.bias": (NE, F),
                     "blk.0.ffn_down_exps.bias": (NE, E)})
OSS_BASE = dict(MOE_BASE, **{"attention.sliding_window": 4})
# lfm2: its one layer a short convolution (head_count_kv [0]) of 3 taps; its output norm is token_embd_norm
_LFM2_TENSORS = {n.replace("output_norm", "token_embd_norm"): s for n, s in _TENSORS.items()
                 if not n.startswith("blk.0.attn_") or n.endswith("norm.weight")}
_LFM2_TENSORS.update({"blk.0.shortconv.in_proj.weight": (3 * E, E), "blk.0.shortconv.conv.weight": (E, 3),
                      "blk.0.shortconv.out_proj.weight": (E, E)})
# qwen35: layer 0 a gated DeltaNet (conv 3 taps, S 8, 1 q/k head, 2 v heads), layer 1 gated attention (attn_q: q and
# gate rows per head), post_attention_norm the FFN's norm; IMROPE sections covering every rotated pair
QWEN35_BASE = {"block_count": 2, "ssm.conv_kernel": 3, "ssm.state_size": 8, "ssm.group_count": 1,
               "ssm.time_step_rank": 2, "ssm.inner_size": 16, "full_attention_interval": 2}
_QWEN35_TENSORS = {"token_embd.weight": (NV, E), "output_norm.weight": (E,)}
for _i in range(2):
    _b = f"blk.{_i}."
    _QWEN35_TENSORS.update({_b + "attn_norm.weight": (E,), _b + "post_attention_norm.weight": (E,),
                            _b + "ffn_gate.weight": (F, E), _b + "ffn_up.weight": (F, E),
                            _b + "ffn_down.weight": (E, F)})
_QWEN35_TENSORS.update({"blk.0.attn_qkv.weight": (32, E), "blk.0.attn_gate.weight": (16, E),
                        "blk.0.ssm_conv1d.weight": (32, 3), "blk.0.ssm_dt.bias": (2,), "blk.0.ssm_a": (2,),
                        "blk.0.ssm_beta.weight": (2, E), "blk.0.ssm_alpha.weight": (2, E),
                        "blk.0.ssm_norm.weight": (8,), "blk.0.ssm_out.weight": (E, 16),
                        "blk.1.attn_q.weight": (2 * H * HD, E), "blk.1.attn_k.weight": (KVH * HD, E),
                        "blk.1.attn_v.weight": (KVH * HD, E), "blk.1.attn_output.weight": (E, H * HD),
                        "blk.1.attn_q_norm.weight": (HD,), "blk.1.attn_k_norm.weight": (HD,)})
# qwen3next: qwen35's two layers, the DeltaNet's q|k|v|z in ssm_in and beta|alpha in ssm_ba (per q/k head
# group), NE experts and a shared expert (feed_forward_length wide) in both, plain RoPE
QWEN3NEXT_BASE = dict(QWEN35_BASE, **MOE_BASE)
_Q3N_TENSORS = {n: s for n, s in _QWEN35_TENSORS.items()
                if n.split(".", 2)[-1] not in ("attn_qkv.weight", "attn_gate.weight", "ssm_beta.weight",
                                               "ssm_alpha.weight", "ffn_gate.weight", "ffn_up.weight",
                                               "ffn_down.weight")}
_Q3N_TENSORS.update({"blk.0.ssm_in.weight": (48, E), "blk.0.ssm_ba.weight": (4, E)})
for _i in range(2):
    _b = f"blk.{_i}."
    _Q3N_TENSORS.update({_b + "ffn_gate_inp.weight": (NE, E), _b + "ffn_gate_exps.weight": (NE, F, E),
                         _b + "ffn_up_exps.weight": (NE, F, E), _b + "ffn_down_exps.weight": (NE, E, F),
                         _b + "ffn_gate_shexp.weight": (F, E), _b + "ffn_up_shexp.weight": (F, E),
                         _b + "ffn_down_shexp.weight": (E, F), _b + "ffn_gate_inp_shexp.weight": (E,)})
# lfm2moe: lfm2's layer with experts and their selection bias (no leading dense layer), sigmoid gating
_LFM2MOE_TENSORS = {n: s for n, s in _LFM2_TENSORS.items()
                    if not n.startswith("blk.0.ffn_") or n.endswith("norm.weight")}
_LFM2MOE_TENSORS.update({n: s for n, s in _MOE_TENSORS.items()
                         if n.startswith(("blk.0.ffn_gate_", "blk.0.ffn_up_", "blk.0.ffn_down_"))})
_LFM2MOE_TENSORS["blk.0.exp_probs_b.bias"] = (NE,)
LFM2MOE_BASE = dict(MOE_BASE, **{"expert_gating_func": 2, "leading_dense_block_count": 0})
# granitehybrid: its one layer a Mamba-2 one (head_count_kv [0]): inner 2 E, 4 heads in 2 groups, state 8, 4 taps
SSM = {"ssm.conv_kernel": 4, "ssm.inner_size": 2 * E, "ssm.state_size": 8, "ssm.time_step_rank": 4,
       "ssm.group_count": 2}
_CD = 2 * E + 2 * 2 * 8
_GH_TENSORS = {n: s for n, s in _TENSORS.items() if not n.startswith("blk.0.attn_") or n.endswith("norm.weight")}
_GH_TENSORS.update({"blk.0.ssm_in.weight": (2 * E + _CD + 4, E),
                    "blk.0.ssm_conv1d.weight": (_CD, 4), "blk.0.ssm_conv1d.bias": (_CD,), "blk.0.ssm_dt.bias": (4,),
                    "blk.0.ssm_a": (4, 1), "blk.0.ssm_d": (4, 1), "blk.0.ssm_norm.weight": (2, E),
                    "blk.0.ssm_out.weight": (E, 2 * E)})
# gemma4: sliding, full, sliding, full (heads of 8 and 16); layers 2-3 reuse layers 0-1's K/V with a doubled FFN;
# per-layer inputs of 4; rope_freqs for the full layers
G4_P, G4_SWA = 4, [True, False, True, False]
GEMMA4_BASE = {"block_count": 4, "attention.key_length": HD, "attention.value_length": HD,
               "attention.key_length_swa": HD // 2, "attention.value_length_swa": HD // 2,
               "rope.dimension_count_swa": HD // 2, "attention.sliding_window": 4, "attention.shared_kv_layers": 2,
               "embedding_length_per_layer_input": G4_P, "final_logit_softcapping": 30.0}
_G4_TENSORS = {"token_embd.weight": (NV, E), "per_layer_token_embd.weight": (NV, 4 * G4_P),
               "per_layer_model_proj.weight": (4 * G4_P, E), "per_layer_proj_norm.weight": (G4_P,),
               "rope_freqs.weight": (HD // 2,), "output_norm.weight": (E,)}
for _i, _s in enumerate(G4_SWA):
    _b, _hd, _f = f"blk.{_i}.", HD // 2 if _s else HD, F * (2 if _i >= 2 else 1)
    _G4_TENSORS.update({_b + "attn_norm.weight": (E,), _b + "attn_q.weight": (H * _hd, E),
                        _b + "attn_q_norm.weight": (_hd,), _b + "attn_output.weight": (E, H * _hd),
                        _b + "post_attention_norm.weight": (E,), _b + "ffn_norm.weight": (E,),
                        _b + "ffn_gate.weight": (_f, E), _b + "ffn_up.weight": (_f, E), _b + "ffn_down.weight": (E, _f),
                        _b + "post_ffw_norm.weight": (E,), _b + "inp_gate.weight": (G4_P, E),
                        _b + "proj.weight": (E, G4_P), _b + "post_norm.weight": (E,),
                        _b + "layer_output_scale.weight": (1,)})
    if _i < 2:
        _G4_TENSORS.update({_b + "attn_k.weight": (KVH * _hd, E), _b + "attn_v.weight": (KVH * _hd, E),
                            _b + "attn_k_norm.weight": (_hd,)})
# and its MoE layout (a second byte's low bit): NE experts beside the dense FFN in every layer
_G4_MOE_TENSORS = dict(_G4_TENSORS)
for _i in range(4):
    _b = f"blk.{_i}."
    _G4_MOE_TENSORS.update({_b + "post_ffw_norm_1.weight": (E,), _b + "pre_ffw_norm_2.weight": (E,),
                            _b + "ffn_gate_inp.weight": (NE, E), _b + "ffn_gate_inp.scale": (E,),
                            _b + "ffn_gate_exps.weight": (NE, F, E), _b + "ffn_up_exps.weight": (NE, F, E),
                            _b + "ffn_down_exps.weight": (NE, E, F), _b + "ffn_down_exps.scale": (NE,),
                            _b + "post_ffw_norm_2.weight": (E,)})
_DATA = {n: (_RNG.standard_normal(s) * 0.3).astype(np.float32)
         for n, s in {**_TENSORS, **_MOE_TENSORS, **_OSS_TENSORS, **_LFM2_TENSORS, **_QWEN35_TENSORS,
                      **_LFM2MOE_TENSORS, **_GH_TENSORS, **_G4_MOE_TENSORS, **_Q3N_TENSORS}.items()}
_ARCH_TENSORS = {"qwen3moe": _MOE_TENSORS, "granitemoe": _MOE_TENSORS, "gpt-oss": _OSS_TENSORS,
                 "lfm2": _LFM2_TENSORS, "qwen35": _QWEN35_TENSORS,
                 "lfm2moe": _LFM2MOE_TENSORS, "granitehybrid": _GH_TENSORS, "gemma4": _G4_TENSORS,
                 "qwen3next": _Q3N_TENSORS}
_fd, _PATH = tempfile.mkstemp(suffix=".gguf")
os.close(_fd)


class Bytes:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def byte(self):
        b = self.data[self.pos] if self.pos < len(self.data) else 0
        self.pos += 1
        return b


def value(src, vt):
    """A value of type vt chosen by the input: mostly edge values, else raw bytes."""
    pick = src.byte()
    if vt == V.STRING:
        return ("none", "linear", "yarn", "llama3", "", "x" * 300, "64")[pick % 7]
    if vt == V.BOOL:
        return bool(pick & 1)
    if vt in (V.FLOAT32, V.FLOAT64):
        if pick < 200:
            return FLOATS[pick % len(FLOATS)]
        raw = bytes(src.byte() for _ in range(4))
        return struct.unpack("<f", raw)[0]
    lo, hi = RANGES[vt]
    v = INTS[pick % len(INTS)] if pick < 200 else src.byte() * 257 + src.byte()
    return min(max(v, lo), hi)


def build(data):
    src = Bytes(data)
    arch = ARCHS[src.byte() % len(ARCHS)]
    moe = arch in ("qwen3moe", "granitemoe")
    base = dict(BASE, **{"gpt-oss": OSS_BASE, "qwen35": QWEN35_BASE, "lfm2moe": LFM2MOE_BASE,
                         "granitehybrid": SSM, "gemma4": GEMMA4_BASE,
                         "qwen3next": QWEN3NEXT_BASE}.get(arch, MOE_BASE if moe else {}))
    if arch == "granitemoe":
        base["logit_scale"] = 2.0
    md = {k: (v, V.FLOAT32 if isinstance(v, float) else V.UINT32) for k, v in base.items()}
    if arch in ("lfm2", "lfm2moe"):
        md.update({"attention.head_count_kv": ([0], V.ARRAY, V.INT32), "shortconv.l_cache": (3, V.UINT32)})
    if arch == "qwen35":
        md["rope.dimension_sections"] = ([3, 3, 2, 0], V.ARRAY, V.INT32)
    if arch == "granitehybrid":
        md["attention.head_count_kv"] = ([0], V.ARRAY, V.INT32)
    g4_moe = arch == "gemma4" and src.byte() & 1
    if g4_moe:
        md.update({k: (v, V.UINT32) for k, v in MOE_BASE.items()})
    if arch == "gemma4":
        md["attention.sliding_window_pattern"] = (G4_SWA, V.ARRAY, V.BOOL)
        md["feed_forward_length"] = ([F, F, 2 * F, 2 * F], V.ARRAY, V.INT32)
    for _ in range(src.byte() % 6):
        key = KEYS[src.byte() % len(KEYS)]
        op = src.byte() % 8
        if op == 0:
            md.pop(key, None)
        elif op == 1:  # an array of a scalar type (per-layer values are allowed when equal)
            vt = SCALAR_TYPES[src.byte() % (len(SCALAR_TYPES) - 2)]
            md[key] = ([value(src, vt) for _ in range(src.byte() % 3 + 1)], V.ARRAY, vt)
        else:
            vt = SCALAR_TYPES[src.byte() % len(SCALAR_TYPES)]
            md[key] = (value(src, vt), vt)
    w = GGUFWriter()
    w.add_string("general.architecture", arch)
    for k, spec in md.items():
        if spec[1] == V.ARRAY:
            w.add_array(f"{arch}.{k}", spec[0], spec[2])
        else:
            w.add_value(f"{arch}.{k}", spec[0], spec[1])
    for name in _G4_MOE_TENSORS if g4_moe else _ARCH_TENSORS.get(arch, _TENSORS):
        w.add_tensor(name, _DATA[name])
    w.write(_PATH)


def test_one_input(data):
    try:
        build(data)
    except (ValueError, OverflowError, struct.error):
        return  # the writer refused the value (out of its type's range): not a file to test
    try:
        m = fastgguf.Model(_PATH, n_threads=1)
    except GGUFError:
        return
    try:
        logits = m.context(8).eval([1, 2])
    except FloatingPointError:
        return
    assert logits.shape == (NV,)


if __name__ == "__main__":
    _harness.run(test_one_input)
