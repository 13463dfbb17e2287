"""The HTTP routes: a thin FastAPI layer over fastgguf.engine.openai (shaping) and the Engine (batching thread).

Every route exists with and without the /v1 prefix. Errors are OpenAI's shape {"error": {message, type, param,
code}}: 400 for bad fields (FastAPI's own 422 validation format is never sent), 401 bad key, 404 unknown model or
route, 413 body too large, 429 queue full (Retry-After), 500 otherwise. A streamed request that fails after its
first chunk gets an `error` event instead.
"""
import asyncio
import hmac
import json
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from fastgguf.engine import openai as oa
from fastgguf.server import schemas as S
from fastgguf.server.engine import Engine

__all__ = ["create_app"]

OPEN_PATHS = ("/health", "/v1/health")  # answered without the API key


def _err(status, message, type_="invalid_request_error", param=None, code=None, headers=None):
    return JSONResponse({"error": {"message": message, "type": type_, "param": param, "code": code}},
                        status_code=status, headers=headers)


DRAIN_LIMIT = 64 << 20  # a declared body above the limit but below this is read and dropped before the 413


async def _drain(receive):
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect" or not msg.get("more_body"):
            return


class _Guard:
    """ASGI middleware: API key (hmac.compare_digest) and body size limit (413), before any route runs. The body is
    read here, counted, and replayed to the app."""

    def __init__(self, app, api_key, max_body):
        self.app, self.api_key, self.max_body = app, api_key, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.api_key and scope["path"] not in OPEN_PATHS:
            auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(given.encode(), self.api_key.encode()):
                return await _err(401, "Invalid API key. Give it as 'Authorization: Bearer KEY'.",
                                  "invalid_request_error", code="invalid_api_key")(scope, receive, send)
        too_big = _err(413, f"The request body is larger than the limit of {self.max_body} bytes.",
                       code="request_too_large")
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            if int(length) <= DRAIN_LIMIT:  # read (and drop) a moderate body first: a client still sending when
                await _drain(receive)       # the answer comes and the connection closes sees a reset, not the 413
            return await too_big(scope, receive, send)
        if scope["method"] in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            size += len(msg.get("body", b""))
            if size > self.max_body:
                if msg.get("more_body") and size <= DRAIN_LIMIT:
                    await _drain(receive)
                return await too_big(scope, receive, send)
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        return await self.app(scope, replay, send)


class _SSE(StreamingResponse):
    """A StreamingResponse that runs `on_close` however it ends (client gone included)."""

    def __init__(self, content, on_close, **kw):
        super().__init__(content, media_type="text/event-stream", **kw)
        self.on_close = on_close

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


def create_app(model, *, parallel=4, n_ctx=None, n_threads=None, api_key=None, max_queue=64,
               max_body_bytes=8 << 20, ping_interval=5.0, engine=None):
    """An ASGI app serving `model` (a fastgguf.Model) with OpenAI's API. `parallel` sequences decode together,
    each in a context of `n_ctx` tokens (default: the model's training context, at most 4096); `max_queue` requests
    may wait (then 429); `api_key`: required as a Bearer token when given."""
    if n_ctx is None:
        n_ctx = min(int(model.n_ctx_train or 4096), 4096)
    eng = engine or Engine(model, parallel=parallel, n_ctx=n_ctx, n_threads=n_threads, max_queue=max_queue)
    mid = oa.model_id(model)
    created = int(time.time())

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        eng.start()
        try:
            yield
        finally:
            eng.stop(timeout=5)

    app = FastAPI(title="fastgguf", version=__import__("fastgguf").__version__, lifespan=lifespan,
                  responses={400: {"model": S.ErrorResponse}})
    app.state.engine = eng
    app.state.model = model

    # -- errors ------------------------------------------------------------------------------------------------

    @app.exception_handler(RequestValidationError)
    async def _validation(request, exc):
        errs = exc.errors()
        e = errs[0] if errs else {}
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        param = ".".join(loc) or None
        msg = e.get("msg", "invalid request")
        if e.get("type") == "json_invalid":
            msg, param = "The request body is not valid JSON.", None
        elif param:
            msg = f"{param}: {msg}"
        return _err(400, msg, param=param.split(".")[0] if param else None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc):
        if exc.status_code == 404:
            return _err(404, f"Unknown route {request.method} {request.url.path}", code="not_found")
        return _err(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(oa.APIError)
    async def _api(request, exc):
        status, body, headers = oa.error_body(exc)
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(Exception)
    async def _any(request, exc):
        status, body, headers = oa.error_body(exc)
        return JSONResponse(body, status_code=status, headers=headers)

    def route(method, path, **kw):
        def deco(fn):
            for p in (path, "/v1" + path) if not path.startswith("/v1") else (path[3:], path):
                app.add_api_route(p, fn, methods=[method], **kw)
            return fn
        return deco

    # -- generation --------------------------------------------------------------------------------------------

    async def _generate(http_req, prep):
        loop = asyncio.get_running_loop()
        q = asyncio.Queue()
        req = prep.request(q.put_nowait, loop)
        b = oa.builder(model, prep)
        try:
            eng.submit(req)
        except Exception as e:  # noqa: BLE001 - QueueFull -> 429, a prompt that does not fit -> 400
            status, body, headers = oa.error_body(e)
            return JSONResponse(body, status_code=status, headers=headers)

        if not prep.stream:
            try:
                while b.usage is None:
                    try:
                        evs = await asyncio.wait_for(q.get(), 0.5)
                    except asyncio.TimeoutError:
                        if await http_req.is_disconnected():
                            return JSONResponse({}, status_code=499)
                        continue
                    try:
                        b.feed(evs)
                    except Exception as e:  # noqa: BLE001 - nothing was sent yet: a real status
                        status, body, headers = oa.error_body(e)
                        return JSONResponse(body, status_code=status, headers=headers)
            finally:
                req.cancel()
            return JSONResponse(b.final())

        # hold the response until the first token (an error before it is a real HTTP status), unless the request
        # waits longer than a ping interval: then the stream starts, with ': ping' comments while it is queued
        early, t_end = [], loop.time() + ping_interval
        while not any(ev[0] != "start" for ev in early):
            left = t_end - loop.time()
            if left <= 0:
                break
            try:
                early += await asyncio.wait_for(q.get(), left)
            except asyncio.TimeoutError:
                break
        try:
            first_chunks = b.chunks(early)
        except Exception as e:  # noqa: BLE001
            req.cancel()
            status, body, headers = oa.error_body(e)
            return JSONResponse(body, status_code=status, headers=headers)

        async def events():
            for c in first_chunks:
                yield f"data: {json.dumps(c, ensure_ascii=False)}\n\n"
            while b.usage is None:
                if req.state == "queued":
                    try:
                        evs = await asyncio.wait_for(q.get(), ping_interval)
                    except asyncio.TimeoutError:
                        yield ": ping\n\n"
                        continue
                else:
                    evs = await q.get()
                try:
                    chunks = b.chunks(evs)
                except Exception as e:  # noqa: BLE001 - after the first chunk: an error event
                    yield f"data: {json.dumps(oa.error_body(e)[1])}\n\n"
                    return
                for c in chunks:
                    yield f"data: {json.dumps(c, ensure_ascii=False)}\n\n"
            yield "data: [DONE]\n\n"
        return _SSE(events(), req.cancel)

    @route("POST", "/v1/chat/completions", response_model=S.ChatCompletion,
           responses={200: {"content": {"text/event-stream": {}}}})
    async def chat_completions(body: S.ChatCompletionRequest, request: Request):
        prep = oa.prepare_chat(model, body.model_dump(exclude_none=True), eng.n_ctx)
        return await _generate(request, prep)

    @route("POST", "/v1/completions", response_model=S.Completion,
           responses={200: {"content": {"text/event-stream": {}}}})
    async def completions(body: S.CompletionRequest, request: Request):
        prep = oa.prepare_completion(model, body.model_dump(exclude_none=True), eng.n_ctx)
        return await _generate(request, prep)

    @route("POST", "/v1/embeddings", response_model=S.EmbeddingResponse,
           description="Each vector is the model's final hidden state (after the output norm, before the lm_head), "
                       "mean-pooled over the input's tokens and L2-normalized; batched with generation.")
    async def embeddings(body: S.EmbeddingRequest, request: Request):
        prep = oa.prepare_embedding(model, body.model_dump(exclude_none=True), eng.n_ctx)
        return await _generate(request, prep)

    # -- models, tokens, health, metrics -----------------------------------------------------------------------

    def card():
        return {"id": mid, "object": "model", "created": created, "owned_by": "fastgguf"}

    @route("GET", "/v1/models", response_model=S.ModelList)
    async def models():
        return {"object": "list", "data": [card()]}

    @route("GET", "/v1/models/{model_name:path}", response_model=S.ModelCard)
    async def model_card(model_name: str):
        oa._check_model({"model": model_name}, model)
        return card()

    @route("POST", "/tokenize", response_model=S.TokenizeResponse)
    async def tokenize(body: S.TokenizeRequest):
        oa._check_model(body.model_dump(exclude_none=True), model)
        return {"tokens": [int(t) for t in model.tokenize(body.content, add_special=body.add_special,
                                                            parse_special=body.parse_special)]}

    @route("POST", "/detokenize", response_model=S.DetokenizeResponse)
    async def detokenize(body: S.DetokenizeRequest):
        oa._check_model(body.model_dump(exclude_none=True), model)
        for t in body.tokens:
            if not 0 <= t < model.n_vocab:
                raise oa.APIError(f"token id {t} is out of range for a vocabulary of {model.n_vocab}",
                                  param="tokens")
        return {"content": model.detokenize(body.tokens)}

    @route("GET", "/health", response_model=S.Health)
    async def health():
        return {"status": "ok"}

    @route("GET", "/metrics", response_class=PlainTextResponse)
    async def metrics():
        m = eng.m
        rows = [
            ("fastgguf_prompt_tokens_total", "counter", "prompt tokens received (uncached)", m["prompt_tokens"]),
            ("fastgguf_prompt_tokens_evaluated_total", "counter", "prompt tokens evaluated",
             m["prompt_tokens_evaluated"]),
            ("fastgguf_prompt_tokens_copied_total", "counter", "prompt tokens of n > 1 choices copied, not evaluated",
             m["prompt_tokens_copied"]),
            ("fastgguf_completion_tokens_total", "counter", "completion tokens generated", m["completion_tokens"]),
            ("fastgguf_requests_total", "counter", "requests accepted", m["requests"]),
            ("fastgguf_request_errors_total", "counter", "requests that failed in the engine", m["errors"]),
            ("fastgguf_requests_running", "gauge", "requests with a sequence in a slot", eng.running_requests()),
            ("fastgguf_requests_queued", "gauge", "requests waiting for a slot", eng.queued_requests()),
            ("fastgguf_slots", "gauge", "parallel sequences (slots)", eng.parallel),
        ]
        out = []
        for name, kind, help_, v in rows:
            out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {v}"]
        out += ["# HELP fastgguf_batch_size sequences per forward step", "# TYPE fastgguf_batch_size summary",
                f"fastgguf_batch_size_sum {m['batch_seqs']}", f"fastgguf_batch_size_count {m['steps']}",
                "# HELP fastgguf_batch_tokens tokens per forward step", "# TYPE fastgguf_batch_tokens summary",
                f"fastgguf_batch_tokens_sum {m['batch_tokens']}", f"fastgguf_batch_tokens_count {m['steps']}",
                "# HELP fastgguf_time_to_first_token_seconds from submission to the first sampled token",
                "# TYPE fastgguf_time_to_first_token_seconds summary",
                f"fastgguf_time_to_first_token_seconds_sum {m['ttft_sum']:.6f}",
                f"fastgguf_time_to_first_token_seconds_count {m['ttft_count']}"]
        return PlainTextResponse("\n".join(out) + "\n", media_type="text/plain; version=0.0.4")

    return _Guard(app, api_key, max_body_bytes) if (api_key or max_body_bytes) else app
