"""The in-process OpenAI-style API, and the public Model that carries it.

    model = fastgguf.Model(path)                                                       # this module's Model
    model.create_completion("Once upon a time", max_tokens=16, temperature=0)          # -> dict
    model.create_chat_completion([{"role": "user", "content": "Hi"}], stream=True)     # -> iterator of chunk dicts
    model.create_embedding(["a cat sat", "a dog ran"])                                  # -> dict (/v1/embeddings)
    reranker.rerank("what is a cat?", ["a cat is a pet", "rust is a language"])         # -> [{index, relevance_score}]

The names follow llama-cpp-python; the dicts are exactly what fastgguf's server sends. A call runs the same three
steps as a route: protocol.prepare_* -> the Scheduler (the model's own, `default_engine`) -> responses' builder.

Why a subclass: engine.Model must not import this layer (imports run server -> api -> engine), yet
`fastgguf.Model(path).create_chat_completion(...)` is public API. So the public `fastgguf.Model` is this small
subclass of fastgguf.engine.model.Model, adding only the OpenAI-shaped methods; the engine, the CLI and the server
never need them, and everything that builds a model for users (fastgguf.Model, the CLI's load_model, the Ray
replicas) builds this one.
"""
import queue
import threading

from fastgguf.engine import model as _model
from fastgguf.engine.scheduler import Scheduler
from fastgguf.api.openai.protocol import is_token_id, prepare_chat, prepare_completion, prepare_embedding, \
    prepare_rerank
from fastgguf.api.openai.responses import builder

__all__ = ["Model", "create_completion", "create_chat_completion", "create_embedding", "embed", "create_rerank",
           "rerank", "default_engine", "run"]


_engine_lock = threading.Lock()


# sequences (prompts x n) the in-process API may queue: more than a server's default, since one call with a batch of
# prompts is the in-process way to use the slots; a larger call is a ValueError naming max_queue
MAX_QUEUE = 4096


def default_engine(model):
    """The model's own Scheduler for the in-process API (started on first use; slots of up to 4096 tokens, as many
    as engine.scheduler.default_parallel gives; up to MAX_QUEUE sequences queued)."""
    with _engine_lock:
        eng = getattr(model, "_api_engine", None)
        if eng is None:
            n_ctx = min(int(getattr(model, "n_ctx_train", 0) or 4096), 4096)
            eng = Scheduler(model, n_ctx=n_ctx, max_queue=MAX_QUEUE)
            model._api_engine = eng
        return eng


def run(model, prep, engine=None):
    """Submit a prepared request; returns the response dict, or an iterator of chunk dicts when prep.stream."""
    engine = engine or default_engine(model)
    q = queue.SimpleQueue()
    req = prep.request(q.put)
    b = builder(model, prep)
    engine.submit(req)

    if not prep.stream:
        try:
            while b.usage is None:
                b.feed(q.get())
        finally:
            req.cancel()
        return b.final()

    def gen():
        try:
            while b.usage is None:
                yield from b.chunks(q.get())
        finally:
            req.cancel()
    return gen()


def _body(kw, **fields):
    body = {k: v for k, v in kw.items() if v is not None}
    body.update({k: v for k, v in fields.items() if v is not None})
    return body


def create_completion(model, prompt, *, engine=None, **kwargs):
    """OpenAI /v1/completions in-process: keyword arguments are the request's fields (max_tokens, temperature,
    stop, seed, n, logprobs, echo, stream, ...). Returns the response dict, or an iterator of chunks with stream."""
    eng = engine or default_engine(model)
    return run(model, prepare_completion(model, _body(kwargs, prompt=prompt), eng.n_ctx), eng)


def create_chat_completion(model, messages, *, engine=None, **kwargs):
    """OpenAI /v1/chat/completions in-process (see create_completion); also tools, tool_choice,
    parallel_tool_calls and reasoning_format ("parsed", "raw", "none"), as over HTTP."""
    eng = engine or default_engine(model)
    return run(model, prepare_chat(model, _body(kwargs, messages=messages), eng.n_ctx), eng)


def create_embedding(model, input, *, engine=None, **kwargs):
    """OpenAI /v1/embeddings in-process (llama-cpp-python's name): input is a string, a list of strings, token
    ids or lists of token ids; keywords: encoding_format ("float" or "base64"), model, dimensions. Each vector is
    the model's final hidden states pooled as its file says (mean, cls or last; mean when the file does not say,
    as for chat models) and L2-normalized (fastgguf.engine.pooling). Returns the dict the server sends."""
    eng = engine or default_engine(model)
    return run(model, prepare_embedding(model, _body(kwargs, input=input), eng.n_ctx), eng)


def embed(model, input, *, engine=None):
    """The embedding (a list of floats) of a string or of a list of token ids; for a list of strings (or of id
    lists), a list of them. A model whose pooling is "none" gives each input's per-token vectors (a list of
    lists of floats), unnormalized, as llama.cpp does. See create_embedding."""
    eng = engine or default_engine(model)
    r = run(model, prepare_embedding(model, {"input": input}, eng.n_ctx, per_token=True), eng)
    vecs = [d["embedding"] for d in r["data"]]
    single = isinstance(input, str) or (isinstance(input, list) and input and is_token_id(input[0]))
    return vecs[0] if single else vecs


def create_rerank(model, query, documents, *, engine=None, **kwargs):
    """/v1/rerank in-process: the dict the server sends (results sorted by relevance_score, best first; usage).
    Keywords: top_n, return_documents, model. The model must be a reranker (pooling rank)."""
    eng = engine or default_engine(model)
    return run(model, prepare_rerank(model, _body(kwargs, query=query, documents=documents), eng.n_ctx), eng)


def rerank(model, query, documents, top_n=None, return_documents=False, *, engine=None):
    """The documents scored against query by a reranker: a list of {"index", "relevance_score"} (and
    "document": {"text"} with return_documents), best first, at most top_n. See create_rerank."""
    return create_rerank(model, query, documents, engine=engine, top_n=top_n,
                         return_documents=return_documents or None)["results"]


class Model(_model.Model):
    __doc__ = _model.Model.__doc__ + """

    The OpenAI-style methods (create_completion, create_chat_completion, create_embedding, embed) run on the model's
    own Scheduler (fastgguf.api.openai.client.default_engine)."""

    def create_completion(self, prompt, **kwargs):
        """OpenAI-style completion in-process (llama-cpp-python's name): the dict fastgguf's server sends for
        /v1/completions, or an iterator of chunk dicts with stream=True. See fastgguf.api.openai.client."""
        return create_completion(self, prompt, **kwargs)

    def create_chat_completion(self, messages, **kwargs):
        """OpenAI-style chat completion in-process: the dict the server sends for /v1/chat/completions, or an
        iterator of chunk dicts with stream=True. See fastgguf.api.openai.client."""
        return create_chat_completion(self, messages, **kwargs)

    def create_embedding(self, input, **kwargs):
        """OpenAI-style embeddings in-process (llama-cpp-python's name): the dict the server sends for
        /v1/embeddings. A vector is the final hidden states pooled as the file says ({arch}.pooling_type; mean
        when absent) and L2-normalized. See fastgguf.api.openai.client.create_embedding."""
        return create_embedding(self, input, **kwargs)

    def embed(self, input):
        """The embedding (list of floats) of a string or token ids; a list of them for a list of inputs
        (pooling "none": per-token vectors)."""
        return embed(self, input)

    def create_rerank(self, query, documents, **kwargs):
        """/v1/rerank in-process: the dict the server sends. See fastgguf.api.openai.client.create_rerank."""
        return create_rerank(self, query, documents, **kwargs)

    def rerank(self, query, documents, top_n=None, return_documents=False):
        """Score documents against query (a reranker: pooling rank): [{"index", "relevance_score"}, ...] best
        first, at most top_n; "document" too with return_documents."""
        return rerank(self, query, documents, top_n, return_documents)
