"""Pooling: a sequence's final hidden rows -> its embedding (or its rerank scores), as llama.cpp's build_pooling and
its server's send_embedding / send_rerank do. The one owner of these facts; the Scheduler calls `embedding()` when an
embedding input's rows are all in.

  pooling (the file's {arch}.pooling_type; None when absent -> "mean", fastgguf's behaviour for chat models)
    none   every token's vector (n_tokens, n_embd), not normalised (llama-server: "normalize only when there is
           pooling"; OpenAI's /v1/embeddings refuses it)
    mean   the mean of the rows                      } then L2-normalised: llama.cpp's --embd-normalize default (2)
    cls    the first row (BERT's [CLS])              }
    last   the last row (Qwen3-Embedding)            }
    rank   the first row of a non-causal model, the last of a causal one (llama.cpp's llm_graph_input_cls), through
           the classifier head: cls.weight (+bias) -> tanh -> cls.output.weight (+bias), then a softmax for qwen3
           (Hparams.rank_softmax); the first n_cls_out values are the scores, score 0 the relevance (not
           normalised). Without any head (llama.cpp accepts such files) the pooled row's first values are taken.

Arithmetic: float64 over the float32 rows, the result float32 (llama.cpp sums in float32: cosine ~1e-7 apart).
"""
import math

import numpy as np

__all__ = ["pooling_of", "max_input_tokens", "embedding", "normalize", "pool", "rank_scores", "SETTABLE"]

SETTABLE = ("none", "mean", "cls", "last")  # what a server may set over the file's (rank needs its classifier head)


def pooling_of(model):
    """The pooling an embedding of `model` gets: the file's, or "mean" when the file does not say."""
    return model.hparams.pooling or "mean"


def max_input_tokens(model, n_ctx):
    """The longest input an embedding (or rerank pair) may have in a context of n_ctx tokens. A non-causal model
    (bert) runs an input whole, in one forward call, and has absolute position embeddings for n_ctx_train
    positions only, so the training context bounds it too (llama.cpp: its context defaults to n_ctx_train, and an
    input past its batch is refused, never truncated)."""
    limit = model.weights.max_tokens   # the forward pass owns it: 0 for a causal model
    return min(n_ctx, limit) if limit else n_ctx


def normalize(v):
    """L2 normalisation as llama.cpp's common_embd_normalize(embd_norm=2): a zero vector stays zero."""
    v = np.asarray(v, dtype=np.float64)
    norm = math.sqrt(float(v @ v))
    return v / norm if norm > 0 else v


def pool(rows, pooling, causal=True):
    """The pooled float64 vector (n_embd,) of rows (n_tokens, n_embd) for mean, cls, last and rank."""
    rows = np.asarray(rows)
    if pooling == "mean":
        return rows.mean(axis=0, dtype=np.float64)
    if pooling == "cls" or (pooling == "rank" and not causal):
        return rows[0].astype(np.float64)
    if pooling in ("last", "rank"):
        return rows[-1].astype(np.float64)
    raise ValueError(f"pooling {pooling!r} gives no single vector")


def rank_scores(pooled, classifier, hp):
    """The rank head over a pooled vector: float64 scores (hp.n_cls_out,)."""
    x = np.asarray(pooled, dtype=np.float64)
    head = classifier or {}
    if "cls.weight" in head:
        x = head["cls.weight"].astype(np.float64) @ x
        if "cls.bias" in head:
            x = x + head["cls.bias"]
        x = np.tanh(x)
    if "cls.output.weight" in head:
        x = head["cls.output.weight"].astype(np.float64) @ x
        if "cls.output.bias" in head:
            x = x + head["cls.output.bias"]
    if hp.rank_softmax:
        e = np.exp(x - x.max())
        x = e / e.sum()
    return x[:hp.n_cls_out]


def embedding(model, rows):
    """What an embedding input of `model` yields from its final hidden rows (n_tokens, n_embd) float32: see the
    module docstring. float32: (n_embd,) for mean/cls/last, (n_tokens, n_embd) for none, (n_cls_out,) for rank."""
    if np.isnan(rows).any():  # a broken model: NaN vectors are never returned (nor a NaN rank score)
        raise FloatingPointError("the model produced NaN hidden states (broken weights?)")
    pooling = pooling_of(model)
    if pooling == "none":
        return np.array(rows, dtype=np.float32)
    hp = model.hparams
    v = pool(rows, pooling, hp.causal)
    if pooling == "rank":
        return rank_scores(v, model.classifier, hp).astype(np.float32)
    return normalize(v).astype(np.float32)
