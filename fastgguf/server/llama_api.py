"""llama-server's native completion, POST /completion and /completions (fastgguf.api.llama: its request and
result shapes; the Scheduler and respond() as every generation route), and its extras that tools and web UIs read:
GET /props (the model, context size, chat template, slots, build) and GET /slots (what each slot is doing), of the
model `?model=NAME` names (default: the server's one
model); its router mode's POST /models/load and /models/unload {"model": NAME}. Each needs the API key, as
every route but /health. Neither /props nor /slots shows a path on the server's disk; /slots shows prompt text
only when the server was started with --slots-show-prompts; with --no-slots it answers 501.
POST /slots/{id}?action=save|restore|erase: an idle slot's KV cache to and from a file (Context.save_state) of
the --slot-save-path folder, named by a bare file name; 501 without that folder, 503 while the slot is busy.
POST /apply-template (a chat body -> {"prompt": its rendered prompt text}) and /chat/completions/input_tokens (->
{"input_tokens": its prompt's tokens}): a chat request prepared as /v1/chat/completions does it, never run."""
import json
import os
import time

from fastapi import APIRouter, Request

import fastgguf
from fastgguf import kernels
from fastgguf.api.llama import NativeBuilder, generation_settings, prepare_native
from fastgguf.engine.chat import CHATML_TEMPLATE
from fastgguf.engine.params import SamplingParams
from fastgguf.api.openai import protocol
from fastgguf.api.openai.protocol import APIError, model_id
from fastgguf.errors import StateError
from fastgguf.server import sse
from fastgguf.server.routes import Dialect, in_worker, respond, use_model

__all__ = ["router"]

router = APIRouter()


NATIVE = Dialect(NativeBuilder, sse.data, "")  # a stream of results, no [DONE]


@router.post("/completion", responses={200: {"content": {"text/event-stream": {}}}},
             description="llama-server's native completion: prompt (text, token ids, both mixed, or a list of "
                         "prompts), n_predict, the sampling fields, logit_bias, ignore_eos, n_probs, samplers, "
                         "stream, return_tokens, response_fields; a result with content, tokens, stop_type, "
                         "generation_settings and timings (a list of them for several prompts).")
async def completion(request: Request):
    body = await _body_object(request)  # JSON whatever the Content-Type says, as llama-server reads it
    lease = await use_model(request, body.get("model"))
    prep = await in_worker(request, prepare_native, lease.model, body, lease.engine.n_ctx)
    return await respond(request, lease, prep, NATIVE)


router.add_api_route("/completions", completion, methods=["POST"], include_in_schema=False)


def _piece(tok, tid):
    return tok.token_to_piece(tid, special=True).decode("utf-8", "replace") if tid is not None else ""


@router.get("/props")
async def props(request: Request):
    lease = await use_model(request, request.query_params.get("model"))
    model, eng = lease.model, lease.engine
    tok = model.tokenizer
    params = generation_settings(SamplingParams(**{"max_tokens": None, **(getattr(model, "sampling_defaults", None)
                                                                          or {})}))
    return {"default_generation_settings": {"id": 0, "n_ctx": eng.n_ctx, "is_processing": False,
                                            "params": params},
            "total_slots": eng.parallel,
            "model_alias": model_id(model),
            "model_path": os.path.basename(model.path),  # the file's name only, never where it is
            "n_ctx": eng.n_ctx,
            "n_ctx_train": model.n_ctx_train,
            "chat_template": tok.chat_template or CHATML_TEMPLATE,
            "bos_token": _piece(tok, tok.bos_id), "eos_token": _piece(tok, tok.eos_id),
            "modalities": {"vision": False, "audio": False},
            "build_info": f"fastgguf {fastgguf.__version__} ({kernels.active()})"}


@router.get("/slots")
async def slots(request: Request):
    state = request.app.state
    if not state.slots_endpoint:
        raise APIError("This server does not support slots endpoint (started with --no-slots)", status=501,
                       type="not_supported_error")
    lease = await use_model(request, request.query_params.get("model"))
    out = lease.engine.slot_states()
    for d in out:
        ids = d.pop("prompt_ids", None)
        d["is_processing"] = d["state"] == "processing"
        if ids is not None and state.slots_show_prompts:
            d["prompt"] = await in_worker(request, lease.model.detokenize, ids)
    return out


def _check_filename(name):
    """A bare file name in the slot folder (no folder part, no . or .., no control characters), or APIError."""
    if (not isinstance(name, str) or not name or len(name.encode("utf-8", "replace")) > 255
            or name in (".", "..") or any(c in name for c in "/\\:") or any(ord(c) < 32 for c in name)):
        raise APIError("Invalid filename: a bare file name in the --slot-save-path folder", param="filename")
    return name


def _slot_action(state, engine, i, action, filename):
    path = os.path.join(state.slot_save_path, filename) if filename else None
    t = time.perf_counter()
    try:
        with engine.hold_slot(i) as ctx:
            if action == "erase":
                n = ctx.n_past
                ctx.reset()
                return {"id_slot": i, "n_erased": n}
            (ctx.save_state if action == "save" else ctx.load_state)(path)
            n = ctx.n_past
    except StateError as e:
        raise APIError(f"Failed to restore slot from {filename}: {e}", param="filename") from None
    except FileNotFoundError:
        raise APIError(f"Failed to restore slot: no file {filename}", status=404, code="not_found") from None
    except ValueError as e:  # the slot id
        raise APIError(str(e), param="id_slot") from None
    except RuntimeError as e:  # busy
        raise APIError(str(e), status=503, type="unavailable_error") from None
    ms = (time.perf_counter() - t) * 1e3
    size = os.path.getsize(path)
    if action == "save":
        return {"id_slot": i, "filename": filename, "n_saved": n, "n_written": size, "timings": {"save_ms": ms}}
    return {"id_slot": i, "filename": filename, "n_restored": n, "n_read": size, "timings": {"restore_ms": ms}}


async def _body_object(request):
    """The JSON object a request's body holds ({} when it is empty), or APIError."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise APIError("The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise APIError("the request body must be a JSON object")
    return body


@router.post("/slots/{id_slot}")
async def slot_action(request: Request, id_slot: str, action: str = ""):
    state = request.app.state
    body = await _body_object(request)
    lease = await use_model(request, request.query_params.get("model"))
    if state.slot_save_path is None or not hasattr(lease.engine, "hold_slot"):
        raise APIError("This server does not support slots action (start it with --slot-save-path DIR)",
                       status=501, type="not_supported_error")
    try:
        i = int(id_slot)
    except ValueError:
        raise APIError(f"Invalid slot ID {id_slot!r}", param="id_slot") from None
    if action not in ("save", "restore", "erase"):
        raise APIError(f"Invalid action {action!r}: save, restore or erase", param="action")
    filename = _check_filename(body.get("filename")) if action != "erase" else None
    return await in_worker(request, _slot_action, state, lease.engine, i, action, filename)


@router.post("/models/load")
async def models_load(request: Request):
    """llama-server's router mode: load the model the body names (as a request for it would); {"success": true}
    once it is loaded, the loader's error otherwise. Its keep-alive starts now."""
    body = await _body_object(request)
    await use_model(request, body.get("model"))
    return {"success": True}


@router.post("/models/unload")
async def models_unload(request: Request):
    """llama-server's router mode: unload the model the body names now, or, while requests use it, when the last
    one ends."""
    body = await _body_object(request)
    registry = request.app.state.registry
    await registry.unload(registry.resolve(body.get("model")).name)
    return {"success": True}


async def _prepared_chat(request):
    """A chat body prepared as /v1/chat/completions does it (the rendered prompt, its tokens), not run."""
    body = await _body_object(request)
    lease = await use_model(request, body.get("model"))
    return await in_worker(request, protocol.prepare_chat, lease.model, body, lease.engine.n_ctx,
                           reasoning_format=request.app.state.reasoning_format)


@router.post("/apply-template")
async def apply_template(request: Request):
    """llama-server's: a chat request's prompt, as the model's chat template renders it."""
    return {"prompt": (await _prepared_chat(request)).prompt_text}


@router.post("/chat/completions/input_tokens")
@router.post("/v1/chat/completions/input_tokens")
async def chat_input_tokens(request: Request):
    """llama-server's: the tokens of a chat request's prompt."""
    return {"input_tokens": len((await _prepared_chat(request)).prompts[0])}
