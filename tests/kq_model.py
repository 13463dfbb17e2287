"""A small random llama whose every matrix dimension is a multiple of 256 (so every K-quant applies without
fallbacks), for the quantizer's byte-identity data (tools/gen_quantize_hashes.py) and the K-quant forward pass
against the float64 oracle. Deterministic: numpy's PCG64 normal draws and float16 rounding are the same on every
platform, so CI rebuilds exactly the file the hashes were made from.

8 layers (so llama.cpp's layer-position rules pick different types along the stack), 4 query heads of 64 sharing
one KV head (n_gqa 4: the Q2_K / IQ4_NL attn_v rule), an untied output matrix (SmolLM2 covers tied embeddings).
The 2-D weights are F16 except token_embd and output (F32), the norms F32: both float source paths."""
import numpy as np

E, L, H, KVH, HD, F, V = 256, 8, 4, 1, 64, 512, 512


def make_kq_model(path, seed=7, n_layer=L, wtype=None, n_expert=0):
    """wtype (a type name such as "Q4_K"): every matrix stored in that format (quantized by fastgguf's kernels)
    instead of F16/F32; the random draws are the same either way. n_expert > 0: the Mixtral layout instead of the
    dense FFN (a router ffn_gate_inp, F32, and 3-D F16 experts ffn_{gate,up,down}_exps, 2 used), for the quantizer's
    MoE rule (mxfp4_moe); other draws unchanged, and nothing else changes when n_expert is 0."""
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(n_layer)
    w.add_context_length(256)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KVH)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HD)
    w.add_file_type(1)
    if n_expert:
        w.add_expert_count(n_expert)
        w.add_expert_used_count(2)

    def t(name, *shape, s=0.5 / 16, f16=True):
        a = (rng.standard_normal(shape) * s).astype(np.float32)
        if name.endswith("norm.weight"):
            a = (1.0 + a).astype(np.float32)
        if wtype is not None and len(shape) == 2:
            from fastgguf import kernels
            w.add_tensor(name, kernels.quantize(a, wtype), raw_dtype=gguf.GGMLQuantizationType[wtype])
        else:
            w.add_tensor(name, a.astype(np.float16) if f16 and len(shape) >= 2 else a)

    t("token_embd.weight", V, E, s=1.0, f16=False)
    t("output_norm.weight", E, s=0.1)
    t("output.weight", V, E, s=1.0 / 16, f16=False)
    for i in range(n_layer):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", E, s=0.1)
        t(p + "attn_q.weight", H * HD, E, s=2.0 / 16)
        t(p + "attn_k.weight", KVH * HD, E, s=2.0 / 16)
        t(p + "attn_v.weight", KVH * HD, E)
        t(p + "attn_output.weight", E, H * HD)
        t(p + "ffn_norm.weight", E, s=0.1)
        if n_expert:
            t(p + "ffn_gate_inp.weight", n_expert, E, f16=False)
            t(p + "ffn_gate_exps.weight", n_expert, F, E)
            t(p + "ffn_up_exps.weight", n_expert, F, E)
            t(p + "ffn_down_exps.weight", n_expert, E, F)
            continue
        t(p + "ffn_gate.weight", F, E)
        t(p + "ffn_up.weight", F, E)
        t(p + "ffn_down.weight", E, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
