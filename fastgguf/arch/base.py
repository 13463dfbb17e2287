"""Architecture descriptions: which hyperparameters and tensors a GGUF file of an architecture holds, turned into
what the forward pass (fastgguf._native.Weights) takes. One short subclass of Arch per architecture, registered
with @register; fastgguf.arch imports them all."""
import math
from dataclasses import dataclass, fields

import numpy as np

from fastgguf import kernels
from fastgguf.errors import GGUFError
from fastgguf.gguf.constants import GGMLType

MAX_DIM = 1 << 20  # the largest width (embedding, feed-forward, heads x head size) or layer count accepted
MAX_CONV = 1024    # the most taps of a short convolution (lfm2's shortconv.l_cache; its files have 3)

# {arch}.pooling_type values, as llama.cpp's enum llama_pooling_type (gguf-py's PoolingType): index -> name
POOLING_TYPES = ("none", "mean", "cls", "last", "rank")
# the optional classifier head of rank pooling (llama.cpp's LLM_TENSOR_CLS / LLM_TENSOR_CLS_OUT), any architecture
CLASSIFIER_TENSORS = ("cls.weight", "cls.bias", "cls.output.weight", "cls.output.bias")
# fg_hparams's codes of names (csrc/fg_forward.h FG_ACT_*, FG_GATING_*, in this order; tests/test_structure.py checks)
ACTIVATIONS = ("silu", "gelu_tanh", "swiglu_oai")
GATINGS = ("softmax", "sigmoid", "softmax_weight")
# Hparams fields without an fg_hparams field of their name: Python's alone, or folded into others by as_c()
NOT_IN_C = ("arch", "n_ctx_train", "pooling", "n_cls_out", "rank_softmax", "causal", "swa_layers", "n_ff_shexp",
            "nope_layers", "conv_layers", "dn_layers", "n_dense_lead", "ssm_layers", "ff_layers", "n_kv_from_start")


@dataclass(frozen=True)
class Hparams:
    arch: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_rot: int
    rope_neox: bool
    norm_eps: float
    rope_base: float
    rope_freq_scale: float
    attn_scale: float
    n_ctx_train: int
    # the gemma-family options; the defaults mean "off" (llama layout)
    embd_scale: float = 1.0          # embeddings multiplied by this (gemma: sqrt(n_embd))
    ffn_act: str = "silu"            # "silu" or "gelu_tanh": act(gate) * up
    attn_softcap: float = 0.0        # > 0: attention scores soft-capped, c * tanh(s / c) (gemma2)
    final_softcap: float = 0.0       # > 0: logits soft-capped likewise
    n_swa: int = 0                   # window of the sliding-window layers
    swa_layers: tuple = ()           # indices of the sliding-window layers
    rope_base_swa: float = 10000.0   # their RoPE base and linear scale
    rope_freq_scale_swa: float = 1.0
    nope_layers: tuple = ()          # indices of the layers whose q and k are not rotated (NoPE: smollm3)
    # RoPE scaling beyond linear (llama.cpp's rope_yarn; see Arch.rope_scaling): YaRN mixes interpolated and
    # extrapolated angles (ext_factor 1) over correction dims from n_ctx_orig and the betas; cos and sin are
    # multiplied by attn_factor (YaRN's and LongRoPE's magnitude correction)
    rope_ext_factor: float = 0.0
    rope_attn_factor: float = 1.0
    rope_n_ctx_orig: int = 0         # also: a sequence longer than this uses the LongRoPE long factors
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    # embeddings: {arch}.pooling_type (None: the key is absent, a chat model; the engine then mean-pools) and
    # {arch}.attention.causal (absent: True, as llama.cpp; the BERT family, fastgguf/arch/bert.py, says False: a
    # non-causal model attends over its whole input, takes each input whole in one call and cannot generate)
    pooling: str | None = None
    causal: bool = True
    n_cls_out: int = 1               # scores of rank pooling: len({arch}.classifier.output_labels), else 1
    rank_softmax: bool = False       # rank pooling ends with a softmax over the head's outputs (qwen3 rerankers)
    # granite: attention and FFN outputs scaled before the residual add, logits multiplied (1: none)
    residual_scale: float = 1.0
    logit_scale: float = 1.0
    # mixture of experts (0: a dense FFN; llama.cpp's build_moe_ffn, csrc/fg_forward.h fg_hparams says what runs)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0                # an expert's FFN width
    n_ff_shexp: int = 0              # the shared expert's width (0: none)
    moe_gating: str = "softmax"      # or "sigmoid": expert probabilities from the router logits; or
                                     # "softmax_weight": the logits choose, the weights are the chosen ones' softmax
    moe_act: str = ""                # the experts' gated activation: "" as ffn_act, or "swiglu_oai" (gpt-oss)
    moe_norm_w: bool = False         # the chosen experts' weights divided by their sum
    n_dense_lead: int = 0            # the first layers have a dense FFN (n_ff wide) instead (lfm2moe; no shared
                                     # expert then: n_ff is the C's one dense width)
    moe_w_scale: float = 1.0         # and multiplied by this
    qk_norm_full: bool = False       # q_norm/k_norm over the whole q and k vectors, not per head (olmoe)
    # gated short-convolution layers instead of attention (lfm2): their indices, and the taps of their conv (their
    # state: the last n_conv - 1 inputs); n_head_kv is then the attention layers' count
    conv_layers: tuple = ()
    n_conv: int = 0
    # qwen35: gated attention (the q projection's gate rows: attention output times sigmoid(gate)) and gated
    # DeltaNet layers instead of attention (their indices; conv taps, head size S, q/k heads, v heads)
    attn_gate: bool = False
    dn_layers: tuple = ()
    dn_conv: int = 0
    dn_state: int = 0
    dn_k_heads: int = 0
    dn_v_heads: int = 0
    dn_kv_grouped: bool = False    # v head h takes q/k head h // (v heads / q/k heads) (qwen3next), else h % q/k heads
    # Mamba-2 layers instead of attention (granitehybrid; csrc/fg_forward.h fg_layer ssm): their indices, conv taps,
    # inner width, state size, heads (ssm.time_step_rank) and groups; their state: the conv's last d_conv - 1
    # inputs and the (heads, d_inner / heads, d_state) scan state of the newest position
    ssm_layers: tuple = ()
    ssm_d_conv: int = 0
    ssm_d_inner: int = 0
    ssm_d_state: int = 0
    ssm_n_head: int = 0
    ssm_n_group: int = 0
    # gemma4: the sliding-window layers' own head size, KV heads and rotated dims (0: as the others'), their RoPE
    # without rope_freqs (swa_no_freqs), V RMS-normed per head before caching (v_norm), per-layer inputs of
    # n_embd_per_layer values per layer (0: none), per-layer FFN widths (ff_layers: () all n_ff), and layers from
    # n_kv_from_start on (0: none) attending over an earlier layer's K/V (kv_source)
    head_dim_swa: int = 0
    n_head_kv_swa: int = 0
    n_rot_swa: int = 0
    swa_no_freqs: bool = False
    v_norm: bool = False
    n_embd_per_layer: int = 0
    ff_layers: tuple = ()
    n_kv_from_start: int = 0
    moe_dense: bool = False          # gemma4: the experts beside a dense FFN of n_ff (no shared expert)

    def kv_source(self, i):
        """The layer whose K/V layer i attends over: i itself, or for a layer from n_kv_from_start on the last
        layer before n_kv_from_start of its kind (as llama.cpp's gemma3n/gemma4 reuse: n_kv_from_start - 2 for a
        sliding-window layer, n_kv_from_start - 1 for a full one)."""
        if not self.n_kv_from_start or i < self.n_kv_from_start:
            return i
        return self.n_kv_from_start - (2 if i in self.swa_layers else 1)

    def layer_dims(self, i):
        """Layer i's (head size, KV heads, rotated dims)."""
        if i in self.swa_layers:
            return (self.head_dim_swa or self.head_dim, self.n_head_kv_swa or self.n_head_kv,
                    self.n_rot_swa or self.n_rot)
        return self.head_dim, self.n_head_kv, self.n_rot

    def check_layers(self):
        """Per-layer dims, FFN widths and K/V reuse (check())."""
        for i in range(self.n_layer):
            hd, g, rot = self.layer_dims(i)
            if self.n_head % g or rot % 2 or rot > hd:
                raise ValueError(f"layer {i}: {g} KV heads must divide {self.n_head} heads, rope dims {rot} even "
                                 f"and <= head size {hd}")
            j = self.kv_source(i)
            if j != i and not (0 <= j < self.n_kv_from_start and (j in self.swa_layers) == (i in self.swa_layers)):
                raise ValueError(f"layer {i} reuses layer {j}'s K/V, which is not an earlier layer of its kind")
        if self.ff_layers and (len(self.ff_layers) != self.n_layer or min(self.ff_layers) < 1):
            raise ValueError(f"per-layer FFN widths {self.ff_layers}: need {self.n_layer} widths >= 1")
        if not 0 <= self.n_kv_from_start <= self.n_layer:
            raise ValueError(f"first K/V-sharing layer {self.n_kv_from_start} out of range [0, {self.n_layer}]")

    def check(self):
        """Raise ValueError on values the forward pass cannot run. A file's values are refused before, by Arch's
        reads (GGUFError); this guards whatever reaches fastgguf._native.Weights (as_c() runs it)."""
        if self.n_head % self.n_head_kv != 0:
            raise ValueError(f"head_count {self.n_head} is not a multiple of head_count_kv {self.n_head_kv}")
        if self.n_rot % 2 != 0 or self.n_rot > self.head_dim:
            raise ValueError(f"rope dimension {self.n_rot} must be even and <= head dim {self.head_dim}")
        if self.rope_ext_factor != 0 and (self.rope_n_ctx_orig < 1 or self.rope_beta_fast <= 0
                                          or self.rope_beta_slow <= 0):
            raise ValueError(f"YaRN needs an original context >= 1 and betas > 0, got {self.rope_n_ctx_orig}, "
                             f"{self.rope_beta_fast}, {self.rope_beta_slow}")
        if self.ffn_act not in ("silu", "gelu_tanh"):
            raise ValueError(f"unknown feed-forward activation {self.ffn_act!r}")
        swa_layers, conv_layers = tuple(self.swa_layers), tuple(self.conv_layers)
        for kind, layers in (("sliding-window", swa_layers), ("NoPE", tuple(self.nope_layers)),
                             ("short-convolution", conv_layers)):
            if any(i < 0 or i >= self.n_layer for i in layers):
                raise ValueError(f"{kind} layers {layers} out of range [0, {self.n_layer})")
        if conv_layers and not (2 <= self.n_conv <= MAX_CONV):
            raise ValueError(f"short-convolution taps {self.n_conv} out of range [2, {MAX_CONV}]")
        if conv_layers and (set(conv_layers) & set(swa_layers) or not self.causal):
            raise ValueError("short-convolution layers must be causal and not sliding-window layers")
        dn_layers = tuple(self.dn_layers)
        if any(i < 0 or i >= self.n_layer for i in dn_layers) or set(dn_layers) & (set(conv_layers) | set(swa_layers)):
            raise ValueError(f"DeltaNet layers {dn_layers} out of range or also another kind")
        if dn_layers and not (2 <= self.dn_conv <= MAX_CONV and self.dn_state >= 1 and self.dn_k_heads >= 1
                              and self.dn_v_heads % self.dn_k_heads == 0 and self.causal):
            raise ValueError(f"DeltaNet: conv taps {self.dn_conv} (2..{MAX_CONV}), head size {self.dn_state}, "
                             f"v heads {self.dn_v_heads} a multiple of k heads {self.dn_k_heads}, causal")
        self.check_ssm(swa_layers, conv_layers)
        self.check_layers()
        if swa_layers and self.n_swa < 1:
            raise ValueError(f"sliding window {self.n_swa} must be >= 1")
        if not self.causal and swa_layers:
            raise ValueError("a non-causal model with sliding-window layers is not supported")
        if self.n_expert > 0 and not (1 <= self.n_expert_used <= self.n_expert and self.n_ff_exp >= 1):
            raise ValueError(f"experts: need 1 <= n_expert_used {self.n_expert_used} <= n_expert {self.n_expert} "
                             f"and n_ff_exp {self.n_ff_exp} >= 1")
        if self.moe_gating not in GATINGS:
            raise ValueError(f"unknown expert gating {self.moe_gating!r}")
        if self.moe_act not in ("", "swiglu_oai"):
            raise ValueError(f"unknown expert activation {self.moe_act!r}")
        if not 0 <= self.n_dense_lead <= self.n_layer or (self.n_dense_lead and self.n_ff_shexp):
            raise ValueError(f"leading dense layers {self.n_dense_lead}: must be in [0, {self.n_layer}], and "
                             f"without a shared expert")

    def check_ssm(self, swa_layers, conv_layers):
        """The Mamba-2 layers' numbers (check())."""
        ssm = tuple(self.ssm_layers)
        if not ssm:
            return
        others = set(swa_layers) | set(conv_layers) | set(self.dn_layers)
        if any(i < 0 or i >= self.n_layer for i in ssm) or set(ssm) & others:
            raise ValueError(f"Mamba-2 layers {ssm} out of range [0, {self.n_layer}) or also another kind")
        d, h, g = self.ssm_d_inner, self.ssm_n_head, self.ssm_n_group
        if not (2 <= self.ssm_d_conv <= MAX_CONV and min(d, h, g, self.ssm_d_state) >= 1 and d % h == 0
                and h % g == 0 and self.causal):
            raise ValueError(f"Mamba-2: need causal, 2 <= d_conv {self.ssm_d_conv} <= {MAX_CONV}, d_state "
                             f"{self.ssm_d_state} >= 1, heads {h} dividing d_inner {d}, groups {g} dividing heads")

    def recurrent(self):
        """Whether some layers keep the state of the newest position only (DeltaNet, Mamba-2): no rewind mid-cache
        (Runner.can_rewind), and speculative drafts restore a snapshot (Runner.snapshot) instead."""
        return bool(self.dn_layers or self.ssm_layers)

    def moe_layer(self, i):
        """Whether layer i is a mixture-of-experts one: with experts, all but the n_dense_lead first."""
        return self.n_expert > 0 and i >= self.n_dense_lead

    def as_c(self):
        """fg_hparams (csrc/fg_forward.h) as {field: value}, after check(): each field is the Hparams field of its
        name (a bool is 0/1 there), but those coded or derived below. fastgguf._native.Weights assigns it to the struct
        whole (Cython refuses a missing field); tests/test_structure.py checks its keys are fg_hparams's fields."""
        self.check()
        c = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in NOT_IN_C}
        moe = self.n_expert > 0
        c.update(
            # with experts the dense FFN is the shared expert, or the leading dense layers' (never both: check())
            n_ff=self.n_ff_shexp if moe and not (self.n_dense_lead or self.moe_dense)
            else max(self.ff_layers or (self.n_ff,)),
            ffn_act=ACTIVATIONS.index(self.ffn_act),
            n_swa=self.n_swa if self.swa_layers else 0,
            n_conv=self.n_conv if self.conv_layers else 0,
            dn_conv=self.dn_conv if self.dn_layers else 0,
            **{k: getattr(self, k) if self.ssm_layers else 0
               for k in ("ssm_d_conv", "ssm_d_inner", "ssm_d_state", "ssm_n_head", "ssm_n_group")},
            non_causal=0 if self.causal else 1,
            n_expert_used=self.n_expert_used if moe else 0,
            n_ff_exp=self.n_ff_exp if moe else 0,
            moe_gating=GATINGS.index(self.moe_gating),
            moe_act=ACTIVATIONS.index(self.moe_act or self.ffn_act))
        return c


class Arch:
    """The llama layout; subclasses change class attributes (and override a method where a model really differs).

    layer_tensors: role -> name inside blk.N (required); optional_layer_tensors: the same, may be absent."""
    name = None
    rope_neox = False
    rank_softmax = False  # llama.cpp's build_pooling: LLM_ARCH_QWEN3 rerankers softmax their (yes, no) logits
    layer_tensors = {
        "attn_norm": "attn_norm.weight",
        "wq": "attn_q.weight",
        "wk": "attn_k.weight",
        "wv": "attn_v.weight",
        "wo": "attn_output.weight",
        "ffn_norm": "ffn_norm.weight",
        "w_gate": "ffn_gate.weight",
        "w_up": "ffn_up.weight",
        "w_down": "ffn_down.weight",
    }
    optional_layer_tensors = {
        "bq": "attn_q.bias",
        "bk": "attn_k.bias",
        "bv": "attn_v.bias",
    }
    vectors = ("attn_norm", "ffn_norm", "bq", "bk", "bv", "q_norm", "k_norm", "output_norm", "rope_freqs",
               "rope_freqs_long", "attn_post_norm", "ffn_post_norm", "gate_inp_shexp")
    # mixture of experts (a layer with {arch}.expert_count > 0): the router and the 3-D expert stacks replace the
    # dense FFN; a shared expert (ffn_*_shexp) fills the dense FFN's roles. As llama.cpp's per-arch build_moe_ffn
    # call: moe_norm_w is fixed per architecture ({arch}.expert_weights_norm is not read there for these), and
    # expert_weights_scale is not read (no scaling).
    expert_tensors = {"gate_inp": "ffn_gate_inp.weight", "gate_exps": "ffn_gate_exps.weight",
                      "up_exps": "ffn_up_exps.weight", "down_exps": "ffn_down_exps.weight"}
    shexp_tensors = {"w_gate": "ffn_gate_shexp.weight", "w_up": "ffn_up_shexp.weight",
                     "w_down": "ffn_down_shexp.weight"}
    moe_norm_w = True
    moe_ff_key = False     # True: expert_feed_forward_length (default n_ff / n_expert_used) sets the experts' width;
                           # False: they are feed_forward_length wide (llama.cpp reads no other key for them)
    shexp_gate = False     # the shared expert's output scaled by sigmoid(ffn_gate_inp_shexp . x) (qwen2moe)
    # model-level tensors besides token_embd: role -> (name, required); encoders change these
    model_tensors = {"output_norm": ("output_norm.weight", True)}
    has_output = True   # False: no lm_head at all, not even tied (encoders)
    ff_default = KeyError   # feed_forward_length when absent (KeyError: required)

    def __init__(self, f):
        self.f = f
        self.md = f.metadata

    # ---- hyperparameters: each read checks its type and range, so a hostile file is a GGUFError naming the key ----
    def key(self, name, default=KeyError):
        k = f"{self.name}.{name}"
        if k in self.md:
            return self.md[k]
        if default is KeyError:
            raise GGUFError(f"{self.f.path}: missing metadata key {k!r}")
        return default

    def int_key(self, name, default=KeyError, lo=1, hi=MAX_DIM):
        """An integer hyperparameter in [lo, hi]; per-layer arrays are accepted when all their values are equal."""
        v = self.key(name, default)
        k = f"{self.name}.{name}"
        if isinstance(v, np.ndarray):   # per-layer values (some models): supported only when all equal
            if v.dtype.kind not in "iu":
                raise GGUFError(f"{k} must be an integer (or an array of integers), got an array of {v.dtype}")
            if v.size == 0 or not np.all(v == v.flat[0]):
                raise GGUFError(f"{k}: per-layer values are not supported")
            v = v.flat[0]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise GGUFError(f"{k} must be an integer, got {type(v).__name__} {v!r:.40}")
        v = int(v)
        if not lo <= v <= hi:
            raise GGUFError(f"{k} = {v} is out of range [{lo}, {hi}]")
        return v

    def float_key(self, name, default=KeyError, lo=0.0, lo_open=True):
        """A finite real hyperparameter > lo (>= lo with lo_open=False)."""
        v = self.key(name, default)
        k = f"{self.name}.{name}"
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise GGUFError(f"{k} must be a number, got {type(v).__name__} {v!r:.40}")
        v = float(v)
        if not math.isfinite(v) or v < lo or (lo_open and v == lo):
            raise GGUFError(f"{k} = {v} must be finite and {'>' if lo_open else '>='} {lo}")
        return v

    def str_key(self, name, default=KeyError):
        v = self.key(name, default)
        if not isinstance(v, str):
            raise GGUFError(f"{self.name}.{name} must be a string, got {type(v).__name__}")
        return v

    def bool_key(self, name, default=KeyError):
        v = self.key(name, default)
        if not isinstance(v, (bool, np.bool_)):
            raise GGUFError(f"{self.name}.{name} must be a bool, got {type(v).__name__} {v!r:.40}")
        return bool(v)

    def pooling(self):
        """{arch}.pooling_type as a name (POOLING_TYPES), None when the file does not say (llama.cpp's
        UNSPECIFIED: a chat model)."""
        k = f"{self.name}.pooling_type"
        if k not in self.md:
            return None
        v = self.md[k]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not 0 <= v < len(POOLING_TYPES):
            raise GGUFError(f"{k} = {v!r:.40} is not a pooling type (0..{len(POOLING_TYPES) - 1}: "
                            f"{', '.join(POOLING_TYPES)})")
        return POOLING_TYPES[int(v)]

    def n_cls_out(self):
        """How many scores rank pooling gives: one per {arch}.classifier.output_labels entry, else 1 (llama.cpp
        reads that many floats of the head's output as the result)."""
        k = f"{self.name}.classifier.output_labels"
        if k not in self.md:
            return 1
        if not isinstance(self.md[k], (list, np.ndarray)):
            raise GGUFError(f"{k} must be an array of labels")
        n = self.md.array_len(k)
        if not 1 <= n <= MAX_DIM:
            raise GGUFError(f"{k} has {n} labels; expected 1..{MAX_DIM}")
        return n

    ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # llama.cpp's LLAMA_ROPE_SCALING_TYPES

    def rope_scaling_type(self):
        """rope.scaling.type; absent means linear (as llama.cpp: then only a factor, if any, scales)."""
        scaling = self.str_key("rope.scaling.type", "linear")
        if scaling not in self.ROPE_SCALING_TYPES:
            hint = (" (llama.cpp has no such type either: Llama 3.x files carry the llama3 factors as "
                    "rope_freqs.weight, which works)" if scaling == "llama3" else "")
            raise GGUFError(f"{self.name}.rope.scaling.type {scaling!r} is not supported (supported: "
                            f"{', '.join(self.ROPE_SCALING_TYPES)}){hint}")
        return scaling

    def rope_scaling(self, n_ctx_train):
        """The Hparams fields of RoPE scaling, as llama.cpp derives them (llama-model.cpp load_hparams and
        llama_context's constructor), in float32 as there:
          freq_scale = 1 / rope.scaling.factor (or the legacy rope.scale_linear; absent or 0: 1; type none: 1)
          YaRN: ext_factor 1; n_ctx_orig = rope.scaling.original_context_length (default context_length);
                attn_factor = mscale(factor) / (1 + 0.1 ln factor), mscale(s) = 1 + 0.1 ln s for s > 1 else 1
                (the rope op multiplies by 1 + 0.1 ln factor again); beta_fast 32, beta_slow 1.
          every type: attn_factor *= rope.scaling.attn_factor (default 1; phi3 LongRoPE files carry it).
        llama.cpp reads rope.scaling.yarn_* (log multiplier, betas, ext/attn factor) only for other
        architectures (deepseek2, grok, mistral3), so they are ignored here as there."""
        scaling = self.rope_scaling_type()
        factor = 0.0
        for name in ("rope.scaling.factor", "rope.scale_linear"):
            if f"{self.name}.{name}" in self.md:
                factor = self.float_key(name, lo_open=False)
                break
        f32 = np.float32
        freq_scale = f32(1.0) if factor == 0.0 or scaling == "none" else f32(1.0) / f32(factor)
        n_ctx_orig = self.int_key("rope.scaling.original_context_length", n_ctx_train, lo=0,
                                  hi=(1 << 31) - 1) or n_ctx_train  # a C int in fg_hparams
        attn_factor, ext_factor = f32(1.0), 0.0
        if scaling == "yarn":
            ext_factor = 1.0
            if n_ctx_orig < 1:
                raise GGUFError(f"{self.name}: YaRN rope scaling needs rope.scaling.original_context_length or "
                                f"context_length")
            fac = f32(1.0) / freq_scale
            mscale = f32(1.0) if fac <= 1 else f32(0.1) * np.log(fac) + f32(1.0)
            attn_factor = mscale * (f32(1.0) / (f32(1.0) + f32(0.1) * np.log(fac)))
        attn_factor *= f32(self.float_key("rope.scaling.attn_factor", 1.0))
        return {"rope_freq_scale": float(freq_scale), "rope_ext_factor": ext_factor,
                "rope_attn_factor": float(attn_factor), "rope_n_ctx_orig": n_ctx_orig}

    def longrope_factors(self):
        """Whether rope_factors_long/short.weight may appear (LongRoPE; llama.cpp: phi3 always, llama with
        rope.scaling.type longrope)."""
        return False

    swa_pattern = 0        # default pattern of sliding-window layers (swa_layers)

    def swa_layers(self, n_layer):
        """Indices of the sliding-window layers, as llama.cpp's set_swa_pattern: il % pattern < pattern - 1
        (attention.sliding_window_pattern, default swa_pattern; 0: all), unless the file lists them (booleans)."""
        k = f"{self.name}.attention.sliding_window_pattern"
        v = self.md.get(k, self.swa_pattern)
        if isinstance(v, np.ndarray):
            if v.size != n_layer or v.dtype.kind not in "biu":
                raise GGUFError(f"{k}: expected {n_layer} booleans, got an array of {v.size} {v.dtype}")
            return tuple(i for i in range(n_layer) if v[i])
        p = self.int_key("attention.sliding_window_pattern", self.swa_pattern, lo=0, hi=1 << 20)
        return tuple(i for i in range(n_layer) if p == 0 or i % p < p - 1)

    def ff_length(self):
        """The FFN width (feed_forward_length; a per-layer array only when all its values are equal)."""
        return self.int_key("feed_forward_length", self.ff_default)

    def kv_heads(self, n_head):
        """The KV head count of the attention layers (attention.head_count_kv, default n_head; a per-layer array
        only when all its values are equal)."""
        return self.int_key("attention.head_count_kv", n_head)

    def hparams(self):
        """The Hparams of the file; subclasses extend base_hparams() (dataclasses.replace)."""
        return self.base_hparams()

    def experts(self, n_ff):
        """The Hparams fields of a mixture of experts ({} without {arch}.expert_count, or with 0)."""
        n_expert = self.int_key("expert_count", 0, lo=0, hi=4096)
        if n_expert == 0:
            return {}
        used = self.int_key("expert_used_count", lo=1, hi=n_expert)
        n_ff_exp = self.int_key("expert_feed_forward_length", max(n_ff // used, 1)) if self.moe_ff_key else n_ff
        return {"n_expert": n_expert, "n_expert_used": used, "n_ff_exp": n_ff_exp,
                "n_ff_shexp": self.int_key("expert_shared_feed_forward_length", 0, lo=0),
                "moe_norm_w": self.moe_norm_w}

    def base_hparams(self):
        n_embd = self.int_key("embedding_length")
        n_head = self.int_key("attention.head_count")
        n_head_kv = self.kv_heads(n_head)
        if n_embd % n_head and f"{self.name}.attention.key_length" not in self.md:
            raise GGUFError(f"{self.name}.embedding_length {n_embd} is not a multiple of "
                            f"{self.name}.attention.head_count {n_head} (and no attention.key_length)")
        head_dim = self.int_key("attention.key_length", n_embd // n_head)
        if self.int_key("attention.value_length", head_dim) != head_dim:
            raise GGUFError("attention.value_length != attention.key_length is not supported")
        if n_head % n_head_kv:
            raise GGUFError(f"{self.name}.attention.head_count {n_head} is not a multiple of "
                            f"{self.name}.attention.head_count_kv {n_head_kv}")
        if n_head * head_dim > MAX_DIM:
            raise GGUFError(f"{self.name}: head_count * key_length = {n_head * head_dim} is too large")
        n_rot = self.int_key("rope.dimension_count", head_dim, lo=0, hi=head_dim)
        if n_rot % 2:
            raise GGUFError(f"{self.name}.rope.dimension_count = {n_rot} must be even")
        if "token_embd.weight" not in self.f.tensors:
            raise GGUFError(f"{self.f.path}: missing tensor 'token_embd.weight' for architecture {self.name!r}")
        emb = self.f.tensors["token_embd.weight"]
        if len(emb.shape) != 2 or emb.shape[0] < 1:
            raise GGUFError(f"tensor 'token_embd.weight' must have shape (n_vocab >= 1, {n_embd}), got {emb.shape}")
        n_vocab = int(emb.shape[0])
        if "tokenizer.ggml.tokens" in self.md:
            n_tok = self.md.array_len("tokenizer.ggml.tokens")
            if n_tok > n_vocab:
                raise GGUFError(f"tokenizer.ggml.tokens has {n_tok} tokens but token_embd.weight only {n_vocab} "
                                f"rows")
        n_ctx_train = self.int_key("context_length", 0, lo=0, hi=(1 << 31) - 1)
        n_ff = self.ff_length()
        return Hparams(
            arch=self.name,
            n_embd=n_embd,
            n_layer=self.int_key("block_count"),
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_dim=head_dim,
            n_ff=n_ff,
            **self.experts(n_ff),
            n_vocab=n_vocab,
            n_rot=n_rot,
            rope_neox=self.rope_neox,
            norm_eps=self.float_key("attention.layer_norm_rms_epsilon", 1e-5),
            rope_base=self.float_key("rope.freq_base", 10000.0),
            attn_scale=1.0 / math.sqrt(head_dim),
            n_ctx_train=n_ctx_train,
            **self.rope_scaling(n_ctx_train),
            pooling=self.pooling(),
            causal=self.bool_key("attention.causal", True),
            n_cls_out=self.n_cls_out(),
            rank_softmax=self.rank_softmax,
        )

    # ---- tensors ----
    def split_layer(self, d, hp, i):
        """A hook for fused tensors (phi3): turn layer i's roles into the forward pass's (wq, wk, wv, w_gate,
        w_up ...). Default: as they are."""
        return d

    def split_qkv(self, d, hp, i):
        """Layer i's fused q|k|v matrix (role "wqkv", attn_qkv.weight: phi3, nomic-bert), if any, into row views
        wq, wk, wv."""
        qd, kv = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
        if "wqkv" in d:
            spec, name = d.pop("wqkv"), f"blk.{i}.attn_qkv.weight"
            if spec[2] != qd + 2 * kv:
                raise GGUFError(f"{name}: expected {qd + 2 * kv} rows (q, k, v), got {spec[2]}")
            d["wq"] = self.row_slice(spec, 0, qd, name)
            d["wk"] = self.row_slice(spec, qd, qd + kv, name)
            d["wv"] = self.row_slice(spec, qd + kv, qd + 2 * kv, name)

    @staticmethod
    def row_slice(spec, r0, r1, name):
        """Rows [r0, r1) of a matrix spec (array, type, rows, cols): a view (each row is whole blocks)."""
        arr, t, rows, cols = spec
        if r1 > rows:
            raise GGUFError(f"tensor {name!r} has {rows} rows, expected at least {r1}")
        return (arr[r0:r1], t, r1 - r0, cols)

    def matrix(self, name):
        ti = self.f.tensors[name]
        if ti.type not in kernels.WEIGHT_TYPES:  # the C type table is the one owner of this fact
            raise GGUFError(f"tensor {name!r} has type {ti.type.name}, which fastgguf cannot run yet "
                            f"(supported: {', '.join(GGMLType(t).name for t in kernels.WEIGHT_TYPES)})")
        if len(ti.shape) != 2:
            raise GGUFError(f"tensor {name!r}: expected 2 dimensions, got shape {ti.shape}")
        return (self.f.tensor(name), int(ti.type), int(ti.shape[0]), int(ti.shape[1]))

    def matrix3(self, name, shape):
        """A 3-D stack of matrices (experts), numpy shape `shape` = (n, rows, cols): (array, type, n, rows, cols)."""
        ti = self.f.tensors[name]
        if ti.type not in kernels.WEIGHT_TYPES:
            raise GGUFError(f"tensor {name!r} has type {ti.type.name}, which fastgguf cannot run yet")
        if tuple(int(d) for d in ti.shape) != tuple(shape):
            raise GGUFError(f"tensor {name!r} has shape {tuple(ti.shape)}, expected {tuple(shape)}")
        return (self.f.tensor(name), int(ti.type)) + tuple(shape)

    def vector(self, name):
        ti = self.f.tensors[name]
        a = self.f.tensor(name)
        if ti.type == GGMLType.F32:
            return a
        if ti.type == GGMLType.F16:
            return a.astype(np.float32)
        if ti.type == GGMLType.BF16:
            return (a.astype(np.uint32) << 16).view(np.float32)
        raise GGUFError(f"tensor {name!r} has type {ti.type.name}; norm weights and biases must be F32/F16/BF16")

    def get(self, role, name):
        if role == "classifier":
            return self.dense(name)
        return self.vector(name) if role in self.vectors else self.matrix(name)

    def tensors(self, hp):
        """The weights for fastgguf._native.Weights; every tensor of the file must be used (else: an error)."""
        names = self.f.tensors
        used = set()

        def take(role, name, required=True):
            if name not in names:
                if required:
                    raise GGUFError(f"{self.f.path}: missing tensor {name!r} for architecture {self.name!r}")
                return None
            used.add(name)
            return self.get(role, name)

        out = {"tok_embd": take("tok_embd", "token_embd.weight")}
        for role, (n, required) in self.model_tensors.items():
            out[role] = take(role, n, required)
        out["rope_freqs"] = take("rope_freqs", "rope_freqs.weight", required=False)
        if self.longrope_factors():   # LongRoPE: the short factors take rope_freqs' place, the long ones their own
            short = take("rope_freqs", "rope_factors_short.weight", required=False)
            long = take("rope_freqs_long", "rope_factors_long.weight", required=False)
            if (short is None) != (long is None) or (long is not None and out["rope_freqs"] is not None):
                raise GGUFError(f"{self.f.path}: rope_factors_long.weight and rope_factors_short.weight come "
                                f"together, and without rope_freqs.weight")
            if long is not None:
                out["rope_freqs"], out["rope_freqs_long"] = short, long
        out["output"] = take("output", "output.weight", required=False) if self.has_output else None
        if out["output"] is None and self.has_output:   # tied embeddings
            out["output"] = out["tok_embd"]
        layers = []
        E, NE, FE = hp.n_embd, hp.n_expert, hp.n_ff_exp
        exp_shapes = {"gate_exps": (NE, FE, E), "up_exps": (NE, FE, E), "down_exps": (NE, E, FE)}
        for i in range(hp.n_layer):
            d = {role: take(role, f"blk.{i}.{n}") for role, n in self.layer_roles(hp, i).items()}
            if hp.moe_layer(i):
                d.update(self.expert_layer(hp, i, take, exp_shapes, used))
            for role, n in self.optional_layer_tensors.items():
                d[role] = take(role, f"blk.{i}.{n}", required=False)
            d = self.split_layer(d, hp, i)
            if d.get("wk") is not None and (d.get("q_norm") is None) != (d.get("k_norm") is None):
                have, miss = ("attn_q_norm", "attn_k_norm") if d.get("k_norm") is None else ("attn_k_norm",
                                                                                             "attn_q_norm")
                raise GGUFError(f"blk.{i}: {have}.weight without {miss}.weight (both or neither)")
            layers.append(d)
        out["layers"] = layers
        out["classifier"] = self.classifier(hp, take)
        unused = [n for n in names if n not in used and not self.skipped_tensor(n, hp)]
        if unused:
            more = f" (and {len(unused) - 5} more)" if len(unused) > 5 else ""
            raise GGUFError(f"architecture {self.name!r}: tensors fastgguf does not know how to use: "
                            f"{', '.join(unused[:5])}{more}")
        return out

    def skipped_tensor(self, name, hp):
        """Whether tensor `name` is one this architecture knowingly does not run (e.g. qwen35's MTP blocks): not
        an unused-tensor error. Default: none."""
        return False

    def layer_roles(self, hp, i):
        """Layer i's required tensors, role -> name inside blk.i: layer_tensors (in an expert layer, less the shared
        expert's, which expert_layer takes when the file has one)."""
        if hp.moe_layer(i):
            return {r: n for r, n in self.layer_tensors.items() if r not in self.shexp_tensors}
        return self.layer_tensors

    def expert_layer(self, hp, i, take, exp_shapes, used):
        """Layer i's router, expert stacks and optional shared expert (with its gate when shexp_gate)."""
        d = {}
        for role, n in self.expert_tensors.items():
            name = f"blk.{i}.{n}"
            if role in exp_shapes:
                if name not in self.f.tensors:
                    raise GGUFError(f"{self.f.path}: missing tensor {name!r} for architecture {self.name!r}")
                used.add(name)
                d[role] = self.matrix3(name, exp_shapes[role])
            else:
                d[role] = take(role, name)
        if hp.n_ff_shexp:
            for role, n in self.shexp_tensors.items():
                d[role] = take(role, f"blk.{i}.{n}")
            if self.shexp_gate:
                d["gate_inp_shexp"] = take("gate_inp_shexp", f"blk.{i}.ffn_gate_inp_shexp.weight")
        return d

    def dense(self, name):
        """A weight matrix or vector dequantized to float32 (the classifier head: run in numpy, a few rows)."""
        ti = self.f.tensors[name]
        if len(ti.shape) == 1:
            return np.ascontiguousarray(self.vector(name), dtype=np.float32)
        arr, t, rows, cols = self.matrix(name)
        return kernels.dequantize(arr, GGMLType(t), cols).reshape(rows, cols)   # F32 and F16 too (exact)

    def classifier(self, hp, take):
        """The optional classifier head of rank pooling, float32 arrays keyed by tensor name
        (CLASSIFIER_TENSORS), or None without one. As llama.cpp's build_pooling: pooled -> cls.weight (+ cls.bias)
        -> tanh -> cls.output.weight (+ cls.output.bias); each part optional (Qwen3 rerankers have only
        cls.output.weight, jina-reranker-v1 only cls.*). Rank pooling without any head is accepted as llama.cpp
        does: the score is then the pooled vector's first value (fastgguf.engine.pooling)."""
        head = {}
        for name in CLASSIFIER_TENSORS:
            t = take("classifier", name, required=False)
            if t is not None:
                head[name] = t
        if not head:
            return None
        n_in = hp.n_embd
        for w, b in (("cls.weight", "cls.bias"), ("cls.output.weight", "cls.output.bias")):
            if w not in head:
                if b in head:
                    raise GGUFError(f"{self.f.path}: {b} without {w}")
                continue
            if head[w].ndim != 2 or head[w].shape[1] != n_in:
                raise GGUFError(f"tensor {w!r} has shape {head[w].shape}; expected (n_out, {n_in})")
            if b in head and head[b].shape != (head[w].shape[0],):
                raise GGUFError(f"tensor {b!r} has shape {head[b].shape}; expected ({head[w].shape[0]},)")
            n_in = head[w].shape[0]
        if n_in < hp.n_cls_out:
            raise GGUFError(f"{self.f.path}: the classifier head gives {n_in} outputs, fewer than its "
                            f"{hp.n_cls_out} {self.name}.classifier.output_labels")
        return head


ARCHS = {}


def register(cls):
    ARCHS[cls.name] = cls
    return cls


def get(f):
    """The Arch instance for an open GGUFFile; an unsupported architecture is a GGUFError naming it."""
    name = f.metadata.get("general.architecture")
    if not isinstance(name, str):
        raise GGUFError(f"general.architecture must be a string, got {type(name).__name__}"
                        if name is not None else "missing metadata key 'general.architecture'")
    if name not in ARCHS:
        raise GGUFError(f"architecture {name!r} is not supported (supported: {', '.join(sorted(ARCHS))})")
    return ARCHS[name](f)


def weight_bytes(f, hp):
    """Where a model's bytes are (f: its GGUFFile, hp: its Hparams), as a dict:
      file: the file's size; weights: all tensor bytes (mapped, zero-copy);
      experts: the mixture-of-experts stacks (ffn_*_exps, with gpt-oss's per-expert biases; 0 for a dense model);
      per_token: the weight bytes one decoded token reads, the physical floor of decoding: every tensor except
        the expert stacks, of which n_expert_used / n_expert, and except token_embd, of which one row (unless it
        is also the lm_head: tied embeddings are read whole);
      active_fraction: per_token / weights."""
    experts = sum(t.nbytes for n, t in f.tensors.items() if n.endswith(("_exps.weight", "_exps.bias")))
    weights = sum(t.nbytes for t in f.tensors.values())
    per_token = weights - experts
    emb = f.tensors.get("token_embd.weight")
    if emb is not None and "output.weight" in f.tensors:
        per_token -= emb.nbytes - emb.nbytes // max(int(emb.shape[0]), 1)
    if hp.n_expert:
        per_token += experts * hp.n_expert_used // hp.n_expert
    return {"file": f.file_size, "weights": weights, "experts": experts, "per_token": per_token,
            "active_fraction": round(per_token / weights, 4) if weights else 0.0}
