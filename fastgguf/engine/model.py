"""Model (the weights, loaded once) and Context (one conversation: KV cache and position).

Thread safety: a Model is immutable after loading and may be shared by any number of threads and Contexts (the
weights are a read-only memory map). A Context holds mutable state (its KV cache) and must be used by one thread
at a time; it guards itself with a lock and raises RuntimeError when two threads use it concurrently. Use one
Context per thread (`model.context()`) for parallel conversations. The Runner under a Context (`ctx.runner`) has
no lock of its own: the decode loop calls it with the GIL released, so it must only run while its Context is not
used by another thread.

Context size: n_ctx may exceed the model's training context (`n_ctx_train`); that is allowed with a
RuntimeWarning, since quality usually degrades past it. The KV cache is F16 (as llama.cpp's default): n_layer * n_ctx * 2 *
kv_dim * 2 bytes (SmolLM2-135M, n_ctx=4096: 94 MB), allocated when the Context is created.
"""
import contextlib
import os
import threading
import warnings

import numpy as np

from fastgguf import arch as _arch
from fastgguf._native import Runner, Weights
from fastgguf.gguf import GGUFFile
from fastgguf.tokenizer import Tokenizer


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


class Model:
    """A GGUF model ready to run. `Model(path, n_threads=None)`; n_threads defaults to the physical cores."""

    def __init__(self, path, n_threads=None):
        self.path = os.fspath(path)
        self.file = GGUFFile(self.path)
        try:
            a = _arch.get(self.file)
            self.hparams = a.hparams()
            self.weights = Weights(self.hparams, a.tensors(self.hparams))
        except BaseException:
            self.file.close()
            raise
        if n_threads is None:
            n_threads = physical_cores()
        if int(n_threads) < 1:
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        self.n_threads = int(n_threads)
        self._tokenizer = None
        self._tok_lock = threading.Lock()

    def __repr__(self):
        hp = self.hparams
        return (f"Model({os.path.basename(self.path)!r}, arch={hp.arch}, n_layer={hp.n_layer}, n_embd={hp.n_embd}, "
                f"n_vocab={hp.n_vocab}, n_threads={self.n_threads})")

    @property
    def metadata(self):
        return self.file.metadata

    @property
    def n_vocab(self):
        return self.hparams.n_vocab

    @property
    def n_ctx_train(self):
        return self.hparams.n_ctx_train

    @property
    def tokenizer(self):
        with self._tok_lock:
            if self._tokenizer is None:
                self._tokenizer = Tokenizer.from_metadata(self.file.metadata)
            return self._tokenizer

    def tokenize(self, text, add_special=True, parse_special=False):
        return self.tokenizer.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids):
        return self.tokenizer.detokenize(ids)

    def context(self, n_ctx=4096, n_threads=None):
        return Context(self, n_ctx=n_ctx, n_threads=n_threads)

    def generate(self, prompt, params=None, **kwargs):
        """See fastgguf.engine.generate.generate (params: a SamplingParams; keywords build or override it)."""
        from fastgguf.engine.generate import generate
        return generate(self, prompt, params, **kwargs)

    def chat(self, messages, params=None, **kwargs):
        """See fastgguf.engine.chat.chat."""
        from fastgguf.engine.chat import chat
        return chat(self, messages, params, **kwargs)

    def create_completion(self, prompt, **kwargs):
        """OpenAI-style completion in-process (llama-cpp-python's name): the dict fastgguf's server sends for
        /v1/completions, or an iterator of chunk dicts with stream=True. See fastgguf.engine.openai."""
        from fastgguf.engine.openai import create_completion
        return create_completion(self, prompt, **kwargs)

    def create_chat_completion(self, messages, **kwargs):
        """OpenAI-style chat completion in-process: the dict the server sends for /v1/chat/completions, or an
        iterator of chunk dicts with stream=True. See fastgguf.engine.openai."""
        from fastgguf.engine.openai import create_chat_completion
        return create_chat_completion(self, messages, **kwargs)


class Context:
    """One conversation over a Model: KV cache of n_ctx positions. Use from one thread at a time."""

    def __init__(self, model, n_ctx=4096, n_threads=None):
        n_ctx = int(n_ctx)
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be >= 1, got {n_ctx}")
        if model.n_ctx_train and n_ctx > model.n_ctx_train:
            warnings.warn(f"n_ctx={n_ctx} exceeds the model's training context {model.n_ctx_train}; "
                          f"output quality may degrade past it", RuntimeWarning, stacklevel=3)
        self.model = model
        self.runner = Runner(model.weights, n_ctx, n_threads or model.n_threads)
        self._lock = threading.Lock()

    @property
    def n_ctx(self):
        return self.runner.n_ctx

    @property
    def n_past(self):
        return self.runner.n_past

    @property
    def tokens(self):
        """The token ids in the KV cache, oldest first (len == n_past)."""
        return self.runner.tokens

    @property
    def n_threads(self):
        return self.runner.n_threads

    @n_threads.setter
    def n_threads(self, n):
        with self._guard():
            self.runner.n_threads = int(n)

    @contextlib.contextmanager
    def _guard(self):
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("this Context is being used by another thread; use one Context per thread")
        try:
            yield
        finally:
            self._lock.release()

    def eval(self, ids, all_logits=False):
        """Run token ids after the tokens already in the cache; returns float32 logits of the last token
        (n_vocab,), or of every token (len(ids), n_vocab) with all_logits."""
        with self._guard():
            return self.runner.eval(np.asarray(ids), all_logits)

    def reset(self):
        with self._guard():
            self.runner.reset()

    def rewind(self, n_past):
        """Drop cached tokens after the first n_past."""
        with self._guard():
            self.runner.rewind(n_past)
