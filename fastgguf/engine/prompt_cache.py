"""A persistent prompt cache: the K/V of long prompts on disk, reused across requests and restarts.

    model = fastgguf.Model(path, prompt_cache="~/.cache/fastgguf/prompts", prompt_cache_size=1024)  # MiB
    fastgguf serve -m MODEL --prompt-cache DIR --prompt-cache-size 1024

After a prompt of at least `min_tokens` tokens (256) is evaluated, its state (fastgguf.engine.state: token ids and
K/V) is copied out and written to DIR by a writer thread (PromptCache.flush waits for it; so does the interpreter's
exit), unless a stored file already holds it. Before a prompt is evaluated, the stored file sharing
the longest prefix with it is found (by its token ids alone, state.read_ids) and, when that prefix is at least
min_tokens and longer than what the context already holds, its first tokens are restored (state.load(ctx, path, n))
instead of recomputed: the next logits are bit for bit those of a cold run, and usage's cached_tokens counts the
restored tokens. generate() (the SDK) and the Scheduler (the server and the OpenAI-style methods) both call the two
hooks below, reuse_prefix and prompt_evaluated.

Files: `<model key>-<hash of the ids>.fgstate` (state.model_key: the model file's sha256, so models sharing a folder
never mix), written atomically (a temporary file, then a rename; no fsync: a file damaged by a crash is refused by
state's checks). A file that is damaged, truncated, or whose header names another model than its name does is
removed when found; files of other models and any other file are left alone. The folder is bounded by `size_mib`
(every model's .fgstate files together): before a write, the least recently used files (their mtime, set on every
write and hit) are removed until the new one fits. Several processes may share a folder (each rescans it per lookup).

Models with recurrent layers (state.recurrent_kind: lfm2 / lfm2moe short convolutions, qwen35 / qwen35moe DeltaNet,
granitehybrid Mamba-2) keep the state of their last position only, which cannot be cut back to a prefix: for them
a file is a checkpoint, stored at the end of a prompt (the same policy: at least min_tokens, not already stored),
and restored only whole, when its tokens are a prefix of the new prompt (state.prefix_loadable: the one rule, in
_longest); cached_tokens is then the checkpoint's length, and 0 when only a part of a stored prompt matches (a chat's
next turn extends the last prompt, so it hits; the same prompt again does not, since one token must be evaluated
for its logits). Encoders do not use the cache (a RuntimeWarning says so); nor does a folder that cannot be written
(a RuntimeWarning; the model works without it).
"""
import atexit
import hashlib
import os
import queue
import tempfile
import threading
import time
import warnings
import weakref

import numpy as np

from fastgguf.engine import state as _state
from fastgguf.errors import StateError

__all__ = ["PromptCache", "open_cache", "reuse_prefix", "prompt_evaluated", "MIN_TOKENS", "DEFAULT_SIZE_MIB"]

MIN_TOKENS = 256        # shorter prompts are neither stored nor restored: recomputing them is cheap
DEFAULT_SIZE_MIB = 1024
SUFFIX = ".fgstate"
MAX_PENDING = 4         # states copied out and waiting for the writer thread (each as large as its file)
WRITER_IDLE = 5.0       # seconds the writer thread waits for more before it ends

_caches = weakref.WeakSet()


@atexit.register
def _flush_all():
    """At exit, the queued writes finish (the writer threads are daemons)."""
    for cache in list(_caches):
        cache.flush()


def open_cache(model, directory, size_mib=None, min_tokens=MIN_TOKENS):
    """Model(prompt_cache=...)'s PromptCache for model, or None (with a RuntimeWarning) where it cannot be used:
    directory None, an encoder, a folder that cannot be created or written."""
    if directory is None:
        return None
    cache = PromptCache(directory, size_mib, min_tokens)  # bad arguments: TypeError / ValueError
    if model.is_encoder:
        warnings.warn(f"the prompt cache is off for {os.path.basename(model.path)}: {model.hparams.arch} is an "
                      f"encoder, which keeps no state between calls", RuntimeWarning, stacklevel=3)
        return None
    try:
        os.makedirs(cache.dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=cache.dir):
            pass
    except OSError as e:
        warnings.warn(f"the prompt cache is off: its folder {cache.dir} cannot be written ({e})", RuntimeWarning,
                      stacklevel=3)
        return None
    # the model file's sha256 names its files: hashed now in the background (about a second per GB), not by the
    # first request
    threading.Thread(target=_hash, args=(model,), name="fastgguf-sha256", daemon=True).start()
    return cache


def _hash(model):
    try:
        model.sha256()
    except OSError:  # the file gone: the first lookup says so, or finds nothing
        pass


class PromptCache:
    """The files of a prompt-cache folder (see the module docstring). Thread-safe: one lock around its folder."""

    def __init__(self, directory, size_mib=None, min_tokens=MIN_TOKENS):
        size_mib = DEFAULT_SIZE_MIB if size_mib is None else size_mib
        if isinstance(size_mib, bool) or not isinstance(size_mib, (int, float)) or not size_mib > 0:
            raise ValueError(f"prompt_cache_size must be a positive number of MiB, got {size_mib!r}")
        if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 1:
            raise ValueError(f"prompt_cache_min_tokens must be an int >= 1, got {min_tokens!r}")
        self.dir = os.path.abspath(os.path.expanduser(os.fspath(directory)))
        self.max_bytes = int(size_mib * (1 << 20))
        self.min_tokens = min_tokens
        self._lock = threading.Lock()
        self._index = {}  # file name -> its token ids (int32 array), for the files of the keys looked up so far
        self._pending = {}  # file name -> its token ids, for the states queued for writing (store)
        self._jobs = queue.Queue()
        self._writer = None
        _caches.add(self)
        self.hits = self.stores = 0

    def __repr__(self):
        return f"PromptCache({self.dir!r}, size_mib={self.max_bytes / (1 << 20):g}, min_tokens={self.min_tokens})"

    def _path(self, name):
        return os.path.join(self.dir, name)

    def _remove(self, name):
        self._index.pop(name, None)
        try:
            os.unlink(self._path(name))
        except OSError:
            pass

    def _scan(self, ctx, key):
        """The index of key's files, brought up to date with the folder: files gone are dropped, new ones read
        (their ids only); a new one that is damaged or names another model in its header is removed."""
        try:
            names = {n for n in os.listdir(self.dir) if n.startswith(key + "-") and n.endswith(SUFFIX)}
        except OSError:
            names = set()
        for n in [n for n in self._index if n.startswith(key + "-") and n not in names]:
            del self._index[n]
        sha = ctx.model.sha256_bytes()
        for n in names - self._index.keys():
            try:
                head, ids = _state.read_ids(self._path(n))
            except FileNotFoundError:
                continue
            except (StateError, OSError):
                self._remove(n)
                continue
            if head["sha256"] != sha:
                self._remove(n)
                continue
            self._index[n] = ids
        return {n: self._index[n] for n in names if n in self._index}

    def _longest(self, ctx, key, ids, limit):
        """(name, n): the stored file sharing the longest loadable prefix with ids[:limit], n tokens (for a model
        with recurrent layers, a whole file: prefix_loadable); (None, 0) if none."""
        arr = np.asarray(ids[:limit], dtype=np.int32)
        hp = ctx.model.hparams
        best = (None, 0)
        for name, stored in self._scan(ctx, key).items():
            m = min(len(stored), len(arr))
            if m <= best[1]:
                continue
            diff = np.flatnonzero(stored[:m] != arr[:m])
            n = int(diff[0]) if len(diff) else m
            if n > best[1] and _state.prefix_loadable(hp, len(stored), n):
                best = (name, n)
        return best

    def restore(self, ctx, ids, keep):
        """Put into ctx the longest stored prefix of ids (at most len(ids) - 1 tokens, at least min_tokens) when
        it is longer than keep; returns its length, or keep (ctx untouched) when nothing better is stored or the
        file fails to load (it is then removed). The caller holds ctx."""
        limit = min(len(ids) - 1, ctx.n_ctx)
        if limit < max(self.min_tokens, keep + 1):
            return keep
        with self._lock:
            key = _state.model_key(ctx)
            name, n = self._longest(ctx, key, ids, limit)
            if name is None or n <= keep or n < self.min_tokens:
                return keep
            path = self._path(name)
            try:
                _state.load(ctx, path, n)
            except FileNotFoundError:
                self._index.pop(name, None)
                return keep
            except (StateError, OSError, ValueError):
                self._remove(name)
                return keep
            self._touch(path)
            self.hits += 1
            return n

    def store(self, ctx, ids):
        """Queue ctx's state for writing when it holds exactly the prompt ids, of at least min_tokens, and no
        stored file holds them already (nor a longer prompt starting with them). The state is copied out here (the
        caller holds ctx) and written by the cache's writer thread (flush() waits for it), so neither generate()
        nor the Scheduler's other slots wait for the disk; at most MAX_PENDING writes wait (more are dropped).
        Returns whether it was queued."""
        n = len(ids)
        if n < self.min_tokens or ctx.n_past != n:
            return False
        size = _state.file_size(ctx, n)
        if size > self.max_bytes:
            return False
        with self._lock:
            key = _state.model_key(ctx)
            arr = np.asarray(ids, dtype=np.int32)
            name = f"{key}-{hashlib.sha256(arr.tobytes()).hexdigest()[:24]}{SUFFIX}"
            if name in self._pending or len(self._pending) >= MAX_PENDING or \
                    self._longest(ctx, key, ids, n)[1] >= n:
                return False
            self._pending[name] = arr
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="fastgguf-prompt-cache", daemon=True)
                self._writer.start()
        self._jobs.put((name, _state.snapshot(ctx), size))
        return True

    def flush(self):
        """Wait until the queued writes are on disk."""
        self._jobs.join()

    def _write_loop(self):
        """The writer thread: writes the queued states; ends when none has been pending for a while (a Model
        unloaded leaves no thread behind; the next store starts another)."""
        while True:
            try:
                name, snap, size = self._jobs.get(timeout=WRITER_IDLE)
            except queue.Empty:
                with self._lock:
                    if not self._pending:
                        self._writer = None
                        return
                continue
            try:
                self._write(name, snap, size)
            finally:
                self._jobs.task_done()

    def _write(self, name, snap, size):
        """Write a queued state: least recently used files removed first to keep the folder within its size; a
        failed write (a full disk) leaves the cache as it was, with a RuntimeWarning. Never raises: a cache is an
        optimisation."""
        path = self._path(name)
        try:
            with self._lock:
                self._evict(self.max_bytes - size)
            _state.save_snapshot(snap, path, durable=False)
        except Exception as e:  # noqa: BLE001 - a full disk, a folder removed: the writer thread must live on
            warnings.warn(f"the prompt cache could not write {name} in {self.dir}: {e}", RuntimeWarning)
            with self._lock:
                self._pending.pop(name, None)
            return
        with self._lock:
            self._touch(path)
            self._index[name] = self._pending.pop(name)
            self.stores += 1

    def _touch(self, path):
        """Record a use: the file's mtime is the LRU clock (nanoseconds, so two uses in a row stay ordered)."""
        try:
            now = time.time_ns()
            os.utime(path, ns=(now, now))
        except OSError:
            pass

    def _evict(self, budget):
        """Remove the least recently used .fgstate files of the folder (any model's) until they total <= budget
        bytes."""
        files = []
        with os.scandir(self.dir) as it:
            for e in it:
                if e.name.endswith(SUFFIX) and not e.name.startswith("."):
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    files.append((st.st_mtime_ns, st.st_size, e.name))
        total = sum(f[1] for f in files)
        for _, size, name in sorted(files):
            if total <= budget:
                break
            self._remove(name)
            total -= size


def reuse_prefix(ctx, ids, keep):
    """Before a prompt is evaluated: make ctx hold the first tokens of ids that need no evaluation and return how
    many. keep: what ctx's own cache can keep (generate.reusable_prefix); the model's prompt cache, if any, may
    restore a longer prefix from disk; otherwise ctx is rewound to keep (reset for 0). The caller holds ctx."""
    cache = getattr(ctx.model, "prompt_cache", None)
    if cache is not None:
        try:
            n = cache.restore(ctx, ids, keep)
        except OSError:  # the model file gone (its sha256 names the files): recompute
            n = keep
        if n > keep:
            return n
    if keep == 0:
        ctx.runner.reset()
    elif keep < ctx.n_past:
        ctx.runner.rewind(keep)
    return keep


def prompt_evaluated(ctx, ids):
    """After a prompt is evaluated (ctx holds exactly ids): store it in the model's prompt cache, if any."""
    cache = getattr(ctx.model, "prompt_cache", None)
    if cache is not None:
        try:
            cache.store(ctx, ids)
        except OSError:  # the model file gone (its sha256 names the files): not stored
            pass
