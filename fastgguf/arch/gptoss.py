"""gpt-oss (OpenAI's open-weight MoE, llama.cpp's LLM_ARCH_OPENAI_MOE): the llama layout with NEOX RoPE, q/k/v and
output biases, attention sinks (attn_sinks (n_head,): one extra logit per head in the softmax, with no value),
sliding-window attention on every other layer (even layers: llama.cpp's swa pattern 2, window
attention.sliding_window) and a mixture of experts with biases everywhere: router bias, gate/up/down expert biases
((n_expert, width) tensors), experts chosen by the raw router logits and weighted by the softmax of the chosen ones
(SOFTMAX_WEIGHT), the clamped SwiGLU (SWIGLU_OAI: alpha 1.702, limit 7), weights not renormalised.
The FFN's input norm is named post_attention_norm (it is not gemma's post-norm of the attention output).
Facts from llama.cpp's src/models/openai-moe.cpp and build_moe_ffn (llama-graph.cpp); attention scale 1/sqrt(n_rot);
the sliding-window layers share the full layers' RoPE (rope.freq_base_swa may change the base)."""
import dataclasses
import math

from fastgguf.arch.base import Arch, register
from fastgguf.errors import GGUFError


@register
class GptOss(Arch):
    name = "gpt-oss"
    rope_neox = True
    moe_norm_w = False
    moe_ff_key = True
    swa_pattern = 2
    layer_tensors = {
        "attn_norm": "attn_norm.weight",
        "wq": "attn_q.weight",
        "wk": "attn_k.weight",
        "wv": "attn_v.weight",
        "wo": "attn_output.weight",
        "bo": "attn_output.bias",
        "attn_sinks": "attn_sinks.weight",
        "ffn_norm": "post_attention_norm.weight",
    }
    expert_tensors = dict(Arch.expert_tensors, b_gate_inp="ffn_gate_inp.bias", b_gate_exps="ffn_gate_exps.bias",
                          b_up_exps="ffn_up_exps.bias", b_down_exps="ffn_down_exps.bias")
    vectors = Arch.vectors + ("bo", "attn_sinks", "b_gate_inp", "b_gate_exps", "b_up_exps", "b_down_exps")

    def hparams(self):
        hp = self.base_hparams()
        if not hp.n_expert:
            raise GGUFError(f"{self.f.path}: gpt-oss needs {self.name}.expert_count >= 1")
        if hp.n_rot < 1:   # the attention scale is 1/sqrt(n_rot)
            raise GGUFError(f"{self.name}.rope.dimension_count = 0: gpt-oss needs rotated dimensions")
        n_swa = self.int_key("attention.sliding_window", lo=1, hi=(1 << 31) - 1)
        return dataclasses.replace(
            hp, attn_scale=1.0 / math.sqrt(hp.n_rot), moe_gating="softmax_weight", moe_act="swiglu_oai",
            n_swa=n_swa, swa_layers=self.swa_layers(hp.n_layer),
            rope_base_swa=self.float_key("rope.freq_base_swa", hp.rope_base), rope_freq_scale_swa=hp.rope_freq_scale)
