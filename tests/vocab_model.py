"""Tiny random-weight llamas that speak a real vocabulary: the tokenizer metadata of one of llama.cpp's
vocabulary-only files (tests/data/vocab/ggml-vocab-<name>.gguf.xz) under 2 random layers. Their free output is
noise over the whole vocabulary (every piece, special tokens included, gets some probability at temperature 1),
which is what structured-output tests want: whatever the grammar lets through is what comes out.

    path = vocab_model(tmp_path / "bpe.gguf", "llama-bpe", seed=1)
"""
import os

import numpy as np

from fastgguf import GGUFFile, GGUFWriter
from fastgguf.gguf import GGUFValueType as V
from vocab_files import unpack_vocab

E, L, H, KVH, HD, F, N_CTX = 64, 2, 4, 2, 16, 128, 256


def vocab_model(path, name, seed=0, nan_embd=(), nan_logits=(), tokenizer_from=None, n_ctx=N_CTX):
    """Write the model to path (str returned). token_embd is tied to the output; the output norm's small weight
    keeps the logits' spread around 2 (at temperature 1 many tokens compete, not one). A broken model for the NaN
    contracts: nan_embd (token ids whose embedding rows are NaN: a sequence holding one goes NaN) and nan_logits
    (ids whose logit is always NaN) untie the output (a copy of token_embd, same logits otherwise).
    tokenizer_from: a GGUF file whose tokenizer is used instead of the vocabulary `name` (a random-weight model with
    a real model's vocabulary: a draft model that is mostly wrong). n_ctx: the training context it declares."""
    path = str(path)
    raw = unpack_vocab(name, path + ".vocab") if tokenizer_from is None else str(tokenizer_from)
    rng = np.random.default_rng(seed)
    w = GGUFWriter()
    w.add_string("general.architecture", "llama")
    for key, value, vt in (("block_count", L, V.UINT32), ("context_length", n_ctx, V.UINT32),
                           ("embedding_length", E, V.UINT32), ("feed_forward_length", F, V.UINT32),
                           ("attention.head_count", H, V.UINT32), ("attention.head_count_kv", KVH, V.UINT32),
                           ("rope.freq_base", 10000.0, V.FLOAT32), ("rope.dimension_count", HD, V.UINT32),
                           ("attention.layer_norm_rms_epsilon", 1e-5, V.FLOAT32)):
        w.add_value("llama." + key, value, vt)
    with GGUFFile(raw) as f:
        for key in f.metadata:
            if not key.startswith("tokenizer."):
                continue
            vt, et = f.value_type(key)
            if vt == V.ARRAY:
                values = f.metadata_raw(key) if et == V.STRING else np.array(f.metadata[key])
                w.add_array(key, values, et)
            else:
                w.add_value(key, f.metadata_raw(key) if vt == V.STRING else f.metadata[key], vt)
        n_vocab = f.metadata.array_len("tokenizer.ggml.tokens")
    if tokenizer_from is None:
        os.remove(raw)

    def t(name, *shape, s=0.2, center=0.0):
        a = (center + rng.standard_normal(shape) * s).astype(np.float32)
        w.add_tensor(name, a.astype(np.float16) if len(shape) == 2 else a)

    embd = (rng.standard_normal((n_vocab, E)) * 1.0).astype(np.float32).astype(np.float16)
    w.add_tensor("token_embd.weight", _with_nan(embd, nan_embd))
    if nan_embd or nan_logits:
        w.add_tensor("output.weight", _with_nan(embd, nan_logits))
    t("output_norm.weight", E, s=0.02, center=0.25)
    for i in range(L):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", E, s=0.1, center=1.0)
        t(p + "attn_q.weight", H * HD, E)
        t(p + "attn_k.weight", KVH * HD, E)
        t(p + "attn_v.weight", KVH * HD, E)
        t(p + "attn_output.weight", E, H * HD)
        t(p + "ffn_norm.weight", E, s=0.1, center=1.0)
        t(p + "ffn_gate.weight", F, E)
        t(p + "ffn_up.weight", F, E)
        t(p + "ffn_down.weight", E, F)
    w.write(path)
    return path


def _with_nan(a, rows):
    a = a.copy()
    a[list(rows)] = np.nan
    return a
