"""Thread counts, the public home (README: `fastgguf.engine.threads.MAX_THREADS_PER_CPU`): physical_cores(),
usable_cpus(), check_n_threads() and MAX_THREADS_PER_CPU, defined in fastgguf._threads, a bottom module that the
quantizer (fastgguf.gguf) can import without importing the engine. Its docstring says what n_threads may be."""
from fastgguf._threads import (  # noqa: F401  (max_threads: importable here before the move)
    MAX_THREADS_PER_CPU, check_n_threads, max_threads, physical_cores, usable_cpus)

__all__ = ["physical_cores", "usable_cpus", "check_n_threads", "MAX_THREADS_PER_CPU"]
