"""The chat page: `GET /` serves static/index.html, `GET /static/<name>` its script and style sheet (plain files in
the package, no build step, nothing from elsewhere). Both are answered without the API key (limits.Guard: the page
asks for the key and sends it with its API calls, which need it as any client's do) but after the Host check.

The page is a client of the OpenAI routes like any other (GET /v1/models, POST /v1/chat/completions, streamed).
Its Content-Security-Policy allows only this server's own scripts, styles and connections: no inline script runs,
whatever a page's content holds (the page itself also never turns model text into HTML: static/markdown.js builds
DOM nodes with textContent)."""
import os

from fastapi import APIRouter
from fastapi.responses import FileResponse

from fastgguf.api.openai.protocol import APIError

__all__ = ["router", "STATIC", "PAGE_HEADERS"]

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
PAGE_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-cache"}

router = APIRouter(include_in_schema=False)


def _file(name):
    """A FileResponse of static/<name> with the page's headers; 404 for any name not a file there (no paths)."""
    path = os.path.join(STATIC, name)
    kind = TYPES.get(os.path.splitext(name)[1])
    if kind is None or "/" in name or "\\" in name or name.startswith(".") or not os.path.isfile(path):
        raise APIError(f"Unknown route GET /static/{name}", status=404, code="not_found")
    return FileResponse(path, media_type=kind, headers=PAGE_HEADERS)


@router.api_route("/", methods=["GET", "HEAD"])  # (HEAD /: also Ollama's heartbeat, `ollama` CLI's first request)
async def index():
    return _file("index.html")


@router.api_route("/static/{name}", methods=["GET", "HEAD"])
async def static(name: str):
    return _file(name)
