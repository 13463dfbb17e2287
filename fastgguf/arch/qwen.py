"""qwen2 and qwen3: the llama layout with NEOX RoPE (pairs (x[i], x[i + n_rot/2])). qwen2 carries q/k/v biases
(optional in every arch); qwen3 has none but RMS-normalises each q and k head (attn_q_norm/attn_k_norm) before
RoPE. Facts from llama.cpp (llama_model_rope_type: LLM_ARCH_QWEN2/QWEN3 -> LLAMA_ROPE_TYPE_NEOX). A Qwen3
reranker is a qwen3 file with pooling_type rank and cls.output.weight = the lm_head rows of "yes" and "no":
llama.cpp's build_pooling softmaxes those two logits, so the score is P(yes)."""
from fastgguf.arch.base import Arch, register


@register
class Qwen2(Arch):
    name = "qwen2"
    rope_neox = True


@register
class Qwen3(Arch):
    name = "qwen3"
    rope_neox = True
    rank_softmax = True
    optional_layer_tensors = dict(Arch.optional_layer_tensors,
                                  q_norm="attn_q_norm.weight", k_norm="attn_k_norm.weight")


@register
class Qwen2Moe(Qwen2):
    """qwen2 with experts (softmax, weights not renormalised) and a shared expert gated by
    sigmoid(ffn_gate_inp_shexp . x); expert_feed_forward_length (default n_ff / n_expert_used) and
    expert_shared_feed_forward_length (default n_ff) as llama.cpp's qwen2moe."""
    name = "qwen2moe"
    moe_norm_w = False
    moe_ff_key = True
    shexp_gate = True

    def experts(self, n_ff):
        d = super().experts(n_ff)
        if d:
            d["n_ff_shexp"] = self.int_key("expert_shared_feed_forward_length", n_ff)
        return d


@register
class Qwen3Moe(Qwen3):
    """qwen3 (q/k norms per head) with experts: softmax, the top weights renormalised, expert_feed_forward_length."""
    name = "qwen3moe"
    rank_softmax = False
    moe_ff_key = True
