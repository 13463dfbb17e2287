"""Random-weight chat models for the tool-call and reasoning tests: a real vocabulary (llama.cpp's vocabulary-only
files in tests/data/vocab), a real chat template (tests/data/templates) in the metadata, and one tiny random layer.
What they say is noise; what the OpenAI layer makes of it (constrained to a tool-call grammar, parsed) is checked."""
import lzma
import os

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def template(name):
    with open(os.path.join(DATA, "templates", name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def make_chat_model(path, vocab, template_name, *, arch="qwen2", seed=0):
    """A one-layer random `arch` model at path with vocabulary `vocab` (ggml-vocab-<vocab>.gguf) and the chat
    template tests/data/templates/<template_name>.jinja. Returns the path."""
    import gguf

    src = str(path) + ".vocab.gguf"
    with lzma.open(os.path.join(DATA, "vocab", f"ggml-vocab-{vocab}.gguf.xz")) as f, open(src, "wb") as out:
        out.write(f.read())
    reader = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(path), arch)
    n_vocab = None
    for field in reader.fields.values():
        name = field.name
        if not name.startswith("tokenizer.") or name == "tokenizer.chat_template":
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(value)
            w.add_key_value(name, value, vtype, sub_type=field.types[-1])
        else:
            w.add_key_value(name, value, vtype)
    os.remove(src)
    w.add_chat_template(template(template_name))
    rng = np.random.default_rng(seed)
    E, H, KVH, hd, F = 32, 2, 1, 16, 48
    w.add_block_count(1)
    w.add_context_length(1024)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KVH)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)

    def t(name, *shape, s=0.2):
        w.add_tensor(name, (rng.standard_normal(shape) * s).astype(np.float32))

    t("token_embd.weight", n_vocab, E, s=1.0)
    t("output_norm.weight", E, s=1.0)
    p = "blk.0."
    t(p + "attn_norm.weight", E, s=1.0)
    t(p + "attn_q.weight", H * hd, E)
    t(p + "attn_k.weight", KVH * hd, E)
    t(p + "attn_v.weight", KVH * hd, E)
    if arch == "qwen2":
        t(p + "attn_q.bias", H * hd)
        t(p + "attn_k.bias", KVH * hd)
        t(p + "attn_v.bias", KVH * hd)
    t(p + "attn_output.weight", E, H * hd)
    t(p + "ffn_norm.weight", E, s=1.0)
    t(p + "ffn_gate.weight", F, E)
    t(p + "ffn_up.weight", F, E)
    t(p + "ffn_down.weight", E, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
