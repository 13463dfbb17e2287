"""phi3 (Phi-3 / Phi-3.5 mini and medium): the llama layout with NEOX RoPE and fused matrices: attn_qkv holds the
q, k and v rows one after another (n_embd + 2 kv_dim rows; separate attn_q/k/v are accepted too), ffn_up holds
the gate rows then the up rows (2 n_ff): SwiGLU of its two halves. The fused matrices are split into row views
here, so the forward pass is llama's. Facts from llama.cpp (src/models/phi3.cpp): its sliding window is
disabled there (phi3 runs with full attention), so it is here. The 128k variants (LongRoPE) carry
rope_factors_long/short.weight and rope.scaling.attn_factor: as llama.cpp (llama_model::get_rope_factors), a
sequence whose context (Context n_ctx) exceeds rope.scaling.original_context_length uses the long factors, any
other the short ones; cos and sin are multiplied by the attn factor (Arch.rope_scaling)."""
from fastgguf.arch.base import Arch, register
from fastgguf.errors import GGUFError


@register
class Phi3(Arch):
    name = "phi3"
    rope_neox = True

    def longrope_factors(self):
        return True

    def __init__(self, f):
        super().__init__(f)
        fused_qkv = "blk.0.attn_qkv.weight" in f.tensors
        lt = {k: v for k, v in Arch.layer_tensors.items() if k not in ("w_gate", "w_up")}
        lt["w_gate_up"] = "ffn_up.weight"
        if fused_qkv:
            lt = {k: v for k, v in lt.items() if k not in ("wq", "wk", "wv")}
            lt["wqkv"] = "attn_qkv.weight"
        self.layer_tensors = lt

    def split_layer(self, d, hp, i):
        self.split_qkv(d, hp, i)
        spec, name = d.pop("w_gate_up"), f"blk.{i}.ffn_up.weight"
        if spec[2] != 2 * hp.n_ff:
            raise GGUFError(f"{name}: expected {2 * hp.n_ff} rows (gate, up), got {spec[2]}")
        d["w_gate"] = self.row_slice(spec, 0, hp.n_ff, name)
        d["w_up"] = self.row_slice(spec, hp.n_ff, 2 * hp.n_ff, name)
        return d
