"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens (and without /v1). The shaping is
fastgguf.api.anthropic; the request runs on the chat completion path (the same Scheduler and limits; errors in
Anthropic's shape: server/errors.py)."""
from fastapi import APIRouter, Body, Request

from fastgguf.api.anthropic import MessagesBuilder, count_tokens, prepare_messages
from fastgguf.server import sse
from fastgguf.server.routes import Dialect, in_worker, respond, use_model

__all__ = ["router"]

router = APIRouter()


@router.post("/messages", responses={200: {"content": {"text/event-stream": {}}}},
             description="Anthropic's Messages API over the chat path: system, messages (text, tool_use and "
                         "tool_result blocks; images refused), max_tokens (required), stop_sequences, temperature, "
                         "top_p, top_k, tools, tool_choice, thinking, stream.")
async def messages(request: Request, body: dict = Body(...)):
    lease = await use_model(request, body.get("model"))
    prep = await in_worker(request, prepare_messages, lease.model, body, lease.engine.n_ctx,
                           reasoning_format=request.app.state.reasoning_format)
    stops = body.get("stop_sequences")
    return await respond(request, lease, prep,
                         Dialect(lambda model, p: MessagesBuilder(model, p, stops), sse.typed, ""))


@router.post("/messages/count_tokens", description="The tokens of a Messages request's rendered prompt.")
async def messages_count_tokens(request: Request, body: dict = Body(...)):
    lease = await use_model(request, body.get("model"))
    return await in_worker(request, count_tokens, lease.model, body, lease.engine.n_ctx,
                           reasoning_format=request.app.state.reasoning_format)
