"""``fastgguf serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--parallel 4] [--ctx-size N] [--threads N]
[--api-key KEY]``: an OpenAI-compatible HTTP server with continuous batching (needs ``pip install "fastgguf[server]"``).

``fastgguf serve --ray [--replicas N] [--max-replicas M] [--address auto | ray://HOST:10001]``: the same API on one
endpoint, served by N Ray Serve replicas (needs ``pip install "fastgguf[ray]"``; see docs/scale-out.md). Without
--address a local Ray cluster is started (and stopped on exit); with one, the command joins that cluster, and on exit
removes its application and leaves the cluster running. --threads is per replica, and each replica reserves as many
Ray CPUs (default: this machine's physical cores divided by N, at least 1).

The API key may also come from the FASTGGUF_API_KEY environment variable; without one, no key is required.
Limits (fastgguf.server.limits, .cors and .transport): --allowed-hosts (Host header names, DNS rebinding),
--cors-origins (browser pages), --timeout-header,
--timeout-keep-alive, --timeout-body, --max-connections, --max-body, --max-queue.
"""

from __future__ import annotations

import os
import sys

from fastgguf.cli.common import MODEL_HELP, add_repack_arg, load_draft_model, load_model
from fastgguf.engine.pooling import SETTABLE
from fastgguf.errors import FastGGUFError


class MissingExtra(FastGGUFError):
    """An optional dependency is not installed."""


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve the model over HTTP with OpenAI's API")
    p.add_argument("-m", "--model", dest="models", action="append", metavar="MODEL",
                   help=MODEL_HELP + "; repeat for several, each loaded on its first request (none, and no "
                   "--models-dir: the catalogue, loaded on demand)")
    add_many_models_args(p)
    add_prompt_cache_args(p)
    add_repack_arg(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (8080)")
    p.add_argument("--parallel", "-np", type=int, default=None,
                   help="sequences decoded together (4; an encoder's inputs embedded together: 16)")
    p.add_argument("--ctx-size", "-c", type=int, default=None,
                   help="context size of each sequence (default: the model's, at most 4096)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: physical cores)")
    p.add_argument("--api-key", default=None, help="require this Bearer key (default: $FASTGGUF_API_KEY)")
    p.add_argument("--max-queue", type=int, default=64, help="sequences (prompts x n) that may wait before 429 (64)")
    p.add_argument("--max-body", type=int, default=8 << 20, help="largest request body in bytes (8 MiB)")
    p.add_argument("--allowed-hosts", default=None,
                   help="comma-separated Host header names answered, others get 400 (against DNS rebinding); "
                        "'*': any (default: the --host address, localhost, 127.0.0.1, [::1])")
    p.add_argument("--cors-origins", default=None,
                   help="comma-separated origins whose pages may call the server from a browser, with credentials; "
                        "'localhost': pages on localhost, 127.0.0.1 and [::1] (any scheme and port); '*': any page "
                        "(no credentials); '': none (default: with --api-key any page, as llama-server; without, "
                        "'localhost')")
    p.add_argument("--alias", default=None,
                   help="the model's id in the API (/v1/models, responses); requests may still name its file "
                        "(default: the file name without .gguf); several, comma-separated: each is accepted, the "
                        "first in sorted order is the id")
    p.add_argument("--tags", default=None,
                   help="comma-separated labels /v1/models lists for the model (llama-server's --tags)")
    p.add_argument("--strict-model-names", action="store_true",
                   help="a request naming another model than this one (its alias or file name) gets 404 (default: "
                        "any name is served by this model, as llama-server does)")
    p.add_argument("--slots-show-prompts", action="store_true",
                   help="GET /slots shows each busy slot's prompt text (default: counts only)")
    p.add_argument("--pooling", default=None, choices=SETTABLE,
                   help="how embeddings are pooled, over what the model's file says (llama-server's --pooling; "
                        "none: per-token vectors, which /v1/embeddings refuses)")
    p.add_argument("--no-slots", dest="slots", action="store_false",
                   help="GET /slots answers 501 (llama-server's --no-slots; default: it shows the slots)")
    g = p.add_argument_group("defaults of requests that do not say (llama-server's flags)")
    g.add_argument("--seed", type=int, default=None, help="sampling seed (default: random; -1: random)")
    g.add_argument("--temp", type=float, default=None, help="temperature (0.8)")
    g.add_argument("--n-predict", type=int, default=None, metavar="N",
                   help="tokens to generate (-1: until end-of-generation or a full context; default: 256, and -1 "
                        "for llama-server's /completion)")
    p.add_argument("--slot-save-path", default=None, metavar="DIR",
                   help="folder of llama-server's POST /slots/{id}?action=save|restore (a slot's KV cache as a "
                        "file; default: none, those answer 501)")
    p.add_argument("--timeout-header", type=float, default=10.0,
                   help="seconds a client has to send a request's headers, from connecting or from the previous "
                        "response; then the connection is closed (10)")
    p.add_argument("--timeout-keep-alive", type=float, default=5.0,
                   help="seconds an idle keep-alive connection is kept after a response (5)")
    p.add_argument("--timeout-body", type=float, default=60.0,
                   help="seconds a client has to send a request's body; then 408 (60)")
    p.add_argument("--max-connections", type=int, default=512,
                   help="open connections; past it a new connection is closed at once (512)")
    p.add_argument("--ping-interval", type=float, default=5.0,
                   help="seconds between ': ping' comments to a stream waiting in the queue (5)")
    p.add_argument("--reasoning-format", default="parsed", choices=("parsed", "raw", "none"),
                   help="a thinking model's <think> block: 'parsed' into message.reasoning_content, 'raw' left in "
                        "content, 'none' dropped (and not asked for where the template allows); a request's "
                        "reasoning_format overrides it (parsed)")
    p.add_argument("--speculative", default=None, choices=("none", "prompt_lookup"),
                   help="speculative decoding for requests that do not say (their `speculative` field): exact, the "
                        "same text in fewer forward passes when the drafts are right (none)")
    p.add_argument("--draft-max", type=int, default=None, help="tokens drafted per step (8)")
    p.add_argument("--draft-model", default=None, metavar="FILE",
                   help="speculative decoding with this draft model (same vocabulary) for requests that do not say")
    p.add_argument("--log-level", default="warning", help="uvicorn log level (warning)")
    g = p.add_argument_group("scale-out with Ray Serve (pip install \"fastgguf[ray]\"; docs/scale-out.md)")
    g.add_argument("--ray", action="store_true", help="serve with Ray Serve replicas instead of one process")
    g.add_argument("--replicas", type=int, default=1, help="replicas (1); with --max-replicas: the minimum")
    g.add_argument("--max-replicas", type=int, default=None,
                   help="autoscale up to this many replicas on ongoing requests (default: a fixed --replicas)")
    g.add_argument("--address", default=None,
                   help="Ray cluster to join: 'auto' (a cluster started on this node with `ray start`) or "
                        "ray://HOST:10001 (default: start a local cluster)")
    g.add_argument("--num-cpus", type=int, default=None,
                   help="CPUs of the local Ray cluster started without --address (default: all)")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MissingExtra(f"the server needs the 'server' extra: pip install \"fastgguf[server]\" ({e})") from None
    for name in ("parallel", "port", "max_queue", "max_body", "max_connections"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("ping_interval", "timeout_header", "timeout_keep_alive", "timeout_body"):
        if not getattr(args, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0")
    if args.ctx_size is not None and args.ctx_size < 2:
        raise ValueError("--ctx-size must be >= 2")
    key = args.api_key or os.environ.get("FASTGGUF_API_KEY") or None
    args.model = args.models[0] if args.models and len(args.models) == 1 else None
    if args.ray:
        if args.models and len(args.models) > 1 or args.models_dir:
            raise ValueError("--ray serves one model: one -m, no --models-dir")
        if args.speculative or args.draft_model or args.draft_max is not None:
            raise ValueError("--speculative, --draft-max and --draft-model are not supported with --ray yet")
        return run_ray(args, key)
    from fastgguf.engine.scheduler import default_parallel
    from fastgguf.server import create_app
    from fastgguf.server.limits import default_hosts
    from fastgguf.server.transport import serve
    many = serves_many(args)
    if not many and (args.keep_alive is not None or args.max_memory is not None):
        print("fastgguf serve: --keep-alive and --max-memory apply to models loaded on demand; the one -m model "
              "stays loaded", file=sys.stderr, flush=True)
    model = None if many else load_model(args, **model_options(args))
    defaults = {}
    if args.draft_model:
        defaults["speculative"] = load_draft_model(args.draft_model, args.threads)
    elif args.speculative:
        defaults["speculative"] = args.speculative
    if args.draft_max is not None:
        defaults["draft_max"] = args.draft_max
    defaults.update(request_defaults(args))
    parallel = args.parallel or (None if many else default_parallel(model))
    if args.slot_save_path is not None:
        os.makedirs(args.slot_save_path, exist_ok=True)
    registry = many_models(args, defaults) if many else None
    app = create_app(model, parallel=parallel, n_ctx=args.ctx_size, n_threads=args.threads, api_key=key,
                     max_queue=args.max_queue, max_body_bytes=args.max_body, ping_interval=args.ping_interval,
                     reasoning_format=args.reasoning_format, body_timeout=args.timeout_body,
                     cors_origins=args.cors_origins, alias=args.alias, slots_show_prompts=args.slots_show_prompts,
                     slot_save_path=args.slot_save_path, slots=args.slots, tags=args.tags, pooling=args.pooling,
                     sampling_defaults=defaults, strict_model_names=args.strict_model_names,
                     registry=registry,
                     allowed_hosts=(args.allowed_hosts.split(",") if args.allowed_hosts is not None
                                    else default_hosts(args.host)))
    what = (f"{len(registry.entries)} models on demand ({', '.join(registry.entries)})" if many
            else f"{os.path.basename(model.path)} (parallel {parallel})")
    print(f"fastgguf serve: {what} on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    if args.allowed_hosts is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"fastgguf serve: only Host headers {', '.join(default_hosts(args.host))} are answered; clients that "
              f"reach this server by another name or address need --allowed-hosts NAME,... (or '*')",
              file=sys.stderr, flush=True)
    serve(app, args.host, args.port, header_timeout=args.timeout_header, keep_alive=args.timeout_keep_alive,
          max_connections=args.max_connections, log_level=args.log_level)
    return 0


def request_defaults(args) -> dict:
    """The SamplingParams defaults of --seed, --temp and --n-predict (none unset; -1 seed or n_predict: none)."""
    d = {}
    if args.seed is not None:
        d["seed"] = None if args.seed == -1 else args.seed
    if args.temp is not None:
        d["temperature"] = args.temp
    if args.n_predict is not None:
        d["max_tokens"] = None if args.n_predict == -1 else args.n_predict
    return d


def add_many_models_args(p) -> None:
    """The flags of a server of several models (fastgguf.server.models)."""
    p.add_argument("--models-dir", default=None, metavar="DIR",
                   help="serve every .gguf file of DIR too, by its file name without .gguf, loaded on demand")
    p.add_argument("--keep-alive", default=None, metavar="DURATION",
                   help="how long a model loaded on demand stays loaded after its last request: seconds or a "
                        "duration (5m, 1h); 0: unload at once; -1: never (5m; a request's keep_alive overrides "
                        "it; a server of one -m model keeps it loaded)")
    p.add_argument("--max-memory", default=None, metavar="SIZE",
                   help="memory budget of the loaded models (weights and caches), e.g. 12G: loading one more "
                        "first unloads the least recently used idle ones (default: 3/4 of this machine's RAM)")


def serves_many(args) -> bool:
    """Whether the server loads models on demand: no -m (the catalogue), several, or --models-dir."""
    return not args.models or len(args.models) > 1 or bool(args.models_dir)


def model_options(args) -> dict:
    """Keywords for fastgguf.Model(...) of every model the server loads (beyond n_threads)."""
    return {**prompt_cache_options(args), **({"repack": True} if args.repack else {})}


def add_prompt_cache_args(p) -> None:
    """The persistent prompt cache's flags (fastgguf.engine.prompt_cache)."""
    p.add_argument("--prompt-cache", default=None, metavar="DIR",
                   help="keep the K/V of long prompts in DIR and restore the longest stored prefix of a prompt "
                        "instead of evaluating it, across requests and restarts (default: none)")
    p.add_argument("--prompt-cache-size", type=float, default=None, metavar="MIB",
                   help="the most MiB the prompt cache's files take; least recently used removed first (1024)")
    p.add_argument("--prompt-cache-min-tokens", type=int, default=None, metavar="N",
                   help="shortest prompt stored or prefix restored, in tokens (256)")


def prompt_cache_options(args) -> dict:
    """The Model keywords of --prompt-cache, --prompt-cache-size and --prompt-cache-min-tokens (none unset)."""
    if args.prompt_cache is None:
        return {}
    d = {"prompt_cache": args.prompt_cache, "prompt_cache_size": args.prompt_cache_size}
    if args.prompt_cache_min_tokens is not None:
        d["prompt_cache_min_tokens"] = args.prompt_cache_min_tokens
    return d


def many_models(args, sampling_defaults):
    """The ModelRegistry of `fastgguf serve` with no -m, several, or --models-dir: the -m models by name (a
    catalogue name, or the file name without .gguf), the files of --models-dir, and, with neither, the catalogue
    (its default model then serves requests naming no known model, unless --strict-model-names)."""
    from fastgguf import hub
    from fastgguf.api.openai.protocol import APIError
    from fastgguf.server import models as M
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if args.models_dir and not os.path.isdir(args.models_dir):
        raise ValueError(f"--models-dir {args.models_dir!r} is not a folder")
    try:
        keep_alive = M.parse_keep_alive(args.keep_alive or M.DEFAULT_KEEP_ALIVE, "--keep-alive")
    except APIError as e:
        raise ValueError(str(e)) from None
    max_memory = M.parse_size(args.max_memory) if args.max_memory else M.default_max_memory()
    catalogue = not args.models and not args.models_dir
    entries = []
    for m in args.models or ():
        if m in hub.CATALOGUE:
            e = M.Entry(m, m, "catalogue", hub.CATALOGUE[m].size, keep_alive=keep_alive)
        elif os.path.isfile(m):
            name = os.path.basename(m)[:-len(".gguf")] if m.endswith(".gguf") else os.path.basename(m)
            e = M.Entry(name, os.path.abspath(m), "file", M.file_size(m), keep_alive=keep_alive)
        else:
            raise FileNotFoundError(f"-m {m!r}: no such file, and not a catalogue name (fastgguf pull --list)")
        if e.name in (x.name for x in entries):
            raise ValueError(f"two -m models have the name {e.name!r}")
        entries.append(e)
    loader = M.Loader(parallel=args.parallel, n_ctx=args.ctx_size, n_threads=args.threads, pooling=args.pooling,
                      max_queue=args.max_queue, sampling_defaults=sampling_defaults, model_options=model_options(args))
    return M.ModelRegistry(entries, load=loader, unload=M.stop_engine,
                           discover=M.discovery(args.models_dir, catalogue=catalogue),
                           default=hub.DEFAULT_NAME if catalogue else None,
                           strict=args.strict_model_names, max_memory=max_memory, keep_alive=keep_alive)


APP_NAME = "fastgguf"


def run_ray(args, key) -> int:
    """`fastgguf serve --ray`: deploy fastgguf.server.ray on a Ray cluster and wait for Ctrl+C / SIGTERM."""
    try:
        import ray
        from ray import serve
    except ImportError as e:
        raise MissingExtra(f"--ray needs the 'ray' extra: pip install \"fastgguf[ray]\" ({e})") from None
    import signal
    import time

    from fastgguf.server.ray import deployment, default_threads
    if args.replicas < 1:
        raise ValueError("--replicas must be >= 1")
    if args.max_replicas is not None and args.max_replicas < args.replicas:
        raise ValueError("--max-replicas must be >= --replicas")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    threads = args.threads or default_threads(args.replicas)
    args.parallel = args.parallel or 4  # Ray routes by it before a replica has loaded the model
    app = deployment(args.model, replicas=args.replicas, max_replicas=args.max_replicas, threads=threads,
                     parallel=args.parallel, n_ctx=args.ctx_size, api_key=key, max_queue=args.max_queue,
                     max_body_bytes=args.max_body, ping_interval=args.ping_interval,
                     reasoning_format=args.reasoning_format)

    def _term(signum, frame):
        raise KeyboardInterrupt
    own_cluster = args.address is None
    t0 = time.perf_counter()
    if own_cluster:
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=args.address, log_to_driver=False)
    signal.signal(signal.SIGTERM, _term)  # after ray.init, which installs its own
    try:
        cpus = ray.cluster_resources().get("CPU", 0)
        if args.replicas * threads > cpus:
            print(f"fastgguf serve: warning: {args.replicas} replicas x {threads} threads need "
                  f"{args.replicas * threads} CPUs; the cluster has {cpus:g}: replicas wait for CPUs "
                  f"(pass --threads)", file=sys.stderr, flush=True)
        serve.start(http_options={"host": args.host, "port": args.port})
        serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
        scale = (f"{args.replicas}..{args.max_replicas} replicas (autoscaling)"
                 if args.max_replicas and args.max_replicas > args.replicas else f"{args.replicas} replicas")
        print(f"fastgguf serve --ray: {scale} x {threads} threads, parallel {args.parallel}, on "
              f"http://{args.host}:{args.port}/v1 (ready in {time.perf_counter() - t0:.1f} s)",
              file=sys.stderr, flush=True)
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            if not own_cluster:  # a cluster of our own goes with ray.shutdown(), replicas and all
                serve.delete(APP_NAME)
        finally:
            ray.shutdown()
    return 0
