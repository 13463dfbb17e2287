"""``fastgguf serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--parallel 4] [--ctx-size N] [--threads N]
[--api-key KEY]``: an OpenAI-compatible HTTP server with continuous batching (needs ``pip install "fastgguf[server]"``).

The API key may also come from the FASTGGUF_API_KEY environment variable; without one, no key is required.
"""

from __future__ import annotations

import os
import sys

from fastgguf.errors import FastGGUFError


class MissingExtra(FastGGUFError):
    """An optional dependency is not installed."""


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve the model over HTTP with OpenAI's API")
    p.add_argument("-m", "--model", help="GGUF file or catalogue name (default: the default model, downloaded if needed)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (8080)")
    p.add_argument("--parallel", "-np", type=int, default=4, help="sequences decoded together (4)")
    p.add_argument("--ctx-size", "-c", type=int, default=None,
                   help="context size of each sequence (default: the model's, at most 4096)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: physical cores)")
    p.add_argument("--api-key", default=None, help="require this Bearer key (default: $FASTGGUF_API_KEY)")
    p.add_argument("--max-queue", type=int, default=64, help="requests that may wait before 429 (64)")
    p.add_argument("--max-body", type=int, default=8 << 20, help="largest request body in bytes (8 MiB)")
    p.add_argument("--ping-interval", type=float, default=5.0,
                   help="seconds between ': ping' comments to a stream waiting in the queue (5)")
    p.add_argument("--log-level", default="warning", help="uvicorn log level (warning)")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as e:
        raise MissingExtra(f"the server needs the 'server' extra: pip install \"fastgguf[server]\" ({e})") from None
    for name in ("parallel", "port", "max_queue", "max_body"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if not args.ping_interval > 0:
        raise ValueError("--ping-interval must be > 0")
    if args.ctx_size is not None and args.ctx_size < 2:
        raise ValueError("--ctx-size must be >= 2")
    from fastgguf.cli.common import load_model
    from fastgguf.server import create_app
    model = load_model(args)
    key = args.api_key or os.environ.get("FASTGGUF_API_KEY") or None
    app = create_app(model, parallel=args.parallel, n_ctx=args.ctx_size, n_threads=args.threads, api_key=key,
                     max_queue=args.max_queue, max_body_bytes=args.max_body, ping_interval=args.ping_interval)
    print(f"fastgguf serve: {os.path.basename(model.path)} on http://{args.host}:{args.port}/v1 "
          f"(parallel {args.parallel})", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
