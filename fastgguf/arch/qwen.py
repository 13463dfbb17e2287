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
