"""The models one server serves (issue 37): a ModelRegistry of Entries, each a name and where its file comes from (a
path, a catalogue name or a file of --models-dir), loaded on the first request that names it and unloaded after its
keep-alive, when told (keep_alive 0, /models/unload, /api/delete), or when loading another would pass the memory
budget (least recently used first, never one a request holds: a Lease).

One load per model however many requests wait for it; the load runs in a worker thread (the event loop and other
models' streams go on); a load that fails gives its error to every request waiting for it and is tried again only
by a new request. Each loaded model has its own engine (a Scheduler and its slots), so requests for different models
run side by side. The registry owns the model names: resolve() is the one place a request's `model` becomes an
Entry (or a 404 naming it). No web framework is imported here; `load` (entry -> (model, engine), in a thread) and
`unload` (engine -> None, in a thread) are the caller's, so the tests drive it with fakes.
"""
import asyncio
import dataclasses
import math
import os
import re
import time

from fastgguf.api.openai.protocol import APIError
from fastgguf.engine.pooling import SETTABLE

__all__ = ["ModelRegistry", "Entry", "Lease", "Loader", "parse_keep_alive", "parse_size", "discovery", "stop_engine",
           "vocabulary", "default_max_memory", "file_size",
           "DEFAULT_KEEP_ALIVE"]

DEFAULT_KEEP_ALIVE = 300.0  # seconds: Ollama's 5 minutes
MAX_KEEP_ALIVE = 9223372036.0  # Go's time.Duration limit (about 292 years), the longest Ollama takes
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?b?)\s*", re.I)


def parse_keep_alive(value, param="keep_alive"):
    """Ollama's keep_alive -> seconds (a float), or None for never: a number of seconds, a string of one, or a Go
    duration ("5m", "1h30m", "250ms"); 0 unloads at once after the request; a negative value keeps the model
    loaded for ever. Anything else (a bool, NaN, an unknown unit, more than Go's longest duration) is APIError 400."""
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float, str)):
        raise APIError(f"{param} must be a number of seconds or a duration such as \"5m\", got {value!r}",
                       param=param)
    if isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = _duration(text, param)
    else:
        seconds = float(value)
    if math.isnan(seconds) or abs(seconds) > MAX_KEEP_ALIVE:
        raise APIError(f"{param} {value!r} is out of range (at most {MAX_KEEP_ALIVE:.0f} seconds; negative: never "
                       f"unload)", param=param)
    return None if seconds < 0 else seconds


def _duration(text, param):
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.lstrip("+"))
    pos, total = 0, 0.0
    for m in _DURATION.finditer(body):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not body or pos != len(body):
        raise APIError(f"{param} {text!r} is not a duration (write seconds, or e.g. \"30s\", \"5m\", \"1h\", \"-1\")",
                       param=param)
    return sign * total


def parse_size(text):
    """--max-memory: bytes from "12G", "512MiB", "1.5GB", "8e9"-free plain integers ("1000000"); K, M, G, T are
    powers of 1024. ValueError for anything else, zero or a negative size."""
    m = _SIZE.fullmatch(str(text))
    if not m or (m.group(3) and not m.group(2) and m.group(3).lower() != "b"):
        raise ValueError(f"not a size: {text!r} (write bytes, or e.g. 512M, 12G, 1.5GiB)")
    n = float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")
    if n < 1:
        raise ValueError(f"a size must be at least one byte, got {text!r}")
    return int(n)


class Entry:
    """One servable model: `name` (its id in the API), `source` (a path or a catalogue name), `kind` ("file": -m,
    "dir": a file of --models-dir, "catalogue", "given": a Model handed to create_app), its `state` ("unloaded",
    "loading", "loaded"), and while loaded its `model` and `engine`. `leases`: requests holding it; `keep_alive`:
    seconds it stays loaded after the last one (None: never); `size`: bytes it takes (estimated before a load,
    measured after); `error`: the last load's failure."""

    def __init__(self, name, source, kind="file", size=0, keep_alive=DEFAULT_KEEP_ALIVE, aliases=()):
        self.name, self.source, self.kind, self.size = name, source, kind, size
        self.aliases = set(aliases)
        self.shown_aliases, self.tags = [], []  # llama-server's --alias a,b and --tags: /v1/models lists them
        self.base_keep_alive = self.keep_alive = keep_alive
        self.state, self.model, self.engine, self.error = "unloaded", None, None, None
        self.leases, self.last_used, self.task = 0, 0.0, None
        self.reserved = False  # loading with its room in the budget counted (past _make_room)

    def names(self):
        return {self.name, *self.aliases}

    def expires_at(self, now):
        """When (the registry's clock) it unloads if nothing uses it meanwhile; None: never."""
        if self.keep_alive is None:
            return None
        return (now if self.leases else self.last_used) + self.keep_alive


class Lease:
    """A request's hold on a loaded model (model, engine): it is not unloaded until release()."""

    def __init__(self, registry, entry):
        self.registry, self.entry = registry, entry
        self.model, self.engine = entry.model, entry.engine
        self._held = True

    def release(self):
        if self._held:
            self._held = False
            self.registry._release(self.entry)


class ModelRegistry:
    """The entries a server serves, by name. `entries`: Entry objects given at start (-m); `discover()`: more
    {name: (source, kind, size)} found when asked (--models-dir files, the catalogue), looked up again when a name
    is unknown; `default`: the name served for a request that names no known model (a one-model server; None: an
    unknown name is a 404) unless `strict`; `max_memory`: bytes (None: no budget)."""

    def __init__(self, entries=(), *, load, unload, discover=None, default=None, strict=False, max_memory=None,
                 keep_alive=DEFAULT_KEEP_ALIVE, clock=time.monotonic, tick=1.0):
        self.entries = {}
        for e in entries:
            self.entries[e.name] = e
        self._load, self._unload, self._discover = load, unload, discover
        self.default, self.strict, self.max_memory = default, strict, max_memory
        self.keep_alive, self.clock, self.tick = keep_alive, clock, tick
        self._changed = None   # an asyncio.Condition, made on the loop (start() or first use)
        self._waiting = 0      # loads waiting for room under the budget (_make_room)
        self._tasks = set()    # tasks started and not awaited (asyncio holds only weak references to them)
        self._reaper = None
        self.refresh()

    # -- names ---------------------------------------------------------------------------------------------------

    def refresh(self):
        """Add what discover() finds now (a new file in --models-dir, a catalogue model) as unloaded entries."""
        if self._discover is None:
            return
        for name, (source, kind, size) in self._discover().items():
            if name not in self.entries:
                self.entries[name] = Entry(name, source, kind, size, keep_alive=self.keep_alive)

    def find(self, name):
        """The entry `name` names (its name or an alias, with or without .gguf or Ollama's ":latest"), or None."""
        for candidate in _spellings(name):
            for e in self.entries.values():
                if candidate in e.names():
                    return e
        return None

    def resolve(self, name, ollama=False):
        """The entry a request's `model` names; the default for another name (not strict); else APIError 404 in
        words the dialect uses (ollama: Ollama's "model 'x' not found"). No name: the default, else 400."""
        if name is not None and not isinstance(name, str):
            raise APIError("model must be a string", param="model")
        if not name:
            if self.default is not None:
                return self.entries[self.default]
            raise APIError(f"model is required: this server serves several models ({', '.join(self.listing())})",
                           param="model")
        e = self.find(name)
        if e is None:
            self.refresh()
            e = self.find(name)
        if e is not None:
            return e
        if self.default is not None and not self.strict:
            return self.entries[self.default]
        served = f"this server serves {', '.join(repr(n) for n in self.listing()) or 'no model'}"
        raise APIError(f"model '{name}' not found" if ollama else f"The model {name!r} does not exist ({served})",
                       status=404, param="model", code="model_not_found")

    def listing(self):
        """The names of every entry, after a refresh."""
        self.refresh()
        return list(self.entries)

    # -- leases --------------------------------------------------------------------------------------------------

    async def acquire(self, name, keep_alive=..., ollama=False):
        """A Lease on the model `name` names (resolve()), loaded first if need be: one load however many requests
        wait; a failed load raises its error in every waiter. keep_alive (seconds, None: never; ...: the entry's
        default) applies after this request."""
        entry = self.resolve(name, ollama=ollama)
        entry.leases += 1
        try:
            await self._loaded(entry)
        except BaseException:
            self._release(entry)
            raise
        entry.keep_alive = entry.base_keep_alive if keep_alive is ... else keep_alive
        return Lease(self, entry)

    async def _loaded(self, entry):
        while entry.state != "loaded":
            if entry.task is None:
                entry.task = asyncio.ensure_future(self._load_entry(entry))
                entry.task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved
            await asyncio.shield(entry.task)

    def _release(self, entry):
        entry.leases -= 1
        entry.last_used = self.clock()
        if entry.leases == 0 and entry.keep_alive == 0 and entry.state == "loaded":
            self._spawn(self.unload(entry.name))
        self._notify()

    # -- loading and unloading -----------------------------------------------------------------------------------

    async def _load_entry(self, entry):
        entry.state, entry.error = "loading", None
        try:
            await self._make_room(entry)
            entry.reserved = True
            model, engine = await asyncio.to_thread(self._load, entry)
        except Exception as e:  # noqa: BLE001 - whatever the loader raised, for every waiter
            entry.state, entry.error = "unloaded", str(e) or type(e).__name__
            raise _load_error(entry, e) from e
        except BaseException:
            entry.state = "unloaded"
            raise
        finally:
            entry.task, entry.reserved = None, False
            self._notify()
        entry.model, entry.engine, entry.state = model, engine, "loaded"
        entry.size = _measured(model, engine, entry.size)
        entry.last_used = self.clock()

    async def _make_room(self, entry):
        """Unload the least recently used idle models until `entry` fits the budget; wait while the rest are in
        use. A model larger than the whole budget is an error."""
        if self.max_memory is None:
            return
        if entry.size > self.max_memory:
            raise APIError(f"model {entry.name!r} needs about {_gib(entry.size)}, more than the server's memory "
                           f"budget of {_gib(self.max_memory)} (--max-memory)", status=500, type="server_error")
        while True:
            others = [e for e in self.entries.values() if e is not entry and (e.state == "loaded" or e.reserved)]
            if sum(e.size for e in others) + entry.size <= self.max_memory:
                return
            idle = [e for e in others if e.state == "loaded" and e.leases == 0]
            if idle:
                await self.unload(min(idle, key=lambda e: e.last_used).name)
                continue
            cond = self._condition()
            self._waiting += 1
            try:
                async with cond:
                    await cond.wait()
            finally:
                self._waiting -= 1

    async def unload(self, name):
        """Unload the model now if it is loaded and no request holds it (True); held: it unloads when its last
        request ends (keep_alive 0), False."""
        entry = self.entries.get(name)
        if entry is None or entry.state != "loaded":
            return False
        if entry.leases:
            entry.keep_alive = 0
            return False
        engine = entry.engine
        entry.state, entry.model, entry.engine = "unloaded", None, None
        try:
            await asyncio.to_thread(self._unload, engine)
        finally:
            self._notify()
        return True

    async def expire(self):
        """Unload every idle model whose keep-alive has passed (the reaper's sweep, every `tick` seconds)."""
        now = self.clock()
        for e in list(self.entries.values()):
            at = e.expires_at(now)
            if e.state == "loaded" and not e.leases and at is not None and at <= now:
                await self.unload(e.name)

    def forget(self, name):
        """Drop an unloaded entry (its file was deleted); the -m ones stay listed."""
        e = self.entries.get(name)
        if e is not None and e.state == "unloaded" and e.kind in ("dir", "catalogue") and name != self.default:
            del self.entries[name]

    # -- the server's lifespan -----------------------------------------------------------------------------------

    def start(self):
        """On the event loop: the keep-alive reaper."""
        self._condition()
        self._reaper = asyncio.ensure_future(self._reap())

    async def _reap(self):
        while True:
            await asyncio.sleep(self.tick)
            await self.expire()

    async def stop(self):
        """Stop the reaper and every engine (a load under way is waited for, then stopped too)."""
        if self._reaper is not None:
            self._reaper.cancel()
        for e in list(self.entries.values()):
            if e.task is not None:
                await asyncio.gather(asyncio.shield(e.task), return_exceptions=True)
        for e in list(self.entries.values()):
            if e.state == "loaded":
                e.leases = 0
                await self.unload(e.name)

    def loaded(self):
        return [e for e in self.entries.values() if e.state == "loaded"]

    def _condition(self):
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    def _notify(self):
        """Wake the loads waiting for room (a model was released or unloaded)."""
        if not self._waiting:
            return
        cond = self._condition()

        async def wake():
            async with cond:
                cond.notify_all()
        self._spawn(wake())

    def _spawn(self, coro):
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _spellings(name):
    out = [name]
    if name.endswith(":latest"):
        out.append(name[:-len(":latest")])
    out += [n[:-len(".gguf")] for n in list(out) if n.endswith(".gguf")]
    return out


def _load_error(entry, e):
    if isinstance(e, APIError):
        return e
    return APIError(f"model {entry.name!r} failed to load: {e}", status=500, type="server_error")


def _measured(model, engine, estimate):
    """Bytes a loaded model takes: its weights, their repacked copies (--repack) and its slots' caches
    (Model.memory), else the estimate."""
    try:
        m = model.memory(engine.n_ctx)
        return int(m["weights"] + m.get("packed", 0) + m["cache"] * engine.parallel)
    except (AttributeError, KeyError, TypeError):
        return estimate


def _gib(n):
    return f"{n / 2 ** 30:.2f} GiB"


def default_max_memory():
    """--max-memory's default: 3/4 of this machine's RAM (None where it cannot be read: no budget)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4
    except (AttributeError, ValueError, OSError):
        return None


def file_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class Loader:
    """The server's `load`: an Entry's fastgguf.Model (a catalogue name fetched first) with its started Scheduler of
    `parallel` slots (default: engine.scheduler.default_parallel) of `n_ctx` tokens (default: the model's training
    context, at most 4096). `sampling_defaults`: SamplingParams fields for requests that do not give them;
    `model_options`: more keywords for fastgguf.Model(...) (what `fastgguf serve` passes through); `pooling`: how
    embeddings are pooled, over what the file says (llama-server's --pooling: none, mean, cls or last)."""

    def __init__(self, *, parallel=None, n_ctx=None, n_threads=None, max_queue=64, sampling_defaults=None,
                 model_options=None, pooling=None):
        if pooling not in (None, *SETTABLE):
            raise ValueError(f"pooling must be one of {', '.join(SETTABLE)}, got {pooling!r}")
        self.parallel, self.n_ctx, self.n_threads, self.max_queue = parallel, n_ctx, n_threads, max_queue
        self.pooling = pooling
        self.sampling_defaults = dict(sampling_defaults or {})
        self.model_options = dict(model_options or {})

    def __call__(self, entry):
        import fastgguf
        from fastgguf import hub
        path = hub.resolve(entry.source) if entry.kind == "catalogue" else entry.source
        model = fastgguf.Model(path, n_threads=self.n_threads, **self.model_options)
        self.prepare(model, entry.name)
        vocabulary(model)
        engine = self.engine(model)
        engine.start()
        return model, engine

    def prepare(self, model, name):
        """What every served model carries: its id (model.alias) and its sampling defaults."""
        model.alias = name
        if self.pooling is not None:
            model.hparams = dataclasses.replace(model.hparams, pooling=self.pooling)
        if self.sampling_defaults:
            model.sampling_defaults = dict(self.sampling_defaults)

    def engine(self, model):
        from fastgguf.engine.scheduler import Scheduler, default_parallel
        n_ctx = self.n_ctx or min(int(model.n_ctx_train or 4096), 4096)
        return Scheduler(model, parallel=self.parallel or default_parallel(model), n_ctx=n_ctx,
                         n_threads=self.n_threads, max_queue=self.max_queue)


def vocabulary(model):
    """Structured output's vocabulary of a model, built once before its first request (0.3 s at 49k tokens, ~3 s
    at 262k)."""
    from fastgguf.engine import grammar
    if grammar.available():
        grammar.vocabulary(model)


def stop_engine(engine):
    """The server's `unload`: stop a model's Scheduler (its slots' caches go with it)."""
    engine.stop(timeout=5)


def discovery(models_dir=None, catalogue=False):
    """The server's `discover`: {name: (source, kind, size)} of the .gguf files in models_dir (named by their file
    name without .gguf) and, with catalogue, of fastgguf's catalogue (fastgguf pull --list)."""
    def discover():
        found = {}
        if catalogue:
            from fastgguf import hub
            for name, e in hub.CATALOGUE.items():
                found[name] = (name, "catalogue", e.size)
        if models_dir:
            try:
                names = sorted(os.listdir(models_dir))
            except OSError:
                names = []
            for f in names:
                path = os.path.join(models_dir, f)
                if f.endswith(".gguf") and os.path.isfile(path):
                    found.setdefault(f[:-len(".gguf")], (path, "dir", file_size(path)))
        return found
    return discover
