"""OpenAI's Responses API: POST /v1/responses (and /responses). The shaping is fastgguf.api.openai.responses_api; the
request runs on the chat completion path (the same Scheduler, limits and errors)."""
from fastapi import APIRouter, Body, Request

from fastgguf.api.openai.responses_api import ResponsesBuilder, prepare_responses
from fastgguf.server import sse
from fastgguf.server.routes import Dialect, in_worker, respond, use_model

__all__ = ["router"]

router = APIRouter()


@router.post("/responses", responses={200: {"content": {"text/event-stream": {}}}},
             description="OpenAI's Responses API over the chat path: input (a string or message / function_call / "
                         "function_call_output items), instructions, max_output_tokens, temperature, top_p, tools "
                         "(function tools), tool_choice, text.format, stream. No stored responses: "
                         "previous_response_id is refused.")
async def responses(request: Request, body: dict = Body(...)):
    lease = await use_model(request, body.get("model"))
    prep = await in_worker(request, prepare_responses, lease.model, body, lease.engine.n_ctx,
                           reasoning_format=request.app.state.reasoning_format)
    return await respond(request, lease, prep,
                         Dialect(lambda model, p: ResponsesBuilder(model, p, body), sse.typed, ""))
