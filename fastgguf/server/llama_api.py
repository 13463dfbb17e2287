"""llama-server's extras that tools and web UIs read: GET /props (the model, context size, chat template, slots,
build) and GET /slots (what each slot is doing). Both need the API key, as every route but /health. Neither shows a
path on the server's disk; /slots shows prompt text only when the server was started with --slots-show-prompts."""
import os

from fastapi import APIRouter, Request

import fastgguf
from fastgguf import kernels
from fastgguf.engine.chat import CHATML_TEMPLATE
from fastgguf.engine.params import SamplingParams
from fastgguf.api.openai.protocol import model_id
from fastgguf.server.routes import in_worker

__all__ = ["router"]

router = APIRouter()


def _piece(tok, tid):
    return tok.token_to_piece(tid, special=True).decode("utf-8", "replace") if tid is not None else ""


@router.get("/props")
async def props(request: Request):
    state = request.app.state
    model, eng = state.model, state.engine
    tok = model.tokenizer
    defaults = SamplingParams()
    params = {name: getattr(defaults, name) for name in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty",
                                                         "repeat_last_n", "frequency_penalty", "presence_penalty")}
    params["n_predict"] = defaults.max_tokens if defaults.max_tokens is not None else -1
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
    out = state.engine.slot_states()
    for d in out:
        ids = d.pop("prompt_ids", None)
        d["is_processing"] = d["state"] == "processing"
        if ids is not None and state.slots_show_prompts:
            d["prompt"] = await in_worker(request, state.model.detokenize, ids)
    return out
