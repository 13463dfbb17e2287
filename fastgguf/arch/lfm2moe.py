"""lfm2moe (LiquidAI LFM2-8B-A1B, LFM2-24B-A2B): lfm2 (fastgguf/arch/lfm2.py: short-convolution and attention
layers, told by the per-layer attention.head_count_kv) whose FFN is a mixture of experts after the
leading_dense_block_count first layers (those keep lfm2's dense SwiGLU FFN, feed_forward_length wide). An expert
layer: router ffn_gate_inp, probabilities = expert_gating_func of its logits (1 softmax, 2 sigmoid: LFM2's, 3
softmax of the chosen logits), the expert_used_count largest of probability + exp_probs_b.bias (a per-expert
selection bias that does not enter the weights), weights = the chosen probabilities divided by their sum (always;
expert_weights_norm and expert_weights_scale are not read), experts expert_feed_forward_length wide, no shared
expert.

Facts from llama.cpp (src/models/lfm2moe.cpp, which builds lfm2.cpp's graph; llama-graph.cpp build_moe_ffn):
leading_dense_block_count optional (default 0), expert_feed_forward_length and expert_gating_func required,
exp_probs_b.bias required in every expert layer; attention.sliding_window is not read (no sliding-window layers)."""
from fastgguf.arch.base import register
from fastgguf.arch.lfm2 import Lfm2
from fastgguf.errors import GGUFError

# {arch}.expert_gating_func values (llama.cpp's llama_expert_gating_func_type) -> Hparams.moe_gating
GATING_FUNCS = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}


@register
class Lfm2Moe(Lfm2):
    name = "lfm2moe"
    sliding_window = False
    moe_norm_w = True
    expert_tensors = dict(Lfm2.expert_tensors, exp_probs_b="exp_probs_b.bias")
    vectors = Lfm2.vectors + ("exp_probs_b",)

    def experts(self, n_ff):
        """The experts' Hparams fields and n_dense_lead: every layer from leading_dense_block_count on has experts
        (expert_count, expert_used_count, expert_feed_forward_length and expert_gating_func then required)."""
        n_layer = self.int_key("block_count")
        lead = self.int_key("leading_dense_block_count", 0, lo=0, hi=n_layer)
        if lead == n_layer:
            return {"n_dense_lead": lead}
        n_expert = self.int_key("expert_count", lo=1, hi=4096)
        used = self.int_key("expert_used_count", lo=1, hi=n_expert)
        gating = self.int_key("expert_gating_func", lo=0, hi=(1 << 32) - 1)
        if gating not in GATING_FUNCS:
            raise GGUFError(f"{self.name}.expert_gating_func = {gating} is not supported (supported: "
                            f"{', '.join(f'{k} {v}' for k, v in GATING_FUNCS.items())})")
        if self.int_key("expert_group_count", 0, lo=0, hi=n_expert) > 1:
            raise GGUFError(f"{self.name}.expert_group_count > 1 (grouped expert selection) is not supported")
        return {"n_expert": n_expert, "n_expert_used": used, "n_ff_exp": self.int_key("expert_feed_forward_length"),
                "moe_norm_w": True, "moe_gating": GATING_FUNCS[gating], "n_dense_lead": lead}

    def layer_roles(self, hp, i):
        """lfm2's conv or attention tensors, less the dense FFN in an expert layer (expert_layer takes those)."""
        roles = super().layer_roles(hp, i)
        if hp.moe_layer(i):
            return {r: n for r, n in roles.items() if r not in self.shexp_tensors}
        return roles
