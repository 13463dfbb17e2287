"""The server as Ray Serve replicas (optional extra: ``pip install "fastgguf[ray]"``).

    from fastgguf.server.ray import deployment
    app = deployment(model="SmolLM2-135M-Instruct.Q4_1.gguf", replicas=2, threads=1, parallel=4)
    serve.run(app, name="fastgguf", route_prefix="/")         # or: fastgguf serve --ray --replicas 2

Each replica is one Ray actor that loads the model once (mmapped: replicas on one node share the page cache) and
runs the same Engine and the same FastAPI routes as ``fastgguf serve`` (fastgguf.server.app.create_app) behind
Serve's single HTTP endpoint (``@serve.ingress``).

Threads: a replica decodes with `threads` threads, passed explicitly to the model (Ray sets OMP_NUM_THREADS to the
actor's CPUs, or to 1, which the kernels do not rely on), and reserves `num_cpus` = `threads` CPUs from Ray, so Ray
places at most CPUs // threads replicas on a node and replicas do not compete for cores.

Routing: a replica accepts at most `max_ongoing_requests` (default: `parallel`) requests; further requests wait in
Serve's router, not in a replica's queue, and go to whichever replica frees a slot first. So a replica that dies
takes only the requests it was decoding with it; Serve starts a new one and the waiting requests are served by the
others meanwhile.

Model files: `model` is what ``-m`` takes, resolved on each replica's node through the catalogue (fastgguf.hub.resolve:
the same catalogue and cache as the CLI, downloading on first use), or a path that must exist on every node (a shared
file system, or the same file copied to the same path).
"""
from __future__ import annotations

import importlib
import os
import time

from ray import serve

import fastgguf
from fastgguf import hub
from fastgguf.engine.threads import physical_cores
from fastgguf.server.app import create_app

__all__ = ["FastGGUFServer", "deployment", "default_threads"]

# This process's replica (one per Ray actor process): the ASGI app it built from its model.
_replica = {}


class _ReplicaApp:
    """The ASGI app given to serve.ingress. It is pickled with the deployment class, before any model is loaded;
    in a replica it forwards every call (lifespan included) to the app that replica's __init__ built."""

    async def __call__(self, scope, receive, send):
        await _replica["app"](scope, receive, send)


def _resolve(model):
    """A model argument as replicas on any node should see it: an existing local file as an absolute path (a
    replica's working directory is not the driver's), anything else (a name, None) unchanged."""
    if model is not None and os.path.isfile(model):
        return os.path.abspath(model)
    return model


def default_threads(replicas):
    """Threads per replica when not given: this machine's physical cores shared by `replicas`, at least 1."""
    return max(1, physical_cores() // max(1, int(replicas)))


@serve.deployment(name="fastgguf")
@serve.ingress(_ReplicaApp())
class FastGGUFServer:
    """One replica: `FastGGUFServer(model, threads, parallel=4, n_ctx=None, api_key=None, max_queue=64,
    max_body_bytes=8 MiB, ping_interval=5.0, reasoning_format="parsed")`, the arguments of ``fastgguf serve``."""

    # (attributes are prefixed: Serve's ingress wrapper has its own `app`)
    def __init__(self, model, threads, parallel=4, n_ctx=None, api_key=None, max_queue=64,
                 max_body_bytes=8 << 20, ping_interval=5.0, reasoning_format="parsed"):
        t0 = time.perf_counter()
        self.fg_model = fastgguf.Model(hub.resolve(model), n_threads=threads)
        self.fg_app = create_app(self.fg_model, parallel=parallel, n_ctx=n_ctx, n_threads=threads, api_key=api_key,
                              max_queue=max_queue, max_body_bytes=max_body_bytes, ping_interval=ping_interval,
                              reasoning_format=reasoning_format)
        self.fg_engine = _find_engine(self.fg_app)
        self.fg_load_seconds = time.perf_counter() - t0
        # (this class travels by value, with a copy of this module's globals: reach the module itself)
        importlib.import_module(__name__)._replica["app"] = self.fg_app

    def replica_info(self):
        """{pid, load_seconds, threads} of this replica (a handle call, for tests and operators)."""
        return {"pid": os.getpid(), "load_seconds": self.fg_load_seconds, "threads": self.fg_model.n_threads}

    def check_health(self):
        """Serve's periodic health check: the engine thread, once started, must still be alive."""
        t = getattr(self.fg_engine, "_thread", None)
        if t is not None and not t.is_alive():
            raise RuntimeError("the fastgguf engine thread has stopped")


def _find_engine(app):
    """The Engine of the one model behind create_app's app (which may be wrapped in its key/body-size guard)."""
    inner = getattr(app, "app", app)
    registry = getattr(getattr(inner, "state", None), "registry", None)
    return registry.entries[registry.default].engine if registry is not None else None


def deployment(model=None, *, replicas=1, max_replicas=None, threads=None, parallel=4, n_ctx=None, api_key=None,
               max_queue=64, max_body_bytes=8 << 20, ping_interval=5.0, max_ongoing_requests=None,
               reasoning_format="parsed"):
    """The bound Serve application: `replicas` replicas of FastGGUFServer, each with `threads` threads and as many
    Ray CPUs. With `max_replicas` > `replicas`, Serve autoscales between the two on ongoing requests (target:
    `parallel` per replica). `max_ongoing_requests` (default `parallel`) requests go to a replica at once."""
    replicas = int(replicas)
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    if threads is None:
        threads = default_threads(replicas)
    if int(threads) < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    threads = int(threads)
    ongoing = int(max_ongoing_requests or parallel)
    opts = dict(ray_actor_options={"num_cpus": threads}, max_ongoing_requests=ongoing)
    if max_replicas is not None and int(max_replicas) > replicas:
        opts["autoscaling_config"] = {"min_replicas": replicas, "initial_replicas": replicas,
                                      "max_replicas": int(max_replicas), "target_ongoing_requests": parallel}
    elif max_replicas is not None and int(max_replicas) < replicas:
        raise ValueError(f"max_replicas ({max_replicas}) must be >= replicas ({replicas})")
    else:
        opts["num_replicas"] = replicas
    return FastGGUFServer.options(**opts).bind(
        _resolve(model), threads, parallel=parallel, n_ctx=n_ctx, api_key=api_key, max_queue=max_queue,
        max_body_bytes=max_body_bytes, ping_interval=ping_interval, reasoning_format=reasoning_format)
