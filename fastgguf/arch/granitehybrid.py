"""granitehybrid (IBM Granite 4.0 H: micro, tiny, small): granite's four scales (fastgguf/arch/granite.py; logit_scale
optional here) over layers of two kinds, told by the per-layer attention.head_count_kv as lfm2's (0: a Mamba-2
layer, else attention with granite's scores scale and optional biases). Every layer is
x += residual_scale * mixer(rms_norm(x, attn_norm)), then x += residual_scale * ffn(rms_norm(x, ffn_norm)), the
FFN a dense SwiGLU or granitemoe's experts (softmax, renormalised, feed_forward_length wide) with an optional
ungated shared expert. The Mamba-2 layer (csrc/fg_forward.h fg_layer ssm says what it computes): ssm_in (z | xBC |
dt), a causal conv of ssm.conv_kernel taps (ssm_conv1d, optional bias) and silu over xBC, the selective scan with
ssm.time_step_rank heads sharing B and C in ssm.group_count groups (ssm_a, ssm_dt.bias, ssm_d), times silu(z), an
RMS norm per group (ssm_norm), ssm_out. Its state (the conv's last inputs and the scan state) is that of the newest
position only: a context rewinds only to 0 (recomputing the prompt), and a saved state is refused.

Facts from llama.cpp (src/models/granite-hybrid.cpp, mamba-base.cpp build_mamba2_layer, ggml's ssm_conv and
ssm_scan): ssm.inner_size must be 2 * embedding_length; RoPE unless rope.scaling.finetuned is false (Granite 4.0 H
files: false, so no layer rotates q and k); ffn_gate.bias and expert stacks without ffn_gate_exps are not
supported here."""
import dataclasses

import numpy as np

from fastgguf.arch.base import MAX_CONV, MAX_DIM, Arch, register
from fastgguf.arch.granite import GraniteMoe
from fastgguf.arch.lfm2 import Lfm2
from fastgguf.errors import GGUFError


@register
class GraniteHybrid(GraniteMoe):
    name = "granitehybrid"
    logit_scale_required = False
    optional_layer_tensors = dict(Arch.optional_layer_tensors, bo="attn_output.bias", b_up="ffn_up.bias",
                                  b_down="ffn_down.bias", ssm_conv1d_b="ssm_conv1d.bias")
    ssm_tensors = {"attn_norm": "attn_norm.weight", "ssm_in": "ssm_in.weight", "ssm_conv1d": "ssm_conv1d.weight",
                   "ssm_dt_b": "ssm_dt.bias", "ssm_a": "ssm_a", "ssm_d": "ssm_d", "ssm_norm": "ssm_norm.weight",
                   "ssm_out": "ssm_out.weight"}
    vectors = Arch.vectors + ("ssm_conv1d", "ssm_conv1d_b", "ssm_dt_b", "ssm_a", "ssm_d", "ssm_norm", "bo", "b_up",
                              "b_down")
    kv_counts = Lfm2.kv_counts
    kv_heads = Lfm2.kv_heads

    def hparams(self):
        hp = super().hparams()
        ssm = tuple(i for i, c in enumerate(self.kv_counts()) if c == 0)
        if not ssm:
            return hp
        d_inner = self.int_key("ssm.inner_size", hi=2 * MAX_DIM)
        if d_inner != 2 * hp.n_embd:
            raise GGUFError(f"{self.name}.ssm.inner_size = {d_inner}: only 2 * embedding_length ({2 * hp.n_embd}) "
                            f"is supported (as llama.cpp)")
        n_head = self.int_key("ssm.time_step_rank", hi=d_inner)
        n_group = self.int_key("ssm.group_count", hi=n_head)
        if d_inner % n_head or n_head % n_group:
            raise GGUFError(f"{self.name}.ssm.time_step_rank {n_head} must divide ssm.inner_size {d_inner} and "
                            f"ssm.group_count {n_group} divide it")
        nope = tuple(range(hp.n_layer)) if not self.bool_key("rope.scaling.finetuned", True) else ()
        return dataclasses.replace(hp, ssm_layers=ssm, nope_layers=nope, ssm_d_inner=d_inner, ssm_n_head=n_head,
                                   ssm_n_group=n_group,
                                   ssm_d_conv=self.int_key("ssm.conv_kernel", lo=2, hi=MAX_CONV),
                                   ssm_d_state=self.int_key("ssm.state_size", hi=1 << 12))

    def layer_roles(self, hp, i):
        roles = super().layer_roles(hp, i)
        if i in hp.ssm_layers:   # the mixer's tensors instead of attention's
            roles = {**self.ssm_tensors, **{r: n for r, n in roles.items() if r.startswith(("ffn_", "w_"))}}
        return roles

    def split_layer(self, d, hp, i):
        """The per-head vectors (H, 1) and the per-group norm (G, D / G) as flat vectors, their shapes checked."""
        if i not in hp.ssm_layers:
            return d
        H, G, D = hp.ssm_n_head, hp.ssm_n_group, hp.ssm_d_inner
        for role, shape in (("ssm_a", (H, 1)), ("ssm_d", (H, 1)), ("ssm_norm", (G, D // G)),
                            ("ssm_conv1d", (D + 2 * G * hp.ssm_d_state, hp.ssm_d_conv))):
            a = np.asarray(d[role])
            if a.shape != shape:
                raise GGUFError(f"tensor 'blk.{i}.{self.ssm_tensors[role]}' has shape {a.shape}, expected {shape}")
            if role != "ssm_conv1d":
                d[role] = a.reshape(-1)
        return d
