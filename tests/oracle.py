"""A second oracle: a plain float64 numpy forward pass of a llama GGUF model, independent of fastgguf (weights read
and dequantized by gguf-py, llama.cpp's own Python package). Slow and obvious on purpose.

Differences from fastgguf/llama.cpp are expected: they quantize activations to Q8 before each matmul; this does not.
"""
import numpy as np
import gguf
from gguf.quants import dequantize


class Oracle:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        md = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
        a = md["general.architecture"]
        self.arch = a
        self.n_embd = md[f"{a}.embedding_length"]
        self.n_layer = md[f"{a}.block_count"]
        self.n_head = md[f"{a}.attention.head_count"]
        self.n_head_kv = md.get(f"{a}.attention.head_count_kv", self.n_head)
        # lfm2 (fastgguf/arch/lfm2.py): head_count_kv per layer, 0 in its gated short-convolution layers
        kv = np.atleast_1d(self.n_head_kv)
        self.conv = [a in ("lfm2", "lfm2moe") and kv[l % kv.size] == 0 for l in range(md[f"{a}.block_count"])]
        # granitehybrid: 0 KV heads is a Mamba-2 layer (ssm.*: conv taps, state size, heads, groups); RoPE unless
        # rope.scaling.finetuned is false
        self.ssm = [a == "granitehybrid" and kv[l % kv.size] == 0 for l in range(md[f"{a}.block_count"])]
        self.ssm_dims = [md.get(f"{a}.ssm.{k}", 0) for k in ("conv_kernel", "state_size", "time_step_rank",
                                                             "group_count")]
        self.n_head_kv = int(max(kv)) or self.n_head
        self.head_dim = md.get(f"{a}.attention.key_length", self.n_embd // self.n_head)
        self.n_rot = md.get(f"{a}.rope.dimension_count", self.head_dim)
        self.eps = md.get(f"{a}.attention.layer_norm_rms_epsilon", md.get(f"{a}.attention.layer_norm_epsilon", 1e-5))
        self.base = md.get(f"{a}.rope.freq_base", 10000.0)
        # RoPE scaling (llama.cpp's semantics): no type means linear; a factor (or the legacy scale_linear)
        # divides the angles unless the type is none. YaRN (Peng et al., "YaRN", sec. 3.2-3.4 / HF transformers'
        # _compute_yarn_parameters): per frequency, a ramp from extrapolated (fast dims) to interpolated angles
        # between the dims where beta_fast = 32 and beta_slow = 1 rotations fit the original context, and cos/sin
        # scaled by 1 + 0.1 ln(factor). LongRoPE (phi3 128k): long factors when the context exceeds the original.
        # Every type: cos/sin also scaled by rope.scaling.attn_factor.
        self.scale_type = md.get(f"{a}.rope.scaling.type", "linear")
        factor = md.get(f"{a}.rope.scaling.factor", md.get(f"{a}.rope.scale_linear", 0.0))
        self.freq_scale = 1.0 / factor if factor and self.scale_type != "none" else 1.0
        n_ctx_train = md.get(f"{a}.context_length", 0)
        self.n_ctx_orig = md.get(f"{a}.rope.scaling.original_context_length", n_ctx_train) or n_ctx_train
        self.attn_factor = md.get(f"{a}.rope.scaling.attn_factor", 1.0)
        self.neox = a in ("qwen2", "qwen3", "qwen2moe", "qwen3moe", "olmoe", "gemma", "gemma2", "gemma3", "phi3",
                          "nomic-bert", "gpt-oss", "lfm2", "lfm2moe", "qwen35", "qwen35moe")
        # qwen35 (fastgguf/arch/qwen35.py): gated DeltaNet layers (attention.recurrent_layers, else all but every
        # full_attention_interval-th), gated attention elsewhere, post_attention_norm as the FFN's norm
        self.qwen35 = a in ("qwen35", "qwen35moe")
        rec = md.get(f"{a}.attention.recurrent_layers")
        every = md.get(f"{a}.full_attention_interval", 4)
        self.dn = [self.qwen35 and (bool(rec[i]) if rec is not None else (i + 1) % every != 0)
                   for i in range(self.n_layer)]
        if self.qwen35:
            self.dn_dims = {k: md[f"{a}.ssm.{k}"] for k in ("conv_kernel", "state_size", "group_count",
                                                            "time_step_rank")}
        # granite (llama.cpp's granite.cpp): embeddings * embedding_scale, scores * attention.scale (instead of
        # 1/sqrt(head_dim)), attention and FFN outputs * residual_scale, logits / logit_scale; 0/absent: none
        self.embd_scale = md.get(f"{a}.embedding_scale", 0.0) or 1.0
        self.attn_scale = md.get(f"{a}.attention.scale", 0.0) or None
        self.residual_scale = md.get(f"{a}.residual_scale", 0.0) or 1.0
        self.logit_scale = md.get(f"{a}.logit_scale", 0.0) or 1.0
        # mixture of experts (llama.cpp's build_moe_ffn): softmax of the router logits, the n_used largest (ties:
        # the lower expert), their probabilities as weights (renormalised to sum 1 except qwen2moe and olmoe),
        # sum of w_j * expert_j(x), plus the shared expert (qwen2moe: times sigmoid(ffn_gate_inp_shexp . x))
        self.n_expert = md.get(f"{a}.expert_count", 0)
        self.n_used = md.get(f"{a}.expert_used_count", 0)
        self.moe_norm_w = a not in ("qwen2moe", "olmoe", "gpt-oss")
        # lfm2moe (fastgguf/arch/lfm2moe.py): the first leading_dense_block_count layers dense; probabilities by
        # expert_gating_func (1 softmax, 2 sigmoid, 3 softmax of the chosen logits); exp_probs_b.bias added to
        # them to choose the experts, not to weigh them
        self.n_dense_lead = md.get(f"{a}.leading_dense_block_count", 0)
        self.gating = md.get(f"{a}.expert_gating_func", 3 if a == "gpt-oss" else 1)
        # gpt-oss (fastgguf/arch/gptoss.py for the facts): the raw router logits (+ bias) choose, the softmax of the
        # chosen ones weighs; experts with biases and the clamped SwiGLU (alpha 1.702, limit 7); attention sinks;
        # its FFN norm is post_attention_norm; sliding window on even layers
        self.oss = a == "gpt-oss"
        # the gemma family (see fastgguf/arch/gemma.py for the facts): embeddings * sqrt(n_embd), GELU (tanh),
        # post-attention/FFN norms, soft-caps (gemma2), sliding-window layers with their own RoPE base (gemma3)
        self.gemma = a.startswith("gemma")
        self.attn_softcap = md.get(f"{a}.attn_logit_softcapping", 50.0 if a == "gemma2" else 0.0)
        self.final_softcap = md.get(f"{a}.final_logit_softcapping", 30.0 if a == "gemma2" else 0.0)
        self.n_swa = md.get(f"{a}.attention.sliding_window", 4096 if a == "gemma2" else 0) \
            if a in ("gemma2", "gemma3", "gemma4", "gpt-oss", "lfm2") else 0
        pattern = md.get(f"{a}.attention.sliding_window_pattern", {"gemma2": 2, "gemma3": 6, "gpt-oss": 2}.get(a, 0))
        self.swa = [bool(self.n_swa) and not self.conv[l] and (pattern == 0 or l % pattern < pattern - 1)
                    for l in range(self.n_layer)] if not isinstance(pattern, list) else [bool(b) for b in pattern]
        self.md = md
        self.base_swa = md.get(f"{a}.rope.freq_base_swa", 10000.0 if a == "gemma3" else self.base)
        # smollm3 (llama.cpp's smollm3.cpp): layers il with (il + 1) % 4 == 0 have no RoPE (NoPE); 4 is fixed there
        self.rope_layer = [(a != "smollm3" or (l + 1) % 4 != 0) and md.get(f"{a}.rope.scaling.finetuned", True)
                           for l in range(self.n_layer)]
        self.types = {t.name: t.tensor_type for t in r.tensors}
        # name -> float64 array in numpy order (rows, cols)
        self.w = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape(tuple(int(d) for d in t.shape[::-1]))
                  for t in r.tensors}
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]
        if a in ("lfm2", "lfm2moe"):   # its output norm's name (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2)
            self.w["output_norm.weight"] = self.w.pop("token_embd_norm.weight")
        qd, kvd = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        for l in range(self.n_layer):   # phi3's fused matrices: q|k|v rows, gate|up rows
            p = f"blk.{l}."
            for kind in ("weight", "bias"):
                if p + f"attn_qkv.{kind}" in self.w and not self.qwen35:   # qwen35's is its DeltaNet's
                    qkv = self.w.pop(p + f"attn_qkv.{kind}")
                    for x in "qkv":
                        self.types[p + f"attn_{x}.{kind}"] = self.types[p + f"attn_qkv.{kind}"]
                    self.w[p + f"attn_q.{kind}"], self.w[p + f"attn_k.{kind}"], self.w[p + f"attn_v.{kind}"] = \
                        qkv[:qd], qkv[qd:qd + kvd], qkv[qd + kvd:]
            if a == "phi3" and p + "ffn_gate.weight" not in self.w:
                gu = self.w.pop(p + "ffn_up.weight")
                half = gu.shape[0] // 2
                self.w[p + "ffn_gate.weight"], self.w[p + "ffn_up.weight"] = gu[:half], gu[half:]

    def layernorm(self, x, w, b):
        mu = x.mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + self.eps) * w + b

    def mm(self, x, name, act_q8):
        """x @ W[name].T; act_q8: x rounded to Q8_0 first when the weight is Q8_0 (as ggml's and fastgguf's
        vec_dot type for Q8_0 weights: the one error of theirs the oracle imitates on request)."""
        if act_q8 and self.types.get(name) == gguf.GGMLQuantizationType.Q8_0:
            q8 = gguf.GGMLQuantizationType.Q8_0
            x = dequantize(gguf.quants.quantize(x.astype(np.float32), q8), q8).astype(np.float64).reshape(x.shape)
        return x @ self.w[name].T

    def encode(self, ids, kv_f16=False, act_q8=False):
        """The BERT family (bert, nomic-bert; facts in fastgguf/arch/bert.py, from llama.cpp's bert.cpp): hidden
        states (len(ids), n_embd) float64 of the last layer, every token attending to every token (non-causal).
        input = LN(token_embd + token_types[0] + position_embd[pos]); per layer, post-norm:
        x = LN(x + attn(x) Wo + bo), x = LN(x + FFN(x)); bert's FFN is gelu (tanh form) of x Wup + b_up, then
        Wdown + b_down; nomic-bert's is (silu(x Wgate) * x Wup) Wdown and it rotates q, k (NEOX RoPE).
        kv_f16: round K (after RoPE) and V to float16 as an F16 KV cache does; act_q8: see mm()."""
        W = self.w
        ids = np.asarray(ids)
        n, hd, H, KVH = len(ids), self.head_dim, self.n_head, self.n_head_kv
        pos = np.arange(n, dtype=np.float64)
        x = W["token_embd.weight"][ids]
        if "token_types.weight" in W:
            x = x + W["token_types.weight"][0]
        if "position_embd.weight" in W:
            x = x + W["position_embd.weight"][:n]
        x = self.layernorm(x, W["token_embd_norm.weight"], W["token_embd_norm.bias"])
        for l in range(self.n_layer):
            p = f"blk.{l}."
            q = self.mm(x, p + "attn_q.weight", act_q8) + W.get(p + "attn_q.bias", 0)
            k = self.mm(x, p + "attn_k.weight", act_q8) + W.get(p + "attn_k.bias", 0)
            v = self.mm(x, p + "attn_v.weight", act_q8) + W.get(p + "attn_v.bias", 0)
            q, k, v = q.reshape(n, H, hd), k.reshape(n, KVH, hd), v.reshape(n, KVH, hd)
            if self.arch == "nomic-bert":
                q, k = self.rope(q, pos), self.rope(k, pos)
            if kv_f16:
                k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
            rep = H // KVH
            att = np.empty((n, H, hd))
            for hh in range(H):
                s = q[:, hh, :] @ k[:, hh // rep, :].T / np.sqrt(hd)   # no mask: every token sees every token
                s = np.exp(s - s.max(axis=1, keepdims=True))
                att[:, hh, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, hh // rep, :]
            o = self.mm(att.reshape(n, H * hd), p + "attn_output.weight", act_q8) + W.get(p + "attn_output.bias", 0)
            x = self.layernorm(x + o, W[p + "attn_output_norm.weight"], W[p + "attn_output_norm.bias"])
            up = self.mm(x, p + "ffn_up.weight", act_q8) + W.get(p + "ffn_up.bias", 0)
            if p + "ffn_gate.weight" in W:
                gt = self.mm(x, p + "ffn_gate.weight", act_q8)
                act = gt / (1 + np.exp(-gt)) * up
            else:
                act = 0.5 * up * (1 + np.tanh(np.sqrt(2 / np.pi) * (up + 0.044715 * up ** 3)))
            o = self.mm(act, p + "ffn_down.weight", act_q8) + W.get(p + "ffn_down.bias", 0)
            x = self.layernorm(x + o, W[p + "layer_output_norm.weight"], W[p + "layer_output_norm.bias"])
        return x

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos, swa=False, n_ctx=None):
        """x: (n, heads, head_dim); rotate the first n_rot dims (swa: a sliding-window layer's RoPE; n_ctx: the
        context size, which picks LongRoPE's factors)."""
        half = self.n_rot // 2
        i = np.arange(half)
        base = self.base_swa if swa else self.base
        scale = 1.0 if swa and self.arch == "gemma3" else self.freq_scale
        extrap = base ** (-2.0 * i / self.n_rot)
        for name in ("rope_freqs.weight", "rope_factors_long.weight" if n_ctx and n_ctx > self.n_ctx_orig
                     else "rope_factors_short.weight"):
            if name in self.w:
                extrap = extrap / self.w[name]
        inv, mscale = extrap * scale, self.attn_factor
        if self.scale_type == "yarn":
            def corr_dim(rotations):   # the dim whose wavelength fits `rotations` times into the original context
                return self.n_rot * np.log(self.n_ctx_orig / (rotations * 2 * np.pi)) / (2 * np.log(base))
            lo, hi = max(0.0, np.floor(corr_dim(32.0))), min(self.n_rot - 1.0, np.ceil(corr_dim(1.0)))
            ramp = 1.0 - np.clip((i - lo) / max(0.001, hi - lo), 0.0, 1.0)   # 1: extrapolate, 0: interpolate
            inv = inv * (1 - ramp) + extrap * ramp
            mscale *= 1.0 + 0.1 * np.log(1.0 / scale) if scale < 1 else 1.0
        th = pos[:, None] * inv[None, :]                        # (n, half)
        c, s = mscale * np.cos(th)[:, None, :], mscale * np.sin(th)[:, None, :]
        x = x.copy()
        if self.neox:
            a, b = x[..., :half].copy(), x[..., half:self.n_rot].copy()
            x[..., :half], x[..., half:self.n_rot] = a * c - b * s, a * s + b * c
        else:
            a, b = x[..., 0:self.n_rot:2].copy(), x[..., 1:self.n_rot:2].copy()
            x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2] = a * c - b * s, a * s + b * c
        return x

    def ffn(self, h, wg, wu, wd, bg=0, bu=0, bd=0):
        gt, up = h @ wg.T + bg, h @ wu.T + bu
        if self.oss:   # ggml's swiglu_oai
            x, y = np.minimum(gt, 7.0), np.clip(up, -7.0, 7.0)
            return (x / (1 + np.exp(-1.702 * x)) * (y + 1)) @ wd.T + bd
        if self.gemma:
            act = 0.5 * gt * (1 + np.tanh(np.sqrt(2 / np.pi) * (gt + 0.044715 * gt ** 3)))
        else:
            act = gt / (1 + np.exp(-gt))
        return (act * up) @ wd.T

    def moe(self, h, p):
        """The mixture-of-experts FFN of rows h (n, n_embd) of layer prefix p."""
        W = self.w
        logits = h @ W[p + "ffn_gate_inp.weight"].T + W.get(p + "ffn_gate_inp.bias", 0)
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs = logits if self.gating == 3 else 1 / (1 + np.exp(-logits)) if self.gating == 2 else \
            probs / probs.sum(axis=1, keepdims=True)
        choose = probs + W.get(p + "exp_probs_b.bias", 0)
        out = np.zeros_like(h)
        bias = {x: W.get(p + f"ffn_{x}_exps.bias") for x in ("gate", "up", "down")}
        for i in range(len(h)):
            sel = np.argsort(-choose[i], kind="stable")[:self.n_used]
            self.selected.append(set(int(e) for e in sel))
            wts = probs[i, sel]
            if self.gating == 3:
                wts = np.exp(wts - wts.max()) / np.exp(wts - wts.max()).sum()
            wts = wts / (max(wts.sum(), 6.103515625e-5) if self.moe_norm_w else 1.0)   # llama.cpp's clamp (F16 min)
            for e, wt in zip(sel, wts):
                b = [0 if bias[x] is None else bias[x][e] for x in ("gate", "up", "down")]
                out[i] += wt * self.ffn(h[i], W[p + "ffn_gate_exps.weight"][e], W[p + "ffn_up_exps.weight"][e],
                                        W[p + "ffn_down_exps.weight"][e], *b)
        if p + "ffn_up_shexp.weight" in W:
            sh = self.ffn(h, W[p + "ffn_gate_shexp.weight"], W[p + "ffn_up_shexp.weight"],
                          W[p + "ffn_down_shexp.weight"])
            if p + "ffn_gate_inp_shexp.weight" in W:
                sh = sh / (1 + np.exp(-(h @ W[p + "ffn_gate_inp_shexp.weight"])))[:, None]
            out = out + sh
        return out

    def forward(self, ids, kv_f16=False, n_ctx=None):
        """Logits (len(ids), n_vocab) float64 of ids at positions 0.. (causal). kv_f16: round K (after RoPE) and V
        to float16 as an F16 KV cache does (to compare engines exactly on tiny F32 models). n_ctx: the context
        size (LongRoPE's choice of factors; default len(ids))."""
        if self.arch == "gemma4":
            return self.forward_gemma4(ids, kv_f16)
        W = self.w
        ids = np.asarray(ids)
        n = len(ids)
        pos = np.arange(n, dtype=np.float64)
        self.selected = []   # mixtures of experts: the set of experts each row picked, per layer
        x = W["token_embd.weight"][ids] * self.embd_scale
        if self.gemma:
            x = x * np.sqrt(self.n_embd)
        mask = np.triu(np.full((n, n), -np.inf), 1)
        window = mask + np.tril(np.full((n, n), -np.inf), -self.n_swa) if self.n_swa else mask
        for l in range(self.n_layer):
            p = f"blk.{l}."
            h = self.rmsnorm(x, W[p + "attn_norm.weight"])
            if self.conv[l]:
                x = x + self.shortconv(h, p)
            elif self.dn[l]:
                x = x + self.deltanet(h, p)
            elif self.ssm[l]:
                x = x + self.mamba2(h, p) * self.residual_scale
            else:
                x = x + self.attention(h, p, l, pos, n_ctx or n, mask, window, kv_f16) * self.residual_scale
            h = self.rmsnorm(x, W[p + ("post_attention_norm.weight" if self.oss or self.qwen35 else "ffn_norm.weight")])
            if self.n_expert and l >= self.n_dense_lead:
                o = self.moe(h, p)
            else:
                o = self.ffn(h, W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"], W[p + "ffn_down.weight"])
            if p + "post_ffw_norm.weight" in W:
                o = self.rmsnorm(o, W[p + "post_ffw_norm.weight"])
            x = x + o * self.residual_scale
        self.last_hidden = self.rmsnorm(x, W["output_norm.weight"])  # final hidden states (len(ids), n_embd)
        lo = self.last_hidden @ W["output.weight"].T / self.logit_scale
        if self.final_softcap:
            lo = self.final_softcap * np.tanh(lo / self.final_softcap)
        return lo

    def forward_gemma4(self, ids, kv_f16=False):
        """gemma4's logits (facts in fastgguf/arch/gemma4.py, from llama.cpp's gemma4.cpp): per layer kind (sliding
        or full) its head size, KV heads, rotated dims and RoPE base (the full layers' angles divided by
        rope_freqs); q, k RMS-normed per head with weights, v without; scores unscaled; the last shared_kv_layers
        layers attend over the K/V of the last earlier layer of their kind; after the FFN the per-layer input gate
        and the layer's output scale."""
        W, md, a = self.w, self.md, self.arch
        ids = np.asarray(ids)
        n, E, NL, H = len(ids), self.n_embd, self.n_layer, self.n_head
        P = md.get(f"{a}.embedding_length_per_layer_input", 0)
        kvh = np.atleast_1d(md[f"{a}.attention.head_count_kv"])
        start = NL - md.get(f"{a}.attention.shared_kv_layers", 0)
        pos = np.arange(n, dtype=np.float64)
        x = W["token_embd.weight"][ids] * np.sqrt(E)
        if P:
            proj = (x @ W["per_layer_model_proj.weight"].T / np.sqrt(E)).reshape(n, NL, P)
            tok = W["per_layer_token_embd.weight"][ids].reshape(n, NL, P)
            ple = (self.rmsnorm(proj, W["per_layer_proj_norm.weight"]) + tok * np.sqrt(P)) / np.sqrt(2)
        mask = np.triu(np.full((n, n), -np.inf), 1)
        window = mask + np.tril(np.full((n, n), -np.inf), -self.n_swa)
        gelu = lambda t: 0.5 * t * (1 + np.tanh(np.sqrt(2 / np.pi) * (t + 0.044715 * t ** 3)))  # noqa: E731
        cache = {}
        for il in range(NL):
            p, swa = f"blk.{il}.", self.swa[il]
            sfx = "_swa" if swa else ""
            hd, G = md[f"{a}.attention.key_length{sfx}"], int(kvh[il % kvh.size])
            rot = md.get(f"{a}.rope.dimension_count{sfx}", hd)
            base = md.get(f"{a}.rope.freq_base_swa", 10000.0) if swa else self.base
            factors = None if swa else W["rope_freqs.weight"]
            h = self.rmsnorm(x, W[p + "attn_norm.weight"])
            q = self.rmsnorm((h @ W[p + "attn_q.weight"].T).reshape(n, H, hd), W[p + "attn_q_norm.weight"])
            q = self.rope_neox(q, pos, rot, base, factors)
            src = il if il < start else start - (2 if swa else 1)
            if src == il:
                k = (h @ W[p + "attn_k.weight"].T).reshape(n, G, hd)
                v = (h @ W[p + "attn_v.weight"].T).reshape(n, G, hd) if p + "attn_v.weight" in W else k
                k = self.rope_neox(self.rmsnorm(k, W[p + "attn_k_norm.weight"]), pos, rot, base, factors)
                v = v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + self.eps)
                if kv_f16:
                    k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
                cache[il] = (k, v)
            k, v = cache[src]
            att = np.empty((n, H, hd))
            for hh in range(H):
                g = hh // (H // G)
                s = q[:, hh, :] @ k[:, g, :].T + (window if swa else mask)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                att[:, hh, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, g, :]
            o = att.reshape(n, H * hd) @ W[p + "attn_output.weight"].T
            x = x + self.rmsnorm(o, W[p + "post_attention_norm.weight"])
            f = self.rmsnorm(x, W[p + "ffn_norm.weight"])
            f = (gelu(f @ W[p + "ffn_gate.weight"].T) * (f @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
            if p + "ffn_gate_inp.weight" in W:
                f = self.rmsnorm(f, W[p + "post_ffw_norm_1.weight"]) + self.gemma4_experts(x, p, gelu)
            x = x + self.rmsnorm(f, W[p + "post_ffw_norm.weight"])
            if P:
                g = gelu(x @ W[p + "inp_gate.weight"].T) * ple[:, il]
                x = x + self.rmsnorm(g @ W[p + "proj.weight"].T, W[p + "post_norm.weight"])
            if p + "layer_output_scale.weight" in W:
                x = x * W[p + "layer_output_scale.weight"][0]
        self.last_hidden = self.rmsnorm(x, W["output_norm.weight"])
        lo = self.last_hidden @ W["output.weight"].T
        if self.final_softcap:
            lo = self.final_softcap * np.tanh(lo / self.final_softcap)
        return lo

    def gemma4_experts(self, x, p, gelu):
        """gemma4's experts of rows x: routed from rmsnorm(x) / sqrt(n_embd) * ffn_gate_inp.scale (softmax, the
        n_used largest, weights renormalised), each on rmsnorm(x) * pre_ffw_norm_2 and scaled by its
        ffn_down_exps.scale, their sum RMS-normed by post_ffw_norm_2."""
        W = self.w
        r = self.rmsnorm(x, 1.0) / np.sqrt(self.n_embd) * W[p + "ffn_gate_inp.scale"]
        logits = r @ W[p + "ffn_gate_inp.weight"].T
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        h = self.rmsnorm(x, W[p + "pre_ffw_norm_2.weight"])
        if p + "ffn_gate_up_exps.weight" in W:
            gu = W[p + "ffn_gate_up_exps.weight"]
            gate, up = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
        else:
            gate, up = W[p + "ffn_gate_exps.weight"], W[p + "ffn_up_exps.weight"]
        scale = W.get(p + "ffn_down_exps.scale", np.ones(len(gate)))
        out = np.zeros_like(x)
        for i in range(len(x)):
            sel = np.argsort(-probs[i], kind="stable")[:self.n_used]
            wts = probs[i, sel] / probs[i, sel].sum()
            for e, wt in zip(sel, wts):
                y = (gelu(gate[e] @ h[i]) * (up[e] @ h[i])) @ W[p + "ffn_down_exps.weight"][e].T
                out[i] += wt * scale[e] * y
        return self.rmsnorm(out, W[p + "post_ffw_norm_2.weight"])

    @staticmethod
    def rope_neox(x, pos, n_rot, base, factors=None):
        """NEOX RoPE of x (n, heads, head_dim) on its first n_rot dims, angles pos * base^(-2i/n_rot) / factors[i]."""
        half = n_rot // 2
        inv = base ** (-2.0 * np.arange(half) / n_rot)
        if factors is not None:
            inv = inv / factors[:half]
        th = pos[:, None] * inv[None, :]
        c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
        x = x.copy()
        a, b = x[..., :half].copy(), x[..., half:n_rot].copy()
        x[..., :half], x[..., half:n_rot] = a * c - b * s, a * s + b * c
        return x

    def shortconv(self, h, p):
        """lfm2's gated short convolution of rows h (n, n_embd) (llama.cpp's build_shortconv_block, ggml_ssm_conv):
        B | C | xx = h in_proj, bx = B * xx, y_t = sum_i conv[:, i] * bx_{t-L+1+i} (zeros before the first row),
        out = (C * y) out_proj."""
        W, E = self.w, self.n_embd
        bcx = h @ W[p + "shortconv.in_proj.weight"].T
        b, c, xx = bcx[:, :E], bcx[:, E:2 * E], bcx[:, 2 * E:]
        k = W[p + "shortconv.conv.weight"]                              # (n_embd, L)
        L = k.shape[1]
        bx = np.concatenate([np.zeros((L - 1, E)), b * xx])             # L - 1 zero rows: the initial state
        y = np.stack([sum(k[:, i] * bx[t + i] for i in range(L)) for t in range(len(h))])
        return (c * y) @ W[p + "shortconv.out_proj.weight"].T

    def deltanet(self, h, p):
        """qwen35's gated DeltaNet of rows h (n, n_embd) from a zero state (llama.cpp's build_layer_attn_linear,
        ggml_ssm_conv, ggml_gated_delta_net): qkv = silu(causal conv of h attn_qkv), q and k L2-normalised per head,
        per v head h (q/k head h mod group_count): S = S exp(g) + k ((v - S^T k) beta)^T, o = S^T q / sqrt(S),
        g = softplus(h alpha + dt) A, beta = sigmoid(h beta); out = (rmsnorm(o) * silu(z)) ssm_out."""
        W, n = self.w, len(h)
        L, S, HK, HV = (self.dn_dims[k] for k in ("conv_kernel", "state_size", "group_count", "time_step_rank"))
        qkv = h @ W[p + "attn_qkv.weight"].T
        z = (h @ W[p + "attn_gate.weight"].T).reshape(n, HV, S)
        beta = 1 / (1 + np.exp(-(h @ W[p + "ssm_beta.weight"].T)))
        g = np.log1p(np.exp(h @ W[p + "ssm_alpha.weight"].T + W[p + "ssm_dt.bias"])) * W[p + "ssm_a"]
        k = W[p + "ssm_conv1d.weight"]                                  # (conv_dim, L)
        xp = np.concatenate([np.zeros((L - 1, qkv.shape[1])), qkv])
        y = np.stack([sum(k[:, i] * xp[t + i] for i in range(L)) for t in range(n)])
        y = y / (1 + np.exp(-y))
        q, kk = y[:, :HK * S].reshape(n, HK, S), y[:, HK * S:2 * HK * S].reshape(n, HK, S)
        v = y[:, 2 * HK * S:].reshape(n, HV, S)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + self.eps)
        kk = kk / np.sqrt((kk * kk).sum(-1, keepdims=True) + self.eps)
        st, o = np.zeros((HV, S, S)), np.empty((n, HV, S))
        for t in range(n):
            for hh in range(HV):
                a, b = q[t, hh % HK], kk[t, hh % HK]
                st[hh] *= np.exp(g[t, hh])
                st[hh] += np.outer(b, (v[t, hh] - st[hh].T @ b) * beta[t, hh])
                o[t, hh] = st[hh].T @ a / np.sqrt(S)
        o = self.rmsnorm(o, W[p + "ssm_norm.weight"]) * (z / (1 + np.exp(-z)))
        return o.reshape(n, HV * S) @ W[p + "ssm_out.weight"].T

    def mamba2(self, h, p):
        """granitehybrid's Mamba-2 mixer of rows h (n, n_embd) (llama.cpp's build_mamba2_layer, ggml_ssm_conv and
        ggml_ssm_scan): z | xBC | dt = h in_proj; xBC = silu(causal conv + bias) = x | B | C; per head (group
        h // (H / G)): dt' = softplus(dt + dt_bias), s = s exp(dt' A) + dt' x B^T, y = s C + D x; y * silu(z),
        RMS-normed per group, out_proj."""
        W, n = self.w, len(h)
        dc, S, H, G = self.ssm_dims
        D = 2 * self.n_embd
        P, GS = D // H, G * S
        zxbcdt = h @ W[p + "ssm_in.weight"].T
        z, xbc, dt = zxbcdt[:, :D], zxbcdt[:, D:2 * D + 2 * GS], zxbcdt[:, 2 * D + 2 * GS:]
        k = W[p + "ssm_conv1d.weight"]                                  # (D + 2 G S, d_conv)
        pad = np.concatenate([np.zeros((dc - 1, xbc.shape[1])), xbc])
        xbc = np.stack([sum(k[:, i] * pad[t + i] for i in range(dc)) for t in range(n)])
        xbc = xbc + W.get(p + "ssm_conv1d.bias", 0)
        xbc = xbc / (1 + np.exp(-xbc))
        x, B, C = xbc[:, :D].reshape(n, H, P), xbc[:, D:D + GS].reshape(n, G, S), xbc[:, D + GS:].reshape(n, G, S)
        dt = dt + W[p + "ssm_dt.bias"]
        dt = np.where(dt > 20, dt, np.log1p(np.exp(np.minimum(dt, 20))))
        A, Dp = W[p + "ssm_a"].reshape(H), W[p + "ssm_d"].reshape(H)
        s, y = np.zeros((H, P, S)), np.empty((n, H, P))
        for t in range(n):
            for hh in range(H):
                g = hh // (H // G)
                s[hh] = s[hh] * np.exp(dt[t, hh] * A[hh]) + np.outer(x[t, hh] * dt[t, hh], B[t, g])
                y[t, hh] = s[hh] @ C[t, g] + Dp[hh] * x[t, hh]
        y = y.reshape(n, D) * (z / (1 + np.exp(-z)))
        y = (self.rmsnorm(y.reshape(n, G, D // G), W[p + "ssm_norm.weight"])).reshape(n, D)
        return y @ W[p + "ssm_out.weight"].T

    def attention(self, h, p, l, pos, n_ctx, mask, window, kv_f16):
        """Layer l's attention output (before the residual add) of normed rows h."""
        W, n, hd, H, KVH = self.w, len(h), self.head_dim, self.n_head, self.n_head_kv
        q = h @ W[p + "attn_q.weight"].T + W.get(p + "attn_q.bias", 0)
        gate = None
        if self.qwen35:                        # per head q then its gate (sigmoid-gated output)
            q4 = q.reshape(n, H, 2, hd)
            q, gate = q4[:, :, 0].reshape(n, H * hd), q4[:, :, 1].reshape(n, H * hd)
        k = h @ W[p + "attn_k.weight"].T + W.get(p + "attn_k.bias", 0)
        v = h @ W[p + "attn_v.weight"].T + W.get(p + "attn_v.bias", 0)
        q, k = q.reshape(n, H, hd), k.reshape(n, KVH, hd)
        if self.arch == "olmoe":               # RMS norm of the whole q and k vectors, before the heads
            q = self.rmsnorm(q.reshape(n, -1), W[p + "attn_q_norm.weight"]).reshape(n, H, hd)
            k = self.rmsnorm(k.reshape(n, -1), W[p + "attn_k_norm.weight"]).reshape(n, KVH, hd)
        elif p + "attn_q_norm.weight" in W:    # qwen3: per-head RMS norm before RoPE
            q = self.rmsnorm(q, W[p + "attn_q_norm.weight"])
            k = self.rmsnorm(k, W[p + "attn_k_norm.weight"])
        if self.rope_layer[l]:
            q, k = self.rope(q, pos, self.swa[l], n_ctx), self.rope(k, pos, self.swa[l], n_ctx)
        v = v.reshape(n, KVH, hd)
        if kv_f16:
            k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
        rep = H // KVH
        att = np.empty((n, H, hd))
        for hh in range(H):
            g = hh // rep
            s = q[:, hh, :] @ k[:, g, :].T * (self.attn_scale or 1 / np.sqrt(hd))
            if self.attn_softcap:
                s = self.attn_softcap * np.tanh(s / self.attn_softcap)
            s = s + (window if self.swa[l] else mask)
            sink = W.get(p + "attn_sinks.weight")   # gpt-oss: one more logit per head, with no value
            mx = s.max(axis=1, keepdims=True) if sink is None else np.maximum(s.max(axis=1, keepdims=True),
                                                                              sink[hh])
            s = np.exp(s - mx)
            s /= s.sum(axis=1, keepdims=True) + (0 if sink is None else np.exp(sink[hh] - mx))
            att[:, hh, :] = s @ v[:, g, :]
        att = att.reshape(n, H * hd)
        if gate is not None:
            att = att / (1 + np.exp(-gate))
        o = att @ W[p + "attn_output.weight"].T + W.get(p + "attn_output.bias", 0)
        if p + "post_attention_norm.weight" in W and not (self.oss or self.qwen35):
            o = self.rmsnorm(o, W[p + "post_attention_norm.weight"])
        return o


def make_reference(model_path, ref_path, out_path):
    """The oracle's logits at llama.cpp's reference positions (tests/data/smollm2-<variant>-oracle.json)."""
    import json
    o = Oracle(model_path)
    ref = json.load(open(ref_path))
    out = {"model_file": ref["model_file"], "engine": "tests/oracle.py (float64 numpy, weights dequantized by gguf-py)",
           "results": []}
    for r in ref["results"]:
        lo = o.forward(r["prompt_ids"] + r["greedy_ids"])
        pos = []
        for p in r["positions"]:
            row = lo[p["pos"]]
            top = np.argsort(-row)[:10]
            pos.append({"pos": p["pos"], "top_ids": [int(i) for i in top], "top_logits": [round(float(row[i]), 5) for i in top],
                        "ref_ids_logits": [round(float(row[i]), 5) for i in p["top_ids"]]})
        out["results"].append({"prompt": r["prompt"], "positions": pos})
    with open(out_path, "w") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    # python tests/oracle.py [q4_1|q8_0|q4_0]: the oracle at llama.cpp's reference positions of that variant
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    v = sys.argv[1] if len(sys.argv) > 1 else "q4_1"
    make_reference(os.path.expanduser(f"~/.cache/fastgguf/SmolLM2-135M-Instruct.{v.upper()}.gguf"),
                   os.path.join(here, "data", f"smollm2-{v}-logits.json"),
                   os.path.join(here, "data", f"smollm2-{v}-oracle.json"))
