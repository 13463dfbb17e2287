# Included by _native.pyx, after _sampling.pxi. The decode loop of one sequence: Runner.step + bias/penalties +
# sampling + bookkeeping with the GIL released; Python only sees each token id as it is yielded (for detokenization
# and stop checks). A constraint (a grammar matcher) adds two Python calls per token: its allowed-token mask before
# the draw, and the drawn token after it. (Speculative decoding is not here: fastgguf.engine.speculative verifies
# several rows of one forward in Python, for generate() and the Scheduler alike.)


cdef int _has_nan(const float *x, int n) noexcept nogil:
    cdef int i, bad = 0
    for i in range(n):  # no early exit: an OR reduction the compiler vectorizes (one pass per token, ~0.1% of one)
        bad |= x[i] != x[i]
    return bad


def generate_ids(Runner runner, Sampler sampler, int max_tokens, eog_ids, logits=None, int token=-1,
                 constraint=None):
    """The decode loop: yields up to ``max_tokens`` sampled token ids.

    Start from either ``logits`` (the last prompt position's logits, e.g. from Context.eval) or ``token`` (a token
    not yet evaluated: it is stepped first). Each iteration runs Runner.step on the previous token, then bias,
    penalties and sampling, and records the token in the sampler, all with the GIL released. Stops after yielding
    an id in ``eog_ids`` (it is yielded), after ``max_tokens`` ids, or when the context is full. The last yielded
    token is not stepped (it is not in the KV cache).

    ``constraint``: an object with ``fill_mask()`` (returns the allowed-token mask for the next token, as
    Sampler.sample takes it) and ``consume(tok)``. Per token: step (GIL released), fill_mask(), the masked draw
    (GIL released), consume(tok), then the yield. Exceptions from either method propagate out of the generator
    (the token is then not yielded); so does the ValueError of a mask that leaves no token. NaN in a step's logits
    raises FloatingPointError (check_logits' contract), with that step's token dropped from the cache."""
    cdef int n_vocab = runner.n_vocab
    cdef int n = 0, tok = -1, prev = token, rc = 0, acc = 0, nan = 0
    cdef float *lp = NULL
    cdef float[::1] first
    cdef const uint32_t[::1] allow
    if constraint is not None and not (callable(getattr(constraint, "fill_mask", None))
                                       and callable(getattr(constraint, "consume", None))):
        raise TypeError(f"constraint must have fill_mask() and consume(tok), got {type(constraint).__name__}")
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    if sampler.n_vocab is not None and sampler.n_vocab != n_vocab:
        raise ValueError(f"sampler vocabulary {sampler.n_vocab} != runner vocabulary {n_vocab}")
    if logits is not None:
        if token >= 0:
            raise ValueError("give either logits or token, not both")
        first = np.array(logits, dtype=np.float32, order="C").reshape(-1)
        if first.shape[0] != n_vocab:
            raise ValueError(f"logits have {first.shape[0]} entries, the runner's vocabulary has {n_vocab}")
        lp = &first[0]
    elif token < 0 or token >= n_vocab:
        raise ValueError(f"give logits, or a start token in [0, {n_vocab}), got token={token}")
    eog_arr = np.zeros(n_vocab, dtype=np.uint8)
    for e in eog_ids:
        if 0 <= int(e) < n_vocab:
            eog_arr[int(e)] = 1
    cdef const uint8_t[::1] eog = eog_arr
    while n < max_tokens:
        if constraint is None:
            with nogil:
                if prev >= 0:
                    rc = runner.step(prev, &lp)
                nan = rc == 0 and _has_nan(lp, n_vocab)
                if rc == 0 and not nan:
                    tok = sampler.sample_ptr(lp, n_vocab)
                    if tok >= 0:
                        acc = fg_sampler_accept(&sampler.s, tok, 1)
        else:
            with nogil:
                if prev >= 0:
                    rc = runner.step(prev, &lp)
                nan = rc == 0 and _has_nan(lp, n_vocab)
            if rc == 0 and not nan:
                allow = _check_mask(constraint.fill_mask(), n_vocab)
                with nogil:
                    tok = sampler.sample_masked_ptr(lp, n_vocab, &allow[0])
                    if tok >= 0:
                        acc = fg_sampler_accept(&sampler.s, tok, 1)
        if rc != 0:
            return  # context full
        if nan:
            # the step's token wrote NaN into the cache: drop it, as Context.eval does
            if prev >= 0 and runner.can_rewind(runner.n_past - 1):
                runner.rewind(runner.n_past - 1)
            elif prev >= 0:   # a state that cannot go back (Mamba-2 layers; a ring past it): start again
                runner.reset()
            raise FloatingPointError(NAN_LOGITS)
        _check_sample(tok)
        if acc != 0:
            raise MemoryError("sampler history")
        if constraint is not None:
            constraint.consume(tok)
        n += 1
        yield tok
        if eog[tok]:
            return
        prev = tok
