"""Tiny random-weight GGUF files for the tests: one builder, build(), for every architecture, weight type, mixture of
experts, encoder and vocabulary the tests run; and upcycle(), a real dense file made a mixture of experts.

    path = build(tmp_path / "m.gguf")                                    # a 2-layer F32 llama, no tokenizer
    path = build(tmp_path / "m.gguf", arch="gemma3", wtype="Q8_0", seed=3, n_layer=4)
    path = build(tmp_path / "m.gguf", "moe", arch="gpt-oss", n_expert=4, meta={"attention.sliding_window": 5})
    path = build(tmp_path / "m.gguf", "vocab", vocab="llama-bpe")        # a real vocabulary, F16 weights
    path = build(tmp_path / "m.gguf", "chat", vocab="qwen2", template="Qwen-Qwen3-0.6B", arch="qwen3")
    path = build(tmp_path / "m.gguf", "encoder", arch="nomic-bert", vocab="wordpiece")

Deterministic: every tensor is drawn, in file order, from one numpy PCG64 generator seeded with `seed` (normal draws
and float32 / float16 rounding are the same on every platform), weight types come from fastgguf's quantizer
(llama-quantize's bytes) and fastgguf's writer writes gguf-py's bytes. Tests compare these files' outputs with
llama.cpp's stored ones (tests/data/tiny-references.json, tiny-encoder-references.json, pooling-references.json,
quantize-hashes.json), so a change that moves one draw, key or tensor changes those files: keep every existing
file byte for byte (the draws' order is the tensors' order in the file).

A preset (PRESETS) is a kind of file: its sizes, its metadata keys in order, its draws' spread by role and which
roles are stored F16 or in wtype. ARCHS holds what each architecture adds to the llama layout."""
import dataclasses
import os

import numpy as np

from fastgguf import GGUFFile, GGUFWriter, kernels
from fastgguf.gguf import GGML_TYPE_INFO, GGMLType
from fastgguf.gguf import GGUFValueType as V
from vocab_files import unpack_vocab

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

# ---- architectures: the optional parts of a layer (the llama layout has none), as fastgguf/arch/ reads them ----
#   bias          q/k/v biases (encoders: every matrix's bias)
#   qk_norm       each q and k head RMS-normalised (attn_q_norm, attn_k_norm of head_dim)
#   qk_norm_full  q and k RMS-normalised as whole vectors (olmoe)
#   post_norms    post_attention_norm and post_ffw_norm around attention and FFN (gemma2/3)
#   fused         q|k|v in attn_qkv (phi3 also gate|up in ffn_up; both stay F32 under wtype, as ever written)
#   sinks         gpt-oss: attn_output.bias, attn_sinks, post_attention_norm as the FFN's norm, router and
#                 expert biases
#   shexp         a shared expert in every layer, with its gate vector ffn_gate_inp_shexp (qwen2moe)
#   exp_ff        the expert width in {arch}.expert_feed_forward_length (else feed_forward_length, with experts)
#   gate          (encoders) a gated FFN, ffn_gate (nomic-bert)
#   position      (encoders) learned position embeddings, no RoPE (bert)
#   shortconv     lfm2: the layers in conv_layers are gated short convolutions (shortconv.in_proj, .conv of
#                 l_cache taps, .out_proj) instead of attention, attention.head_count_kv a per-layer array (0 there),
#                 shortconv.l_cache; the output norm is named token_embd_norm
#   deltanet      qwen35: the layers in dn_layers are gated DeltaNet layers (attn_qkv, attn_gate, ssm_*), the others
#                 gated attention (attn_q of q|gate rows per head, q/k norms); post_attention_norm is the FFN's norm;
#                 ssm.* keys from Preset.ssm, rope.dimension_sections and attention.recurrent_layers
#   next          qwen3next (with deltanet): no rope.dimension_sections; the DeltaNet layers' q|k|v|z in ssm_in and
#                 beta|alpha in ssm_ba, interleaved per q/k head group (its legacy files); with fused:
#                 attn_qkv and attn_gate as qwen35's (the current converter's), ssm_ba still
#   exp_probs_b   lfm2moe: each expert layer's selection bias exp_probs_b.bias (n_expert,) after its router; the
#                 first n_dense_lead layers dense (leading_dense_block_count); expert_gating_func (default 2,
#                 sigmoid)
#   ssm           granitehybrid: the layers in ssm_layers are Mamba-2 ones (ssm_in, ssm_conv1d with bias, ssm_dt.bias,
#                 ssm_a, ssm_d, ssm_norm, ssm_out; inner width 2 n_embd, ssm_heads heads, ssm_groups groups, state
#                 ssm_state, ssm_conv taps), attention.head_count_kv a per-layer array (0 there), the ssm.* keys
#   gemma4        its own layout (_gemma4, GEMMA4: the layer kinds, head sizes, K/V sharing, per-layer inputs)
ARCHS = {
    "llama": "", "granite": "", "gemma": "", "qwen2": "bias", "qwen3": "qk_norm", "phi3": "fused",
    "gemma2": "post_norms", "gemma3": "post_norms qk_norm",
    "qwen3moe": "qk_norm exp_ff", "qwen2moe": "shexp exp_ff", "olmoe": "qk_norm_full", "granitemoe": "",
    "gpt-oss": "bias sinks exp_ff", "smollm3": "", "lfm2": "qk_norm shortconv",
    "lfm2moe": "qk_norm shortconv exp_ff exp_probs_b", "granitehybrid": "ssm",
    "bert": "bias position", "nomic-bert": "fused gate",
    "qwen35": "deltanet", "qwen35moe": "deltanet shexp exp_ff", "gemma4": "gemma4",
    "qwen3next": "deltanet shexp exp_ff next",
}
# gemma4's tiny layout (build(gemma4={...}) overrides): layer kinds (True: sliding-window), the last `shared` layers
# reusing earlier K/V (layer 4 reads layer 2's, layer 5 layer 3's), head sizes and KV heads of the full / sliding
# layers, the full layers' rotated pairs (rope_freqs: 1e30 on the others), the sliding window, the per-layer input
# width P (0: none), the KV-sharing layers' FFN twice as wide, layers without attn_v (V = K's projection), and
# the KV-sharing layers that still carry attn_k / attn_v / attn_k_norm (unused, as llama.cpp's optional ones);
# n_expert > 0: the MoE layout (n_used of n_expert experts n_ff_exp wide in every layer, gate|up fused in the
# layers of fused_exps)
GEMMA4 = {"swa": (True, True, True, False, True, False), "shared": 2, "hd": 32, "hd_swa": 16, "kv": 1, "kv_swa": 2,
          "rot_pairs": 8, "window": 4, "ple": 32, "double_ff": True, "no_v": (1,), "stale_kv": (4,),
          "softcap": 30.0, "n_expert": 0, "n_used": 2, "n_ff_exp": 32, "fused_exps": ()}
GEMMA4_KEYS = ("block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
               "attention.head_count_kv", "rope.freq_base", "rope.freq_base_swa", "attention.layer_norm_rms_epsilon",
               "attention.key_length", "attention.value_length", "attention.key_length_swa",
               "attention.value_length_swa", "rope.dimension_count", "rope.dimension_count_swa",
               "attention.sliding_window", "attention.sliding_window_pattern", "attention.shared_kv_layers",
               "embedding_length_per_layer_input", "final_logit_softcapping")


@dataclasses.dataclass(frozen=True)
class Preset:
    """A kind of file; build()'s keywords override its sizes (n_embd ... rope_base).

    keys: the metadata after general.architecture, in order: "vocab" (the tokenizer's keys), {arch}.<key>, or a
    tokenizer.* / general.* key; a key without a value in this file is left out. scales: role -> the spread s of
    its normal draws, or (s, center) (SCALES: the defaults); f16: the roles stored F16 (the others F32); quantized:
    the roles stored in wtype when one is given. layer: "decoder" or "encoder". tied: no output.weight. vocab: the
    default vocabulary (see build); n_vocab: its size without one. center_f32: a center is added after the draw is
    rounded to float32 (kq's norms). biases_first: gpt-oss's attn_output.bias / attn_sinks and expert biases come
    before their weights (else each right after its weight)."""
    arch: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx: int
    keys: tuple
    scales: dict
    f16: frozenset = frozenset()
    quantized: frozenset = frozenset()
    layer: str = "decoder"
    tied: bool = True
    vocab: str = None
    seed: int = 0
    n_expert: int = 0
    n_used: int = 2
    n_ff_exp: int = 0
    rope_base: float = 10000.0
    center_f32: bool = False
    biases_first: bool = False
    conv_layers: tuple = ()   # shortconv: the short-convolution layers, and their conv's taps
    l_cache: int = 3
    dn_layers: tuple = ()     # deltanet: the DeltaNet layers; ssm: conv taps, head size S, q/k heads, v heads
    ssm: tuple = (4, 16, 2, 4)
    n_rot: int = 0            # rope.dimension_count (0: head_dim)
    n_dense_lead: int = 0     # exp_probs_b: the leading dense layers
    ssm_layers: tuple = ()    # ssm: the Mamba-2 layers, their heads, groups, state size and conv taps
    ssm_heads: int = 8
    ssm_groups: int = 2
    ssm_state: int = 16
    ssm_conv: int = 4


# the roles' spread when a preset says nothing
SCALES = {"embd": 1.0, "output_norm": 1.0, "norm": 1.0, "head_norm": 1.0, "qk": 0.2, "matrix": 0.2, "fused": 0.2,
          "output": 0.2, "bias": 0.2, "sinks": 1.0, "router": 1.0, "experts": 0.2, "expert_bias": 0.2,
          "shexp": 0.2, "shexp_gate": 1.0, "token_types": 0.5, "position": 0.5, "conv": 0.5, "probs_b": 0.5,
          "ssm_dt": 0.5, "ssm_a": 0.5, "ssm_d": 1.0}
LLAMA_KEYS = ("block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
              "attention.head_count_kv", "rope.freq_base", "attention.layer_norm_rms_epsilon", "rope.dimension_count")
EXPERT_KEYS = ("expert_count", "expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length")
MATRICES = frozenset({"qk", "matrix"})

PRESETS = {
    # the float64 oracle's and llama.cpp's references' decoders: F32, norms drawn around 0
    "tiny": Preset("llama", 64, 2, 4, 2, 96, 100, 128, ("vocab",) + LLAMA_KEYS, {},
                   quantized=MATRICES | {"output"}),
    # every dimension a multiple of 256 (every K-quant applies): the quantizer's hashes, the K-quant forward pass;
    # F16 matrices (token_embd, output and the router F32), wtype: every 2-D weight; n_expert: the Mixtral layout
    "kq": Preset("llama", 256, 8, 4, 1, 512, 512, 256, LLAMA_KEYS + ("general.file_type",) + EXPERT_KEYS,
                 {"norm": (0.1, 1.0), "output_norm": (0.1, 1.0), "qk": 1 / 8, "matrix": 1 / 32, "output": 1 / 16,
                  "router": 1 / 32, "experts": 1 / 32},
                 f16=MATRICES | {"experts"}, quantized=MATRICES | {"embd", "output", "router"}, tied=False, seed=7,
                 n_ff_exp=512, center_f32=True),
    # mixtures of experts (8, 2 used): F32, wtype the experts' (and shared expert's) type
    "moe": Preset("qwen3moe", 64, 2, 4, 2, 96, 100, 128,
                  ("vocab",) + tuple(k for k in LLAMA_KEYS if k != "rope.freq_base") + EXPERT_KEYS, {},
                  quantized=frozenset({"experts", "shexp"}), tied=False, vocab="no_vocab", n_expert=8, n_ff_exp=32,
                  biases_first=True),
    # a real vocabulary under 2 random layers, F16, tied: noise over the whole vocabulary (the output norm's small
    # weight keeps the logits' spread around 2)
    "vocab": Preset("llama", 64, 2, 4, 2, 128, 0, 256,
                    ("block_count", "context_length", "embedding_length", "feed_forward_length",
                     "attention.head_count", "attention.head_count_kv", "rope.freq_base", "rope.dimension_count",
                     "attention.layer_norm_rms_epsilon", "vocab"),
                    {"output_norm": (0.02, 0.25), "norm": (0.1, 1.0)}, f16=MATRICES | {"embd"}),
    # one layer, a real vocabulary and chat template, F32; pooling and a rank head on request
    "chat": Preset("qwen2", 32, 1, 2, 1, 48, 0, 1024,
                   ("vocab", "block_count", "context_length", "embedding_length", "feed_forward_length",
                    "attention.head_count", "attention.head_count_kv", "rope.dimension_count", "rope.freq_base",
                    "attention.layer_norm_rms_epsilon", "pooling_type") + EXPERT_KEYS
                   + ("classifier.output_labels", "tokenizer.chat_template.rerank"), {}, n_ff_exp=32),
    # qwen35 / qwen35moe: DeltaNet, attention, DeltaNet (3 layers), partial rotary (8 of 16 dims); F32, wtype the
    # matrices, experts and shared expert (qwen35moe: 4 experts of 32, 2 used, a shared expert)
    "qwen35": Preset("qwen35", 64, 3, 4, 2, 96, 100, 128, ("vocab",) + LLAMA_KEYS + EXPERT_KEYS, {},
                     quantized=MATRICES | {"output", "experts", "shexp"}, tied=False, vocab="no_vocab", n_used=2,
                     n_ff_exp=32, dn_layers=(0, 2), n_rot=8),
    # gemma4 (GEMMA4): 6 layers, n_embd 64, 4 query heads; F32, wtype the matrices, both embeddings and experts
    "gemma4": Preset("gemma4", 64, 6, 4, 2, 96, 100, 128, ("vocab",) + GEMMA4_KEYS, {"out_scale": (0.2, 1.0)},
                     quantized=MATRICES | {"embd", "experts"}, rope_base=1000000.0),
    # bert / nomic-bert as llama.cpp's converter writes them, mean pooling, context 512 (the position embeddings'
    # rows, as all-MiniLM-L6-v2); wtype: the 2-D weights but token_types
    "encoder": Preset("bert", 64, 2, 4, 4, 96, 100, 512,
                      ("vocab", "tokenizer.ggml.token_type_count", "block_count", "context_length",
                       "embedding_length", "feed_forward_length", "attention.head_count",
                       "attention.layer_norm_epsilon", "attention.causal", "pooling_type", "rope.freq_base"),
                      {"qk": 0.1, "norm": (0.2, 1.0)}, quantized=MATRICES | {"embd", "position"}, layer="encoder",
                      vocab="no_vocab", rope_base=1000.0),
}
# the metadata types of the keys that are not UINT32
KEY_TYPES = {"rope.freq_base": V.FLOAT32, "attention.layer_norm_rms_epsilon": V.FLOAT32,
             "attention.layer_norm_epsilon": V.FLOAT32, "attention.causal": V.BOOL,
             "classifier.output_labels": V.ARRAY, "tokenizer.chat_template.rerank": V.STRING}


def build(path, preset="tiny", *, arch=None, wtype=None, vocab=None, seed=None, tied=None, bias=None, qk_norm=None,
          post_norms=None, fused=None, meta=None, extra=None, rope_freqs=False, scale=None, router=None, shared=0,
          pooling=None, head=None, template=None, control=(), nan_embd=(), nan_logits=(), gemma4=None,
          **sizes):
    """Write a tiny random `preset` file (PRESETS) to path; returns str(path).

    arch: its layout (ARCHS; the preset's when None; an unknown name writes the llama layout); bias, qk_norm,
    post_norms, fused: True / False override the arch's part. wtype: a ggml type name ("Q8_0", "F16", ...) for the
    preset's quantized roles. sizes: n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, n_expert, n_used, n_ff_exp
    (the experts' width), rope_base; conv_layers, l_cache (lfm2's short-convolution layers and taps), n_dense_lead
    (lfm2moe's leading dense layers), ssm_layers, ssm_heads, ssm_groups, ssm_state, ssm_conv (granitehybrid's
    Mamba-2 layers). seed: the
    draws (the preset's when None); scale: {role: spread} over the preset's; tied: no output.weight.
    vocab: None (the preset's), "no_vocab" (tokenizer.ggml.model no_vocab: ids only, llama.cpp loads it),
    "wordpiece" (WORDPIECE, as llama.cpp's converter stores it), the name of a vocabulary-only file of llama.cpp
    (tests/data/vocab/ggml-vocab-<name>.gguf.xz), or the path of a GGUF file whose tokenizer.* keys are copied;
    template: tests/data/templates/<template>.jinja as the chat template (the vocabulary's own one dropped);
    control: texts that become control tokens (the last ids), as Mistral's [TOOL_CALLS] is in tekken.
    meta: more {arch}.* metadata ({key: int (UINT32), float (FLOAT32), str or list}); a key the preset writes
    takes the value in its place. extra: more tensors after the rest ({name: array, or (raw blocks, type name)});
    rope_freqs: a rope_freqs.weight of linspace(1, 8) factors.
    Experts: router(layer, router draws) -> the router written; shared: a shared expert of that width (qwen2moe:
    always, of n_ff when 0). pooling: {arch}.pooling_type; head: a rank classifier head, "qwen3" (cls.output.weight
    of 2 rows, labels yes/no and the rerank template, as llama.cpp converts Qwen3-Reranker) or "full" (cls.weight,
    cls.bias, cls.output.weight of 2 rows, cls.output.bias: a BERT cross-encoder's head). nan_embd: token ids whose
    token_embd rows are NaN; nan_logits: ids whose logit is always NaN; either unties the output (a copy of
    token_embd written after it)."""
    p = PRESETS[preset]
    p = dataclasses.replace(p, arch=arch or p.arch, **sizes)
    parts = set(ARCHS.get(p.arch, "").split())
    for name, on in (("bias", bias), ("qk_norm", qk_norm), ("post_norms", post_norms), ("fused", fused)):
        if on is not None:
            parts = parts | {name} if on else parts - {name}
    w = GGUFWriter()
    w.add_string("general.architecture", p.arch)
    vocab = (vocab or p.vocab, str(path) + ".vocab.gguf", template, control)
    g4 = {**GEMMA4, **(gemma4 or {})} if "gemma4" in parts else None
    if g4:
        meta = {**_gemma4_meta(p, g4), **(meta or {})}
    n_vocab = _metadata(w, p, parts, vocab, pooling, head, shared, meta)
    t = _Tensors(w, p, p.seed if seed is None else seed, wtype, scale)
    if g4:
        _gemma4(t, p, g4, n_vocab)
    elif p.layer == "encoder":
        _encoder(t, p, parts, n_vocab)
    else:
        _decoder(t, p, parts, n_vocab, p.tied if tied is None else tied, rope_freqs, router, shared, head,
                 nan_embd, nan_logits)
    for name, a in (extra or {}).items():
        if isinstance(a, tuple):   # raw blocks of a ggml type: (rows, bytes per row)
            raw, gt = a[0], GGMLType[a[1]]
            bs, ts = GGML_TYPE_INFO[gt]
            w.add_tensor(name, raw, ggml_type=gt, shape=raw.shape[:-1] + (raw.shape[-1] // ts * bs,))
        else:
            w.add_tensor(name, a)
    return w.write(str(path))


# ---- metadata ----

def _metadata(w, p, parts, vocab, pooling, head, shared, meta):
    """The preset's keys in order (vocab: _write_vocab's arguments), then meta; returns the vocabulary's size."""
    moe = p.n_expert > 0
    values = {
        "block_count": p.n_layer, "context_length": p.n_ctx, "embedding_length": p.n_embd,
        "feed_forward_length": p.n_ff_exp if moe and "exp_ff" not in parts else p.n_ff,
        "attention.head_count": p.n_head, "attention.head_count_kv": p.n_head_kv,
        "rope.freq_base": None if "position" in parts else p.rope_base,
        "rope.dimension_count": p.n_rot or p.n_embd // p.n_head,
        "attention.layer_norm_rms_epsilon": 1e-5, "attention.layer_norm_epsilon": 1e-12, "attention.causal": False,
        "tokenizer.ggml.token_type_count": 2, "general.file_type": 1,   # 1: mostly F16
        "pooling_type": 1 if p.layer == "encoder" and pooling is None else pooling,   # encoders: mean
        "expert_count": p.n_expert or None, "expert_used_count": p.n_used if moe else None,
        "expert_feed_forward_length": p.n_ff_exp if moe and "exp_ff" in parts else None,
        "expert_shared_feed_forward_length": shared or None,
        "classifier.output_labels": ["yes", "no"] if head == "qwen3" else None,
        "tokenizer.chat_template.rerank": QWEN3_RERANK_TEMPLATE if head == "qwen3" else None,
    }
    if "shortconv" in parts:   # per layer: 0 KV heads in a conv layer
        values["attention.head_count_kv"] = [0 if i in p.conv_layers else p.n_head_kv for i in range(p.n_layer)]
        meta = {"shortconv.l_cache": p.l_cache, **(meta or {})}
    if "deltanet" in parts:
        dc, S, hk, hv = p.ssm
        sections = {} if "next" in parts else {"rope.dimension_sections": [p.n_rot // 8, p.n_rot // 8, p.n_rot // 8, 0]
                                               if p.n_rot % 8 == 0 else [p.n_rot // 2, 0, 0, 0]}
        meta = {"ssm.conv_kernel": dc, "ssm.state_size": S, "ssm.group_count": hk, "ssm.time_step_rank": hv,
                "ssm.inner_size": hv * S, **sections, **_layer_pattern(p), **(meta or {})}
    if "exp_probs_b" in parts:
        meta = {"leading_dense_block_count": p.n_dense_lead, "expert_gating_func": 2, **(meta or {})}
    if "ssm" in parts:   # per layer: 0 KV heads in a Mamba-2 layer
        values["attention.head_count_kv"] = [0 if i in p.ssm_layers else p.n_head_kv for i in range(p.n_layer)]
        meta = {"ssm.conv_kernel": p.ssm_conv, "ssm.inner_size": 2 * p.n_embd, "ssm.state_size": p.ssm_state,
                "ssm.time_step_rank": p.ssm_heads, "ssm.group_count": p.ssm_groups, **(meta or {})}
    meta = dict(meta or {})
    n_vocab = p.n_vocab
    for key in p.keys:
        if key == "vocab":
            n_vocab = _write_vocab(w, p.arch, p.n_vocab, *vocab)
            continue
        value = meta.pop(key) if key in meta else values[key]
        if value is not None:
            _add(w, key if key.startswith(("tokenizer.", "general.")) else f"{p.arch}.{key}", value,
                 KEY_TYPES.get(key))
    for key, value in meta.items():
        _add(w, f"{p.arch}.{key}", value)
    return n_vocab


def _layer_pattern(p):
    """qwen35's layer kinds: full_attention_interval when dn_layers is every layer but each k-th (as converted
    files say it), else attention.recurrent_layers (one boolean per layer)."""
    for k in range(2, p.n_layer + 2):
        if p.dn_layers == tuple(i for i in range(p.n_layer) if (i + 1) % k):
            return {"full_attention_interval": k}
    return {"attention.recurrent_layers": [i in p.dn_layers for i in range(p.n_layer)]}


def _add(w, key, value, vtype=None):
    """A value of the given type, or: int -> UINT32, float -> FLOAT32, bool -> BOOL, str -> STRING, list -> ARRAY."""
    if vtype is None:
        vtype = V.ARRAY if isinstance(value, list) else V.STRING if isinstance(value, str) \
            else V.FLOAT32 if isinstance(value, float) else V.BOOL if isinstance(value, bool) else V.UINT32
    w.add_value(key, value, vtype)


# ---- vocabularies ----

# [PAD] [UNK] [CLS] [SEP] [MASK], a few words, the letters and digits alone and as word pieces, punctuation
WORDPIECE = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "dog", "ran"]
             + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [f"##{chr(c)}" for c in range(ord("a"), ord("z") + 1)]
             + [str(d) for d in range(10)] + list(".,!?;:'\"()-/&*+=<>@#$%[]_~"))
# the rerank template llama.cpp's converter writes into Qwen3-Reranker files (conversion/qwen.py)
QWEN3_RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a "
    "web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: "
    "{document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def _template(name):
    """tests/data/templates/<name>.jinja."""
    with open(os.path.join(DATA, "templates", name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def _write_vocab(w, arch, n_vocab, vocab, scratch, template_name=None, control=()):
    """The tokenizer keys of `vocab` (see build; None: none; scratch: where a vocabulary file is unpacked, then
    removed); returns the vocabulary's size."""
    if vocab is None:
        return n_vocab
    if vocab == "no_vocab":
        w.add_string("tokenizer.ggml.model", "no_vocab")
        w.add_uint32(f"{arch}.vocab_size", n_vocab)
        return n_vocab
    if vocab == "wordpiece":
        return _wordpiece(w)
    path = vocab if os.path.exists(str(vocab)) else unpack_vocab(vocab, scratch)
    try:
        with GGUFFile(path) as g:
            for key in g.metadata:
                if key.startswith("tokenizer.") and not (template_name and key == "tokenizer.chat_template"):
                    w.add_value(key, *_tokenizer_value(g, key, control))
            n_vocab = g.metadata.array_len("tokenizer.ggml.tokens")
    finally:
        if path != vocab:
            os.remove(path)
    if template_name:
        w.add_string("tokenizer.chat_template", _template(template_name))
    return n_vocab


def _tokenizer_value(g, key, control):
    """(value, type, element type) of key as stored in g (strings as their bytes); control: texts that replace
    the last tokens, as control tokens."""
    vt, et = g.value_type(key)
    text = vt == V.STRING or (vt == V.ARRAY and et == V.STRING)
    value = g.metadata_raw(key) if text else g.metadata[key]
    if control and key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
        value = list(value)
        for k, piece in enumerate(control, 1):
            value[-k] = piece.encode() if key.endswith("tokens") else 3   # 3: CONTROL
    return value, vt, et


def _wordpiece(w):
    """WORDPIECE as llama.cpp's converter stores a WordPiece vocabulary (conversion/bert.py phantom()): control
    tokens as they are, "##x" pieces as "x", word-initial tokens with a leading U+2581."""
    control = [t.startswith("[") and t.endswith("]") and len(t) > 2 for t in WORDPIECE]
    w.add_string("tokenizer.ggml.model", "bert")
    w.add_array("tokenizer.ggml.tokens", [t if c else t[2:] if t.startswith("##") else "\u2581" + t
                                          for t, c in zip(WORDPIECE, control)])
    w.add_array("tokenizer.ggml.token_type", [3 if c else 1 for c in control])
    for key, tok in (("padding", "[PAD]"), ("unknown", "[UNK]"), ("bos", "[CLS]"), ("seperator", "[SEP]"),
                     ("mask", "[MASK]")):
        w.add_uint32(f"tokenizer.ggml.{key}_token_id", WORDPIECE.index(tok))
    return len(WORDPIECE)


# ---- tensors ----

class _Tensors:
    """Adds tensors in file order, each drawn from one seeded generator, stored as the preset says for its role."""

    def __init__(self, w, p, seed, wtype, scale=None):
        self.w, self.p, self.wtype = w, p, wtype
        self.rng = np.random.default_rng(seed)
        self.scales = {**SCALES, **p.scales, **(scale or {})}

    def draw(self, shape, role):
        """N(center, s^2) draws of the role's spread, float32."""
        s = self.scales[role]
        s, center = s if isinstance(s, tuple) else (s, 0.0)
        a = self.rng.standard_normal(shape) * s
        if center and not self.p.center_f32:
            a = center + a
        a = a.astype(np.float32)
        return (center + a).astype(np.float32) if center and self.p.center_f32 else a

    def store(self, a, role):
        """(data, ggml type) of float32 a as the role is stored: wtype, F16 or F32."""
        if self.wtype is not None and role in self.p.quantized:
            return _quantize(a, self.wtype)
        if role in self.p.f16:
            return a.astype(np.float16), GGMLType.F16
        return a, GGMLType.F32

    def add(self, name, shape, role, a=None):
        """Draw (unless a is given), store and add a tensor of `shape` (numpy order: rows, columns)."""
        a = self.draw(shape, role) if a is None else a
        data, gt = self.store(a, role)
        self.w.add_tensor(name, data, ggml_type=gt, shape=a.shape)
        return a


def _quantize(a, wtype):
    """(raw blocks, type) of float32 rows a in ggml type `wtype` (a name) as llama-quantize writes them (for the
    types these files use; F16: a float16 array)."""
    if wtype == "F16":
        return a.astype(np.float16), GGMLType.F16
    return kernels.quantize(a, wtype), GGMLType[wtype]


def _decoder(t, p, parts, n_vocab, tied, rope_freqs, router, shared, head, nan_embd, nan_logits):
    """The llama layout and what `parts` add: embeddings, output norm and matrix, then per layer attention, FFN
    norm(s) and a dense FFN or experts; a rank head."""
    E, NV, hd = p.n_embd, n_vocab, p.n_embd // p.n_head
    if nan_embd or nan_logits:   # untied: output.weight the same (F32 / F16) rows; NaN rows where asked
        embd, _ = t.store(t.draw((NV, E), "embd"), "embd")
        t.w.add_tensor("token_embd.weight", _nan_rows(embd, nan_embd))
        t.w.add_tensor("output.weight", _nan_rows(embd, nan_logits))
    else:
        t.add("token_embd.weight", (NV, E), "embd")                               # (n_vocab, n_embd)
    t.add("token_embd_norm.weight" if "shortconv" in parts else "output_norm.weight", (E,), "output_norm")
    if not tied and not (nan_embd or nan_logits):
        t.add("output.weight", (NV, E), "output")                                 # (n_vocab, n_embd)
    if rope_freqs:
        t.w.add_tensor("rope_freqs.weight", np.linspace(1.0, 8.0, hd // 2).astype(np.float32))
    for i in range(p.n_layer):
        b = f"blk.{i}."
        if i in p.conv_layers:
            _shortconv(t, p, b)
        elif "deltanet" in parts:
            _deltanet(t, p, parts, b) if i in p.dn_layers else _gated_attention(t, p, b)
        elif i in p.ssm_layers:
            _mamba2(t, p, b)
        else:
            _attention(t, p, parts, b)
        if "post_norms" in parts:
            t.add(b + "post_attention_norm.weight", (E,), "norm")
            t.add(b + "post_ffw_norm.weight", (E,), "norm")
        t.add(b + ("post_attention_norm.weight" if parts & {"sinks", "deltanet"} else "ffn_norm.weight"), (E,), "norm")
        if p.n_expert and i >= p.n_dense_lead:
            _experts(t, p, parts, b, i, router, shared)
        elif "fused" in parts:
            t.add(b + "ffn_up.weight", (2 * p.n_ff, E), "fused")                 # gate|up (2 n_ff, n_embd)
            t.add(b + "ffn_down.weight", (E, p.n_ff), "matrix")
        else:
            t.add(b + "ffn_gate.weight", (p.n_ff, E), "matrix")                  # (n_ff, n_embd)
            t.add(b + "ffn_up.weight", (p.n_ff, E), "matrix")
            t.add(b + "ffn_down.weight", (E, p.n_ff), "matrix")                  # (n_embd, n_ff)
    if head == "qwen3":
        t.add("cls.output.weight", (2, E), "matrix")
    elif head == "full":
        t.add("cls.weight", (E, E), "matrix")
        t.add("cls.bias", (E,), "bias")
        t.add("cls.output.weight", (2, E), "matrix")   # two outputs: qwen3 softmaxes them (one would always score 1)
        t.add("cls.output.bias", (2,), "bias")


def _gemma4_ff(p, g4):
    first_shared = p.n_layer - g4["shared"]
    return [p.n_ff * (2 if g4["double_ff"] and i >= first_shared else 1) for i in range(p.n_layer)]


def _gemma4_meta(p, g4):
    """gemma4's keys as llama.cpp's converter writes them (conversion/gemma.py Gemma4Model)."""
    ff = _gemma4_ff(p, g4)
    return {"feed_forward_length": ff if len(set(ff)) > 1 else ff[0],
            "attention.head_count_kv": [g4["kv_swa"] if s else g4["kv"] for s in g4["swa"]],
            "rope.freq_base_swa": 10000.0, "attention.layer_norm_rms_epsilon": 1e-6,
            "attention.key_length": g4["hd"], "attention.value_length": g4["hd"],
            "attention.key_length_swa": g4["hd_swa"], "attention.value_length_swa": g4["hd_swa"],
            "rope.dimension_count": g4["hd"], "rope.dimension_count_swa": g4["hd_swa"],
            "attention.sliding_window": g4["window"], "attention.sliding_window_pattern": list(g4["swa"]),
            "attention.shared_kv_layers": g4["shared"], "embedding_length_per_layer_input": g4["ple"],
            "final_logit_softcapping": g4["softcap"],
            **({"expert_count": g4["n_expert"], "expert_used_count": g4["n_used"],
                "expert_feed_forward_length": g4["n_ff_exp"]} if g4["n_expert"] else {})}


def _gemma4(t, p, g4, n_vocab):
    """gemma4's tensors (GEMMA4): embeddings, per-layer input tables, rope_freqs, output norm; per layer attention
    (no K/V in the sharing layers unless stale_kv), norms, FFN, per-layer input gate, output scale. Tied output."""
    E, P, NL, first_shared = p.n_embd, g4["ple"], p.n_layer, p.n_layer - g4["shared"]
    t.add("token_embd.weight", (n_vocab, E), "embd")
    if P:
        t.add("per_layer_token_embd.weight", (n_vocab, NL * P), "embd")          # (n_vocab, n_layer P)
        t.add("per_layer_model_proj.weight", (NL * P, E), "matrix")              # (n_layer P, n_embd)
        t.add("per_layer_proj_norm.weight", (P,), "norm")
    half = g4["hd"] // 2
    factors = [1.0] * g4["rot_pairs"] + [1e30] * (half - g4["rot_pairs"])   # 1e30: an unrotated pair
    t.w.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))
    t.add("output_norm.weight", (E,), "output_norm")
    for i, (swa, ff) in enumerate(zip(g4["swa"], _gemma4_ff(p, g4))):
        b, hd = f"blk.{i}.", g4["hd_swa"] if swa else g4["hd"]
        q, kv = p.n_head * hd, (g4["kv_swa"] if swa else g4["kv"]) * hd
        own = i < first_shared or i in g4["stale_kv"]
        t.add(b + "attn_norm.weight", (E,), "norm")
        t.add(b + "attn_q.weight", (q, E), "qk")
        if own:
            t.add(b + "attn_k.weight", (kv, E), "qk")
            if i not in g4["no_v"]:
                t.add(b + "attn_v.weight", (kv, E), "matrix")
        t.add(b + "attn_q_norm.weight", (hd,), "head_norm")
        if own:
            t.add(b + "attn_k_norm.weight", (hd,), "head_norm")
        t.add(b + "attn_output.weight", (E, q), "matrix")
        t.add(b + "post_attention_norm.weight", (E,), "norm")
        t.add(b + "ffn_norm.weight", (E,), "norm")
        t.add(b + "ffn_gate.weight", (ff, E), "matrix")
        t.add(b + "ffn_up.weight", (ff, E), "matrix")
        t.add(b + "ffn_down.weight", (E, ff), "matrix")
        if g4["n_expert"]:
            _gemma4_experts(t, g4, b, E, i in g4["fused_exps"])
        t.add(b + "post_ffw_norm.weight", (E,), "norm")
        if P:
            t.add(b + "inp_gate.weight", (P, E), "matrix")                       # (P, n_embd)
            t.add(b + "proj.weight", (E, P), "matrix")                           # (n_embd, P)
            t.add(b + "post_norm.weight", (E,), "norm")
        t.add(b + "layer_output_scale.weight", (1,), "out_scale")


def _gemma4_experts(t, g4, b, E, fused):
    """gemma4's MoE part of a layer (llama.cpp's names): the dense FFN's post norm, the experts' input norm, the
    router and its input scale, the expert stacks (gate|up fused or not), per-expert output scales, their post norm."""
    NE, FE = g4["n_expert"], g4["n_ff_exp"]
    t.add(b + "post_ffw_norm_1.weight", (E,), "norm")
    t.add(b + "pre_ffw_norm_2.weight", (E,), "norm")
    t.add(b + "ffn_gate_inp.weight", (NE, E), "router")
    t.add(b + "ffn_gate_inp.scale", (E,), "norm")
    if fused:
        t.add(b + "ffn_gate_up_exps.weight", (NE, 2 * FE, E), "experts")          # per expert gate rows, up rows
    else:
        t.add(b + "ffn_gate_exps.weight", (NE, FE, E), "experts")
        t.add(b + "ffn_up_exps.weight", (NE, FE, E), "experts")
    t.add(b + "ffn_down_exps.weight", (NE, E, FE), "experts")
    t.add(b + "ffn_down_exps.scale", (NE,), "out_scale")
    t.add(b + "post_ffw_norm_2.weight", (E,), "norm")


def _nan_rows(a, rows):
    a = a.copy()
    a[list(rows)] = np.nan
    return a


def _attention(t, p, parts, b):
    """A decoder layer's attention: norm, q/k/v (fused or not, biases), q/k norms, output (gpt-oss's bias, sinks)."""
    E, hd = p.n_embd, p.n_embd // p.n_head
    q, kv = p.n_head * hd, p.n_head_kv * hd
    t.add(b + "attn_norm.weight", (E,), "norm")
    if "fused" in parts:
        t.add(b + "attn_qkv.weight", (q + 2 * kv, E), "fused")                    # q|k|v (q + 2 kv, n_embd)
    else:
        t.add(b + "attn_q.weight", (q, E), "qk")                                  # (n_head head_dim, n_embd)
        t.add(b + "attn_k.weight", (kv, E), "qk")                                 # (n_head_kv head_dim, n_embd)
        t.add(b + "attn_v.weight", (kv, E), "matrix")
    if "bias" in parts:
        for x, n in (("q", q), ("k", kv), ("v", kv)):
            t.add(b + f"attn_{x}.bias", (n,), "bias")
    sinks = "sinks" in parts
    if sinks and p.biases_first:
        _sinks(t, p, b)
    if "qk_norm" in parts:
        t.add(b + "attn_q_norm.weight", (hd,), "head_norm")
        t.add(b + "attn_k_norm.weight", (hd,), "head_norm")
    if "qk_norm_full" in parts:
        t.add(b + "attn_q_norm.weight", (q,), "head_norm")
        t.add(b + "attn_k_norm.weight", (kv,), "head_norm")
    t.add(b + "attn_output.weight", (E, q), "matrix")                             # (n_embd, n_head head_dim)
    if sinks and not p.biases_first:
        _sinks(t, p, b)


def _shortconv(t, p, b):
    """lfm2's gated short-convolution layer: norm, in_proj (B | C | xx rows), the conv kernel, out_proj."""
    E = p.n_embd
    t.add(b + "attn_norm.weight", (E,), "norm")
    t.add(b + "shortconv.in_proj.weight", (3 * E, E), "matrix")                 # (3 n_embd, n_embd)
    t.add(b + "shortconv.conv.weight", (E, p.l_cache), "conv")                  # (n_embd, l_cache), F32
    t.add(b + "shortconv.out_proj.weight", (E, E), "matrix")


def _deltanet(t, p, parts, b):
    """qwen35's gated DeltaNet layer: norm, qkv and z projections, conv kernel, dt bias, A (negative), beta and alpha
    projections, the head norm, the output projection (next: qwen3next's fused ssm_in and ssm_ba)."""
    E, (dc, S, hk, hv) = p.n_embd, p.ssm
    cd, vd = (2 * hk + hv) * S, hv * S
    t.add(b + "attn_norm.weight", (E,), "norm")
    if "next" in parts and "fused" not in parts:   # per q/k head group q (S) | k (S) | v (r S) | z (r S)
        t.add(b + "ssm_in.weight", (2 * cd - 2 * hk * S, E), "matrix")
    else:
        t.add(b + "attn_qkv.weight", (cd, E), "matrix")                          # q | k | v (conv_dim, n_embd)
        t.add(b + "attn_gate.weight", (vd, E), "matrix")                         # z (HV S, n_embd)
    t.add(b + "ssm_conv1d.weight", (cd, dc), "conv")                             # (conv_dim, conv_kernel), F32
    t.add(b + "ssm_dt.bias", (hv,), "bias")
    t.add(b + "ssm_a", (hv,), "bias", a=-np.exp(t.draw((hv,), "bias")))         # -exp(A_log)
    if "next" in parts:                                                          # per group beta (r) | alpha (r)
        t.add(b + "ssm_ba.weight", (2 * hv, E), "matrix")
    else:
        t.add(b + "ssm_beta.weight", (hv, E), "matrix")
        t.add(b + "ssm_alpha.weight", (hv, E), "matrix")
    t.add(b + "ssm_norm.weight", (S,), "head_norm")
    t.add(b + "ssm_out.weight", (E, vd), "matrix")                               # (n_embd, HV S)


def _gated_attention(t, p, b):
    """qwen35's gated attention: attn_q holds per head q then its gate (2 n_head head_dim rows), q/k norms."""
    E, hd = p.n_embd, p.n_embd // p.n_head
    t.add(b + "attn_norm.weight", (E,), "norm")
    t.add(b + "attn_q.weight", (2 * p.n_head * hd, E), "qk")
    t.add(b + "attn_k.weight", (p.n_head_kv * hd, E), "qk")
    t.add(b + "attn_v.weight", (p.n_head_kv * hd, E), "matrix")
    t.add(b + "attn_q_norm.weight", (hd,), "head_norm")
    t.add(b + "attn_k_norm.weight", (hd,), "head_norm")
    t.add(b + "attn_output.weight", (E, p.n_head * hd), "matrix")


def _mamba2(t, p, b):
    """granitehybrid's Mamba-2 layer: norm, in_proj (z | xBC | dt rows), the conv kernel and bias, dt bias, A (as
    -exp of the draws), D, the per-group norm, out_proj."""
    E, D, H, G, S = p.n_embd, 2 * p.n_embd, p.ssm_heads, p.ssm_groups, p.ssm_state
    CD = D + 2 * G * S
    t.add(b + "attn_norm.weight", (E,), "norm")
    t.add(b + "ssm_in.weight", (D + CD + H, E), "matrix")                       # (2 D + 2 G S + H, n_embd)
    t.add(b + "ssm_conv1d.weight", (CD, p.ssm_conv), "conv")                    # (D + 2 G S, d_conv), F32
    t.add(b + "ssm_conv1d.bias", (CD,), "bias")
    t.add(b + "ssm_dt.bias", (H,), "ssm_dt")
    t.add(b + "ssm_a", (H, 1), "ssm_a", a=-np.exp(t.draw((H, 1), "ssm_a")))     # -exp(A_log) (n_head, 1)
    t.add(b + "ssm_d", (H, 1), "ssm_d")
    t.add(b + "ssm_norm.weight", (G, D // G), "norm")                           # (n_group, D / n_group)
    t.add(b + "ssm_out.weight", (E, D), "matrix")                               # (n_embd, D)


def _sinks(t, p, b):
    t.add(b + "attn_output.bias", (p.n_embd,), "bias")
    t.add(b + "attn_sinks.weight", (p.n_head,), "sinks")                          # one logit per query head


def _experts(t, p, parts, b, i, router, shared):
    """Layer i's mixture of experts: the router (router(i, draws): the router written), gpt-oss's biases, the
    expert stacks, the shared expert."""
    E, NE, FE = p.n_embd, p.n_expert, p.n_ff_exp
    r = t.draw((NE, E), "router")
    t.add(b + "ffn_gate_inp.weight", (NE, E), "router", a=router(i, r) if router else r)   # (n_expert, n_embd)
    if "exp_probs_b" in parts:
        t.add(b + "exp_probs_b.bias", (NE,), "probs_b")                          # (n_expert,) selection bias
    sinks = "sinks" in parts
    if sinks:
        t.add(b + "ffn_gate_inp.bias", (NE,), "bias")
    stacks = (("gate", (NE, FE, E), "expert_bias"), ("up", (NE, FE, E), "expert_bias"), ("down", (NE, E, FE), "bias"))
    if sinks and p.biases_first:
        for x, shape, role in stacks:
            t.add(b + f"ffn_{x}_exps.bias", shape[:2], role)                      # (n_expert, rows)
    for x, shape, role in stacks:
        t.add(b + f"ffn_{x}_exps.weight", shape, "experts")                       # (n_expert, rows, columns)
        if sinks and not p.biases_first:
            t.add(b + f"ffn_{x}_exps.bias", shape[:2], role)
    if shared or "shexp" in parts:
        FS = shared or p.n_ff
        t.add(b + "ffn_gate_shexp.weight", (FS, E), "shexp")                      # (shared width, n_embd)
        t.add(b + "ffn_up_shexp.weight", (FS, E), "shexp")
        t.add(b + "ffn_down_shexp.weight", (E, FS), "shexp")
        if "shexp" in parts:
            t.add(b + "ffn_gate_inp_shexp.weight", (E,), "shexp_gate")


def _encoder(t, p, parts, n_vocab):
    """bert / nomic-bert: embeddings and their norm, then per layer attention, its norm, FFN, its norm."""
    E, F = p.n_embd, p.n_ff
    t.add("token_embd.weight", (n_vocab, E), "embd")
    t.add("token_types.weight", (2, E), "token_types")
    if "position" in parts:
        t.add("position_embd.weight", (p.n_ctx, E), "position")                   # (n_ctx, n_embd)
    t.add("token_embd_norm.weight", (E,), "norm")
    t.add("token_embd_norm.bias", (E,), "bias")
    bias = "bias" in parts
    for i in range(p.n_layer):
        b = f"blk.{i}."
        if "fused" in parts:
            t.add(b + "attn_qkv.weight", (3 * E, E), "qk")                        # q|k|v (3 n_embd, n_embd)
        else:
            t.add(b + "attn_q.weight", (E, E), "qk")
            t.add(b + "attn_k.weight", (E, E), "qk")
            t.add(b + "attn_v.weight", (E, E), "matrix")
        if bias:
            for x in "qkv":
                t.add(b + f"attn_{x}.bias", (E,), "bias")
        t.add(b + "attn_output.weight", (E, E), "matrix")
        if bias:
            t.add(b + "attn_output.bias", (E,), "bias")
        t.add(b + "attn_output_norm.weight", (E,), "norm")
        t.add(b + "attn_output_norm.bias", (E,), "bias")
        if "gate" in parts:
            t.add(b + "ffn_gate.weight", (F, E), "matrix")
        t.add(b + "ffn_up.weight", (F, E), "matrix")                              # (n_ff, n_embd)
        if bias:
            t.add(b + "ffn_up.bias", (F,), "bias")
        t.add(b + "ffn_down.weight", (E, F), "matrix")                            # (n_embd, n_ff)
        if bias:
            t.add(b + "ffn_down.bias", (E,), "bias")
        t.add(b + "layer_output_norm.weight", (E,), "norm")
        t.add(b + "layer_output_norm.bias", (E,), "bias")


def tie_router(i, r):
    """A router (build's / upcycle's router=) whose rows are in equal pairs (2k, 2k+1): every row's logits tie
    pairwise, so with 3 experts used a tie decides the third (the top pair is taken whole). llama.cpp breaks ties to
    the lower expert for <= 16 experts (std::sort is an insertion sort there), as fastgguf always does."""
    return np.repeat(r[::2], 2, axis=0)


# ---- gpt-oss's harmony channels (tests/engine/test_harmony.py, tests/server/test_harmony_api.py) ----
HARMONY_TOKENS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>")


def build_harmony(path, arch="qwen2"):
    """A random `arch` chat file (qwen2, or gpt-oss: its layer, 4 experts 2 used, a sliding window of 8) with
    gpt-oss's template and harmony's markers as control tokens (rendered as text, <|end|> not end of generation:
    the tokenizer's harmony rules, as llama.cpp's)."""
    oss = {"n_expert": 4, "meta": {"attention.sliding_window": 8}} if arch == "gpt-oss" else {}
    return build(path, "chat", arch=arch, vocab="qwen2", template="openai-gpt-oss-120b", control=HARMONY_TOKENS,
                 **oss)


def harmony_steering(model):
    """Greedy sampling arguments that make a random harmony model think a few words, then answer: " sunny" is
    favoured (+60) until the frequency and presence penalties take it below "<|end|>" (+40), where the analysis
    message of the reasoning grammar ends; a json_schema request then puts its JSON in the final channel."""
    tok = model.tokenizer
    sunny, = tok.tokenize(" sunny", add_special=False)
    end, = tok.tokenize("<|end|>", add_special=False, parse_special=True)
    return dict(max_tokens=60, temperature=0, frequency_penalty=2.0, presence_penalty=2.0,
                logit_bias={str(sunny): 60, str(end): 40})


# ---- upcycle: a real dense file made a mixture of experts ----

_FFN = ("ffn_gate", "ffn_up", "ffn_down")


def upcycle(src, dst, n_expert=4, n_used=2, scales=None, seed=0, router=None):
    """An "upcycled" mixture of experts at dst from the dense llama file src (the default SmolLM2): every layer's
    FFN becomes n_expert experts (ffn_{gate,up,down}_exps stacked from copies of ffn_{gate,up,down}, same type)
    behind a random F32 router, {arch}.expert_count / expert_used_count set, everything else copied byte for byte.
    With identical copies the model computes the dense one (the chosen weights are renormalised to 1); scales[e]
    != 1 makes expert e a scaled copy (dequantized, scaled, quantized again as llama-quantize does) so routing
    matters. router: a function (layer, (n_expert, n_embd) standard normal draws) -> the router written (default:
    the draws). Returns str(dst). Used by tests/engine/test_upcycle.py, tools/make_moe_references.py and
    benchmarks/bench_moe.py."""
    from fastgguf.gguf.quantize import copy_metadata
    scales = [1.0] * n_expert if scales is None else list(scales)
    rng = np.random.default_rng(seed)
    with GGUFFile(str(src)) as f:
        arch = f.metadata["general.architecture"]
        w = GGUFWriter(alignment=f.alignment)
        copy_metadata(f, w)
        w.add_uint32(f"{arch}.expert_count", n_expert)
        w.add_uint32(f"{arch}.expert_used_count", n_used)
        n_embd = int(f.metadata[f"{arch}.embedding_length"])
        for name, ti in f.tensors.items():
            parts = name.split(".")
            if len(parts) == 4 and parts[2] in _FFN:
                continue
            w.add_tensor(name, f.tensor(name), ggml_type=ti.type, shape=tuple(ti.shape))
            if parts[-2:] == ["ffn_norm", "weight"]:   # the router and experts of this layer
                p = ".".join(parts[:2])
                r = rng.standard_normal((n_expert, n_embd)).astype(np.float32)
                w.add_tensor(f"{p}.ffn_gate_inp.weight", router(int(parts[1]), r) if router else r)
                for kind in _FFN:
                    t = f.tensors[f"{p}.{kind}.weight"]
                    raw = f.tensor(f"{p}.{kind}.weight")
                    cols = int(t.shape[-1])
                    exps = [raw if s == 1.0 else kernels.quantize_as_llama_file(
                        kernels.dequantize(raw, t.type, cols).reshape(raw.shape[0], cols) * np.float32(s), t.type)
                        for s in scales]
                    w.add_tensor(f"{p}.{kind}_exps.weight", np.stack(exps), ggml_type=t.type,
                                 shape=(n_expert,) + tuple(t.shape))
        return w.write(str(dst))


def both_paths(model, ids, n_ctx=64):
    """The logits of ids teacher-forced in one call (the batch path) and one token per call (the one-row path)."""
    batch = model.context(n_ctx).eval(ids, all_logits=True)
    ctx = model.context(n_ctx)
    return batch, np.array([ctx.runner.step_py(t) for t in ids])


def scheduler_n2_then_1(model, ids, params, n_ctx):
    """An n = 2 request of ids in a 2-slot Scheduler, then an n = 1 request of the same ids on the same slots:
    (the first's two texts, the second's text, the second's usage)."""
    import threading

    from fastgguf.engine.scheduler import Delta, Done, Request, Scheduler

    def run(sch, n):
        done, text, usage = threading.Event(), [""] * n, []

        def sink(events):
            for e in events:
                if isinstance(e, Delta):
                    text[e.index] += e.text
                elif isinstance(e, Done):
                    usage.append(e.usage)
                    done.set()
        sch.submit(Request([ids], params, sink, n=n))
        assert done.wait(120)
        return text, usage[0]

    sch = Scheduler(model, parallel=2, n_ctx=n_ctx, n_threads=2).start()
    try:
        first, _ = run(sch, 2)
        again, usage = run(sch, 1)
    finally:
        sch.stop()
    return first, again[0], usage
