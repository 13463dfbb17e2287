"""llama (and the many models stored as llama: SmolLM2, Mistral 7B v0.1, TinyLlama, ...).

Facts (from llama.cpp): RoPE in "normal" mode, rotating pairs (x[2i], x[2i+1]) of each head; the converter
permutes attn_q/attn_k rows so this matches the Hugging Face rotate-half layout. Output absent -> tied to
token_embd. Optional rope_freqs.weight carries llama3-style frequency divisors (Llama 3.1/3.2: the converter
turns rope_scaling llama3 into that tensor; no "llama3" rope.scaling.type exists in llama.cpp); with
rope.scaling.type longrope, rope_factors_long/short.weight instead. q/k/v biases are optional. Mistral files are
llama files: llama.cpp does not read llama.attention.sliding_window (full attention), nor does fastgguf."""
from fastgguf.arch.base import Arch, register


@register
class Llama(Arch):
    name = "llama"
    rope_neox = False

    def longrope_factors(self):
        return self.rope_scaling_type() == "longrope"
