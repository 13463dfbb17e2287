"""llama (and the many models stored as llama: SmolLM2, Mistral 7B v0.1, TinyLlama, ...).

Facts (from llama.cpp): RoPE in "normal" mode, rotating pairs (x[2i], x[2i+1]) of each head; the converter
permutes attn_q/attn_k rows so this matches the Hugging Face rotate-half layout. Output absent -> tied to
token_embd. Optional rope_freqs.weight carries llama3-style frequency divisors. q/k/v biases are optional."""
from fastgguf.arch.base import Arch, register


@register
class Llama(Arch):
    name = "llama"
    rope_neox = False
