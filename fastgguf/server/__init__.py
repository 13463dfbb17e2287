"""The OpenAI-compatible HTTP server (optional extra: ``pip install "fastgguf[server]"``).

    from fastgguf.server import create_app
    app = create_app(fastgguf.Model(path), parallel=4)     # an ASGI app (FastAPI): serve it with uvicorn

    app = create_app(registry=ModelRegistry(...))           # several models loaded on demand (server/models.py)

HTTP only: app.py builds the app (state: a ModelRegistry of the models served, each loaded with its own Scheduler,
models.py), routes.py the routes (module level;
responses_api.py, anthropic_api.py and ollama_api.py: OpenAI's Responses, Anthropic's Messages and Ollama's
/api/..., on routes.respond),
sse.py frames streams, errors.py turns every exception into its API's error shape, limits.py checks the Host header,
the API key and the body's size and time, transport.py serves the app with uvicorn plus a header deadline and a
connection limit (`fastgguf serve`), schemas.py holds the pydantic models of every request and response. The batching thread is
fastgguf.engine.scheduler; the request/response shaping is fastgguf.api, which the in-process API
(Model.create_completion / create_chat_completion) uses too.
"""

__all__ = ["create_app", "Engine"]


def __getattr__(name):  # lazily: importing fastgguf.server must not need fastapi
    if name == "create_app":
        from fastgguf.server.app import create_app
        return create_app
    if name == "Engine":  # the batching thread, fastgguf.engine.scheduler.Scheduler, by its older name
        from fastgguf.engine.scheduler import Engine
        return Engine
    raise AttributeError(name)
