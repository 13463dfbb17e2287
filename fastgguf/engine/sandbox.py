"""Running a native library's compile on untrusted input where a crash cannot take this process down.

    text = sandbox.run("fastgguf.engine.grammar:build", ["json_schema", source, False])
    with sandbox.cancel_on(event):        # a server's request: the compile is killed when event is set
        ...

`run(target, args)` calls the module-level function `target` ("module:function", JSON-able args and result) in a
worker process (this module's `main`, importing the fastgguf this process runs), one job at a time per worker,
under limits:
- CPU: CPU_SECONDS per job (RLIMIT_CPU set anew before each job: the kernel kills an over-budget compile); a wall
  clock of WALL_FACTOR x that is the backstop where RLIMIT_CPU does not exist (Windows) or the machine is loaded;
- memory: MEMORY_BYTES of address space (RLIMIT_AS);
- stack: the job runs in a thread of WORKER_STACK, a sixteenth of BIG_STACK, the stack of the in-process compile
  that follows a successful check (big_stack): what survived the worker survives here with that margin;
- at most MAX_WORKERS jobs at once, MAX_WAITING more queued; past that `Busy` (a QueueFull: HTTP 429).
A worker that dies (a signal, the CPU or memory limit) or is killed (the caller cancelled, the wall clock ran out)
is replaced on the next job; its job raises SandboxError saying which. An exception the target raises comes back
as the same class when it is a FastGGUFError, ValueError or TypeError, as SandboxError otherwise.

FASTGGUF_SANDBOX=0 runs jobs in this process instead (in a BIG_STACK thread: the static limits of the callers still
hold, a crash of the library does not), for hosts that cannot start a subprocess; a worker that cannot start falls
back to that with a warning. FASTGGUF_SANDBOX_CPU_SECONDS sets CPU_SECONDS.
"""
import collections
import contextlib
import contextvars
import importlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings

from fastgguf import errors

__all__ = ["run", "prestart", "big_stack", "cancel_on", "SandboxError", "Cancelled", "Busy", "CPU_SECONDS", "MAX_WORKERS",
           "MAX_WAITING"]

CPU_SECONDS = float(os.environ.get("FASTGGUF_SANDBOX_CPU_SECONDS", "5"))
WALL_FACTOR = 4
MEMORY_BYTES = 4 << 30
BIG_STACK = 256 << 20
WORKER_STACK = BIG_STACK // 16
MAX_WORKERS = 2
MAX_WAITING = 8


class SandboxError(errors.GrammarError):
    """A sandboxed compile did not finish: the worker crashed or ran past a limit. (A GrammarError: its input is
    refused, HTTP 400.)"""


class Cancelled(RuntimeError):
    """The caller cancelled the job (cancel_on's event was set): the worker was killed."""


class Busy(errors.QueueFull):
    """MAX_WORKERS jobs run and MAX_WAITING wait already."""


_CANCEL = contextvars.ContextVar("fastgguf_sandbox_cancel", default=None)


@contextlib.contextmanager
def cancel_on(event):
    """Jobs run inside the block are killed (Cancelled) when the threading.Event `event` is set."""
    token = _CANCEL.set(event)
    try:
        yield
    finally:
        _CANCEL.reset(token)


def _call(target, args):
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)(*args)


def big_stack(fn, *args):
    """fn(*args) in a fresh thread with a BIG_STACK stack (the native compile that follows a sandboxed check)."""
    out = {}

    def body():
        try:
            out["ok"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            out["err"] = e
    with _STACK_LOCK:
        old = threading.stack_size(BIG_STACK)
        try:
            t = threading.Thread(target=body, name="fastgguf-compile", daemon=True)
            t.start()
        finally:
            threading.stack_size(old)
    t.join()
    if "err" in out:
        raise out["err"]
    return out["ok"]


_STACK_LOCK = threading.Lock()
# The worker imports the fastgguf this process runs, wherever it was started: `python -m` would put the working
# directory first on its path, and a source checkout there (no built extensions) would shadow an installed package.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOT = "import sys; sys.path[0] = {root!r}; from fastgguf.engine.sandbox import main; main()"


class _Worker:
    """One worker process and the thread that reads its replies."""

    def __init__(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT.format(root=_PACKAGE_ROOT)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.replies, self.stderr = queue.Queue(), collections.deque(maxlen=1)   # its last line of stderr
        threading.Thread(target=self._read, name="fastgguf-sandbox-reader", daemon=True).start()
        self.stderr_reader = threading.Thread(target=self._read_stderr, name="fastgguf-sandbox-stderr", daemon=True)
        self.stderr_reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.replies.put(line)
        self.replies.put(None)

    def _read_stderr(self):
        for line in self.proc.stderr:
            if line.strip():
                self.stderr.append(line.decode("utf-8", "replace").strip()[:300])

    def call(self, target, args, cancel):
        """The job's reply (a dict), or SandboxError / Cancelled after killing the process."""
        self.proc.stdin.write(json.dumps({"target": target, "args": args, "cpu": CPU_SECONDS}).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + CPU_SECONDS * WALL_FACTOR
        while True:
            try:
                line = self.replies.get(timeout=0.05)
                break
            except queue.Empty:
                if cancel is not None and cancel.is_set():
                    self.kill()
                    raise Cancelled("the compile was cancelled") from None
                if time.monotonic() > deadline:
                    self.kill()
                    raise SandboxError(f"the compile ran past {CPU_SECONDS * WALL_FACTOR:g} s of wall time "
                                       f"(budget {CPU_SECONDS:g} CPU-s): refused") from None
        if line is None:
            raise SandboxError(self._death())
        return json.loads(line)

    def _death(self):
        rc = self.proc.wait()
        if rc == -getattr(signal, "SIGXCPU", -1000):
            return f"the compile exceeded its CPU budget of {CPU_SECONDS:g} s: refused"
        if rc > 0:                      # Python itself failed (a job's own exceptions are replies, not exits)
            self.stderr_reader.join(timeout=1.0)      # (its last lines, read to the end of the pipe)
            last = self.stderr[-1] if self.stderr else "no message"
            return f"the compile sandbox failed (exit status {rc}: {last})"
        return (f"the compiler died (signal {-rc}): refused (too large or deep for the limits of "
                f"{MEMORY_BYTES >> 30} GiB memory and its stack)")

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class _Pool:
    def __init__(self):
        self.pid = os.getpid()
        self.idle, self.lock = [], threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_WORKERS)
        self.jobs = 0                  # running or waiting for a slot
        self.inprocess = os.environ.get("FASTGGUF_SANDBOX", "1") == "0"

    def acquire(self):
        """An idle or new worker (None: compile in this process), waiting for a slot; Busy past the queue."""
        with self.lock:
            if self.jobs >= MAX_WAITING + MAX_WORKERS:
                raise Busy(f"{MAX_WORKERS} grammar compiles run and {MAX_WAITING} wait already: retry later")
            self.jobs += 1
        self.slots.acquire()
        with self.lock:
            while self.idle:
                w = self.idle.pop()
                if w.alive():
                    return w
        try:
            return _Worker()
        except OSError as e:
            warnings.warn(f"fastgguf: the compile sandbox cannot start ({e}); compiling in this process",
                          RuntimeWarning, stacklevel=3)
            self.inprocess = True
            return None

    def release(self, w):
        if w is not None and w.alive():
            with self.lock:
                self.idle.append(w)
        with self.lock:
            self.jobs -= 1
        self.slots.release()


_POOL = [None]
_POOL_LOCK = threading.Lock()


def _pool():
    with _POOL_LOCK:
        if _POOL[0] is None or _POOL[0].pid != os.getpid():     # none survive a fork
            _POOL[0] = _Pool()
        return _POOL[0]


def _raise(err):
    kind, message = err
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, errors.FastGGUFError):
        raise cls(message)
    if kind in ("ValueError", "TypeError"):
        raise {"ValueError": ValueError, "TypeError": TypeError}[kind](message)
    raise SandboxError(f"the compile failed: {kind}: {message}")


def prestart():
    """Start one idle worker now (a server at start-up), so the first compile does not wait for it."""
    pool = _pool()
    if pool.inprocess:
        return
    with pool.lock:
        if pool.idle:
            return
    try:
        w = _Worker()
    except OSError:
        return
    with pool.lock:
        pool.idle.append(w)


def run(target, args):
    """target(*args) ("module:function") in a worker process under the limits above; see the module docstring."""
    pool = _pool()
    if pool.inprocess:
        return big_stack(_call, target, args)
    w = pool.acquire()
    try:
        if w is None:
            return big_stack(_call, target, args)
        try:
            reply = w.call(target, args, _CANCEL.get())
        except BrokenPipeError:     # an idle worker that died since (killed from outside): one fresh try
            w.kill()
            w = _Worker()
            reply = w.call(target, args, _CANCEL.get())
    finally:
        pool.release(w)
    if "error" in reply:
        _raise(reply["error"])
    return reply["ok"]


# -- the worker process -----------------------------------------------------------------------------------------------

def _limit(job_cpu):
    try:
        import resource
    except ImportError:     # Windows: the parent's wall clock is the only budget
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime + job_cpu) + 1
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _setup():
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if os.environ.get("LD_PRELOAD", "").find("asan") < 0:     # ASan reserves terabytes of address space
            resource.setrlimit(resource.RLIMIT_AS, (min(MEMORY_BYTES, hard) if hard > 0 else MEMORY_BYTES, hard))
    except (ImportError, ValueError, OSError):
        pass
    threading.stack_size(WORKER_STACK)


def _job(line):
    job = json.loads(line)
    _limit(job["cpu"])
    out = {}

    def body():
        try:
            out["ok"] = _call(job["target"], job["args"])
        except BaseException as e:  # noqa: BLE001 - every failure (a Rust panic too) goes back, by class name
            out["error"] = [type(e).__name__, str(e).split("<backtrace>", 1)[0].strip()]
    t = threading.Thread(target=body)
    t.start()
    t.join()
    return out


def main():
    reply = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr             # nothing the job prints can break the replies
    _setup()
    for line in sys.stdin.buffer:
        reply.write(json.dumps(_job(line)).encode() + b"\n")
        reply.flush()


if __name__ == "__main__":
    main()
