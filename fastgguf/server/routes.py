"""The HTTP routes, at module level: each takes a Lease on the model its request names from the app's ModelRegistry
(use_model: loaded first if need be; held until the response has been sent, ReleaseLeases) and reads the rest from
`request.app.state` (set by create_app). A generation route is four calls: use_model -> protocol.prepare_* (in a
worker thread) -> the model's Scheduler (submit) -> responses' builder (respond).

Every route of `router` exists with and without the /v1 prefix (create_app includes it twice); `v1_router`'s only
under /v1 (/completions without it is llama-server's native completion: server/llama_api.py)."""
import asyncio
import collections
import functools
import json
import threading
from typing import Callable, NamedTuple, Optional

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from fastgguf.engine import sandbox
from fastgguf.engine.scheduler import Start
from fastgguf.api.openai import protocol
from fastgguf.api.openai.protocol import APIError
from fastgguf.api.openai.responses import builder
from fastgguf.server import schemas as S
from fastgguf.server import sse
from fastgguf.server.errors import error_response

__all__ = ["router", "v1_router", "use_model", "ReleaseLeases"]

router = APIRouter()
v1_router = APIRouter()  # routes only under /v1: OpenAI's /v1/completions (llama-server's /completions is its own)
LEASES = "fastgguf.leases"  # the scope key of a request's Leases


class ReleaseLeases:
    """ASGI middleware: the Leases a request took (use_model) are released once its response has been sent, a
    stream's last chunk included, or the request failed."""

    def __init__(self, app):
        self.app = app

    def __getattr__(self, name):  # the FastAPI app's own attributes (openapi, state, ...) through the wrapper
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        leases = scope.setdefault(LEASES, [])
        try:
            await self.app(scope, receive, send)
        finally:
            for lease in leases:
                lease.release()


async def use_model(request, name, keep_alive=...):
    """A Lease on the model `name` names (the registry's resolve(): a 404 in the dialect's words for an unknown
    one), loaded first if need be, held until the response is sent. keep_alive: seconds it stays loaded after this
    request (None: never; ...: the model's default)."""
    registry = request.app.state.registry
    lease = await registry.acquire(name, keep_alive, ollama=request.url.path.startswith("/api/"))
    request.scope.setdefault(LEASES, []).append(lease)
    return lease


# -- generation ----------------------------------------------------------------------------------------------------

async def in_worker(http_req, fn, *args, **kw):
    """fn(*args, **kw) in a worker thread, at most app.state.workers (a CapacityLimiter) at once: a request's CPU
    work (the template, tokenizing a long prompt, compiling a grammar, detokenizing: milliseconds to seconds) never
    stalls the event loop, and N costly requests wait for each other, not take every thread of the pool. A client
    that hangs up meanwhile cancels what runs in the compile sandbox for it (sandbox.cancel_on: the grammar
    compile's worker process is killed)."""
    cancel = threading.Event()
    watch = asyncio.ensure_future(_disconnected(http_req, cancel))
    try:
        return await anyio.to_thread.run_sync(functools.partial(_cancellable, cancel, fn, *args, **kw),
                                              limiter=http_req.app.state.workers)
    finally:
        watch.cancel()


def _cancellable(cancel, fn, *args, **kw):
    with sandbox.cancel_on(cancel):
        return fn(*args, **kw)


async def _disconnected(http_req, event):
    """Set event when the client disconnects (the body was read already)."""
    while (await http_req.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)
    event.set()


async def prepare(http_req, prepare_fn, body, **kw):
    """(lease, protocol.prepare_*(model, body, n_ctx)): the model the body names, and its request prepared in a
    worker thread (in_worker) before it is queued."""
    lease = await use_model(http_req, body.model)
    return lease, await in_worker(http_req, prepare_fn, lease.model, body.model_dump(exclude_none=True),
                                  lease.engine.n_ctx, **kw)


async def _hang_up(http_req, req, q):
    """Watch the connection of a request whose body was read: on the client's disconnect, cancel the engine's
    request and wake its waiter (None). Independent of engine events: polling between events never ran while tokens
    kept coming, and a hung-up request generated to its end (issue 24)."""
    while (await http_req.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # (uvicorn blocks until the disconnect; a server that answers at once is polled)
    req.cancel()
    q.put_nowait(None)


class Dialect(NamedTuple):
    """How one API answers a generation: make(model, prep) -> its builder (chunks(events), feed(events) + final(),
    usage once done, error_chunk(exc)), frame(dict) -> one event of its stream, `done`, the stream's last words,
    `ping`, what a queued stream sends while it waits (None: no pings, the response is held until the first token
    however long it takes), and the stream's media_type. Errors with a status take the shape of the route's API
    (errors.error_response, by path)."""
    make: Callable = builder
    frame: Callable = sse.data
    done: str = sse.DONE
    ping: Optional[str] = sse.PING
    media_type: str = "text/event-stream"


OPENAI = Dialect()


async def respond(http_req, lease, prep, dialect=OPENAI):
    """Submit a prepared request to its model's Scheduler (lease: use_model's) and answer it: a JSON response, or a
    stream of chunks. Errors before the first token are a real HTTP status; after it, an error event ends the
    stream. A client that hangs up before anything was sent: 499, its request cancelled."""
    state = http_req.app.state
    loop = asyncio.get_running_loop()
    q = asyncio.Queue()
    req = prep.request(q.put_nowait, loop)
    b = dialect.make(lease.model, prep)
    path = http_req.url.path
    try:
        lease.engine.submit(req)
    except Exception as e:  # noqa: BLE001 - QueueFull -> 429, a prompt that does not fit -> 400
        return error_response(e, path)

    if not prep.stream:
        watch = asyncio.ensure_future(_hang_up(http_req, req, q))
        try:
            while b.usage is None:
                evs = await q.get()
                if evs is None:  # the client hung up: its sequences are cancelled (slots free at the next step)
                    return JSONResponse({}, status_code=499)
                try:
                    b.feed(evs)
                except Exception as e:  # noqa: BLE001 - nothing was sent yet: a real status
                    return error_response(e, path)
        finally:
            watch.cancel()
            req.cancel()
        return JSONResponse(b.final())

    # hold the response until the first token (an error before it is a real HTTP status), unless the request
    # waits longer than a ping interval (a dialect with pings): then the stream starts, with pings while it is
    # queued. A client that hangs up meanwhile cancels its request.
    ping_interval = state.ping_interval if dialect.ping else None
    early, t_end = [], loop.time() + (ping_interval or 0)
    watch = asyncio.ensure_future(_hang_up(http_req, req, q))
    try:
        while all(isinstance(ev, Start) for ev in early):
            left = None if ping_interval is None else t_end - loop.time()
            if left is not None and left <= 0:
                break
            try:
                evs = await asyncio.wait_for(q.get(), left)
            except asyncio.TimeoutError:
                break
            if evs is None:  # the client hung up (its request is cancelled)
                return JSONResponse({}, status_code=499)
            early += evs
    finally:
        watch.cancel()
    try:
        first_chunks = b.chunks(early)
    except Exception as e:  # noqa: BLE001
        req.cancel()
        return error_response(e, path)

    async def events():
        for c in first_chunks:
            yield dialect.frame(c)
        while b.usage is None:
            if dialect.ping and req.state == "queued":
                try:
                    evs = await asyncio.wait_for(q.get(), ping_interval)
                except asyncio.TimeoutError:
                    yield dialect.ping
                    continue
            else:
                evs = await q.get()
            if evs is None:  # the hang-up watcher's, as the hold ended: the request is cancelled
                return
            try:
                chunks = b.chunks(evs)
            except Exception as e:  # noqa: BLE001 - after the first chunk: an error event
                yield dialect.frame(b.error_chunk(e))
                return
            for c in chunks:
                yield dialect.frame(c)
        yield dialect.done
    return sse.EventStream(events(), req.cancel, media_type=dialect.media_type)


_STREAMS = {200: {"content": {"text/event-stream": {}}}}


@router.post("/chat/completions", response_model=S.ChatCompletion, responses=_STREAMS)
async def chat_completions(body: S.ChatCompletionRequest, request: Request):
    return await respond(request, *await prepare(request, protocol.prepare_chat, body,
                                                 reasoning_format=request.app.state.reasoning_format))


@v1_router.post("/completions", response_model=S.Completion, responses=_STREAMS)
async def completions(body: S.CompletionRequest, request: Request):
    return await respond(request, *await prepare(request, protocol.prepare_completion, body))


@router.post("/embeddings", response_model=S.EmbeddingResponse,
             description="Each vector is the model's final hidden states pooled as its file says (mean, cls or last; "
                         "mean when the file does not say, as for chat models) and L2-normalized; batched with "
                         "generation. A file with pooling none (per-token vectors) is refused, as by llama-server.")
async def embeddings(body: S.EmbeddingRequest, request: Request):
    return await respond(request, *await prepare(request, protocol.prepare_embedding, body))


@router.post("/rerank", response_model=S.RerankResponse, response_model_exclude_none=True,
             description="llama-server's rerank (Jina / Cohere shape): each document scored against the query by a "
                         "reranker (pooling rank), results sorted by relevance_score, best first.")
async def rerank(body: S.RerankRequest, request: Request):
    return await respond(request, *await prepare(request, protocol.prepare_rerank, body))


# -- models, tokens, health, metrics -------------------------------------------------------------------------------

CHAT_MODEL_NOTE = ("not an embedding model: its file has no pooling_type, so /v1/embeddings mean-pools its final "
                   "hidden states; such vectors are not meant for retrieval")


def card(entry, created):
    """A model's entry in /v1/models: its id, aliases and tags (llama-server's --alias a,b and --tags), status
    ({"value": "loaded" | "loading" | "unloaded"}, as llama-server's router mode shows it; "failed" and the error
    after a load that failed) and, while loaded, what it is for."""
    c = {"id": entry.name, "object": "model", "created": created, "owned_by": "fastgguf",
         "status": {"value": entry.state}, "aliases": entry.shown_aliases, "tags": entry.tags}
    if entry.error and entry.state == "unloaded":
        c["status"].update(failed=True, error=entry.error)
    if entry.model is not None:
        pooling = entry.model.hparams.pooling
        c.update(pooling=pooling, embedding=pooling in ("none", "mean", "cls", "last"), rerank=pooling == "rank")
        if pooling is None:
            c["note"] = CHAT_MODEL_NOTE
    return c


@router.get("/models", response_model=S.ModelList)
async def models(request: Request):
    state = request.app.state
    state.registry.refresh()
    return {"object": "list", "data": [card(e, state.created) for e in state.registry.entries.values()]}


@router.get("/models/{model_name:path}", response_model=S.ModelCard)
async def model_card(model_name: str, request: Request):
    state = request.app.state
    return card(state.registry.resolve(model_name), state.created)


@router.post("/tokenize", response_model=S.TokenizeResponse)
async def tokenize(body: S.TokenizeRequest, request: Request):
    model = (await use_model(request, body.model)).model

    def tokens_json():   # encoded here too: a 2 MB prompt's id list takes FastAPI's encoder most of a second
        ids = model.tokenize(body.content, add_special=body.add_special, parse_special=body.parse_special)
        if body.with_pieces:
            return json.dumps({"tokens": [{"id": int(t), "piece": _piece(model, t)} for t in ids]},
                              ensure_ascii=False)
        return json.dumps({"tokens": [int(t) for t in ids]})
    return Response(await in_worker(request, tokens_json), media_type="application/json")


def _piece(model, t):
    """llama-server's piece of a token (special tokens rendered): its text, or its bytes (a list of ints) when they
    are not valid UTF-8 alone (a part of a character)."""
    b = model.tokenizer.token_to_piece(int(t), special=True)
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return list(b)


@router.post("/detokenize", response_model=S.DetokenizeResponse)
async def detokenize(body: S.DetokenizeRequest, request: Request):
    model = (await use_model(request, body.model)).model
    for t in body.tokens:
        if not 0 <= t < model.n_vocab:
            raise APIError(f"token id {t} is out of range for a vocabulary of {model.n_vocab}", param="tokens")
    return {"content": await in_worker(request, model.detokenize, body.tokens)}


@router.get("/health", response_model=S.Health)
async def health():
    return {"status": "ok"}


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request):
    engines = [e.engine for e in request.app.state.registry.loaded()]
    m = collections.Counter()
    for eng in engines:
        m.update(eng.m)

    def total(method):
        return sum(getattr(eng, method)() for eng in engines)
    rows = [
        ("fastgguf_prompt_tokens_total", "counter", "prompt tokens received (uncached)", m["prompt_tokens"]),
        ("fastgguf_prompt_tokens_evaluated_total", "counter", "prompt tokens evaluated", m["prompt_tokens_evaluated"]),
        ("fastgguf_prompt_tokens_copied_total", "counter", "prompt tokens of n > 1 choices copied, not evaluated",
         m["prompt_tokens_copied"]),
        ("fastgguf_completion_tokens_total", "counter", "completion tokens generated", m["completion_tokens"]),
        ("fastgguf_draft_tokens_total", "counter", "speculative decoding: tokens drafted", m["draft_tokens"]),
        ("fastgguf_draft_accepted_total", "counter", "speculative decoding: drafted tokens accepted",
         m["draft_accepted"]),
        ("fastgguf_requests_total", "counter", "requests accepted", m["requests"]),
        ("fastgguf_request_errors_total", "counter", "requests that failed in the engine", m["errors"]),
        ("fastgguf_requests_running", "gauge", "requests with a sequence in a slot", total("running_requests")),
        ("fastgguf_requests_queued", "gauge", "requests waiting for a slot", total("queued_requests")),
        ("fastgguf_sequences_queued", "gauge", "sequences (prompts x n) waiting for a slot; --max-queue bounds it",
         total("queued_sequences")),
        ("fastgguf_slots", "gauge", "parallel sequences (slots)", sum(eng.parallel for eng in engines)),
    ]
    out = []
    for name, kind, help_, v in rows:
        out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {v}"]
    out += ["# HELP fastgguf_batch_size sequences per forward step", "# TYPE fastgguf_batch_size summary",
            f"fastgguf_batch_size_sum {m['batch_seqs']}", f"fastgguf_batch_size_count {m['steps']}",
            "# HELP fastgguf_batch_tokens tokens per forward step", "# TYPE fastgguf_batch_tokens summary",
            f"fastgguf_batch_tokens_sum {m['batch_tokens']}", f"fastgguf_batch_tokens_count {m['steps']}",
            "# HELP fastgguf_time_to_first_token_seconds from submission to the first sampled token",
            "# TYPE fastgguf_time_to_first_token_seconds summary",
            f"fastgguf_time_to_first_token_seconds_sum {m['ttft_sum']:.6f}",
            f"fastgguf_time_to_first_token_seconds_count {m['ttft_count']}"]
    return PlainTextResponse("\n".join(out) + "\n", media_type="text/plain; version=0.0.4")
