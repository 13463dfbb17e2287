"""granite and granitemoe: the llama layout (normal RoPE, pairs (2i, 2i+1)) with four scales, as llama.cpp's
src/models/granite.cpp: embeddings times embedding_scale, attention scores times attention.scale (instead of
1/sqrt(head_dim)), the attention and FFN outputs times residual_scale before each residual add, and the logits
divided by logit_scale (required). A scale of 0 or absent means none, as there. granitemoe adds experts (softmax,
weights renormalised, feed_forward_length wide) and an optional ungated shared expert
(expert_shared_feed_forward_length > 0: Granite MoE Shared)."""
import dataclasses

import numpy as np

from fastgguf.arch.base import Arch, register
from fastgguf.errors import GGUFError


@register
class Granite(Arch):
    name = "granite"
    logit_scale_required = True   # granitehybrid: optional (absent or 0: none)

    def hparams(self):
        hp = self.base_hparams()
        scale = {k: self.float_key(k, 0.0, lo_open=False)
                 for k in ("embedding_scale", "attention.scale", "residual_scale")}
        with np.errstate(over="ignore", divide="ignore"):
            ls = self.float_key("logit_scale") if self.logit_scale_required else \
                self.float_key("logit_scale", 0.0, lo_open=False) or 1.0
            logit_scale = np.float32(1.0) / np.float32(ls)
        if not np.isfinite(logit_scale) or not all(np.isfinite(np.float32(v)) for v in scale.values()):
            raise GGUFError(f"{self.name}: logit_scale {self.md.get(self.name + '.logit_scale')!r} or a scale "
                            f"{scale} out of float32 range")
        return dataclasses.replace(
            hp, embd_scale=scale["embedding_scale"] or 1.0,
            attn_scale=scale["attention.scale"] or hp.attn_scale,
            residual_scale=scale["residual_scale"] or 1.0,
            logit_scale=float(logit_scale))


@register
class GraniteMoe(Granite):
    name = "granitemoe"
