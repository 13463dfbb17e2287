"""Model (the weights, loaded once) and Context (one conversation: KV cache and position).

Thread safety: a Model is immutable after loading and may be shared by any number of threads and Contexts (the
weights are a read-only memory map). A Context holds mutable state (its KV cache) and must be used by one thread
at a time; it guards itself with a lock and raises RuntimeError when two threads use it concurrently. Use one
Context per thread (`model.context()`) for parallel conversations. The Runner under a Context (`ctx.runner`) has
no lock of its own: the decode loop calls it with the GIL released, so it must only run while its Context is not
used by another thread.

Context size: n_ctx may exceed the model's training context (`n_ctx_train`); that is allowed with a
RuntimeWarning, since quality usually degrades past it. The KV cache is F16 (as llama.cpp's default): n_layer * n_ctx * 2 *
kv_dim * 2 bytes (SmolLM2-135M, n_ctx=4096: 94 MB), allocated when the Context is created. A LongRoPE model
(phi3 128k) uses its long RoPE factors in a Context whose n_ctx exceeds its rope.scaling.original_context_length
and its short ones otherwise, as llama.cpp does per context: the same tokens give other logits in a 4k Context
than in a 128k one.
"""
import contextlib
import hashlib
import io
import os
import threading
import warnings

from fastgguf import arch as _arch
from fastgguf import hub as _hub
from fastgguf._native import Runner, Weights, _threads_for, check_logits
from fastgguf.engine.chat import chat as _chat
from fastgguf.engine.generate import generate as _generate
from fastgguf.engine import prompt_cache as _prompt_cache
from fastgguf.engine import state as _state
from fastgguf.engine.params import check_token_ids
from fastgguf._threads import decode_threads
from fastgguf.engine.threads import check_n_threads, physical_cores  # noqa: F401  (physical_cores: public here)
from fastgguf.errors import GGUFError
from fastgguf.gguf import GGUFFile
from fastgguf.tokenizer import Tokenizer


MAX_CTX = 1 << 24  # positions; past this int32 position arithmetic in the kernels is not safe


class Model:
    """A GGUF model ready to run. `Model(path, n_threads=None, mmap=True)`; n_threads defaults to the physical cores
    for prompts and to `decode_threads`, about the fewest of them that saturate the memory (fastgguf._threads.
    decode_threads: with more than 2 cores a probe of tens of ms once per process, when the first context is made;
    FASTGGUF_DECODE_THREADS overrides), for decode steps; a given n_threads is used for both.
    path may also be a catalogue name (`Model("smollm2-135m")`, `fastgguf list`), as the CLI's -m takes it: fetched
    into the cache once, checksummed (fastgguf.hub); a bare catalogue name is always the catalogue's model (a file of
    that name in the working folder is written as a path, "./smollm2-135m").

    mmap=True (the default, as llama.cpp) maps the file: loading takes milliseconds and processes share the pages,
    but the file must not change while the model lives. Truncating it (a download into the same path) kills the
    process with SIGBUS on the next read, and rewriting it in place silently changes the weights. mmap=False
    reads the weights into private memory (slower to load, memory not shared; the file may then change or go
    away). `fastgguf pull` never rewrites a cached model in place: it replaces the file by an atomic rename, which
    leaves a model that maps the old file intact.

    The public `fastgguf.Model` is fastgguf.api.openai.client.Model, this class plus the OpenAI-style create_*
    methods (that layer sits above the engine).

    prompt_cache=DIR keeps the K/V of long prompts (prompt_cache_min_tokens, 256) in DIR, at most
    prompt_cache_size MiB (1024, least recently used removed first), and restores the longest stored prefix of a
    later prompt instead of evaluating it, across Models and processes (fastgguf.engine.prompt_cache);
    `model.prompt_cache` is then its PromptCache (None without one, or where the folder or model cannot use it:
    a RuntimeWarning says why).

    repack=True (default: the environment's FASTGGUF_REPACK=1, else off) makes, at load, a row-interleaved copy of
    each matrix whose format has a packed layout (kernels.type_table()'s packed_size: the 4-bit K-quant) that decode
    then reads (llama.cpp's repacked 8x8 types, ik_llama.cpp's _R8 ones; prompts keep reading the mapped file). It
    costs that many bytes more of private memory (memory()["packed"]: about 1.03x those matrices) and a moment at
    load, and gives equal results bit for bit. It is made only where the kernels have a packed gemv of their own
    (x86: AVX2, AVX-512 VNNI): it pays where a thread's share of the memory's speed is near what the tiles' gemv
    computes (2 threads on a 2-core VM: +7-12% decode; benchmarks/gemv_repack.c), and gains little where one
    thread waits on memory."""

    def __init__(self, path, n_threads=None, mmap=True, prompt_cache=None, prompt_cache_size=None,
                 prompt_cache_min_tokens=_prompt_cache.MIN_TOKENS, repack=None):
        if n_threads is not None:
            n_threads = check_n_threads(n_threads)
        if not isinstance(mmap, bool):
            raise TypeError(f"mmap must be True or False, got {type(mmap).__name__}")
        if repack is None:
            repack = os.environ.get("FASTGGUF_REPACK", "0") not in ("", "0")
        if not isinstance(repack, bool):
            raise TypeError(f"repack must be True, False or None, got {type(repack).__name__}")
        path = os.fspath(path)
        self.path = _hub.model_path(path) if path in _hub.CATALOGUE else path
        self.file = GGUFFile(self.path, mmap=mmap)
        try:
            a = _arch.get(self.file)
            self.hparams = a.hparams()
            try:
                tensors = a.tensors(self.hparams)
                # rank pooling's classifier head (float32 arrays, or None): applied by fastgguf.engine.pooling
                self.classifier = tensors.pop("classifier", None)
                self.weights = Weights(self.hparams, tensors, repack=repack)
            except ValueError as e:  # a tensor of the wrong shape: the file's fault
                raise GGUFError(f"{self.path}: {e}") from None
        except BaseException:
            self.file.close()
            raise
        # a build without threads runs 1: it says so (once) when more were asked, and never reports more
        self.n_threads = _threads_for(physical_cores(), warn=False) if n_threads is None else _threads_for(n_threads)
        self._decode_threads = self.n_threads if n_threads is not None else None  # None: probe on first use
        self._tokenizer = None
        self._tok_lock = threading.Lock()
        self._sha256 = None
        self._sha_lock = threading.Lock()
        self.prompt_cache = _prompt_cache.open_cache(self, prompt_cache, prompt_cache_size, prompt_cache_min_tokens)

    @property
    def decode_threads(self):
        """Threads of a decode step in contexts made after: n_threads when given, else the fewest of them that
        saturate the memory (fastgguf._threads.decode_threads: its probe runs here, on first use, once per
        process; FASTGGUF_DECODE_THREADS overrides); prompts keep n_threads. Settable."""
        if self._decode_threads is None:
            self._decode_threads = decode_threads(self.n_threads)
        return self._decode_threads

    @decode_threads.setter
    def decode_threads(self, n):
        self._decode_threads = _threads_for(check_n_threads(n, "decode_threads"))

    def __repr__(self):
        hp = self.hparams
        return (f"Model({os.path.basename(self.path)!r}, arch={hp.arch}, n_layer={hp.n_layer}, n_embd={hp.n_embd}, "
                f"n_vocab={hp.n_vocab}, n_threads={self.n_threads})")

    @property
    def metadata(self):
        return self.file.metadata

    def memory(self, n_ctx=None):
        """Bytes of the weights: file, weights (all tensors, mapped zero-copy), experts (the mixture-of-experts
        stacks), per_token (what one decoded token reads: for a 30B-A3B a small fraction), active_fraction
        (fastgguf.arch.base.weight_bytes says how each is counted) and packed (repack=True's copies, private memory:
        0 without). With n_ctx, also what one sequence's cache of
        n_ctx positions allocates (each Context, each --parallel slot): cache (K and V, and the short-convolution
        layers' state rings and the DeltaNet and Mamba-2 layers' states: Context.runner.kv_bytes), conv_state (those
        rings alone; 0 without such layers) and recurrent_state (the DeltaNet and Mamba-2 states alone, whatever
        n_ctx; 0 without)."""
        d = _arch.base.weight_bytes(self.file, self.hparams)
        d["packed"] = self.weights.packed_bytes  # repack=True's copies (0 without)
        if n_ctx is not None:
            d["cache"], d["conv_state"], d["recurrent_state"] = self.weights.cache_bytes(n_ctx)
        return d

    def sha256(self):
        """The sha256 (hex) of the model file, which a saved state names (Context.save_state). Read from disk on
        the first call and cached on the Model: about a second per GB (the default model, 100 MB: 0.2 s), so the
        first save or load of a large model pays it once."""
        return self.sha256_bytes().hex()

    def sha256_bytes(self):
        """sha256() as 32 bytes."""
        with self._sha_lock:
            if self._sha256 is None:
                h = hashlib.sha256()
                with open(self.path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 24), b""):  # (hashlib.file_digest: Python 3.11)
                        h.update(block)
                self._sha256 = h.digest()
            return self._sha256

    @property
    def n_vocab(self):
        return self.hparams.n_vocab

    @property
    def n_embd(self):
        return self.hparams.n_embd

    @property
    def pooling(self):
        """How the file says its embeddings are pooled: "none", "mean", "cls", "last", "rank", or None when it does
        not say (a chat model: embeddings are then mean-pooled, fastgguf.engine.pooling)."""
        return self.hparams.pooling

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

    @property
    def is_encoder(self):
        """True for an encoder (bert, nomic-bert: non-causal, no lm_head): it embeds text and cannot generate."""
        return not self.hparams.causal or not self.weights.has_logits

    def check_generative(self):
        """Raise ValueError for an encoder: generation and logits need an lm_head and causal attention."""
        if self.is_encoder:
            raise ValueError(f"{self.hparams.arch} is an encoder: it embeds text and cannot generate")

    def generate(self, prompt, params=None, **kwargs):
        """See fastgguf.engine.generate.generate (params: a SamplingParams; keywords build or override it)."""
        self.check_generative()
        return _generate(self, prompt, params, **kwargs)

    def chat(self, messages, params=None, **kwargs):
        """See fastgguf.engine.chat.chat."""
        self.check_generative()
        return _chat(self, messages, params, **kwargs)


class _Claim:
    """A generation stream's hold on its Context (see Context._claim)."""

    def __init__(self, ctx):
        self._ctx = ctx

    def guard(self):
        return self._ctx._guard(self)

    def release(self):
        if self._ctx._owner is self:
            self._ctx._owner = None


def _unpickle_context(model_class, path, n_ctx, n_threads, state):
    ctx = model_class(path, n_threads=n_threads).context(n_ctx=n_ctx, n_threads=n_threads)
    ctx._load_state_bytes(state)
    return ctx


class Context:
    """One conversation over a Model: KV cache of n_ctx positions. Use from one thread at a time.

    save_state(path) / load_state(path) write and read its state (token ids, their K/V, and a hybrid model's
    short-convolution rings and DeltaNet / Mamba-2 states; fastgguf.engine.state says what the file holds and what
    it is checked against). A pickle of a Context holds the model's class and file path, n_ctx, n_threads and that
    state (its size: about n_past * n_attention_layers * 4 * kv_dim bytes, plus the fixed recurrent states): unpickling
    loads the model from the same path (a new Model each time) and refuses, with StateError, a file whose sha256
    differs from the pickled one's. A sampler's random state is the Sampler's (fastgguf.engine.sampler)."""

    def __init__(self, model, n_ctx=4096, n_threads=None):
        if isinstance(n_ctx, bool) or not hasattr(n_ctx, "__index__"):
            raise TypeError(f"n_ctx must be an int, got {type(n_ctx).__name__}")
        n_ctx = int(n_ctx)
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be >= 1, got {n_ctx}")
        if n_ctx > MAX_CTX:
            raise ValueError(f"n_ctx={n_ctx} is larger than fastgguf supports ({MAX_CTX})")
        decode = model.decode_threads if n_threads is None else None
        n_threads = model.n_threads if n_threads is None else check_n_threads(n_threads)
        if model.n_ctx_train and n_ctx > model.n_ctx_train:
            warnings.warn(f"n_ctx={n_ctx} exceeds the model's training context {model.n_ctx_train}; "
                          f"output quality may degrade past it", RuntimeWarning, stacklevel=3)
        self.model = model
        self.runner = Runner(model.weights, n_ctx, n_threads)
        if decode is not None and decode != self.runner.n_threads:
            self.runner.decode_threads = decode
        self._lock = threading.Lock()
        self._owner = None  # the _Claim of the live generation stream that owns this context, if any

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
        """Threads of prompts and of decode steps alike (decode_threads follows)."""
        n = check_n_threads(n)
        with self._guard():
            self.runner.n_threads = n

    @property
    def decode_threads(self):
        """Threads of a decode step (one new token): the model's decode_threads (fastgguf._threads.decode_threads:
        the fewest that saturate the memory) for a Context and Model given no n_threads, else n_threads."""
        return self.runner.decode_threads

    @decode_threads.setter
    def decode_threads(self, n):
        n = check_n_threads(n, "decode_threads")
        with self._guard():
            self.runner.decode_threads = n

    @contextlib.contextmanager
    def _guard(self, owner=None):
        """One user at a time: RuntimeError when another thread is inside, or when a live generation stream owns
        the context and the caller is not that stream (`owner`)."""
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("this Context is being used by another thread; use one Context per thread")
        try:
            if self._owner is not None and self._owner is not owner:
                raise RuntimeError("this Context belongs to a live generation stream: finish or close() the stream "
                                   "first (or use another Context)")
            yield
        finally:
            self._lock.release()

    def _claim(self):
        """Give the context to a generation stream until claim.release() (idempotent): meanwhile every other use
        raises RuntimeError, and the stream runs each of its steps inside claim.guard()."""
        with self._guard():
            self._owner = claim = _Claim(self)
        return claim

    def _eval(self, ids, all_logits=False):
        self.model.check_generative()
        ids = check_token_ids(ids, self.model.n_vocab)
        n_past = self.runner.n_past
        logits = self.runner.eval(ids, all_logits)
        try:
            return check_logits(logits)
        except FloatingPointError:
            if self.runner.can_rewind(n_past):
                self.runner.rewind(n_past)
            else:
                self.runner.reset()
            raise

    def _reset(self):
        self.runner.reset()

    def _rewind(self, n_past):
        self.runner.rewind(n_past)

    def reusable(self, n_past):
        """n_past if rewind(n_past) can keep that much of the cache, else 0 (sliding-window layers keep a ring of
        recent positions: a far rewind needs a fresh start)."""
        return n_past if self.runner.can_rewind(n_past) else 0

    def __repr__(self):
        return (f"Context(n_ctx={self.n_ctx}, n_past={self.n_past}, n_threads={self.n_threads}, "
                f"kv_bytes={self.runner.kv_bytes})")

    def eval(self, ids, all_logits=False):
        """Run token ids after the tokens already in the cache; returns float32 logits of the last token
        (n_vocab,), or of every token (len(ids), n_vocab) with all_logits. NaN logits raise
        FloatingPointError (a broken model file) instead of being returned; the cache is as before the call."""
        with self._guard():
            return self._eval(ids, all_logits)

    def reset(self):
        with self._guard():
            self._reset()

    def copy_prefix(self, src, n):
        """Make this context's cache the first n tokens of src's (a Context of the same model) by copying their K/V
        rows, with no forward pass: a prompt evaluated once serves several continuations."""
        if not isinstance(src, Context) or src.model is not self.model or src is self:
            raise ValueError("copy_prefix needs another Context of the same model")
        with self._guard(), src._guard():
            self.runner.copy_prefix(src.runner, n)

    def rewind(self, n_past):
        """Drop cached tokens after the first n_past."""
        with self._guard():
            self._rewind(n_past)

    def save_state(self, path):
        """Write the token ids in the cache and their K/V to path (atomically: a temporary file, then os.replace; a
        failed write leaves an old file intact). The first save or load of a Model hashes its file (Model.sha256)."""
        with self._guard():
            _state.save(self, path)

    def load_state(self, path):
        """Make this context hold the state save_state wrote (n_past and tokens as then; the next logits bit for
        bit the same). Allowed: any Context of the same model file whose n_ctx holds the saved tokens (LongRoPE
        models: n_ctx on the same side of the original context). StateError (a ValueError) naming what differs,
        or on a damaged or truncated file; the context is then unchanged."""
        with self._guard():
            _state.load(self, path)

    def _load_state_bytes(self, data):
        with self._guard():
            self.runner.load_kv(*_state.read(self, io.BytesIO(data), len(data)))

    def __reduce__(self):
        buf = io.BytesIO()
        with self._guard():
            _state.write(self, buf)
        return (_unpickle_context, (type(self.model), self.model.path, self.n_ctx, self.n_threads, buf.getvalue()))
