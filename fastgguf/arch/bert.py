"""bert and nomic-bert: encoders (sentence embeddings, rerankers). Post-norm layers with LayerNorm (weight and
bias), non-causal attention over the whole input, no lm_head: the forward pass gives each token's hidden state
(the last layer's output; pooling is the caller's).

Facts from llama.cpp (src/models/bert.cpp, nomic-bert.cpp, llama-model.cpp, llama-graph.cpp):
  input = LayerNorm(token_embd[id] + token_types[0] + position_embd[pos]) with token_embd_norm (+ bias);
          token types are always 0 ("sentence A"); nomic-bert has no position_embd (RoPE instead).
  layer: x = LayerNorm(x + attn(x) . Wo + bo)            attn_output_norm (+ bias)
         x = LayerNorm(x + FFN(x))                        layer_output_norm (+ bias)
  FFN:   bert: gelu(x . Wup + b_up) . Wdown + b_down, GELU in its tanh form (ggml_gelu);
         nomic-bert: (silu(x . Wgate) * (x . Wup)) . Wdown, no biases.
  attention: scale 1/sqrt(head_dim); q/k/v biases optional; nomic-bert fuses q|k|v into attn_qkv and rotates
         q and k with NEOX RoPE (rope.freq_base).
  LayerNorm eps: {arch}.attention.layer_norm_epsilon (required); {arch}.attention.causal False in these files."""
import dataclasses

from fastgguf.arch.base import Arch, register
from fastgguf.errors import GGUFError


@register
class Bert(Arch):
    name = "bert"
    rope = False         # bert: learned position embeddings; nomic-bert: RoPE
    has_output = False
    model_tensors = {
        "tok_norm": ("token_embd_norm.weight", True),
        "tok_norm_b": ("token_embd_norm.bias", True),
        "type_embd": ("token_types.weight", False),
        "pos_embd": ("position_embd.weight", True),
    }
    layer_tensors = {
        "wq": "attn_q.weight",
        "wk": "attn_k.weight",
        "wv": "attn_v.weight",
        "wo": "attn_output.weight",
        "attn_out_norm": "attn_output_norm.weight",
        "attn_out_norm_b": "attn_output_norm.bias",
        "w_up": "ffn_up.weight",
        "w_down": "ffn_down.weight",
        "layer_out_norm": "layer_output_norm.weight",
        "layer_out_norm_b": "layer_output_norm.bias",
    }
    optional_layer_tensors = dict(Arch.optional_layer_tensors, bo="attn_output.bias", b_up="ffn_up.bias",
                                  b_down="ffn_down.bias")
    vectors = Arch.vectors + ("tok_norm", "tok_norm_b", "type_embd", "bo", "b_up", "b_down", "attn_out_norm",
                              "attn_out_norm_b", "layer_out_norm", "layer_out_norm_b", "bqkv")

    def hparams(self):
        hp = self.base_hparams()
        if hp.causal:
            raise GGUFError(f"{self.name}.attention.causal is true or absent: a causal {self.name} model is not "
                            f"supported")
        return dataclasses.replace(
            hp, norm_eps=self.float_key("attention.layer_norm_epsilon"), causal=False, ffn_act="gelu_tanh",
            n_rot=hp.n_rot if self.rope else 0, rope_neox=self.rope)


@register
class NomicBert(Bert):
    name = "nomic-bert"
    rope = True
    rope_neox = True
    model_tensors = {k: v for k, v in Bert.model_tensors.items() if k != "pos_embd"}

    def __init__(self, f):
        super().__init__(f)
        lt = dict(Bert.layer_tensors, w_gate="ffn_gate.weight")
        olt = dict(Bert.optional_layer_tensors)
        if "blk.0.attn_qkv.weight" in f.tensors:   # q|k|v in one matrix (the converter's usual output)
            lt = {k: v for k, v in lt.items() if k not in ("wq", "wk", "wv")}
            lt["wqkv"] = "attn_qkv.weight"
            olt["bqkv"] = "attn_qkv.bias"
        self.layer_tensors, self.optional_layer_tensors = lt, olt

    def hparams(self):
        hp = super().hparams()
        return dataclasses.replace(hp, ffn_act="silu")

    def split_layer(self, d, hp, i):
        self.split_qkv(d, hp, i)
        qd, kv = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
        b = d.pop("bqkv", None)
        if b is not None:
            if b.shape != (qd + 2 * kv,):
                raise GGUFError(f"blk.{i}.attn_qkv.bias: expected shape ({qd + 2 * kv},), got {b.shape}")
            d["bq"], d["bk"], d["bv"] = b[:qd], b[qd:qd + kv], b[qd + kv:]
        return d
