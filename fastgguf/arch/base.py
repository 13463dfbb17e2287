"""Architecture descriptions: which hyperparameters and tensors a GGUF file of an architecture holds, turned into
what the forward pass (fastgguf._native.Weights) takes. One short subclass of Arch per architecture, registered
with @register; fastgguf.arch imports them all."""
import math
from dataclasses import dataclass

import numpy as np

from fastgguf import kernels
from fastgguf.errors import GGUFError
from fastgguf.gguf.constants import GGMLType


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


class Arch:
    """The llama layout; subclasses change class attributes (and override a method where a model really differs).

    layer_tensors: role -> name inside blk.N (required); optional_layer_tensors: the same, may be absent."""
    name = None
    rope_neox = False
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
    vectors = ("attn_norm", "ffn_norm", "bq", "bk", "bv", "q_norm", "k_norm", "output_norm", "rope_freqs")

    def __init__(self, f):
        self.f = f
        self.md = f.metadata

    # ---- hyperparameters ----
    def key(self, name, default=KeyError):
        k = f"{self.name}.{name}"
        if k in self.md:
            return self.md[k]
        if default is KeyError:
            raise GGUFError(f"{self.f.path}: missing metadata key {k!r}")
        return default

    def int_key(self, name, default=KeyError):
        v = self.key(name, default)
        if isinstance(v, np.ndarray):   # per-layer values (some models): supported only when all equal
            if v.size == 0 or not np.all(v == v.flat[0]):
                raise GGUFError(f"{self.name}.{name}: per-layer values are not supported")
            v = v.flat[0]
        return int(v)

    def hparams(self):
        n_embd = self.int_key("embedding_length")
        n_head = self.int_key("attention.head_count")
        n_head_kv = self.int_key("attention.head_count_kv", n_head)
        head_dim = self.int_key("attention.key_length", n_embd // n_head)
        if self.int_key("attention.value_length", head_dim) != head_dim:
            raise GGUFError("attention.value_length != attention.key_length is not supported")
        scaling = self.key("rope.scaling.type", "none")
        factor = float(self.key("rope.scaling.factor", self.key("rope.scale_linear", 0.0)))
        if scaling not in ("none", "linear"):
            raise GGUFError(f"rope scaling type {scaling!r} is not supported (supported: none, linear, and "
                            f"llama3-style frequency factors from rope_freqs.weight)")
        freq_scale = 1.0 / factor if (scaling == "linear" and factor > 0) else 1.0
        return Hparams(
            arch=self.name,
            n_embd=n_embd,
            n_layer=self.int_key("block_count"),
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_dim=head_dim,
            n_ff=self.int_key("feed_forward_length"),
            n_vocab=int(self.f.tensors["token_embd.weight"].shape[0]),
            n_rot=self.int_key("rope.dimension_count", head_dim),
            rope_neox=self.rope_neox,
            norm_eps=float(self.key("attention.layer_norm_rms_epsilon", 1e-5)),
            rope_base=float(self.key("rope.freq_base", 10000.0)),
            rope_freq_scale=freq_scale,
            attn_scale=1.0 / math.sqrt(head_dim),
            n_ctx_train=self.int_key("context_length", 0),
        )

    # ---- tensors ----
    def matrix(self, name):
        ti = self.f.tensors[name]
        if ti.type not in kernels.WEIGHT_TYPES:  # the C type table is the one owner of this fact
            raise GGUFError(f"tensor {name!r} has type {ti.type.name}, which fastgguf cannot run yet "
                            f"(supported: {', '.join(GGMLType(t).name for t in kernels.WEIGHT_TYPES)})")
        if len(ti.shape) != 2:
            raise GGUFError(f"tensor {name!r}: expected 2 dimensions, got shape {ti.shape}")
        return (self.f.tensor(name), int(ti.type), int(ti.shape[0]), int(ti.shape[1]))

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

        out = {
            "tok_embd": take("tok_embd", "token_embd.weight"),
            "output_norm": take("output_norm", "output_norm.weight"),
            "rope_freqs": take("rope_freqs", "rope_freqs.weight", required=False),
        }
        out["output"] = take("output", "output.weight", required=False)
        if out["output"] is None:   # tied embeddings
            out["output"] = out["tok_embd"]
        layers = []
        for i in range(hp.n_layer):
            d = {role: take(role, f"blk.{i}.{n}") for role, n in self.layer_tensors.items()}
            for role, n in self.optional_layer_tensors.items():
                d[role] = take(role, f"blk.{i}.{n}", required=False)
            layers.append(d)
        out["layers"] = layers
        unused = [n for n in names if n not in used]
        if unused:
            more = f" (and {len(unused) - 5} more)" if len(unused) > 5 else ""
            raise GGUFError(f"architecture {self.name!r}: tensors fastgguf does not know how to use: "
                            f"{', '.join(unused[:5])}{more}")
        return out


ARCHS = {}


def register(cls):
    ARCHS[cls.name] = cls
    return cls


def get(f):
    """The Arch instance for an open GGUFFile; an unsupported architecture is a GGUFError naming it."""
    name = f.metadata.get("general.architecture")
    if name not in ARCHS:
        raise GGUFError(f"architecture {name!r} is not supported (supported: {', '.join(sorted(ARCHS))})")
    return ARCHS[name](f)
