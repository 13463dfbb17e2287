"""Tiny random-weight encoders (bert, nomic-bert) written with gguf-py's writer: the tensors and metadata llama.cpp's
converter writes for these architectures (see fastgguf/arch/bert.py), deterministic for a seed.

n_embd 64, 4 heads of 16 (GQA with n_head_kv=2 is not used by real BERTs, but the forward pass takes it), n_ff 96,
2 layers, vocabulary 100, context 512 (the position embeddings' rows, as all-MiniLM-L6-v2). No vocabulary: the
forward pass needs token ids only (tokenizer.ggml.model "no_vocab", which llama.cpp also loads); vocab=True writes
a small WordPiece vocabulary instead (VOCAB: llama.cpp's tools need text in, tools/make_tiny_references.py)."""
import numpy as np

import gguf

E, H, HD, F, V, N_CTX = 64, 4, 16, 96, 100, 512
# [PAD] [UNK] [CLS] [SEP] [MASK], a few words, the letters and digits alone and as word pieces, punctuation
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "dog", "ran"]
         + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [f"##{chr(c)}" for c in range(ord("a"), ord("z") + 1)]
         + [str(d) for d in range(10)] + list(".,!?;:'\"()-/&*+=<>@#$%[]_~"))
QK_S = 0.1   # q/k weights' scale: attention neither uniform nor so sharp that one Q8 rounding flips an output


def make_tiny_encoder(path, *, arch="bert", wtype=None, seed=0, n_layer=2, biases=True, fused=True,
                      token_types=True, vocab=False):
    """arch "bert" or "nomic-bert"; wtype: a gguf.GGMLQuantizationType for the 2-D weights (not token_types), or
    None for F32. biases: q/k/v/o and FFN biases (bert; nomic-bert has none). fused: nomic-bert's attn_qkv."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    if vocab:
        assert len(VOCAB) == V
        # as llama.cpp's converter stores a WordPiece vocabulary (conversion/bert.py phantom()): control tokens as
        # they are, "##x" pieces as "x", word-initial tokens with a leading U+2581
        control = [t.startswith("[") and t.endswith("]") and len(t) > 2 for t in VOCAB]
        w.add_tokenizer_model("bert")
        w.add_token_list([t if c else t[2:] if t.startswith("##") else "\u2581" + t for t, c in zip(VOCAB, control)])
        w.add_token_types([3 if c else 1 for c in control])
        for add, tok in ((w.add_pad_token_id, "[PAD]"), (w.add_unk_token_id, "[UNK]"), (w.add_bos_token_id, "[CLS]"),
                         (w.add_sep_token_id, "[SEP]"), (w.add_mask_token_id, "[MASK]")):
            add(VOCAB.index(tok))
    else:
        w.add_tokenizer_model("no_vocab")
        w.add_vocab_size(V)
    w.add_token_type_count(2)
    w.add_block_count(n_layer)
    w.add_context_length(N_CTX)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    if arch == "nomic-bert":
        w.add_rope_freq_base(1000.0)

    def t(name, *shape, s=0.2, mean=0.0, quant=True):
        a = (mean + rng.standard_normal(shape) * s).astype(np.float32)
        if wtype is not None and quant and len(shape) == 2:
            w.add_tensor(name, gguf.quants.quantize(a, wtype), raw_dtype=wtype)
        else:
            w.add_tensor(name, a)

    t("token_embd.weight", V, E, s=1.0)
    if token_types:
        t("token_types.weight", 2, E, s=0.5, quant=False)
    if arch == "bert":
        t("position_embd.weight", N_CTX, E, s=0.5)
    t("token_embd_norm.weight", E, mean=1.0, s=0.2)
    t("token_embd_norm.bias", E, s=0.2)
    for i in range(n_layer):
        p = f"blk.{i}."
        if arch == "nomic-bert" and fused:
            t(p + "attn_qkv.weight", 3 * E, E, s=QK_S)
        else:
            t(p + "attn_q.weight", E, E, s=QK_S)
            t(p + "attn_k.weight", E, E, s=QK_S)
            t(p + "attn_v.weight", E, E, s=0.2)
        if biases:
            for x in "qkv":
                t(p + f"attn_{x}.bias", E)
        t(p + "attn_output.weight", E, E)
        if biases:
            t(p + "attn_output.bias", E)
        t(p + "attn_output_norm.weight", E, mean=1.0, s=0.2)
        t(p + "attn_output_norm.bias", E, s=0.2)
        if arch == "nomic-bert":
            t(p + "ffn_gate.weight", F, E)
        t(p + "ffn_up.weight", F, E)
        if biases:
            t(p + "ffn_up.bias", F)
        t(p + "ffn_down.weight", E, F)
        if biases:
            t(p + "ffn_down.bias", E)
        t(p + "layer_output_norm.weight", E, mean=1.0, s=0.2)
        t(p + "layer_output_norm.bias", E, s=0.2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
