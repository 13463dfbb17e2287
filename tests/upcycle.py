"""An "upcycled" mixture of experts made from a dense llama file (the default SmolLM2): every layer's FFN becomes
n_expert experts (ffn_{gate,up,down}_exps stacked from copies of ffn_{gate,up,down}, same type) behind a random
F32 router, llama.expert_count / expert_used_count set, everything else copied byte for byte. With identical
copies the model computes the dense one (the chosen weights are renormalised to 1); scales[e] != 1 makes expert
e a scaled copy (dequantized, scaled, quantized again as llama-quantize does) so routing matters.
Used by tests/engine/test_upcycle.py, tools/make_moe_references.py and benchmarks/bench_moe.py."""
import numpy as np

from fastgguf import kernels
from fastgguf.gguf import GGUFFile, GGUFWriter
from fastgguf.gguf.quantize import copy_metadata

FFN = ("ffn_gate", "ffn_up", "ffn_down")


def upcycle(src, dst, n_expert=4, n_used=2, scales=None, seed=0, router=None):
    """Write dst from the dense llama file src (see the module docstring); returns str(dst). router: a function
    (layer, (n_expert, n_embd) standard normal draws) -> the router written (default: the draws)."""
    scales = [1.0] * n_expert if scales is None else list(scales)
    rng = np.random.default_rng(seed)
    f = GGUFFile(str(src))
    try:
        arch = f.metadata["general.architecture"]
        w = GGUFWriter(alignment=f.alignment)
        copy_metadata(f, w)
        w.add_uint32(f"{arch}.expert_count", n_expert)
        w.add_uint32(f"{arch}.expert_used_count", n_used)
        n_embd = int(f.metadata[f"{arch}.embedding_length"])
        for name, ti in f.tensors.items():
            parts = name.split(".")
            if len(parts) == 4 and parts[2] in FFN:
                continue
            w.add_tensor(name, f.tensor(name), ggml_type=ti.type, shape=tuple(ti.shape))
            if parts[-2:] == ["ffn_norm", "weight"]:   # the router and experts of this layer
                p = ".".join(parts[:2])
                r = rng.standard_normal((n_expert, n_embd)).astype(np.float32)
                w.add_tensor(f"{p}.ffn_gate_inp.weight", router(int(parts[1]), r) if router else r)
                for kind in FFN:
                    t = f.tensors[f"{p}.{kind}.weight"]
                    raw = f.tensor(f"{p}.{kind}.weight")
                    cols = int(t.shape[-1])
                    exps = [raw if s == 1.0 else kernels.quantize_as_llama_file(
                        kernels.dequantize(raw, t.type, cols).reshape(raw.shape[0], cols) * np.float32(s), t.type)
                        for s in scales]
                    w.add_tensor(f"{p}.{kind}_exps.weight", np.stack(exps), ggml_type=t.type,
                                 shape=(n_expert,) + tuple(t.shape))
        return w.write(str(dst))
    finally:
        f.close()
