"""create_app: the FastAPI app over one model and its Scheduler, or over a ModelRegistry of models loaded on demand
(server/models.py), each with its own Scheduler (HTTP only; the shaping is fastgguf.api).

Errors are OpenAI's shape {"error": {message, type, param, code}} (server/errors.py): 400 for bad fields (FastAPI's
own 422 validation format is never sent) or a Host not allowed, 401 bad key, 404 unknown model or route, 408 body too
slow, 413 body too large, 429 queue full (Retry-After), 500 otherwise. A streamed request that fails after its first chunk gets an `error` event instead.
"""
import os
import time
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

import fastgguf
from fastgguf.engine import sandbox
from fastgguf.api.openai import protocol
from fastgguf.engine.grammar import available as grammar_available
from fastgguf.engine.params import SamplingParams
from fastgguf.engine.reasoning import MODES
from fastgguf.server import anthropic_api, errors, llama_api, ollama_api, page, responses_api, schemas as S
from fastgguf.server.cors import Cors
from fastgguf.server.limits import Guard
from fastgguf.server.models import Entry, Loader, ModelRegistry, file_size, stop_engine, vocabulary
from fastgguf.server.routes import ReleaseLeases, router, v1_router

__all__ = ["create_app", "one_model"]

WORKERS = 4  # threads preparing requests at once (tokenizing, templates, grammars): more only queue for the GIL


def create_app(model=None, *, parallel=None, n_ctx=None, n_threads=None, api_key=None, max_queue=64,
               max_body_bytes=8 << 20, ping_interval=5.0, engine=None, reasoning_format="parsed", allowed_hosts=None,
               body_timeout=60.0, cors_origins=None, alias=None, slots_show_prompts=False, sampling_defaults=None,
               strict_model_names=False, slot_save_path=None, slots=True, tags=None, pooling=None, registry=None):
    """An ASGI app serving `model` (a fastgguf.Model) with OpenAI's API, or the models of `registry` (a
    server.models.ModelRegistry: several, loaded on demand; then the per-model settings are its Loader's).
    `parallel` sequences decode together (default: 4; 16 for an encoder, engine.scheduler.default_parallel),
    each in a context of `n_ctx` tokens (default: the model's training context, at most 4096); `max_queue` sequences
    (prompts x n) may wait (then 429); `api_key`: required as a Bearer token when given; `reasoning_format`: the
    default of a chat request's reasoning_format ("parsed", "raw" or "none"); `allowed_hosts`: the Host header names
    answered (others: 400; None or "*" in it: any; `fastgguf serve` passes limits.default_hosts); a request body
    must arrive within `body_timeout` seconds (408); `cors_origins`: the pages a browser may call from (None: any
    when there is an API key, else "localhost": this machine's; a list or comma-separated string; "*": any;
    server/cors.py);
    `alias`: the model's id in the API (set as model.alias; its file name is still accepted in requests; several,
    comma-separated as llama-server takes them: all are accepted, the first in sorted order is the id, /v1/models
    lists them as `aliases`); `tags`: labels /v1/models lists (a list or a comma-separated string);
    `strict_model_names`: a request naming another model gets 404 (default: any name is served by this model, as
    llama-server does);
    `slots_show_prompts`: /slots shows each busy slot's prompt text (`slots` False: GET /slots answers 501);
    `sampling_defaults`: SamplingParams fields for requests that do not give them (`fastgguf serve --speculative`:
    {"speculative": ..., "draft_max": ...}; --seed, --temp, --n-predict; set as model.sampling_defaults);
    `slot_save_path`: the folder of POST /slots/{id}?action=save|restore (None: 501); `pooling`: how embeddings
    are pooled, over what the model's file says (none, mean, cls, last: llama-server's --pooling)."""
    if reasoning_format not in MODES:
        raise ValueError(f"reasoning_format must be one of {', '.join(MODES)}, got {reasoning_format!r}")
    if sampling_defaults:
        SamplingParams(**sampling_defaults)  # bad defaults fail here, not in every request
    if registry is None:
        registry = one_model(model, Loader(parallel=parallel, n_ctx=n_ctx, n_threads=n_threads, max_queue=max_queue,
                                           pooling=pooling,
                                           sampling_defaults=sampling_defaults),
                             engine=engine, alias=alias, strict=strict_model_names,
                             tags=tags)

    @asynccontextmanager
    async def lifespan(app):
        given = registry.loaded()  # a Model handed to create_app: loaded already, its engine started here
        if grammar_available():
            await run_in_threadpool(sandbox.prestart)  # a compile worker ready (its start: ~0.5 s)
        for e in given:
            await run_in_threadpool(vocabulary, e.model)
            e.engine.start()
        registry.start()
        try:
            yield
        finally:
            await registry.stop()

    app = FastAPI(title="fastgguf", version=fastgguf.__version__, lifespan=lifespan,
                  responses={400: {"model": S.ErrorResponse}})
    app.state.registry = registry
    app.state.created = int(time.time())
    app.state.ping_interval = ping_interval
    app.state.reasoning_format = reasoning_format
    app.state.slots_show_prompts = slots_show_prompts
    app.state.slots_endpoint = slots
    app.state.slot_save_path = os.fspath(slot_save_path) if slot_save_path is not None else None
    app.state.workers = anyio.CapacityLimiter(WORKERS)  # routes.in_worker: requests' CPU work, off the event loop
    errors.install(app)
    for r in (router, responses_api.router, anthropic_api.router):   # each with and without /v1
        app.include_router(r)
        app.include_router(r, prefix="/v1")
    app.include_router(v1_router, prefix="/v1")  # OpenAI's /v1/completions
    app.include_router(ollama_api.router)  # Ollama's /api/...
    app.include_router(llama_api.router)  # llama-server's /completion(s), /props, /slots, /models/load, /models/unload
    app.include_router(page.router)  # the chat page: GET / and its files under /static/
    return Guard(ReleaseLeases(app), api_key, max_body_bytes, allowed_hosts=allowed_hosts, body_timeout=body_timeout,
                 cors=Cors(cors_origins, keyed=bool(api_key)))


def _names(value):
    """A list or comma-separated string of names -> the sorted distinct non-empty ones."""
    items = value.split(",") if isinstance(value, str) else (value or ())
    return sorted({s.strip() for s in items if s.strip()})


def one_model(model, loader, *, engine=None, alias=None, strict=False, tags=None):
    """The registry of a server of one Model, loaded already and never unloaded by time: it serves any model name
    unless `strict` (then its id, or its file name with or without .gguf). Unloaded by /models/unload, it loads
    again from its file on the next request."""
    aliases = _names(alias)
    name = aliases[0] if aliases else protocol.model_id(model)
    entry = Entry(name, model.path, "given", keep_alive=None,
                  aliases={protocol.file_id(model), protocol.file_id(model) + ".gguf", *aliases})
    entry.shown_aliases, entry.tags = aliases, _names(tags)
    loader.prepare(model, name)
    entry.model, entry.engine, entry.state = model, engine or loader.engine(model), "loaded"
    entry.size = file_size(model.path)
    return ModelRegistry([entry], load=loader, unload=stop_engine, default=name, strict=strict)
