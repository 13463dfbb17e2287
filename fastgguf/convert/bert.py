"""A Hugging Face BERT model (safetensors + config.json + tokenizer.json, sentence-transformers pooling config) to a
``bert`` GGUF, written as llama.cpp's converter writes it (convert_hf_to_gguf.py, conversion/bert.py class
BertModel, with gguf-py's SpecialVocab and TextModel.set_gguf_parameters), so that llama.cpp and fastgguf read the
same file the same way:

- metadata: bert.{context_length, embedding_length, feed_forward_length, block_count, attention.head_count,
  attention.layer_norm_epsilon, attention.causal = False, pooling_type (from modules.json's Pooling module: mean 1,
  cls 2, lasttoken 3)}, general.file_type, general.quantization_version;
- vocabulary: tokenizer.ggml.model "bert", the tokens in "phantom space" form (a word-initial piece gets U+2581 in
  front, a ``##`` continuation loses its ``##``, control tokens stay as they are), token types (added special tokens
  CONTROL, the rest NORMAL), token_type_count, the special ids and add_*_token flags that SpecialVocab derives from
  tokenizer_config.json and the TemplateProcessing post-processor, and the BertNormalizer's lowercase flag;
- tensors: renamed by gguf-py's BERT tensor map; the pooler and the masked-LM / next-sentence heads are dropped
  (embeddings only); types chosen as the converter does: 1-D tensors, ``*_norm.weight``, non-``.weight`` tensors,
  position_embd and token_types stay F32, every other weight gets the output type (F32, F16 or Q8_0).
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from fastgguf import kernels
from fastgguf.convert.safetensors import SafetensorsFile
from fastgguf.errors import ConvertError
from fastgguf.gguf import GGMLType, GGUFWriter

ARCHITECTURES = ("BertModel", "BertForMaskedLM")   # the layouts this converter knows (no classifier head)
OUT_TYPES = {"f32": GGMLType.F32, "f16": GGMLType.F16, "q8_0": GGMLType.Q8_0}
FILE_TYPES = {GGMLType.F32: 0, GGMLType.F16: 1, GGMLType.Q8_0: 7}     # llama.cpp's LLAMA_FTYPE_* (general.file_type)
QUANTIZATION_VERSION = 2                                              # GGML_QUANT_VERSION, written for every file
POOLING = {"mean": 1, "cls": 2, "lasttoken": 3}                       # gguf-py PoolingType
TOKEN_NORMAL, TOKEN_USER_DEFINED, TOKEN_CONTROL = 1, 4, 3             # gguf-py TokenType
# llama.cpp's converter names the pre-tokenizer by a hash of the ids of its test text (get_vocab_base_pre); this
# vocabulary's ids hash to 0876d13b... (checked with the WPM tokenizer), listed for "bert-bge" and then for
# "jina-v2-en", and the later entry wins. llama.cpp's WPM tokenizer does not read it.
TOKENIZER_PRE = "jina-v2-en"

_GLOBAL = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.LayerNorm": "token_embd_norm",
}
_BLOCK = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
_SKIP = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
_SKIP_PREFIX = ("cls.predictions", "cls.seq_relationship")
_KEEP_F32 = ("position_embd.weight", "token_types.weight")


def gguf_name(name: str) -> str | None:
    """The GGUF name of a Hugging Face BERT tensor; None for one llama.cpp's converter drops."""
    if name.startswith("bert."):
        name = name[5:]
    if name.endswith(".gamma"):
        name = name[:-6] + ".weight"
    if name.endswith(".beta"):
        name = name[:-5] + ".bias"
    if name in _SKIP or name.startswith(_SKIP_PREFIX):
        return None
    base, dot, suffix = name.rpartition(".")
    if suffix not in ("weight", "bias"):
        raise ConvertError(f"tensor {name!r}: not a weight or bias of a BERT model")
    if base in _GLOBAL:
        return f"{_GLOBAL[base]}.{suffix}"
    m = re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)", base)
    if m and m.group(2) in _BLOCK:
        return f"blk.{int(m.group(1))}.{_BLOCK[m.group(2)]}.{suffix}"
    raise ConvertError(f"tensor {name!r}: no GGUF name for it in the BERT layout")


def tensor_type(gname: str, ndim: int, out: GGMLType) -> GGMLType:
    """The type llama.cpp's converter writes a tensor in (see the module docstring)."""
    if ndim <= 1 or gname.endswith("_norm.weight") or not gname.endswith(".weight") or gname in _KEEP_F32:
        return GGMLType.F32
    return out


def _load_json(path: str, what: str, required: bool = True):
    if not os.path.isfile(path):
        if required:
            raise ConvertError(f"{path} is missing ({what})")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConvertError(f"{path}: cannot read {what}: {e}") from None


def pooling_type(src: str) -> int | None:
    """{arch}.pooling_type from sentence-transformers' modules.json + the Pooling module's config (None: no
    Pooling module, the key is not written), as llama.cpp's _try_set_pooling_type."""
    modules = _load_json(os.path.join(src, "modules.json"), "sentence-transformers modules", required=False)
    path = next((m.get("path") for m in modules or () if str(m.get("type", "")).endswith("Pooling")), None)
    if path is None:
        return None
    cfg = _load_json(os.path.join(src, path, "config.json"), "the pooling config")
    if cfg.get("pooling_mode_mean_tokens"):
        return POOLING["mean"]
    if cfg.get("pooling_mode_cls_token"):
        return POOLING["cls"]
    if cfg.get("pooling_mode_lasttoken"):
        return POOLING["lasttoken"]
    if cfg.get("pooling_mode") in POOLING:
        return POOLING[cfg["pooling_mode"]]
    raise ConvertError(f"{os.path.join(src, path, 'config.json')}: only mean, cls and last-token pooling can be "
                       f"written to a GGUF")


def vocabulary(src: str, n_vocab: int):
    """(tokens in phantom-space form, token types, special ids {typ: id}, add flags {typ: bool}, lowercase or None)
    from tokenizer.json (+ tokenizer_config.json, config.json), as llama.cpp's BertModel.set_vocab."""
    tj = _load_json(os.path.join(src, "tokenizer.json"), "the tokenizer")
    model = tj.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise ConvertError(f"{src}/tokenizer.json: a WordPiece model with a vocab is needed, got "
                           f"{model.get('type')!r}")
    by_id = {}
    for tok, i in model["vocab"].items():
        by_id[int(i)] = tok
    added = {int(a["id"]): a for a in tj.get("added_tokens") or ()}
    for i, a in added.items():
        by_id[i] = a["content"]
    if by_id and max(by_id) >= n_vocab:
        raise ConvertError(f"{src}: token id {max(by_id)} is past the vocabulary size {n_vocab} of config.json")
    tokens, types = [], []
    for i in range(n_vocab):
        tok = by_id.get(i)
        if tok is None:
            tokens.append(f"[PAD{i}]")
            types.append(2)     # UNUSED
            continue
        if i in added:
            a = added[i]
            special = a.get("special") or (tok.startswith("<|") and tok.endswith("|>"))
            types.append(TOKEN_CONTROL if special else TOKEN_USER_DEFINED)
        else:
            types.append(TOKEN_NORMAL)
        # phantom space: what llama.cpp's WPM tokenizer matches against (control tokens stay as they are)
        if types[-1] == TOKEN_CONTROL:
            tokens.append(tok)
        elif tok.startswith("##"):
            tokens.append(tok[2:])
        else:
            tokens.append("\u2581" + tok)
    special, add = _special_tokens(src, tj, list(added.values()), n_vocab)
    norm = tj.get("normalizer") or {}
    lowercase = _normalizer_lowercase(norm)
    return tokens, types, special, add, lowercase


def _normalizer_lowercase(norm: dict):
    t = norm.get("type")
    if t == "Lowercase":
        return True
    if t == "BertNormalizer":
        return norm.get("lowercase")
    if t == "Sequence":
        vals = [_normalizer_lowercase(n) for n in norm.get("normalizers", [])]
        return next((v for v in reversed(vals) if v is not None), None)
    return None


def _special_tokens(src: str, tj: dict, added: list, n_vocab: int):
    """gguf-py SpecialVocab for a BERT tokenizer: the special ids (bos/eos fall back to cls/sep) and the add_*
    flags from the TemplateProcessing post-processor ([CLS] A [SEP] -> add bos and eos, not sep)."""
    cfg = _load_json(os.path.join(src, "tokenizer_config.json"), "the tokenizer config", required=False) or {}
    cfg = dict(cfg)
    if not cfg.get("bos_token") and cfg.get("cls_token"):
        cfg["bos_token"] = cfg["cls_token"]
    if not cfg.get("eos_token") and cfg.get("sep_token"):
        cfg["eos_token"] = cfg["sep_token"]
    add = {}
    pp = tj.get("post_processor") or {}
    for proc in pp.get("processors", [pp]):
        if proc.get("type") == "BertProcessing" or proc.get("type") == "RobertaProcessing":
            add.update(bos=True, eos=True, sep=True)
        elif proc.get("type") == "TemplateProcessing":
            single = proc.get("single") or []
            first = single[0].get("SpecialToken", {}).get("id") if len(single) > 1 else None
            last = single[-1].get("SpecialToken", {}).get("id") if len(single) > 1 else None
            if first or last:
                if first not in (None, cfg.get("bos_token"), cfg.get("cls_token")) or \
                        last not in (None, cfg.get("eos_token")):
                    raise ConvertError(f"{src}/tokenizer.json: a post-processor template {first!r} ... {last!r} "
                                       f"that this converter does not know")
                if first:
                    add["bos"] = True
                if last:
                    add["eos"] = True
            pair = proc.get("pair") or []
            inner = pair[1:-1] if first and last else pair
            # [CLS] A [SEP] B [SEP]: the separator between A and B is the eos already added: add_sep stays false
            if len(inner) >= 3 and inner[0].get("Sequence", {}).get("id") == "A":
                add["sep"] = bool(len(inner) == 4 and not last)
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        v = cfg.get(f"add_{typ}_token")
        if isinstance(v, bool) and typ not in add:
            add[typ] = v
    special = {}
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        entry = cfg.get(f"{typ}_token")
        content = entry.get("content") if isinstance(entry, dict) else entry
        if isinstance(content, str):
            tid = next((a.get("id") for a in added if a.get("content") == content), None)
            if isinstance(tid, int) and 0 <= tid < n_vocab:
                special[typ] = tid
    config = _load_json(os.path.join(src, "config.json"), "the model config")
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        tid = config.get(f"{typ}_token_id")
        if typ not in special and isinstance(tid, int) and 0 <= tid < n_vocab:
            special[typ] = tid
    return special, add


_ID_KEYS = {"bos": "bos", "eos": "eos", "unk": "unknown", "sep": "seperator", "pad": "padding", "cls": "cls",
            "mask": "mask"}      # llama.cpp's key names (sic: "seperator")


def convert_bert(src: str, out_path: str, out_type: str = "f16", name: str | None = None) -> dict:
    """Convert the BERT model in folder src to a GGUF at out_path (written atomically); out_type "f32", "f16" or
    "q8_0". Returns {tensor name: GGMLType written}."""
    try:
        out = OUT_TYPES[out_type.lower()]
    except (KeyError, AttributeError):
        raise ConvertError(f"unknown output type {out_type!r}; choose one of {', '.join(OUT_TYPES)}") from None
    config = _load_json(os.path.join(src, "config.json"), "the model config")
    archs = config.get("architectures") or []
    if config.get("model_type") != "bert" or not any(a in ARCHITECTURES for a in archs):
        raise ConvertError(f"{src}/config.json: model_type {config.get('model_type')!r}, architectures {archs}: "
                           f"this converter handles {', '.join(ARCHITECTURES)}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ConvertError(f"{src}/config.json: position_embedding_type {config['position_embedding_type']!r}; "
                           f"a bert GGUF has absolute positions")
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        raise ConvertError(f"{src}/config.json: hidden_act {act!r}; a bert GGUF's FFN is GELU")

    def hp(key):
        v = config.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            raise ConvertError(f"{src}/config.json: {key} is {v!r}, expected a positive number")
        return v

    n_layer, n_embd, n_ff = int(hp("num_hidden_layers")), int(hp("hidden_size")), int(hp("intermediate_size"))
    n_head, n_ctx, n_vocab = int(hp("num_attention_heads")), int(hp("max_position_embeddings")), int(hp("vocab_size"))
    eps = float(hp("layer_norm_eps"))
    n_types = int(config.get("type_vocab_size", 1))
    tokens, types, special, add, lowercase = vocabulary(src, n_vocab)
    pool = pooling_type(src)

    w = GGUFWriter()
    w.add_string("general.architecture", "bert")
    w.add_string("general.type", "model")
    w.add_string("general.name", name or os.path.basename(os.path.normpath(src)))
    w.add_uint32("bert.block_count", n_layer)
    w.add_uint32("bert.context_length", n_ctx)
    w.add_uint32("bert.embedding_length", n_embd)
    w.add_uint32("bert.feed_forward_length", n_ff)
    w.add_uint32("bert.attention.head_count", n_head)
    w.add_float32("bert.attention.layer_norm_epsilon", eps)
    w.add_uint32("general.file_type", FILE_TYPES[out])
    w.add_bool("bert.attention.causal", False)
    if pool is not None:
        w.add_uint32("bert.pooling_type", pool)
    w.add_uint32("general.quantization_version", QUANTIZATION_VERSION)
    w.add_uint32("tokenizer.ggml.token_type_count", n_types)
    w.add_string("tokenizer.ggml.model", "bert")
    w.add_string("tokenizer.ggml.pre", TOKENIZER_PRE)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", np.asarray(types, np.int32))
    for typ, tid in special.items():
        w.add_uint32(f"tokenizer.ggml.{_ID_KEYS[typ]}_token_id", tid)
    for typ, flag in add.items():
        w.add_bool(f"tokenizer.ggml.add_{typ}_token", flag)
    if lowercase is not None:
        w.add_bool("tokenizer.ggml.normalizer.lowercase", lowercase)

    st_path = os.path.join(src, "model.safetensors")
    if not os.path.isfile(st_path):
        raise ConvertError(f"{st_path} is missing (only single-file safetensors models are converted)")
    expect = {"token_embd.weight": (n_vocab, n_embd), "position_embd.weight": (n_ctx, n_embd),
              "token_types.weight": (n_types, n_embd)}
    for i in range(n_layer):
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            expect[f"blk.{i}.{t}.weight"] = (n_embd, n_embd)
        expect[f"blk.{i}.ffn_up.weight"] = (n_ff, n_embd)
        expect[f"blk.{i}.ffn_down.weight"] = (n_embd, n_ff)
    plan = {}
    with SafetensorsFile(st_path) as st:
        for hf in st.names:
            g = gguf_name(hf)
            if g is None:
                continue
            if g in plan:
                raise ConvertError(f"{st_path}: two tensors map to {g!r}")
            arr = st.array(hf)
            if arr.dtype.kind != "f":
                kind = "BF16" if arr.dtype == np.dtype("<u2") else arr.dtype
                raise ConvertError(f"{st_path}: tensor {hf!r} is {kind}, expected F32 or F16")
            want = expect.get(g, (n_ff,) if g.startswith("blk.") and ".ffn_up." in g else (n_embd,))
            if tuple(arr.shape) != want:
                raise ConvertError(f"{st_path}: tensor {hf!r} has shape {tuple(arr.shape)}, config.json says "
                                   f"{want}")
            t = tensor_type(g, arr.ndim, out)
            if t == GGMLType.F32:
                w.add_tensor(g, np.asarray(arr, np.float32))
            elif t == GGMLType.F16:
                w.add_tensor(g, np.asarray(arr, np.float32).astype(np.float16))
            else:
                w.add_tensor(g, kernels.quantize_as_llama_file(np.asarray(arr, np.float32), int(t)), ggml_type=t,
                             shape=arr.shape)
            plan[g] = t
        missing = sorted(set(expect) - set(plan))
        if missing or len(plan) != len(expect) + 2 + 10 * n_layer:  # + norms, biases
            raise ConvertError(f"{st_path}: tensors missing: {', '.join(missing) or 'biases or norms'}")
        w.write(out_path)
    return plan
