"""Thread counts: what this process may use, and the one validation every n_threads goes through.

n_threads must be a positive int (a bool or a float is a TypeError, not silently truncated). It is capped at
MAX_THREADS_PER_CPU times the CPUs of the machine (ValueError above: 100000 threads crashed the OpenMP runtime);
above the CPUs this process may run on (its affinity mask) it works but warns: threads then wait for each other's
time slices (64 threads on 2 cores made decode 75x slower)."""
import os
import warnings

__all__ = ["physical_cores", "usable_cpus", "check_n_threads", "MAX_THREADS_PER_CPU"]

MAX_THREADS_PER_CPU = 4


def usable_cpus():
    """Logical CPUs this process may run on (its affinity mask where the OS has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def physical_cores():
    """Physical cores this process may run on (affinity-aware; Linux topology when readable), at least 1."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return max(1, (os.cpu_count() or 2) // 2)
    cores = set()
    try:
        for c in cpus:
            base = f"/sys/devices/system/cpu/cpu{c}/topology/"
            with open(base + "core_id") as f1, open(base + "physical_package_id") as f2:
                cores.add((f2.read().strip(), f1.read().strip()))
    except OSError:
        return max(1, len(cpus))
    return max(1, len(cores))


def max_threads():
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
