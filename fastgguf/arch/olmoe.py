"""olmoe (OLMoE-1B-7B): the llama layout with NEOX RoPE, q and k RMS-normalised as whole vectors (attn_q_norm
(q_dim,), attn_k_norm (kv_dim,)) before the split into heads, and a mixture of experts (softmax, the top weights
NOT renormalised, feed_forward_length wide). Facts from llama.cpp's src/models/olmoe.cpp."""
import dataclasses

from fastgguf.arch.base import Arch, register


@register
class Olmoe(Arch):
    name = "olmoe"
    rope_neox = True
    moe_norm_w = False
    layer_tensors = dict(Arch.layer_tensors, q_norm="attn_q_norm.weight", k_norm="attn_k_norm.weight")

    def hparams(self):
        return dataclasses.replace(self.base_hparams(), qk_norm_full=True)
