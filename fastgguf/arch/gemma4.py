"""gemma4 (Gemma 4 text: the E2B / E4B layout, the dense 31B's and the MoE 26B-A4B's): gemma3's layer (NEOX RoPE,
embeddings times sqrt(n_embd), q and k RMS-normed per head, post-attention and post-FFN norms, GELU-tanh FFN, tied
output, final logit soft-cap) with:
  * sliding-window and full-attention layers of their own head size, KV heads and rotated dims
    (attention.key_length_swa, rope.dimension_count_swa, a per-layer attention.head_count_kv); the full layers'
    RoPE divides by rope_freqs.weight (1e30 on the unrotated pairs: "proportional" RoPE), the sliding ones' does not;
  * V RMS-normed per head (no weight) before it is cached; attention scores not scaled (scale 1);
  * the last attention.shared_kv_layers layers compute no K/V: each attends over the last earlier layer of its kind
    (Hparams.kv_source), and their FFN may be wider (a per-layer feed_forward_length);
  * per-layer inputs (embedding_length_per_layer_input = P): per token, per layer, P values from
    per_layer_token_embd and per_layer_model_proj of the scaled embedding, gated into the residual after the FFN
    (inp_gate, proj, post_norm); then the layer's output times layer_output_scale.
  * the MoE layout (expert_count > 0, every layer): beside the dense FFN, whose output post_ffw_norm_1 norms, softmax-
    routed experts (weights renormalised; gate and up apart or fused in ffn_gate_up_exps; each expert's output times
    its ffn_down_exps.scale) on rmsnorm(x) * pre_ffw_norm_2, the router reading rmsnorm(x) / sqrt(n_embd) *
    ffn_gate_inp.scale, their sum normed by post_ffw_norm_2; the two added, then post_ffw_norm.
attn_v.weight may be absent (V is then K's projection, before its norm and RoPE). Not supported: a fused attn_qkv,
a mix of dense and expert layers, the vision / audio towers (a separate mmproj file).

Facts from llama.cpp (src/models/gemma4.cpp, llama-model.cpp, llama-hparams.cpp, conversion/gemma.py): its norm
weights are stored as they are used (no "1 +"); a KV-sharing layer il reads layer n_kv_from_start - 2 (sliding) or
n_kv_from_start - 1 (full), n_kv_from_start = block_count - shared_kv_layers; the per-layer inputs are
(rmsnorm(proj . x / sqrt(n_embd)) * per_layer_proj_norm + tok_row * sqrt(P)) / sqrt(2); the sliding layers' RoPE base
is rope.freq_base_swa (default 10000), unscaled."""
import dataclasses

import numpy as np

from fastgguf.arch.base import MAX_DIM, Arch, register
from fastgguf.arch.gemma import Gemma3
from fastgguf.errors import GGUFError


@register
class Gemma4(Gemma3):
    name = "gemma4"
    swa_default = KeyError   # attention.sliding_window is required (llama.cpp's get_key)
    n_layer_27b = None
    kv_tensors = {"wk": "attn_k.weight", "k_norm": "attn_k_norm.weight"}
    ple_tensors = {"ple_gate": "inp_gate.weight", "ple_out": "proj.weight", "ple_post_norm": "post_norm.weight"}
    # wv: absent means V = K's projection; a KV-sharing layer's own k/v/k_norm, if the file has them, are not used
    optional_layer_tensors = {"wv": "attn_v.weight", "out_scale": "layer_output_scale.weight", **kv_tensors}
    ple_model_tensors = {"ple_embd": ("per_layer_token_embd.weight", True),
                         "ple_proj": ("per_layer_model_proj.weight", True),
                         "ple_norm": ("per_layer_proj_norm.weight", True)}
    # the MoE layout (26B-A4B): beside the dense FFN (its output normed by post_ffw_norm_1) the experts, on their own
    # normed input, routed from rmsnorm(x) / sqrt(n_embd) * ffn_gate_inp.scale, their sum normed by post_ffw_norm_2
    moe_tensors = {"ffn_post_norm_1": "post_ffw_norm_1.weight", "moe_post_norm": "post_ffw_norm_2.weight",
                   "router_scale": "ffn_gate_inp.scale", "exp_norm": "pre_ffw_norm_2.weight"}
    moe_ff_key = True
    vectors = Gemma3.vectors + ("ple_post_norm", "out_scale", "ple_norm", "ffn_post_norm_1", "moe_post_norm",
                                "router_scale", "exp_norm", "down_exps_s")

    def swa_flags(self):
        """attention.sliding_window_pattern: one boolean per layer (required: llama.cpp's get_arr)."""
        k = f"{self.name}.attention.sliding_window_pattern"
        n = self.int_key("block_count")
        v = self.key("attention.sliding_window_pattern")
        if not isinstance(v, np.ndarray) or v.dtype.kind not in "biu" or v.size != n:
            raise GGUFError(f"{k}: expected {n} booleans (block_count), got {np.asarray(v).size} values")
        return [bool(x) for x in v]

    def per_kind(self, name, default, swa):
        """(full layers' value, sliding layers' value) of an integer key that is one value or one per layer (equal
        within each kind)."""
        k = f"{self.name}.{name}"
        v = self.key(name, default)
        if not isinstance(v, np.ndarray):
            v = self.int_key(name, default)
            return v, v
        if v.dtype.kind not in "iu" or v.size != len(swa):
            raise GGUFError(f"{k}: expected {len(swa)} integers (block_count), got an array of {v.size} {v.dtype}")
        out = []
        for kind in (False, True):
            vals = {int(x) for x, s in zip(v, swa) if s == kind}
            if len(vals) > 1:
                raise GGUFError(f"{k}: the {'sliding' if kind else 'full'}-attention layers' values differ: {vals}")
            out.append(vals.pop() if vals else int(v.flat[0]))
        for x in out:
            if not 1 <= x <= MAX_DIM:
                raise GGUFError(f"{k} = {x} is out of range [1, {MAX_DIM}]")
        return tuple(out)

    def kv_heads(self, n_head):
        return self.per_kind("attention.head_count_kv", n_head, self.swa_flags())[0]

    def ff_widths(self):
        """feed_forward_length: one width, or one per layer (the KV-sharing layers' may be doubled)."""
        k = f"{self.name}.feed_forward_length"
        v = self.key("feed_forward_length")
        if not isinstance(v, np.ndarray):
            return (self.int_key("feed_forward_length"),)
        n = self.int_key("block_count")
        if v.dtype.kind not in "iu" or v.size != n or np.any(v < 1) or np.any(v > MAX_DIM):
            raise GGUFError(f"{k}: expected {n} integers in [1, {MAX_DIM}] (block_count), got {v!r:.60}")
        return tuple(int(x) for x in v)

    def ff_length(self):
        return max(self.ff_widths())

    def hparams(self):
        hp = super().hparams()
        swa = self.swa_flags()
        if any(swa) and hp.n_swa < 1:
            raise GGUFError(f"{self.name}.attention.sliding_window = {hp.n_swa} must be >= 1")
        g_full, g_swa = self.per_kind("attention.head_count_kv", hp.n_head, swa)
        hd_swa = self.int_key("attention.key_length_swa")
        if self.int_key("attention.value_length_swa") != hd_swa:
            raise GGUFError(f"{self.name}.attention.value_length_swa != attention.key_length_swa is not supported")
        if hp.n_head % g_swa:
            raise GGUFError(f"{self.name}.attention.head_count {hp.n_head} is not a multiple of the sliding layers' "
                            f"{self.name}.attention.head_count_kv {g_swa}")
        if hp.n_head * hd_swa > MAX_DIM:
            raise GGUFError(f"{self.name}: head_count * key_length_swa = {hp.n_head * hd_swa} is too large")
        n_rot_swa = self.int_key("rope.dimension_count_swa", min(hp.n_rot, hd_swa), lo=0, hi=hd_swa)
        if n_rot_swa % 2:
            raise GGUFError(f"{self.name}.rope.dimension_count_swa = {n_rot_swa} must be even")
        ff = self.ff_widths()
        return dataclasses.replace(
            hp, attn_scale=1.0, head_dim_swa=hd_swa, n_head_kv_swa=g_swa, n_rot_swa=n_rot_swa, swa_no_freqs=True,
            v_norm=True, n_embd_per_layer=self.int_key("embedding_length_per_layer_input", lo=0),
            ff_layers=ff if len(set(ff)) > 1 else (), n_kv_from_start=self.kv_from_start(hp.n_layer, swa),
            moe_dense=hp.n_expert > 0, n_ff_shexp=0)

    def kv_from_start(self, n_layer, swa):
        """The first layer without K/V of its own (0: every layer has its own): block_count - shared_kv_layers.
        Each later layer reuses the last layer of its kind before it (Hparams.kv_source), which must be that kind."""
        k = f"{self.name}.attention.shared_kv_layers"
        shared = self.int_key("attention.shared_kv_layers", 0, lo=0, hi=n_layer)
        if shared == 0:
            return 0
        start = n_layer - shared
        if start < 2 or swa[start - 1] or not swa[start - 2]:
            raise GGUFError(f"{k} = {shared}: the layers before the K/V-sharing ones must end with a sliding-window "
                            f"layer then a full-attention one (layers {start - 2}, {start - 1}), as llama.cpp reuses "
                            f"them")
        return start

    def layer_roles(self, hp, i):
        roles = {r: n for r, n in self.layer_tensors.items() if r not in ("wk", "wv", "k_norm")}
        if hp.kv_source(i) == i:
            roles.update(self.kv_tensors)
        if hp.n_embd_per_layer:
            roles.update(self.ple_tensors)
        if hp.moe_layer(i):
            roles.update(self.moe_tensors)
        return roles

    def expert_layer(self, hp, i, take, exp_shapes, used):
        """The router and expert stacks: gate and up apart or fused (ffn_gate_up_exps: per expert gate rows then up
        rows), and the optional per-expert output scale ffn_down_exps.scale."""
        fused = f"blk.{i}.ffn_gate_up_exps.weight"
        if fused not in self.f.tensors:
            d = super().expert_layer(hp, i, take, exp_shapes, used)
        else:
            NE, FE, E = hp.n_expert, hp.n_ff_exp, hp.n_embd
            used.add(fused)
            arr, t = self.matrix3(fused, (NE, 2 * FE, E))[:2]
            a = np.asarray(arr)
            d = {"gate_inp": take("gate_inp", f"blk.{i}.ffn_gate_inp.weight"), "gate_exps": (a[:, :FE], t, NE, FE, E),
                 "up_exps": (a[:, FE:], t, NE, FE, E)}
            name = f"blk.{i}.ffn_down_exps.weight"
            if name not in self.f.tensors:
                raise GGUFError(f"{self.f.path}: missing tensor {name!r} for architecture {self.name!r}")
            used.add(name)
            d["down_exps"] = self.matrix3(name, exp_shapes["down_exps"])
        d["down_exps_s"] = take("down_exps_s", f"blk.{i}.ffn_down_exps.scale", required=False)
        return d

    def split_layer(self, d, hp, i):
        if hp.kv_source(i) != i:   # attends over an earlier layer's K/V: its own k, v, k_norm unused
            for role in ("wk", "wv", "k_norm"):
                d.pop(role, None)
        elif d.get("wv") is None:
            d["wv"] = d["wk"]
        if "router_scale" in d:   # the router's input norm weight: ffn_gate_inp.scale / sqrt(n_embd), in float32
            inv = np.float32(1.0) / np.sqrt(np.float32(hp.n_embd))
            d["router_norm"] = (np.asarray(d.pop("router_scale"), dtype=np.float32) * inv).astype(np.float32)
        if d.get("out_scale") is not None and d["out_scale"].shape != (1,):
            raise GGUFError(f"tensor 'blk.{i}.layer_output_scale.weight' has shape {d['out_scale'].shape}, "
                            f"expected (1,)")
        return d

    def tensors(self, hp):
        self.model_tensors = dict(Arch.model_tensors, **(self.ple_model_tensors if hp.n_embd_per_layer else {}))
        if len(hp.swa_layers) < hp.n_layer and "rope_freqs.weight" not in self.f.tensors:
            raise GGUFError(f"{self.f.path}: missing tensor 'rope_freqs.weight' for architecture {self.name!r} "
                            f"(the full-attention layers' RoPE factors)")
        return super().tensors(hp)
