"""lfm2 (LiquidAI LFM2 / LFM2.5, dense): layers of two kinds, told by attention.head_count_kv, a per-layer array:
0 is a gated short-convolution layer, any other value an attention layer (qwen3's: q/k/v, a per-head RMS norm of q
and k before NEOX RoPE, scores times 1/sqrt(head_dim)). Every layer is x += block(rms_norm(x, attn_norm)), then
x += swiglu_ffn(rms_norm(x, ffn_norm)). The conv layer (fg_layer conv in csrc/fg_forward.h): B | C | xx =
shortconv.in_proj . h (three n_embd-wide thirds), bx = B * xx, y = C * (the causal conv of bx with the
(n_embd, l_cache) kernel shortconv.conv), out = shortconv.out_proj . y; no bias, no activation. Its state is the
last l_cache - 1 rows of bx, kept in a ring beside the K/V cache (docs/lfm2-design.md). The output norm is named
token_embd_norm.weight; output tied unless output.weight.

Facts from llama.cpp (src/models/lfm2.cpp, ggml's ssm_conv): shortconv.l_cache is required; with
attention.sliding_window > 0 every attention layer is a sliding-window one; a non-causal file (LFM2-ColBERT:
attention.causal false, a symmetric conv and dense_2_out) is refused here. lfm2moe (fastgguf/arch/lfm2moe.py) is
this with experts after leading dense layers."""
import dataclasses

import numpy as np

from fastgguf.arch.base import MAX_CONV, MAX_DIM, Arch, register
from fastgguf.errors import GGUFError


@register
class Lfm2(Arch):
    name = "lfm2"
    rope_neox = True
    model_tensors = {"output_norm": ("token_embd_norm.weight", True)}
    attention_tensors = dict(Arch.layer_tensors, q_norm="attn_q_norm.weight", k_norm="attn_k_norm.weight")
    conv_tensors = {"attn_norm": "attn_norm.weight", "conv_in": "shortconv.in_proj.weight",
                    "conv_w": "shortconv.conv.weight", "conv_out": "shortconv.out_proj.weight",
                    **{r: n for r, n in Arch.layer_tensors.items() if r.startswith(("ffn_", "w_"))}}
    vectors = Arch.vectors + ("conv_w",)   # F32 (F16/BF16 widened), as ggml_ssm_conv takes it
    sliding_window = True   # attention.sliding_window is read (llama.cpp's lfm2 does; its lfm2moe does not)

    def kv_counts(self):
        """attention.head_count_kv per layer (an array of block_count integers, or one integer for every layer;
        absent: head_count, as llama.cpp's get_key_or_arr)."""
        k, n_layer = f"{self.name}.attention.head_count_kv", self.int_key("block_count")
        v = self.key("attention.head_count_kv", None)
        if not isinstance(v, np.ndarray):
            return [self.int_key("attention.head_count_kv", self.int_key("attention.head_count"))] * n_layer
        if v.dtype.kind not in "iu" or v.size != n_layer:
            raise GGUFError(f"{k}: expected {n_layer} integers (0: a short-convolution layer), got an array of "
                            f"{v.size} {v.dtype}")
        if np.any(v < 0) or np.any(v > MAX_DIM):
            raise GGUFError(f"{k}: values out of range [0, {MAX_DIM}]")
        return [int(x) for x in v]

    def kv_heads(self, n_head):
        heads = {c for c in self.kv_counts() if c}
        if len(heads) > 1:
            raise GGUFError(f"{self.name}.attention.head_count_kv: attention layers with different KV head counts "
                            f"{sorted(heads)} are not supported")
        return heads.pop() if heads else n_head

    def hparams(self):
        hp = self.base_hparams()
        if not hp.causal:
            raise GGUFError(f"{self.name}.attention.causal = false (LFM2-ColBERT's symmetric conv) is not supported")
        conv = tuple(i for i, c in enumerate(self.kv_counts()) if c == 0)
        n_conv = self.int_key("shortconv.l_cache", lo=2, hi=MAX_CONV)
        n_swa = self.int_key("attention.sliding_window", 0, lo=0, hi=(1 << 31) - 1) if self.sliding_window else 0
        swa = tuple(i for i in range(hp.n_layer) if i not in conv) if n_swa > 0 else ()
        return dataclasses.replace(hp, conv_layers=conv, n_conv=n_conv, n_swa=n_swa, swa_layers=swa)

    def layer_roles(self, hp, i):
        return self.conv_tensors if i in hp.conv_layers else self.attention_tensors

    def split_layer(self, d, hp, i):
        w = d.get("conv_w")
        if w is not None and w.shape != (hp.n_embd, hp.n_conv):
            raise GGUFError(f"tensor 'blk.{i}.shortconv.conv.weight' has shape {w.shape}, expected "
                            f"({hp.n_embd}, {hp.n_conv}) (n_embd, {self.name}.shortconv.l_cache)")
        return d
