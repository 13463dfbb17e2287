"""gemma, gemma2, gemma3: the llama layout with NEOX RoPE, embeddings scaled by sqrt(n_embd), GELU (tanh form)
instead of SiLU in the gated FFN, and always-tied output. gemma2/gemma3 add an RMS norm of the attention and of
the FFN output before each residual add (post_attention_norm, post_ffw_norm) and sliding-window layers; gemma2
soft-caps attention scores and logits; gemma3 RMS-normalises each q and k head before RoPE and gives its
sliding-window layers their own RoPE base (rope.freq_base_swa, else 10000) without scaling.

Facts from llama.cpp (src/models/gemma*.cpp, llama-hparams.cpp): the GGUF norm weights already hold Gemma's
"1 + w"; attention scale 1/sqrt(head_dim) (1/sqrt(n_embd/n_head) for the 27B sizes, told by their layer count);
sliding-window layers are those with il % pattern < pattern - 1 (pattern: attention.sliding_window_pattern,
default 2 for gemma2, 6 for gemma3) unless the file lists them (an array of booleans); a query sees the last
`sliding_window` positions, itself included."""
import dataclasses
import math

import numpy as np

from fastgguf.arch.base import Arch, register


@register
class Gemma(Arch):
    name = "gemma"
    rope_neox = True
    post_norms = False
    swa_default = 0        # default window when the file has no attention.sliding_window
    n_layer_27b = None     # the layer count of the size whose attention scale is 1/sqrt(n_embd / n_head)

    def __init__(self, f):
        super().__init__(f)
        if self.post_norms:
            self.layer_tensors = dict(Arch.layer_tensors, attn_post_norm="post_attention_norm.weight",
                                      ffn_post_norm="post_ffw_norm.weight")

    def hparams(self):
        hp = self.base_hparams()
        scale = 1.0 / math.sqrt(hp.head_dim)
        if self.n_layer_27b is not None and hp.n_layer == self.n_layer_27b:
            scale = 1.0 / math.sqrt(hp.n_embd // hp.n_head)
        n_swa = self.int_key("attention.sliding_window", self.swa_default, lo=0, hi=(1 << 31) - 1)
        swa_layers = self.swa_layers(hp.n_layer) if n_swa > 0 else ()
        return dataclasses.replace(
            hp, attn_scale=scale, embd_scale=float(np.sqrt(np.float32(hp.n_embd))), ffn_act="gelu_tanh",
            final_softcap=self.float_key("final_logit_softcapping", 0.0, lo_open=False),
            n_swa=n_swa, swa_layers=swa_layers, **self.swa_rope(hp))

    def swa_rope(self, hp):
        """RoPE of the sliding-window layers."""
        return {"rope_base_swa": self.float_key("rope.freq_base_swa", hp.rope_base),
                "rope_freq_scale_swa": hp.rope_freq_scale}


@register
class Gemma2(Gemma):
    name = "gemma2"
    post_norms = True
    swa_pattern = 2
    swa_default = 4096
    n_layer_27b = 46

    def hparams(self):
        hp = super().hparams()
        return dataclasses.replace(
            hp, attn_softcap=self.float_key("attn_logit_softcapping", 50.0, lo_open=False),
            final_softcap=self.float_key("final_logit_softcapping", 30.0, lo_open=False))


@register
class Gemma3(Gemma):
    name = "gemma3"
    post_norms = True
    swa_pattern = 6
    n_layer_27b = 62
    layer_tensors = Arch.layer_tensors  # + the post norms (Gemma.__init__) and q/k norms (below)

    def __init__(self, f):
        super().__init__(f)
        self.layer_tensors = dict(self.layer_tensors, q_norm="attn_q_norm.weight", k_norm="attn_k_norm.weight")

    def swa_rope(self, hp):
        return {"rope_base_swa": self.float_key("rope.freq_base_swa", 10000.0), "rope_freq_scale_swa": 1.0}
