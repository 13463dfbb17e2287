"""The OpenAI-compatible HTTP server (optional extra: ``pip install "fastgguf[server]"``).

    from fastgguf.server import create_app
    app = create_app(fastgguf.Model(path), parallel=4)     # an ASGI app (FastAPI): serve it with uvicorn

engine.py is the continuous-batching thread (no web framework), schemas.py the pydantic models of every request and
response, app.py the routes. The request/response shaping itself is fastgguf.engine.openai, which the in-process
API (Model.create_completion / create_chat_completion) uses too.
"""

__all__ = ["create_app", "Engine"]


def __getattr__(name):
    if name == "create_app":
        from fastgguf.server.app import create_app
        return create_app
    if name == "Engine":
        from fastgguf.server.engine import Engine
        return Engine
    raise AttributeError(name)
