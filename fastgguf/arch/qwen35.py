"""qwen35 / qwen35moe (Qwen3.5, dense and MoE) and qwen3next (their predecessor: Qwen3Next at the end): gated
DeltaNet linear-attention layers interleaved with gated full attention (docs/qwen35-design.md). Every layer is
x += mixer(rms_norm(x, attn_norm)), then x += ffn(rms_norm(x, post_attention_norm)) (a SwiGLU FFN; qwen35moe:
softmax-routed experts, weights normalised, plus a shared expert scaled by sigmoid(ffn_gate_inp_shexp . x)).
  * Full attention (every full_attention_interval-th layer, or attention.recurrent_layers false): attn_q gives per
    head [q (head_dim) | gate (head_dim)], q and k RMS-normed per head, NEOX RoPE on the first rope.dimension_count
    dims, scores times 1/sqrt(head_dim), the output times sigmoid(gate), then attn_output. The gate rows are split
    out of attn_q at load (a copy of those rows: fg_mat rows are evenly spaced).
  * Gated DeltaNet (fg_layer deltanet in csrc/fg_forward.h): ssm.state_size S, ssm.group_count q/k heads,
    ssm.time_step_rank v heads (ssm.inner_size = their S each).

Facts from llama.cpp (src/models/qwen35.cpp, qwen35moe.cpp, delta-net-base.cpp, ggml's gated_delta_net, ssm_conv):
the rope is IMROPE over rope.dimension_sections; a text token has the same position in the t, h and w sections and
0 in the fourth, so when every rotated pair falls in t/h/w sections it is the plain NEOX rope (a file whose sections
leave pairs to the fourth needs vision positions: refused). nextn_predict_layers trailing blocks (MTP) are counted in
block_count, not run, and their tensors ignored; vision towers live in a separate mmproj file (not supported)."""
import dataclasses

import numpy as np

from fastgguf.arch.base import MAX_CONV, MAX_DIM, Arch, register
from fastgguf.errors import GGUFError

MAX_STATE = 1024   # the largest DeltaNet head size (ssm.state_size) accepted; real files have 128


@register
class Qwen35(Arch):
    name = "qwen35"
    rope_neox = True
    attention_tensors = {
        "attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight", "wv": "attn_v.weight",
        "wo": "attn_output.weight", "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight"}
    deltanet_tensors = {
        "attn_norm": "attn_norm.weight", "dn_qkv": "attn_qkv.weight", "dn_z": "attn_gate.weight",
        "dn_conv_w": "ssm_conv1d.weight", "dn_dt": "ssm_dt.bias", "dn_a": "ssm_a", "dn_beta": "ssm_beta.weight",
        "dn_alpha": "ssm_alpha.weight", "dn_norm": "ssm_norm.weight", "dn_out": "ssm_out.weight"}
    ffn_tensors = {"ffn_norm": "post_attention_norm.weight", "w_gate": "ffn_gate.weight", "w_up": "ffn_up.weight",
                   "w_down": "ffn_down.weight"}
    optional_layer_tensors = {}
    vectors = Arch.vectors + ("dn_conv_w", "dn_dt", "dn_a", "dn_norm")

    def n_layer_all(self):
        return self.int_key("block_count")

    def n_nextn(self):
        return self.int_key("nextn_predict_layers", 0, lo=0, hi=self.n_layer_all() - 1)

    def recurrent(self, n_all, n_layer):
        """Whether each of the n_layer run layers is a DeltaNet one: attention.recurrent_layers (n_all booleans)
        or else every layer but each full_attention_interval-th (default 4)."""
        k = f"{self.name}.attention.recurrent_layers"
        v = self.key("attention.recurrent_layers", None)
        if v is None:
            n = self.int_key("full_attention_interval", 4, lo=1, hi=MAX_DIM)
            return [(i + 1) % n != 0 for i in range(n_layer)]
        if not isinstance(v, np.ndarray) or v.dtype.kind not in "biu" or v.size != n_all:
            raise GGUFError(f"{k}: expected {n_all} booleans (block_count), got {np.asarray(v).size} values")
        return [bool(x) for x in v[:n_layer]]

    def rope_text(self, n_rot):
        """Check rope.dimension_sections: a text-only model needs every rotated pair in the t/h/w sections."""
        k = f"{self.name}.rope.dimension_sections"
        v = self.key("rope.dimension_sections")
        if not isinstance(v, np.ndarray) or v.dtype.kind not in "iu" or v.size < 4 or np.any(v < 0) \
                or np.any(v > MAX_DIM):
            raise GGUFError(f"{k}: expected 4 non-negative integers, got {v!r:.60}")
        sec = [int(x) for x in v[:4]]
        total = sum(sec)
        if n_rot == 0:
            return
        if total < 1 or 2 * total > n_rot:
            raise GGUFError(f"{k} = {sec}: sections of {total} pairs do not fit rope.dimension_count {n_rot}")
        for p in range(n_rot // 2):   # ggml_mrope_cache_init's interleaved (IMROPE) choice of a pair's position
            s = p % total
            if not ((s % 3 == 0 and s < 3 * sec[0]) or (s % 3 == 1 and s < 3 * sec[1])
                    or (s % 3 == 2 and s < 3 * sec[2])):
                raise GGUFError(f"{k} = {sec}: rotated pair {p} takes the fourth (vision) position, which needs "
                                f"image positions; only text models whose sections cover every pair are supported")

    def deltanet_hparams(self):
        dc = self.int_key("ssm.conv_kernel", lo=2, hi=MAX_CONV)
        S = self.int_key("ssm.state_size", lo=1, hi=MAX_STATE)
        hk = self.int_key("ssm.group_count", lo=1, hi=MAX_DIM)
        hv = self.int_key("ssm.time_step_rank", lo=1, hi=MAX_DIM)
        inner = self.int_key("ssm.inner_size", lo=1, hi=MAX_DIM)
        if hv % hk:
            raise GGUFError(f"{self.name}.ssm.time_step_rank {hv} (v heads) is not a multiple of "
                            f"{self.name}.ssm.group_count {hk} (q/k heads)")
        if inner != hv * S:
            raise GGUFError(f"{self.name}.ssm.inner_size {inner} != ssm.time_step_rank {hv} * ssm.state_size {S} "
                            f"(v head size must equal k head size)")
        if (2 * hk + hv) * S > MAX_DIM:
            raise GGUFError(f"{self.name}: the DeltaNet conv width (2 ssm.group_count + ssm.time_step_rank) * "
                            f"ssm.state_size = {(2 * hk + hv) * S} is too large")
        return {"dn_conv": dc, "dn_state": S, "dn_k_heads": hk, "dn_v_heads": hv}

    def hparams(self):
        n_all = self.n_layer_all()
        n_layer = n_all - self.n_nextn()
        dn = self.deltanet_hparams()
        hp = self.base_hparams()
        self.rope_text(hp.n_rot)
        rec = self.recurrent(n_all, n_layer)
        dn_layers = tuple(i for i, r in enumerate(rec) if r)
        return dataclasses.replace(hp, n_layer=n_layer, attn_gate=True, dn_layers=dn_layers, **dn)

    def layer_roles(self, hp, i):
        mixer = self.deltanet_tensors if i in hp.dn_layers else self.attention_tensors
        ffn = {r: n for r, n in self.ffn_tensors.items() if not (hp.n_expert and r in self.shexp_tensors)}
        return {**mixer, **ffn}

    def skipped_tensor(self, name, hp):
        """The MTP blocks' tensors (blk.i, i >= the run layers): not used."""
        if not name.startswith("blk."):
            return False
        i = name.split(".")[1]
        return i.isdigit() and int(i) >= hp.n_layer

    def split_layer(self, d, hp, i):
        if i in hp.dn_layers:
            w = d["dn_conv_w"]
            cd = (2 * hp.dn_k_heads + hp.dn_v_heads) * hp.dn_state
            if w.shape != (cd, hp.dn_conv):
                raise GGUFError(f"tensor 'blk.{i}.ssm_conv1d.weight' has shape {w.shape}, expected ({cd}, "
                                f"{hp.dn_conv}) (conv width, {self.name}.ssm.conv_kernel)")
            return d
        arr, t, rows, cols = d["wq"]   # per head [q | gate]: split into two matrices of whole rows
        H, hd = hp.n_head, hp.head_dim
        if rows != 2 * H * hd:
            raise GGUFError(f"tensor 'blk.{i}.attn_q.weight' has {rows} rows, expected {2 * H * hd} (q and gate)")
        a = np.asarray(arr).reshape(H, 2, hd, -1)
        d["wq"] = (np.ascontiguousarray(a[:, 0]).reshape(H * hd, -1), t, H * hd, cols)
        d["wg"] = (np.ascontiguousarray(a[:, 1]).reshape(H * hd, -1), t, H * hd, cols)
        return d


@register
class Qwen35Moe(Qwen35):
    name = "qwen35moe"
    moe_ff_key = True
    shexp_gate = True
    ff_default = 1   # llama.cpp does not require feed_forward_length (its FFNs are the experts and shared expert)


@register
class Qwen3Next(Qwen35Moe):
    """qwen3next (Qwen3-Next-80B-A3B), qwen35moe's predecessor, as llama.cpp's src/models/qwen3next.cpp: the same
    layers, with plain NEOX RoPE (no rope.dimension_sections); v head h reads q/k head h // (v heads / q/k heads)
    (a repeat-interleave, not qwen35's broadcast); q|k|v|z in one ssm_in per q/k head group (legacy files; the
    current converter writes attn_qkv and attn_gate, qwen35's) split at load; beta|alpha in one ssm_ba per
    q/k head group, split at load; experts required (expert_count > 0), and the shared expert too, of
    expert_shared_feed_forward_length (default feed_forward_length)."""
    name = "qwen3next"

    def rope_text(self, n_rot):
        """Plain RoPE (ggml_rope_ext): no sections to check."""

    def experts(self, n_ff):
        e = super().experts(n_ff)
        if not e:
            raise GGUFError(f"{self.name}.expert_count must be > 0 (llama.cpp: {self.name} cannot have zero experts)")
        return {**e, "n_ff_shexp": e["n_ff_shexp"] or n_ff}

    def hparams(self):
        return dataclasses.replace(super().hparams(), dn_kv_grouped=True)

    def layer_roles(self, hp, i):
        roles = super().layer_roles(hp, i)
        if i in hp.dn_layers:
            del roles["dn_beta"], roles["dn_alpha"]
            roles["dn_ba"] = "ssm_ba.weight"
            if f"blk.{i}.ssm_in.weight" in self.f.tensors:   # legacy files: q|k|v|z in one
                del roles["dn_qkv"], roles["dn_z"]
                roles["dn_in"] = "ssm_in.weight"
        return roles

    def split_layer(self, d, hp, i):
        if i not in hp.dn_layers:
            return super().split_layer(d, hp, i)
        S, HK, HV = hp.dn_state, hp.dn_k_heads, hp.dn_v_heads
        r = HV // HK

        def groups(role, name, per_group):   # (HK, per_group, -1): the rows of each q/k head group
            arr, t, rows, cols = d.pop(role)
            if rows != HK * per_group:
                raise GGUFError(f"tensor 'blk.{i}.{name}' has {rows} rows, expected {HK * per_group} "
                                f"({self.name}.ssm.group_count {HK} groups of {per_group})")
            return np.asarray(arr).reshape(HK, per_group, -1), t, cols

        def rows(a, t, cols):
            a = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
            return (a, t, a.shape[0], cols)

        if "dn_in" in d:   # per group [q (S) | k (S) | v (r S) | z (r S)]: llama.cpp's build_qkvz legacy path
            a, t, cols = groups("dn_in", "ssm_in.weight", 2 * S + 2 * r * S)
            d["dn_qkv"] = rows(np.concatenate([a[:, :S].reshape(HK * S, -1), a[:, S:2 * S].reshape(HK * S, -1),
                                               a[:, 2 * S:(2 + r) * S].reshape(HV * S, -1)]), t, cols)
            d["dn_z"] = rows(a[:, (2 + r) * S:], t, cols)
        a, t, cols = groups("dn_ba", "ssm_ba.weight", 2 * r)   # per group [beta (r) | alpha (r)]
        d["dn_beta"], d["dn_alpha"] = rows(a[:, :r], t, cols), rows(a[:, r:], t, cols)
        return super().split_layer(d, hp, i)
