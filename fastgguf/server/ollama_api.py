"""Ollama's API (/api/...): the same Scheduler, limits and API key as the OpenAI routes; the Ollama <-> OpenAI
shaping is fastgguf.api.ollama. Streams are newline-delimited JSON (stream defaults to true, as Ollama's);
errors are Ollama's {"error": message} with the OpenAI routes' status codes, except a full queue: 503, as Ollama
(errors.error_response, by path: the errors of the Guard, of CORS and of unknown /api/... routes too).

    POST /api/chat  /api/generate  /api/embed  /api/embeddings (legacy)  /api/show  /api/pull
    GET /api/tags  /api/ps  /api/version    DELETE /api/delete

A request loads the model it names (server/models.py; `keep_alive` as Ollama's: "5m", seconds, 0 unloads after
this request, -1 never); /api/tags lists the models on this machine, /api/ps the loaded ones.
"""
import asyncio
import json
import os
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

import fastgguf
from fastgguf.engine.reasoning import detect_reasoning
from fastgguf.api import ollama as O
from fastgguf.api.openai.protocol import APIError
from fastgguf.server import sse
from fastgguf.server.models import parse_keep_alive
from fastgguf.server.routes import Dialect, in_worker, respond, use_model

PULL_TICK = 0.5  # seconds between /api/pull's progress lines

__all__ = ["router"]

router = APIRouter(prefix=O.PREFIX)


def _load(raw):
    """A request body's JSON (bytes; empty: {})."""
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        raise APIError("The request body is not valid JSON.") from None


async def _body(request):
    """The request's JSON, parsed in a worker thread (routes.in_worker), not on the event loop (megabytes of
    messages take a while)."""
    return await in_worker(request, _load, await request.body())


async def _prepare(request, fn, *args, body=None):
    """(lease, fn(model, body, n_ctx, *args)): the model the body names (its keep_alive applied after this request)
    and the body shaped in a worker thread."""
    if body is None:
        body = await _body(request)
    lease = await _use(request, body)
    return lease, await in_worker(request, fn, lease.model, body, lease.engine.n_ctx, *args)


async def _use(request, body):
    """use_model of the model an Ollama body names (`model`, or older clients' `name`), with its keep_alive."""
    if not isinstance(body, dict):
        raise APIError("the request body must be a JSON object")
    name = body.get("model") or body.get("name") or None  # none: the default model, else 400
    keep_alive = parse_keep_alive(body["keep_alive"]) if body.get("keep_alive") is not None else ...
    return await use_model(request, name, keep_alive)


def _dialect(make):
    """Ollama's way to answer through routes.respond: NDJSON lines, no pings (the response waits for the first
    token), no end marker (the reply's builder sends the last line, with done and the timings)."""
    return Dialect(make, sse.line, "", ping=None, media_type=sse.NDJSON)


@router.post("/chat")
async def chat(request: Request):
    t0 = time.perf_counter()
    lease, prep = await _prepare(request, O.prepare_chat)
    shaper = O.Shaper(lease.model, chat=True, message=True)
    return await respond(request, lease, prep, _dialect(lambda model, p: O.Reply(model, p, shaper, t0)))


@router.post("/generate")
async def generate(request: Request):
    t0 = time.perf_counter()
    body = await _body(request)
    if _unloading(body):  # Ollama's way to unload a model: no prompt, keep_alive 0 (a model not loaded stays so)
        registry = request.app.state.registry
        entry = registry.resolve(body.get("model") or None, ollama=True)
        await registry.unload(entry.name)
        return JSONResponse({"model": body["model"], "created_at": O.now(), "response": "", "done": True,
                             "done_reason": "unload"})
    lease, (kind, prep) = await _prepare(request, O.prepare_generate, body=body)
    shaper = O.Shaper(lease.model, chat=kind == "chat", message=False)
    if kind == "load":  # Ollama's way to load a model: it is loaded
        line = shaper._line(done=True)
        line["done_reason"] = "load"
        return JSONResponse(line)
    return await respond(request, lease, prep, _dialect(lambda model, p: O.Reply(model, p, shaper, t0)))


def _unloading(body):
    return (isinstance(body, dict) and isinstance(body.get("model"), str) and body["model"] and not body.get("prompt")
            and body.get("keep_alive") is not None and parse_keep_alive(body["keep_alive"]) == 0)


async def _embed(request, legacy):
    t0 = time.perf_counter()
    lease, prep = await _prepare(request, O.prepare_embed, legacy)
    return await respond(request, lease, prep, _dialect(lambda model, p: O.EmbedReply(model, p, legacy, t0)))


@router.post("/embed")
async def embed(request: Request):
    return await _embed(request, legacy=False)


@router.post("/embeddings")
async def embeddings(request: Request):
    return await _embed(request, legacy=True)


def _iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _entry(entry, created):
    """A model as an entry of /api/tags and /api/ps: the details of its file when loaded (else its format)."""
    details = O.details(entry.model) if entry.model is not None else {"parent_model": "", "format": "gguf"}
    path = entry.model.path if entry.model is not None else entry.source
    try:
        size, modified = os.path.getsize(path), os.path.getmtime(path)
    except (OSError, TypeError):
        size, modified = entry.size, created
    return {"name": entry.name, "model": entry.name, "digest": "", "size": size, "modified_at": _iso(modified),
            "details": details}


def _local(entry):
    """Whether a model's file is on this machine (a catalogue model: once pulled)."""
    if entry.kind == "catalogue":
        from fastgguf import hub
        return hub.is_cached(entry.source)
    return True


@router.get("/tags")
async def tags(request: Request):
    state = request.app.state
    registry = state.registry
    registry.refresh()
    return JSONResponse({"models": [_entry(e, state.created) for e in registry.entries.values()
                                    if e.state == "loaded" or _local(e)]})


@router.get("/ps")
async def ps(request: Request):
    """The loaded models, each with when it unloads (expires_at; a model kept for ever: the year 9999)."""
    state = request.app.state
    registry = state.registry
    out = []
    for entry in registry.loaded():
        e = _entry(entry, state.created)
        at = entry.expires_at(registry.clock())
        expires = "9999-12-31T23:59:59Z" if at is None else _iso(time.time() + at - registry.clock())
        e.update(expires_at=expires, size_vram=0, context_length=entry.engine.n_ctx)
        del e["modified_at"]
        out.append(e)
    return JSONResponse({"models": out})


@router.get("/version")
async def version(request: Request):
    return JSONResponse({"version": fastgguf.__version__})


@router.post("/show")
async def show(request: Request):
    lease, out = await _prepare(request, _show, request.app.state.created)
    return JSONResponse(out)


@router.post("/pull")
async def pull(request: Request):
    """Fetch a catalogue model into the cache (fastgguf pull), streamed as Ollama streams it: "pulling manifest",
    "pulling <digest>" lines with total and completed bytes, "verifying sha256 digest", "writing manifest",
    "success"; an error after the first line is an {"error": ...} line. stream false: the last line alone. A
    client that hangs up does not stop the download."""
    from fastgguf import hub
    body = _load(await request.body())
    if not isinstance(body, dict):
        raise APIError("the request body must be a JSON object")
    name = body.get("model") or body.get("name")
    if not isinstance(name, str) or not name:
        raise APIError("model is required", param="model")
    base = name[:-len(":latest")] if name.endswith(":latest") else name
    if base not in hub.CATALOGUE:
        raise APIError(f"pull model manifest: model '{name}' is not in the catalogue (known: "
                       f"{', '.join(hub.CATALOGUE)})", status=404, param="model")
    task = asyncio.ensure_future(asyncio.to_thread(hub.model_path, base))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    if body.get("stream") is False:
        await asyncio.shield(task)
        request.app.state.registry.refresh()
        return JSONResponse({"status": "success"})
    return sse.EventStream(_pull_lines(request, hub, base, task), lambda: None, media_type=sse.NDJSON)


async def _pull_lines(request, hub, name, task):
    e = hub.entry(name)
    digest = f"sha256:{e.sha256}"
    yield sse.line({"status": "pulling manifest"})
    while True:
        done, _ = await asyncio.wait({task}, timeout=PULL_TICK)
        completed = e.size if done and task.exception() is None else _pulled_bytes(hub, e)
        yield sse.line({"status": f"pulling {e.sha256[:12]}", "digest": digest, "total": e.size,
                        "completed": completed})
        if done:
            break
    if task.exception() is not None:
        yield sse.line({"error": str(task.exception())})
        return
    request.app.state.registry.refresh()
    for status in ("verifying sha256 digest", "writing manifest", "success"):
        yield sse.line({"status": status})


def _pulled_bytes(hub, e):
    """Bytes of a catalogue model written so far: its largest .part file in the cache (0 while pip fetches)."""
    d, best = hub.cache_dir(), 0
    try:
        for f in os.listdir(d):
            if f.startswith(e.file + ".") and f.endswith(".part"):
                best = max(best, os.path.getsize(os.path.join(d, f)))
    except OSError:  # no cache yet, or a part file renamed meanwhile
        pass
    return min(best, e.size)


@router.delete("/delete")
async def delete(request: Request):
    """Delete a model's file: a pulled catalogue model from the cache, a file of --models-dir (unloaded first; 409
    while requests use it). A file given with -m is not deleted (400)."""
    from fastgguf import hub
    body = _load(await request.body())
    name = body.get("model") or body.get("name") if isinstance(body, dict) else None
    registry = request.app.state.registry
    entry = registry.find(name) if isinstance(name, str) and name else None
    if entry is None or not _local(entry):
        raise APIError(f"model '{name}' not found", status=404, param="model")
    if entry.kind not in ("catalogue", "dir"):
        raise APIError(f"model '{name}' was given on the command line; its file is not deleted", param="model")
    if entry.leases:
        raise APIError(f"model '{name}' is in use", status=409, type="conflict_error")
    await registry.unload(entry.name)
    path = hub.model_path(entry.source, download=False) if entry.kind == "catalogue" else entry.source
    for p in (path, path + ".sha256"):
        try:
            os.remove(p)
        except FileNotFoundError:
            pass
    registry.forget(entry.name)
    return Response(status_code=200)


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
