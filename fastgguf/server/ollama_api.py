"""Ollama's API (/api/...): the same Scheduler, limits and API key as the OpenAI routes; the Ollama <-> OpenAI
shaping is fastgguf.openai.ollama. Streams are newline-delimited JSON (stream defaults to true, as Ollama's);
errors are Ollama's {"error": message} with the OpenAI routes' status codes, except a full queue: 503, as Ollama.

    POST /api/chat  /api/generate  /api/embed  /api/embeddings (legacy)  /api/show     GET /api/tags  /api/ps
    GET /api/version
"""
import asyncio
import json
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

import fastgguf
from fastgguf.engine.reasoning import detect_reasoning
from fastgguf.engine.scheduler import Start
from fastgguf.openai import ollama as O
from fastgguf.openai import protocol
from fastgguf.openai.protocol import APIError
from fastgguf.openai.responses import builder, error_body
from fastgguf.server import sse
from fastgguf.server.routes import _hang_up, in_worker

__all__ = ["router"]

router = APIRouter(prefix="/api")
NDJSON = "application/x-ndjson"


def _error(exc):
    """Ollama's error response of any exception (a full queue: 503, Ollama's "server busy")."""
    status, body, headers = error_body(exc)
    if status == 429:
        status = 503
    return JSONResponse(O.error_dict(body), status_code=status, headers=headers or None)


async def _json(request):
    try:
        return json.loads(await request.body() or b"{}")
    except ValueError:
        raise APIError("The request body is not valid JSON.") from None


def ollama_route(method, path):
    """A route whose every error is Ollama's shape."""
    def wrap(fn):
        async def route(request: Request):
            try:
                return await fn(request)
            except Exception as e:  # noqa: BLE001 - before anything was sent: a real status
                return _error(e)
        route.__name__ = fn.__name__
        return router.api_route(path, methods=[method])(route)
    return wrap


async def _run(request, prep, shaper, t_received):
    """Submit prep to the Scheduler; a JSON response, or an NDJSON stream (prep.stream)."""
    state = request.app.state
    loop = asyncio.get_running_loop()
    q = asyncio.Queue()
    req = prep.request(q.put_nowait, loop)
    b = builder(state.model, prep)
    state.engine.submit(req)  # QueueFull -> 503, a prompt that does not fit -> 400

    def last(line=None):
        return shaper.final(b.finish[0], b.usage, t_received, req.t_submit, req.t_first, time.perf_counter(), line)

    if not prep.stream:
        watch = asyncio.ensure_future(_hang_up(request, req, q))
        try:
            while b.usage is None:
                evs = await q.get()
                if evs is None:  # the client hung up: its sequence is cancelled
                    return JSONResponse({}, status_code=499)
                b.feed(evs)
        finally:
            watch.cancel()
            req.cancel()
        return JSONResponse(last(shaper.whole(b.final())))

    # hold the response until the first token, so an error before it is a real status (NDJSON has no ping); a
    # client that hangs up meanwhile cancels its request
    early = []
    watch = asyncio.ensure_future(_hang_up(request, req, q))
    try:
        while all(isinstance(ev, Start) for ev in early):
            evs = await q.get()
            if evs is None:
                return JSONResponse({}, status_code=499)
            early += evs
    finally:
        watch.cancel()
    try:
        first = shaper.lines(b.chunks(early))
    except Exception:
        req.cancel()
        raise

    async def lines():
        for line in first:
            yield json.dumps(line, ensure_ascii=False) + "\n"
        while b.usage is None:
            evs = await q.get()
            try:
                out = shaper.lines(b.chunks(evs))
            except Exception as e:  # noqa: BLE001 - after the first line: an error line ends the stream
                yield json.dumps(O.error_dict(error_body(e)[1]), ensure_ascii=False) + "\n"
                return
            for line in out:
                yield json.dumps(line, ensure_ascii=False) + "\n"
        yield json.dumps(last(), ensure_ascii=False) + "\n"
    return sse.EventStream(lines(), req.cancel, media_type=NDJSON)


@ollama_route("POST", "/chat")
async def chat(request):
    t0 = time.perf_counter()
    state = request.app.state
    body, mode = O.chat_body(await _json(request), state.model)
    prep = await in_worker(request, protocol.prepare_chat, state.model, body, state.engine.n_ctx,
                           reasoning_format=mode)
    return await _run(request, prep, O.Shaper(state.model, chat=True, message=True), t0)


@ollama_route("POST", "/generate")
async def generate(request):
    t0 = time.perf_counter()
    state = request.app.state
    kind, body, mode = O.generate_body(await _json(request), state.model)
    shaper = O.Shaper(state.model, chat=kind == "chat", message=False)
    if kind == "load":  # Ollama's way to load a model: it is loaded
        line = shaper._line(done=True)
        line["done_reason"] = "load"
        return JSONResponse(line)
    if kind == "chat":
        prep = await in_worker(request, protocol.prepare_chat, state.model, body, state.engine.n_ctx,
                               reasoning_format=mode)
    else:
        prep = await in_worker(request, protocol.prepare_completion, state.model, body, state.engine.n_ctx)
    return await _run(request, prep, shaper, t0)


async def _embed(request, legacy):
    t0 = time.perf_counter()
    state = request.app.state
    body = O.embed_body(await _json(request), state.model, legacy)
    prep = await in_worker(request, protocol.prepare_embedding, state.model, body, state.engine.n_ctx)
    q = asyncio.Queue()
    req = prep.request(q.put_nowait, asyncio.get_running_loop())
    b = builder(state.model, prep)
    state.engine.submit(req)
    watch = asyncio.ensure_future(_hang_up(request, req, q))
    try:
        while b.usage is None:
            evs = await q.get()
            if evs is None:
                return JSONResponse({}, status_code=499)
            b.feed(evs)
    finally:
        watch.cancel()
        req.cancel()
    vectors = [v["embedding"] for v in b.final()["data"]]
    if legacy:
        return JSONResponse({"embedding": vectors[0]})
    return JSONResponse({"model": protocol.model_id(state.model), "embeddings": vectors,
                         "total_duration": int((time.perf_counter() - t0) * 1e9), "load_duration": 0,
                         "prompt_eval_count": b.usage["prompt_tokens"]})


@ollama_route("POST", "/embed")
async def embed(request):
    return await _embed(request, legacy=False)


@ollama_route("POST", "/embeddings")
async def embeddings(request):
    return await _embed(request, legacy=True)


def _entry(state):
    """The served model as an entry of /api/tags and /api/ps."""
    model = state.model
    name = protocol.model_id(model)
    return {"name": name, "model": name, "digest": "", "size": model.memory()["file"],
            "modified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.created)),
            "details": O.details(model)}


@ollama_route("GET", "/tags")
async def tags(request):
    return JSONResponse({"models": [_entry(request.app.state)]})


@ollama_route("GET", "/ps")
async def ps(request):
    state = request.app.state
    e = _entry(state)
    e.update(expires_at="9999-12-31T23:59:59Z", size_vram=0, context_length=state.engine.n_ctx)  # never unloaded
    del e["modified_at"]
    return JSONResponse({"models": [e]})


@ollama_route("GET", "/version")
async def version(request):
    return JSONResponse({"version": fastgguf.__version__})


@ollama_route("POST", "/show")
async def show(request):
    state = request.app.state
    model = state.model
    O.check_model(await _json(request), model)
    template = model.tokenizer.chat_template or ""
    arch = model.hparams.arch
    caps = ["embedding"] if model.is_encoder else ["completion"]
    if not model.is_encoder and "tools" in template:
        caps.append("tools")
    if detect_reasoning(template):
        caps.append("thinking")
    info = {"general.architecture": arch, f"{arch}.context_length": model.n_ctx_train,
            f"{arch}.embedding_length": model.n_embd, f"{arch}.block_count": model.hparams.n_layer,
            "general.parameter_count": sum(t.n_elements for t in model.file.tensors.values())}
    return JSONResponse({"modelfile": "", "parameters": "", "template": template, "details": O.details(model),
                         "model_info": info, "capabilities": caps,
                         "modified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.created))})
