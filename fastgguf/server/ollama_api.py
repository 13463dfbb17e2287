"""Ollama's API (/api/...): the same Scheduler, limits and API key as the OpenAI routes; the Ollama <-> OpenAI
shaping is fastgguf.api.ollama. Streams are newline-delimited JSON (stream defaults to true, as Ollama's);
errors are Ollama's {"error": message} with the OpenAI routes' status codes, except a full queue: 503, as Ollama
(errors.error_response, by path: the errors of the Guard, of CORS and of unknown /api/... routes too).

    POST /api/chat  /api/generate  /api/embed  /api/embeddings (legacy)  /api/show     GET /api/tags  /api/ps
    GET /api/version
"""
import json
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

import fastgguf
from fastgguf.engine.reasoning import detect_reasoning
from fastgguf.api import ollama as O
from fastgguf.api.openai import protocol
from fastgguf.api.openai.protocol import APIError
from fastgguf.server import sse
from fastgguf.server.routes import Dialect, in_worker, respond

__all__ = ["router"]

router = APIRouter(prefix=O.PREFIX)


def _load(raw):
    """A request body's JSON (bytes; empty: {})."""
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        raise APIError("The request body is not valid JSON.") from None


async def _prepare(request, fn, *args):
    """fn(model, body, n_ctx, *args) of the request's body in a worker thread (routes.in_worker): its JSON is parsed
    and shaped there, not on the event loop (megabytes of messages take a while)."""
    state = request.app.state
    raw = await request.body()
    return await in_worker(request, lambda: fn(state.model, _load(raw), state.engine.n_ctx, *args))


def _dialect(make):
    """Ollama's way to answer through routes.respond: NDJSON lines, no pings (the response waits for the first
    token), no end marker (the reply's builder sends the last line, with done and the timings)."""
    return Dialect(make, sse.line, "", ping=None, media_type=sse.NDJSON)


@router.post("/chat")
async def chat(request: Request):
    t0 = time.perf_counter()
    state = request.app.state
    prep = await _prepare(request, O.prepare_chat)
    shaper = O.Shaper(state.model, chat=True, message=True)
    return await respond(request, prep, _dialect(lambda model, p: O.Reply(model, p, shaper, t0)))


@router.post("/generate")
async def generate(request: Request):
    t0 = time.perf_counter()
    state = request.app.state
    kind, prep = await _prepare(request, O.prepare_generate)
    shaper = O.Shaper(state.model, chat=kind == "chat", message=False)
    if kind == "load":  # Ollama's way to load a model: it is loaded
        line = shaper._line(done=True)
        line["done_reason"] = "load"
        return JSONResponse(line)
    return await respond(request, prep, _dialect(lambda model, p: O.Reply(model, p, shaper, t0)))


async def _embed(request, legacy):
    t0 = time.perf_counter()
    prep = await _prepare(request, O.prepare_embed, legacy)
    return await respond(request, prep, _dialect(lambda model, p: O.EmbedReply(model, p, legacy, t0)))


@router.post("/embed")
async def embed(request: Request):
    return await _embed(request, legacy=False)


@router.post("/embeddings")
async def embeddings(request: Request):
    return await _embed(request, legacy=True)


def _entry(state):
    """The served model as an entry of /api/tags and /api/ps."""
    model = state.model
    name = protocol.model_id(model)
    return {"name": name, "model": name, "digest": "", "size": model.memory()["file"],
            "modified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.created)),
            "details": O.details(model)}


@router.get("/tags")
async def tags(request: Request):
    return JSONResponse({"models": [_entry(request.app.state)]})


@router.get("/ps")
async def ps(request: Request):
    state = request.app.state
    e = _entry(state)
    e.update(expires_at="9999-12-31T23:59:59Z", size_vram=0, context_length=state.engine.n_ctx)  # never unloaded
    del e["modified_at"]
    return JSONResponse({"models": [e]})


@router.get("/version")
async def version(request: Request):
    return JSONResponse({"version": fastgguf.__version__})


@router.post("/show")
async def show(request: Request):
    return JSONResponse(await _prepare(request, _show, request.app.state.created))


def _show(model, body, n_ctx, created):
    """/api/show's answer: the template, details, model_info and capabilities of the model the body names."""
    O.check_show(body, model)
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
    return {"modelfile": "", "parameters": "", "template": template, "details": O.details(model),
            "model_info": info, "capabilities": caps,
            "modified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))}
