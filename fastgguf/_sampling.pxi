# Included by _native.pyx. Samplers (C, csrc/fg_sample.c); the decode loop that runs them is _decode.pxi.
#
# Sampler takes its parameters as plain values and trusts them, as the C underneath does: fastgguf.engine.sampler's
# Sampler (a subclass) builds it from a SamplingParams, which validates them (the extension imports nothing of
# fastgguf).

NO_CANDIDATE = FG_SAMPLE_NO_CANDIDATE
NO_MEMORY = FG_SAMPLE_NO_MEMORY
NO_ALLOWED = FG_SAMPLE_NO_ALLOWED


cdef class Sampler:
    """Turns logits into token ids with the samplers of csrc/fg_sample.c (their order: fastgguf.engine.params).
    Built from validated plain values: `temperature`, `top_k`, ..., `presence_penalty` as SamplingParams holds
    them, `logit_bias` a {token id: bias} dict, `seed` an int or None (None: drawn from os.urandom), `n_vocab` an
    int or None; use fastgguf.engine.sampler.Sampler, which checks them. accept() trusts its token id likewise."""

    def __cinit__(self, *args, **kwargs):
        fg_sampler_init(&self.s, 0)

    def __dealloc__(self):
        fg_sampler_free(&self.s)

    def __init__(self, *, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, frequency_penalty,
                 presence_penalty, logit_bias, seed, n_vocab):
        self.n_vocab = n_vocab
        self.s.temperature = temperature
        self.s.top_k = top_k
        self.s.top_p = top_p
        self.s.min_p = min_p
        self.s.repeat_penalty = repeat_penalty
        self.s.repeat_last_n = repeat_last_n
        self.s.frequency_penalty = frequency_penalty
        self.s.presence_penalty = presence_penalty
        ids = np.fromiter(logit_bias.keys(), dtype=np.int32, count=len(logit_bias))
        vals = np.fromiter(logit_bias.values(), dtype=np.float32, count=len(logit_bias))
        cdef int32_t[::1] ids_v = ids
        cdef float[::1] vals_v = vals
        if fg_sampler_set_bias(&self.s, &ids_v[0] if len(logit_bias) else NULL,
                               &vals_v[0] if len(logit_bias) else NULL, <int32_t>len(logit_bias)) != 0:
            raise MemoryError("logit_bias")
        self.logit_bias = logit_bias
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little")
        fg_rng_seed(&self.s.rng, <uint64_t>(self.seed & 0xFFFFFFFFFFFFFFFF))

    @property
    def temperature(self): return self.s.temperature
    @property
    def top_k(self): return self.s.top_k
    @property
    def top_p(self): return self.s.top_p
    @property
    def min_p(self): return self.s.min_p
    @property
    def repeat_penalty(self): return self.s.repeat_penalty
    @property
    def repeat_last_n(self): return self.s.repeat_last_n
    @property
    def frequency_penalty(self): return self.s.frequency_penalty
    @property
    def presence_penalty(self): return self.s.presence_penalty

    @property
    def history(self):
        """Every accepted token id, oldest first."""
        return [self.s.hist[i] for i in range(self.s.n_hist)]

    def __repr__(self):
        return (f"Sampler(temperature={self.temperature:g}, top_k={self.top_k}, top_p={self.top_p:g}, "
                f"min_p={self.min_p:g}, repeat_penalty={self.repeat_penalty:g}, repeat_last_n={self.repeat_last_n}, "
                f"frequency_penalty={self.frequency_penalty:g}, presence_penalty={self.presence_penalty:g}, "
                f"logit_bias={self.logit_bias!r}, seed={self.seed})")

    cdef int sample_ptr(self, float *logits, int n_vocab) noexcept nogil:
        return fg_sampler_sample(&self.s, logits, n_vocab)

    cdef int sample_masked_ptr(self, float *logits, int n_vocab, const uint32_t *allow) noexcept nogil:
        return fg_sampler_sample_masked(&self.s, logits, n_vocab, allow)

    def sample(self, logits, mask=None):
        """Token id chosen from a 1-D array of logits (not modified). ``mask``: only the tokens it allows may be
        chosen (a C-contiguous uint32 array of at least ceil(n_vocab / 32) words, bit i of word i // 32 = token i);
        the others count as -inf for every sampler stage. ValueError when no allowed token is left."""
        cdef const uint32_t[::1] allow_v
        cdef const uint32_t *allow = NULL
        arr = np.asarray(logits)
        if arr.ndim != 1 or arr.shape[0] == 0:
            raise ValueError(f"logits must be a non-empty 1-D array, got shape {arr.shape}")
        if self.n_vocab is not None and arr.shape[0] != self.n_vocab:
            raise ValueError(f"logits have {arr.shape[0]} entries, the sampler's vocabulary has {self.n_vocab}")
        if arr.shape[0] > 0x7FFFFFFF:
            raise ValueError("logits too long")
        # the C side changes biased/penalized entries and restores them: give it a writable float32 buffer
        if arr.dtype != np.float32 or not arr.flags.c_contiguous or not arr.flags.writeable:
            arr = np.array(arr, dtype=np.float32, order="C")
        cdef float[::1] v = arr
        cdef int n = <int>v.shape[0]
        cdef int tok
        if mask is not None:
            allow_v = _check_mask(mask, n)
            allow = &allow_v[0]
        with nogil:
            tok = self.sample_masked_ptr(&v[0], n, allow)
        return _check_sample(tok)

    def apply(self, logits):
        """A float32 copy of logits with logit bias and penalties applied (what top-k/top-p/min-p then see)."""
        arr = np.array(logits, dtype=np.float32, order="C")
        if arr.ndim != 1 or arr.shape[0] == 0:
            raise ValueError(f"logits must be a non-empty 1-D array, got shape {arr.shape}")
        cdef float[::1] v = arr
        if fg_sampler_apply(&self.s, &v[0], <int32_t>v.shape[0]) != 0:
            raise MemoryError("sampler scratch buffers")
        return arr

    def accept(self, token, generated=True):
        """Record a token (a valid id: fastgguf.engine.sampler.Sampler.accept checks it): it enters the
        repetition-penalty window, and when ``generated`` also the counts of the frequency/presence penalties (prompt
        tokens: ``generated=False``)."""
        if fg_sampler_accept(&self.s, <int32_t>token, 1 if generated else 0) != 0:
            raise MemoryError("sampler history")

    def accept_many(self, tokens, generated=False):
        """accept() each token of a sequence (default: as prompt tokens)."""
        for t in tokens:
            self.accept(t, generated)

    def reset(self):
        """Forget the history (parameters, bias and random state are kept)."""
        fg_sampler_reset(&self.s)

    def get_state(self):
        """What set_state() takes back to continue exactly here: the random generator's 4 words, every accepted id
        (oldest first) and the (id, count) of the generated ones in order of first generation."""
        return {"rng": [int(self.s.rng.s[i]) for i in range(4)], "history": self.history,
                "generated": [(self.s.seen[j], self.s.counts[self.s.seen[j]]) for j in range(self.s.n_seen)]}

    def set_state(self, state):
        """Restore what get_state() returned (ids trusted, as accept() trusts them)."""
        rng = [int(w) for w in state["rng"]]
        if len(rng) != 4 or not all(0 <= w < 1 << 64 for w in rng) or not any(rng):
            raise ValueError("rng must be 4 words in [0, 2**64), not all 0")
        fg_sampler_reset(&self.s)
        for tok, n in state["generated"]:  # counts and first-generation order, then the history over them
            for _ in range(n):
                self.accept(tok, True)
        self.s.n_hist = 0
        self.accept_many(state["history"], False)
        for i in range(4):
            self.s.rng.s[i] = rng[i]


def _check_mask(mask, int n_vocab):
    """mask itself once it is a C-contiguous 1-D uint32 ndarray of at least ceil(n_vocab / 32) words."""
    if not isinstance(mask, np.ndarray) or mask.dtype != np.uint32:
        got = mask.dtype if isinstance(mask, np.ndarray) else type(mask).__name__
        raise TypeError(f"mask must be a numpy uint32 array (bit i = token i allowed), got {got}")
    need = (n_vocab + 31) // 32
    if mask.ndim != 1 or not mask.flags.c_contiguous:
        raise ValueError(f"mask must be a 1-D C-contiguous array, got shape {mask.shape}")
    if mask.shape[0] < need:
        raise ValueError(f"mask has {mask.shape[0]} words, {n_vocab} tokens need {need} (ceil(n_vocab / 32))")
    return mask


NAN_LOGITS = "the model produced NaN logits (broken weights?)"


def check_logits(logits):
    """logits itself; FloatingPointError when any entry is NaN. NaN logits are a broken model, never something to
    sample from or score (the Sampler alone ignores NaN entries: a low-level tool; the engine refuses them)."""
    a = np.asarray(logits)
    if a.size and np.isnan(a.max()):  # max propagates NaN: no (n_vocab,) bool temporary per sampled token
        raise FloatingPointError(NAN_LOGITS)
    return logits


def _check_sample(int tok):
    if tok == FG_SAMPLE_NO_CANDIDATE:
        raise ValueError("no token can be sampled: every logit is -inf or NaN (is every token banned by logit_bias?)")
    if tok == FG_SAMPLE_NO_ALLOWED:
        raise ValueError("no token can be sampled: the grammar mask allows no token with a finite logit (the mask "
                         "is empty, or logit_bias bans every token the grammar mask allows)")
    if tok == FG_SAMPLE_NO_MEMORY:
        raise MemoryError("sampler scratch buffers")
    return tok


def argmax(logits):
    """First index of the maximum (NaN ignored) of a float32 vector, -1 if every entry is -inf/NaN (C fg_argmax)."""
    cdef const float[::1] v = np.ascontiguousarray(logits, dtype=np.float32)
    return fg_argmax(&v[0], <int32_t>v.shape[0]) if v.shape[0] else -1


def top_k(logits, int k):
    """(ids, logits) of the k largest entries, best first, ties by smaller id (C fg_top_k, partial selection)."""
    cdef const float[::1] v = np.ascontiguousarray(logits, dtype=np.float32)
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    k = min(k, <int>v.shape[0])
    out = np.zeros(max(k, 1), dtype=[("logit", np.float32), ("id", np.int32)])
    cdef fg_cand[::1] o = out
    cdef int m = fg_top_k(&v[0], <int32_t>v.shape[0], k, &o[0]) if k > 0 else 0
    return out["id"][:m].copy(), out["logit"][:m].copy()
