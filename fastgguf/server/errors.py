"""Errors over HTTP: every exception becomes OpenAI's {"error": {message, type, param, code}} through the one
translation, fastgguf.api.openai.responses.error_body; under Anthropic's paths (anthropic.PATHS) its
{"type": "error", "error": {type, message}} of the same status, under Ollama's (ollama.PREFIX) its {"error": message}
(a full queue: 503), under llama-server's native completion (llama.PATHS) its {"error": {code, message, type}}.
FastAPI's own 422 validation format is never sent: a body that does not fit the schema is a 400 naming the field; an
unknown route a 404."""
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from fastgguf.api import anthropic, llama, ollama
from fastgguf.api.openai.protocol import APIError
from fastgguf.api.openai.responses import error_body

__all__ = ["error_response", "install"]


def error_response(exc, path=""):
    """The JSONResponse (status, error dict, headers) of any exception, in the shape of the API `path` belongs to."""
    status, body, headers = error_body(exc)
    if path in anthropic.PATHS:
        body = anthropic.error_dict(status, body)
    elif path in llama.PATHS:
        body = llama.error_dict(status, body)
    elif path.startswith(ollama.PREFIX + "/"):
        status, body = ollama.error_status(status), ollama.error_dict(body)
    return JSONResponse(body, status_code=status, headers=headers or None)


def _from_validation(exc):
    errs = exc.errors()
    e = errs[0] if errs else {}
    loc = [str(x) for x in e.get("loc", ()) if x != "body"]
    param = ".".join(loc) or None
    msg = e.get("msg", "invalid request")
    if e.get("type") == "json_invalid":
        msg, param = "The request body is not valid JSON.", None
    elif not loc:  # the body as a whole: JSON that is not an object (an array, a string, a number, null, a bool)
        msg = "the request body must be a JSON object"
    elif param:
        msg = f"{param}: {msg}"
    return APIError(msg, param=param.split(".")[0] if param else None)


def _from_http(request, exc):
    if exc.status_code == 404:
        return APIError(f"Unknown route {request.method} {request.url.path}", status=404, code="not_found")
    return APIError(str(exc.detail), status=exc.status_code, headers=getattr(exc, "headers", None))


def install(app):
    """Route every error of `app` through error_response."""
    async def validation(request, exc):
        return error_response(_from_validation(exc), request.url.path)

    async def http(request, exc):
        return error_response(_from_http(request, exc), request.url.path)

    async def any_error(request, exc):
        return error_response(exc, request.url.path)

    # APIError by its own class too: Starlette gives an `Exception` handler only to its outermost middleware,
    # which answers and then re-raises (a traceback in the log for a plain 4xx)
    app.add_exception_handler(APIError, any_error)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http)
    app.add_exception_handler(Exception, any_error)
