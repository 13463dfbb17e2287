"""Random-weight chat models for the tool-call and reasoning tests: a real vocabulary (llama.cpp's vocabulary-only
files in tests/data/vocab), a real chat template (tests/data/templates) in the metadata, and one tiny random layer.
What they say is noise; what the API layer makes of it (constrained to a tool-call grammar, parsed) is checked."""
import os

import numpy as np

from vocab_files import unpack_vocab

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def template(name):
    with open(os.path.join(DATA, "templates", name + ".jinja"), encoding="utf-8") as f:
        return f.read()


# the rerank template llama.cpp's converter writes into Qwen3-Reranker files (conversion/qwen.py)
QWEN3_RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a "
    "web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: "
    "{document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def make_chat_model(path, vocab, template_name, *, arch="qwen2", seed=0, control=(), pooling=None, head=None):
    """A one-layer random `arch` model at path with vocabulary `vocab` (ggml-vocab-<vocab>.gguf) and the chat
    template tests/data/templates/<template_name>.jinja. `control`: texts that become control tokens (the last ids
    of the vocabulary are replaced), as Mistral's [TOOL_CALLS] is in tekken. `pooling`: {arch}.pooling_type
    (0..4) written when given; `head`: a rank classifier head, "qwen3" (cls.output.weight of 2 rows, labels
    yes/no and the rerank template, as llama.cpp converts Qwen3-Reranker) or "full" (cls.weight, cls.bias,
    cls.output.weight of 2 rows, cls.output.bias: a BERT cross-encoder's head, no labels: 1 score). arch "gpt-oss":
    its layer (biases, sinks, 4 experts 2 used, a sliding window of 8). Returns the path."""
    from fastgguf import GGUFFile, GGUFWriter
    from fastgguf.gguf.constants import GGUFValueType

    src = unpack_vocab(vocab, str(path) + ".vocab.gguf")
    w = GGUFWriter()
    w.add_string("general.architecture", arch)
    with GGUFFile(src) as g:
        for key in list(g.metadata):
            if key.startswith("tokenizer.") and key != "tokenizer.chat_template":
                vtype, etype = g.value_type(key)
                value = g.metadata[key]
                if vtype == GGUFValueType.ARRAY and etype == GGUFValueType.STRING:
                    value = g.metadata_raw(key)
                elif vtype == GGUFValueType.STRING:
                    value = g.metadata_raw(key)
                if control and key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
                    value = list(value)
                    for k, text in enumerate(control, 1):
                        value[-k] = text.encode() if key.endswith("tokens") else 3   # 3: CONTROL
                w.add_value(key, value, vtype, etype)
        n_vocab = len(g.metadata["tokenizer.ggml.tokens"])
    os.remove(src)
    w.add_string("tokenizer.chat_template", template(template_name))
    rng = np.random.default_rng(seed)
    E, H, KVH, hd, F = 32, 2, 1, 16, 48
    for key, v in (("block_count", 1), ("context_length", 1024), ("embedding_length", E), ("feed_forward_length", F),
                   ("attention.head_count", H), ("attention.head_count_kv", KVH), ("rope.dimension_count", hd)):
        w.add_uint32(f"{arch}.{key}", v)
    w.add_float32(f"{arch}.rope.freq_base", 10000.0)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    if pooling is not None:
        w.add_uint32(f"{arch}.pooling_type", pooling)
    NE, FE = 4, 32
    if arch == "gpt-oss":
        for key, v in (("expert_count", NE), ("expert_used_count", 2), ("expert_feed_forward_length", FE),
                       ("attention.sliding_window", 8)):
            w.add_uint32(f"{arch}.{key}", v)
    if head == "qwen3":
        w.add_array(f"{arch}.classifier.output_labels", ["yes", "no"])
        w.add_string("tokenizer.chat_template.rerank", QWEN3_RERANK_TEMPLATE)

    def t(name, *shape, s=0.2):
        w.add_tensor(name, (rng.standard_normal(shape) * s).astype(np.float32))

    t("token_embd.weight", n_vocab, E, s=1.0)
    t("output_norm.weight", E, s=1.0)
    p = "blk.0."
    t(p + "attn_norm.weight", E, s=1.0)
    t(p + "attn_q.weight", H * hd, E)
    t(p + "attn_k.weight", KVH * hd, E)
    t(p + "attn_v.weight", KVH * hd, E)
    if arch in ("qwen2", "gpt-oss"):
        t(p + "attn_q.bias", H * hd)
        t(p + "attn_k.bias", KVH * hd)
        t(p + "attn_v.bias", KVH * hd)
    if arch == "qwen3":   # no biases; each q and k head RMS-normalised
        t(p + "attn_q_norm.weight", hd, s=1.0)
        t(p + "attn_k_norm.weight", hd, s=1.0)
    t(p + "attn_output.weight", E, H * hd)
    if arch == "gpt-oss":
        t(p + "attn_output.bias", E)
        t(p + "attn_sinks.weight", H, s=1.0)
        t(p + "post_attention_norm.weight", E, s=1.0)
        t(p + "ffn_gate_inp.weight", NE, E, s=1.0)
        t(p + "ffn_gate_inp.bias", NE)
        for x, rows, cols in (("gate", FE, E), ("up", FE, E), ("down", E, FE)):
            t(p + f"ffn_{x}_exps.weight", NE, rows, cols)
            t(p + f"ffn_{x}_exps.bias", NE, rows)
    else:
        t(p + "ffn_norm.weight", E, s=1.0)
        t(p + "ffn_gate.weight", F, E)
        t(p + "ffn_up.weight", F, E)
        t(p + "ffn_down.weight", E, F)
    if head == "qwen3":
        t("cls.output.weight", 2, E)
    elif head == "full":
        t("cls.weight", E, E)
        t("cls.bias", E)
        t("cls.output.weight", 2, E)   # two outputs: qwen3 softmaxes them (one would always score 1)
        t("cls.output.bias", 2)
    w.write(str(path))
    return str(path)


# ---- gpt-oss's harmony channels (tests/engine/test_harmony.py, tests/server/test_harmony_api.py) ----
HARMONY_TOKENS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>")


def make_harmony_model(path, arch="qwen2"):
    """A random `arch` (qwen2 or gpt-oss) file with gpt-oss's template and harmony's markers as control tokens
    (rendered as text, <|end|> not end of generation: the tokenizer's harmony rules, as llama.cpp's)."""
    return make_chat_model(path, "qwen2", "openai-gpt-oss-120b", arch=arch, control=HARMONY_TOKENS)


def harmony_steering(model):
    """Greedy sampling arguments that make a random harmony model think a few words, then answer: " sunny" is
    favoured (+60) until the frequency and presence penalties take it below "<|end|>" (+40), where the analysis
    message of the reasoning grammar ends; a json_schema request then puts its JSON in the final channel."""
    tok = model.tokenizer
    sunny, = tok.tokenize(" sunny", add_special=False)
    end, = tok.tokenize("<|end|>", add_special=False, parse_special=True)
    return dict(max_tokens=60, temperature=0, frequency_penalty=2.0, presence_penalty=2.0,
                logit_bias={str(sunny): 60, str(end): 40})
