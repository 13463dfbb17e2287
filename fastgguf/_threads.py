"""Thread counts: what this process may use, and the one validation every n_threads goes through. A bottom module
(it imports nothing of fastgguf) so that the quantizer (fastgguf.gguf) and the engine both use it; its public home
is fastgguf.engine.threads.

n_threads must be a positive int (a bool or a float is a TypeError, not silently truncated). It is capped at
MAX_THREADS_PER_CPU times the CPUs of the machine (ValueError above: 100000 threads crashed the OpenMP runtime);
above the CPUs this process may run on (its affinity mask) it works but warns: threads then wait for each other's
time slices (64 threads on 2 cores made decode 75x slower)."""
import ctypes
import os
import sys
import warnings

__all__ = ["physical_cores", "usable_cpus", "check_n_threads", "MAX_THREADS_PER_CPU"]

MAX_THREADS_PER_CPU = 4
DECODE_THREADS_ENV = "FASTGGUF_DECODE_THREADS"  # overrides decode_threads' probe (a positive int)
SATURATION = 0.9  # decode_threads: the fewest threads reading at least this share of the best thread count's rate
PROBE_BYTES = 32 << 20  # decode_threads: the probe's buffers, all threads together (past many laptops' L3)
_decode_threads = {}  # cores -> the probe's answer: one probe per process and core count


def usable_cpus():
    """Logical CPUs this process may run on (its affinity mask where the OS has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def physical_cores():
    """Physical cores this process may run on (affinity-aware; Linux topology when readable), at least 1. The
    default thread count: one thread per core, since a hyperthread pair shares the core's load units."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows: no affinity mask in os
        return _cores_without_affinity()
    cores = set()
    try:
        for c in cpus:
            base = f"/sys/devices/system/cpu/cpu{c}/topology/"
            with open(base + "core_id") as f1, open(base + "physical_package_id") as f2:
                cores.add((f2.read().strip(), f1.read().strip()))
    except OSError:
        return max(1, len(cpus))
    return max(1, len(cores))


def _cores_without_affinity():
    if sys.platform == "darwin":
        # Apple Silicon has no SMT (cpu_count() // 2 would halve the threads): its performance cores, since a team
        # splits rows evenly and an efficiency core would set everyone's pace; Intel Macs have no perflevels and
        # hw.physicalcpu counts cores, not hyperthreads.
        for name in ("hw.perflevel0.physicalcpu", "hw.physicalcpu"):
            n = _sysctl_int(name)
            if n and n > 0:
                return n
    # Windows (and the rest): os.cpu_count() counts logical CPUs. Halving it guesses SMT that many machines lack
    # (most ARM laptops, many server SKUs); all logical CPUs at worst pairs two threads on a core.
    return max(1, os.cpu_count() or 1)


def _sysctl_int(name):
    """An integer sysctl by name on macOS / BSD (sysctlbyname), or None where it is unknown or unreadable."""
    try:
        libc = ctypes.CDLL(None)
        value, size = ctypes.c_int(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_int))
        rc = libc.sysctlbyname(name.encode(), ctypes.byref(value), ctypes.byref(size), None, ctypes.c_size_t(0))
    except (OSError, AttributeError):
        return None
    return value.value if rc == 0 and size.value == ctypes.sizeof(ctypes.c_int) else None


def max_threads():
    """The most threads any n_threads may ask for: MAX_THREADS_PER_CPU per CPU of the machine."""
    return MAX_THREADS_PER_CPU * max(os.cpu_count() or 1, usable_cpus())


def check_n_threads(n, name="n_threads", stacklevel=3):
    """n as a validated int (see the module docstring)."""
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"{name} must be a positive int, got {type(n).__name__} {n!r}")
    n = int(n.__index__())
    if n < 1:
        raise ValueError(f"{name} must be >= 1, got {n}")
    limit = max_threads()
    if n > limit:
        raise ValueError(f"{name}={n} is more than {MAX_THREADS_PER_CPU} threads per CPU of this machine "
                         f"(at most {limit})")
    if n > usable_cpus():
        warnings.warn(f"{name}={n} is more than the {usable_cpus()} CPUs this process may use: threads will wait "
                      f"for each other (slower, not faster)", RuntimeWarning, stacklevel=stacklevel)
    return n


def decode_threads(cores):
    """The threads of a decode step (one token: every weight read once, memory-bound) when the user gave no
    n_threads: one more than the fewest of 1..cores whose concurrent reads reach SATURATION of the best rate, at
    most `cores` (fastgguf._native.read_bandwidth_curve: PROBE_BYTES spread over `cores` threads, best of 3
    rounds). The one more: the probe's loop only reads, while a GEMV thread also computes and reads ~80% of what a
    probe thread does (issue 35), so the probe's count alone would leave decode short of the wall. More threads
    than the memory needs only add barrier waits, and on a shared or hybrid machine a thread waiting for its slice
    or on a slow core; prompts (compute-bound) keep all cores. With 2 cores or fewer the answer is `cores` whatever
    the probe says, so there is no probe. The probe takes 25-40 ms on a busy 2-vCPU VM (forced there), once per
    process and core count, on the first use of a Model's decode_threads (its first context), not at load. A
    probe smaller than the last-level cache measures the cache, which scales with threads: it then keeps every
    core, as before; on a machine whose memory other processes saturate it is noise (FASTGGUF_DECODE_THREADS=n
    overrides it: checked as every n_threads, then at most `cores`; an explicit n_threads is used for decode
    too). Where the probe cannot run (no memory, no threads): cores."""
    env = os.environ.get(DECODE_THREADS_ENV)
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"{DECODE_THREADS_ENV} must be a positive int, got {env!r}") from None
        return min(check_n_threads(n, DECODE_THREADS_ENV), cores)
    if cores <= 2:
        return cores
    if cores not in _decode_threads:
        from fastgguf import _native  # lazily: this module imports nothing of fastgguf at import time
        try:
            curve = _native.read_bandwidth_curve(max(1 << 20, PROBE_BYTES // cores), 3, cores)
        except (ValueError, RuntimeError):
            curve = None
        fewest = cores if not curve else next(k for k, bw in enumerate(curve, 1) if bw >= SATURATION * max(curve))
        _decode_threads[cores] = min(cores, fewest + 1)
    return _decode_threads[cores]
