"""Tiny random-weight mixture-of-experts GGUF files (llama/Mixtral layout, qwen2moe, qwen3moe, granitemoe, gpt-oss), for
tests/engine/test_moe.py and tools/make_tiny_references.py. Deterministic: seeded weights, the gguf writer."""
import gguf
import numpy as np

from fastgguf import kernels

# the shared expert's tensors, and (qwen2moe) its gate vector
SHEXP = ("ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight")


def tie_router(i, r):
    """Router rows in equal pairs (2k, 2k+1): every row's logits tie pairwise, so with 3 experts used a tie
    decides the third (the top pair is taken whole). llama.cpp breaks ties to the lower expert for <= 16 experts
    (std::sort is an insertion sort there), as fastgguf always does."""
    return np.repeat(r[::2], 2, axis=0)


def make_moe(path, *, arch="qwen3moe", n_expert=8, n_used=2, wtype=None, n_embd=64, n_ff_exp=32, n_ff=96,
             n_layer=2, shared=0, seed=0, meta=None, router=None, no_vocab=True, route_scale=1.0, n_head_kv=2,
             bias_scale=0.2):
    """wtype: the experts' (and shared expert's) ggml type name ("Q8_0", "Q4_K"), None: F32 (widths must suit its
    block size); router: a function (layer, (n_expert, n_embd) random router) -> the router written (F32);
    route_scale: the random router's spread; n_head_kv: of 4 query heads.
    shared: the shared expert's width (0: none; qwen2moe always has one, of width shared or n_ff).
    meta: more {arch}.* metadata (float -> float32, int -> uint32; str -> string).
    gpt-oss: its layout (q/k/v/o biases, attn_sinks, post_attention_norm as the FFN's norm, router and expert
    biases: bias_scale their spread; a large one drives the experts' gate/up past SWIGLU_OAI's limit of 7); its
    sliding window comes from meta (attention.sliding_window, required there)."""
    rng = np.random.default_rng(seed)
    E, L, H, KVH, V, hd = n_embd, n_layer, 4, n_head_kv, 100, n_embd // 4
    w = gguf.GGUFWriter(str(path), arch)
    if no_vocab:
        w.add_tokenizer_model("no_vocab")
        w.add_vocab_size(V)
    w.add_block_count(L)
    w.add_context_length(128)
    w.add_embedding_length(E)
    w.add_feed_forward_length(n_ff_exp if arch in ("llama", "granitemoe", "olmoe") else n_ff)
    w.add_head_count(H)
    w.add_head_count_kv(KVH)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    meta = dict(meta or {})   # its keys override these
    w.add_expert_count(meta.pop("expert_count", n_expert))
    w.add_expert_used_count(n_used)
    oss = arch == "gpt-oss"
    if arch in ("qwen3moe", "qwen2moe", "gpt-oss"):
        w.add_expert_feed_forward_length(meta.pop("expert_feed_forward_length", n_ff_exp))
    if shared:
        w.add_expert_shared_feed_forward_length(shared)
    FS = shared or n_ff
    for k, v in meta.items():
        add = w.add_string if isinstance(v, str) else w.add_float32 if isinstance(v, float) else w.add_uint32
        add(f"{arch}.{k}", v)

    def t(name, *shape, s=0.2, quant=False):
        a = (rng.standard_normal(shape) * s).astype(np.float32)
        if quant and wtype is not None:   # quantized as llama-quantize would (fastgguf's kernels)
            q = kernels.quantize_as_llama_file(a.reshape(-1, shape[-1]), wtype)
            w.add_tensor(name, q.reshape(shape[:-1] + (-1,)), raw_dtype=gguf.GGMLQuantizationType[wtype])
        else:
            w.add_tensor(name, a)
        return a

    t("token_embd.weight", V, E, s=1.0)
    t("output_norm.weight", E, s=1.0)
    t("output.weight", V, E)
    for i in range(L):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", E, s=1.0)
        t(p + "attn_q.weight", H * hd, E)
        t(p + "attn_k.weight", KVH * hd, E)
        t(p + "attn_v.weight", KVH * hd, E)
        if oss:
            for x, n in (("q", H), ("k", KVH), ("v", KVH)):
                t(p + f"attn_{x}.bias", n * hd)
            t(p + "attn_output.bias", E)
            t(p + "attn_sinks.weight", H, s=1.0)
        if arch == "qwen3moe":
            t(p + "attn_q_norm.weight", hd, s=1.0)
            t(p + "attn_k_norm.weight", hd, s=1.0)
        if arch == "olmoe":   # whole-vector q/k norms
            t(p + "attn_q_norm.weight", H * hd, s=1.0)
            t(p + "attn_k_norm.weight", KVH * hd, s=1.0)
        t(p + "attn_output.weight", E, H * hd)
        t(p + ("post_attention_norm.weight" if oss else "ffn_norm.weight"), E, s=1.0)
        r = (rng.standard_normal((n_expert, E)) * route_scale).astype(np.float32)
        w.add_tensor(p + "ffn_gate_inp.weight", router(i, r) if router else r)
        if oss:
            t(p + "ffn_gate_inp.bias", n_expert)
            t(p + "ffn_gate_exps.bias", n_expert, n_ff_exp, s=bias_scale)
            t(p + "ffn_up_exps.bias", n_expert, n_ff_exp, s=bias_scale)
            t(p + "ffn_down_exps.bias", n_expert, E)
        t(p + "ffn_gate_exps.weight", n_expert, n_ff_exp, E, quant=True)
        t(p + "ffn_up_exps.weight", n_expert, n_ff_exp, E, quant=True)
        t(p + "ffn_down_exps.weight", n_expert, E, n_ff_exp, quant=True)
        if shared or arch == "qwen2moe":
            t(p + SHEXP[0], FS, E, quant=True)
            t(p + SHEXP[1], FS, E, quant=True)
            t(p + SHEXP[2], E, FS, quant=True)
            if arch == "qwen2moe":
                t(p + "ffn_gate_inp_shexp.weight", E, s=1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
