# Included by _native.pyx. Thin Python wrappers over the C kernels, for tests, benchmarks and the quantizer.
# Arrays in, arrays out; every function validates its arguments so the C underneath can trust them, except the
# bound on thread counts: fastgguf._threads owns it and the extension imports nothing of fastgguf (kernels.matmul
# and the engine check n_threads before they get here).

ISAS = tuple(fg_isa_name(i).decode() for i in range(FG_ISA_COUNT))
_KINDS = ((FG_K_QUANTIZE, "quantize"), (FG_K_DEQUANTIZE, "dequantize"), (FG_K_VEC_DOT, "vec_dot"),
          (FG_K_GEMV, "gemv"), (FG_K_GEMM, "gemm"), (FG_K_GEMV_PACKED, "gemv_packed"))


def type_table():
    """The C type table (csrc/fg_dispatch.c), the one owner of format facts: one dict per type with its name,
    ggml id, block size, block bytes, the activation type its dot product takes (None for activation-only types),
    the bytes of a packed block of PACK_ROWS rows (0: no row-interleaved layout; pack_rows) and, per available
    ISA, the kernels that ISA has of its own (the rest run the scalar reference)."""
    out = []
    cdef const fg_type_info *t
    for i in range(fg_type_count()):
        t = fg_type_at(i)
        out.append({"name": t.name.decode(), "id": t.type, "block_size": t.blck, "type_size": t.size,
                    "dot_type": t.dot_type if t.dot_type >= 0 else None, "packed_size": t.packed_size,
                    "kernels": {isa: [k for bit, k in _KINDS if fg_kernel_mask(j, t.type) & bit]
                                for j, isa in enumerate(ISAS) if fg_isa_available(j)}})
    return out


SUPPORTED_TYPES = {t["name"]: t["id"] for t in type_table()}
SUPPORTED_NAMES = {v: k for k, v in SUPPORTED_TYPES.items()}
WEIGHT_TYPES = tuple(t["id"] for t in type_table() if t["dot_type"] is not None)  # what a matrix may be stored as


def _init():
    if fg_init() != 0:
        want = os.environ.get("FASTGGUF_ISA", "")
        why = "is not available on this CPU" if want in ISAS else "is not a known instruction set"
        raise RuntimeError(
            f"environment variable FASTGGUF_ISA={want!r} {why}: choose one of {available()} "
            f"(CPU features: {fg_cpu_features().decode() or 'none'})")


def available():
    """Instruction sets this build holds and this CPU (and OS) runs, best last."""
    return [fg_isa_name(i).decode() for i in range(FG_ISA_COUNT) if fg_isa_available(i)]


def active():
    """The instruction set the kernels use now."""
    return fg_isa_name(fg_isa_active()).decode()


def cpu_features():
    return fg_cpu_features().decode()


def compiled():
    """Instruction sets whose kernels this build holds (an ISA not compiled in is never available)."""
    return [fg_isa_name(i).decode() for i in range(FG_ISA_COUNT) if fg_isa_compiled(i)]


def build_info():
    """How this extension was built: {"threads": compiled with fastgguf's thread pool (False: every call runs one
    thread), "thread_api": "pthreads", "win32" or "none", "compiler": as the C preprocessor names it (e.g.
    "gcc 12.2.0", "clang 19.1.0 ...", "msvc 1940"), "compiled": the ISAs this build holds, "platform":
    sys.platform, "machine": platform.machine()}."""
    api = fg_thread_api().decode()
    return {"threads": api != "none", "thread_api": api, "compiler": fg_compiler().decode().strip(),
            "compiled": compiled(), "platform": sys.platform, "machine": platform.machine()}


_THREADS = fg_thread_api().decode() != "none"  # a module global, so tests can act a build without threads
_warned_one_thread = False


def _threads_for(int n, bint warn=True):
    """The threads a forward pass asking for n (already validated) runs: n, or 1 on a build without the thread
    pool, with a RuntimeWarning the first time in the process (unless warn is False: a default, not a request)."""
    global _warned_one_thread
    if n <= 1 or _THREADS:
        return n
    if warn and not _warned_one_thread:
        _warned_one_thread = True
        warnings.warn(f"n_threads={n} asked, but this fastgguf was built without threads (FASTGGUF_NO_THREADS; "
                      f"see fastgguf.kernels.build_info()): running 1 thread", RuntimeWarning, stacklevel=2)
    return 1


def _check_team(int asked, int ran):
    """A forward pass that ran fewer threads than it asked (the OS would not start them) says so."""
    if ran < asked:
        warnings.warn(f"only {ran} of {asked} threads could be started (the OS refused more threads): running "
                      f"{ran}", RuntimeWarning, stacklevel=2)


def set_isa(name):
    """Force an instruction set for every kernel, the model's forward pass included. Returns the previous one."""
    prev = active()
    fg_set_isa(_isa_id(name))
    return prev


def ext_name(isa=None):
    """The run-time extension of an instruction set ("vnni" for avx512; for neon "i8mm" on a CPU with it, whose
    kernels run above the dotprod ones, else "dotprod"; "" for the others)."""
    return fg_isa_ext_name(_isa_id(active() if isa is None else isa)).decode()


def ext_available(isa=None):
    """Whether this CPU has the extension of `isa` (default: the active one)."""
    return bool(fg_isa_ext_available(_isa_id(active() if isa is None else isa)))


def ext_enabled():
    return bool(fg_ext_enabled())


def set_ext(on):
    """Use (True) or avoid (False) the extension kernels (VNNI; dotprod and i8mm); returns whether they are in use
    now.

    FASTGGUF_NO_EXT=1 in the environment starts with them off."""
    return bool(fg_set_ext(1 if on else 0))


def active_ext():
    """The extension the active kernels use ("vnni", "i8mm", "dotprod" or "")."""
    i = fg_isa_active()
    return fg_isa_ext_name(i).decode() if fg_ext_enabled() and fg_isa_ext_available(i) else ""


cdef int _isa_id(name) except -1:
    i = fg_isa_from_name(str(name).encode())
    if i < 0:
        raise ValueError(f"unknown instruction set {name!r}; known: {list(ISAS)}")
    if not fg_isa_available(i):
        raise ValueError(f"instruction set {name!r} is not available on this CPU; available: {available()}")
    return i


cdef const fg_type_kernels *_table(isa, int ti) except NULL:
    """The kernels of one ISA for a type; isa=None: the active ISA. NULL entries mean the scalar reference."""
    return fg_kernels_of(fg_isa_active() if isa is None else _isa_id(isa), ti)


cdef int _type_id(t) except -1:
    if isinstance(t, str):
        if t.upper() not in SUPPORTED_TYPES:
            raise ValueError(f"unsupported type {t!r}; supported: {sorted(SUPPORTED_TYPES)}")
        return SUPPORTED_TYPES[t.upper()]
    ti = int(t)
    if not fg_type_supported(ti):
        raise ValueError(f"unsupported ggml type id {ti}")
    return ti


def block_size(t):
    return fg_blck_size(_type_id(t))


def row_size(t, int64_t n):
    cdef int ti = _type_id(t)
    _check_len(ti, n)
    return fg_row_size(ti, n)


def vec_dot_type(t):
    cdef int r = fg_vec_dot_type(_type_id(t))
    if r < 0:
        raise ValueError(f"type {t!r} is an activation-only type")
    return r


cdef _floats(x):
    """x as C-contiguous, ALIGNED float32 (a view when it is one): the C reads whole floats, and a view into a file
    (a safetensors tensor at an odd offset) can be misaligned, which np.ascontiguousarray lets through."""
    return np.require(x, np.float32, ["C", "A"])


cdef _check_len(int ti, int64_t n):
    cdef int64_t b = fg_blck_size(ti)
    if n < 0 or n % b:
        raise ValueError(f"row length {n} is not a multiple of the block size {b}")


def quantize(x, t, isa=None):
    """Quantize float rows x (..., n) into raw blocks: uint8 (..., row_bytes). isa: force an instruction set."""
    cdef int ti = _type_id(t)
    cdef const fg_type_kernels *k = _table(isa, ti)
    cdef fg_quantize_fn fn = k.quantize if k.quantize else fg_kernels_of(FG_ISA_SCALAR, ti).quantize
    cdef cnp.ndarray[cnp.float32_t, ndim=2] a = _floats(np.asarray(x, dtype=np.float32).reshape(-1, np.shape(x)[-1]))
    cdef int64_t n = a.shape[1], rows = a.shape[0], i
    _check_len(ti, n)
    cdef size_t rs = fg_row_size(ti, n)
    cdef cnp.ndarray[cnp.uint8_t, ndim=2] out = np.empty((rows, rs), dtype=np.uint8)
    with nogil:
        for i in range(rows):
            fn(&a[i, 0] if n else NULL, &out[i, 0] if rs else NULL, n)
    return out.reshape(tuple(np.shape(x)[:-1]) + (rs,))


def quantize_as_llama_file(x, t):
    """Quantize float rows x (..., n) as llama-quantize writes them into a file (ggml_quantize_chunk, no importance
    matrix): the scalar reference of quantize(), except IQ4_NL, whose file quantizer searches 7 trial scales either
    side (quantize_row_iq4_nl_ref, which quantize() matches, tries none). Used by fastgguf.gguf.quantize."""
    cdef int ti = _type_id(t)
    cdef cnp.ndarray[cnp.float32_t, ndim=2] a = _floats(np.asarray(x, dtype=np.float32).reshape(-1, np.shape(x)[-1]))
    cdef int64_t n = a.shape[1], rows = a.shape[0], i
    _check_len(ti, n)
    cdef size_t rs = fg_row_size(ti, n)
    cdef cnp.ndarray[cnp.uint8_t, ndim=2] out = np.empty((rows, rs), dtype=np.uint8)
    with nogil:
        for i in range(rows):
            fg_quantize_row_file(ti, &a[i, 0] if n else NULL, &out[i, 0] if rs else NULL, n)
    return out.reshape(tuple(np.shape(x)[:-1]) + (rs,))


def dequantize(raw, t, int64_t n, isa=None):
    """Dequantize raw blocks (..., row_bytes) holding rows of n elements into float32 (..., n)."""
    cdef int ti = _type_id(t)
    cdef const fg_type_kernels *k = _table(isa, ti)
    cdef fg_dequantize_fn fn = k.dequantize if k.dequantize else fg_kernels_of(FG_ISA_SCALAR, ti).dequantize
    _check_len(ti, n)
    cdef size_t rs = fg_row_size(ti, n)
    r = np.ascontiguousarray(np.asarray(raw).view(np.uint8))
    if r.shape[-1] != rs:
        raise ValueError(f"raw rows are {r.shape[-1]} bytes, expected {rs} for {n} elements")
    cdef cnp.ndarray[cnp.uint8_t, ndim=2] a = r.reshape(-1, rs)
    cdef int64_t rows = a.shape[0], i
    cdef cnp.ndarray[cnp.float32_t, ndim=2] out = np.empty((rows, n), dtype=np.float32)
    with nogil:
        for i in range(rows):
            fn(&a[i, 0] if rs else NULL, &out[i, 0] if n else NULL, n)
    return out.reshape(tuple(r.shape[:-1]) + (n,))


def _gemv_operands(w_raw, wtype, xq_raw):
    """Checked operands of a product: (type id, n, row bytes, weights (rows, row_bytes) uint8, activation bytes)."""
    cdef int ti = _type_id(wtype)
    cdef int xt = fg_vec_dot_type(ti)
    if xt < 0:
        raise ValueError(f"type {wtype!r} is an activation-only type")
    w = np.asarray(w_raw)
    if w.ndim != 2:
        raise ValueError(f"weights must be 2-D raw rows, got shape {w.shape}")
    w = np.ascontiguousarray(w.view(np.uint8) if w.dtype != np.uint8 else w)
    xb = np.ascontiguousarray(np.asarray(xq_raw).view(np.uint8).reshape(-1))
    cdef int64_t n = xb.shape[0] // fg_type_size(xt) * fg_blck_size(xt)
    if <size_t>xb.shape[0] != fg_row_size(xt, n) or n == 0:
        raise ValueError(f"activation is {xb.shape[0]} bytes, not a row of {SUPPORTED_NAMES[xt]}")
    cdef size_t rs = fg_row_size(ti, n)
    if <size_t>w.shape[1] != rs:
        raise ValueError(f"weight rows are {w.shape[1]} bytes, expected {rs} for {n} elements")
    return ti, n, rs, w, xb


def gemv(w_raw, wtype, xq_raw, isa=None):
    """y[r] = dot(W_r, xq) with W raw rows (rows, row_bytes) and xq an already quantized activation (raw bytes
    of vec_dot_type(wtype)). isa=None: the dispatched fg_gemv_rows; else that ISA's gemv (or its vec_dot loop)."""
    ti, n_, rs_, w, xb = _gemv_operands(w_raw, wtype, xq_raw)
    cdef int64_t n = n_
    cdef size_t rs = rs_
    cdef const uint8_t[:, ::1] wv = w
    cdef const uint8_t[::1] xv = xb
    cdef int64_t rows = wv.shape[0], r
    cdef int t = ti
    cdef cnp.ndarray[cnp.float32_t, ndim=1] y = np.empty(rows, dtype=np.float32)
    if rows == 0:
        return y
    if isa is None:
        with nogil:
            fg_gemv_rows(t, &wv[0, 0], rs, n, &xv[0], &y[0], 0, rows)
        return y
    cdef const fg_type_kernels *k = _table(isa, t)
    cdef fg_vec_dot_fn dot = k.vec_dot if k.vec_dot else fg_kernels_of(FG_ISA_SCALAR, t).vec_dot
    with nogil:
        if k.gemv:
            k.gemv(n, &wv[0, 0], rs, &xv[0], &y[0], rows)
        else:
            for r in range(rows):
                y[r] = dot(n, &wv[r, 0], &xv[0])
    return y


PACK_ROWS = FG_PACK_ROWS


cdef _aligned_bytes(size_t n):
    """n bytes (uint8) starting on a 64-byte boundary."""
    buf = np.empty(n + 64, dtype=np.uint8)
    cdef size_t off = (64 - <uintptr_t>_ptr(buf) % 64) % 64
    return buf[off:off + n]


def pack_rows(w_raw, wtype):
    """The row-interleaved copy of raw rows (rows, row_bytes) that decode reads with repack=True (csrc/fg_blocks.h:
    block_<fmt>_r16): its first rows - rows % PACK_ROWS rows, PACK_ROWS at a time, as uint8 bytes; None where the
    type has no such layout."""
    cdef int ti = _type_id(wtype)
    w = np.asarray(w_raw)
    if w.ndim != 2:
        raise ValueError(f"weights must be 2-D raw rows, got shape {w.shape}")
    w = np.ascontiguousarray(w.view(np.uint8) if w.dtype != np.uint8 else w)
    cdef int64_t rows = w.shape[0], n = w.shape[1] // fg_type_size(ti) * fg_blck_size(ti)
    if <size_t>w.shape[1] != fg_row_size(ti, n):
        raise ValueError(f"weight rows of {w.shape[1]} bytes are not whole blocks of {SUPPORTED_NAMES[ti]}")
    cdef size_t nbytes = fg_packed_size(ti, rows, n)
    if not fg_packed_size(ti, FG_PACK_ROWS, n):
        return None
    out = _aligned_bytes(nbytes)
    cdef const uint8_t[:, ::1] wv = w
    cdef uint8_t[::1] ov = out
    if nbytes:
        with nogil:
            fg_pack_rows(ti, &wv[0, 0], <size_t>wv.shape[1], rows, n, &ov[0])
    return out


def gemv_packed(w_raw, wtype, packed, xq_raw, isa=None, int64_t r0=0, r1=None):
    """gemv from W's packed copy (pack_rows): isa=None, the dispatched fg_gemv_rows_packed over rows [r0, r1) (r1
    None: every row; the rows past the copy, and ends inside a group, from W; y holds every row, those outside
    the range 0); else that ISA's gemv_packed kernel over the copy's rows alone."""
    ti, n_, rs_, w, xb = _gemv_operands(w_raw, wtype, xq_raw)
    cdef int64_t n = n_, rows = w.shape[0], groups = rows // FG_PACK_ROWS
    cdef size_t rs = rs_
    cdef int t = ti
    p = np.ascontiguousarray(np.asarray(packed).view(np.uint8).reshape(-1))
    if <size_t>p.shape[0] != fg_packed_size(t, rows, n):
        raise ValueError(f"packed copy is {p.shape[0]} bytes, expected {fg_packed_size(t, rows, n)}")
    cdef const uint8_t[:, ::1] wv = w
    cdef const uint8_t[::1] xv = xb
    cdef const uint8_t[::1] pv = p if p.shape[0] else np.zeros(1, np.uint8)
    cdef int64_t end = rows if r1 is None else r1
    if not 0 <= r0 <= end <= rows:
        raise ValueError(f"rows [{r0}, {end}) are not inside [0, {rows})")
    cdef cnp.ndarray[cnp.float32_t, ndim=1] y = np.zeros(rows if isa is None else groups * FG_PACK_ROWS, np.float32)
    if y.shape[0] == 0:
        return y
    cdef const fg_type_kernels *k
    if isa is None:
        if r0 < end:
            with nogil:
                fg_gemv_rows_packed(t, &wv[0, 0], rs, &pv[0], n, &xv[0], &y[0], r0, end)
        return y
    k = _table(isa, t)
    cdef fg_gemv_packed_fn fn = k.gemv_packed if k.gemv_packed else fg_kernels_of(FG_ISA_SCALAR, t).gemv_packed
    with nogil:
        fn(n, &pv[0], &xv[0], &y[0], groups)
    return y


def vec_dot(w_row, wtype, xq_raw, isa=None):
    """One weight row (raw bytes) . a quantized activation (raw bytes) with the vec_dot kernel of `isa`
    (None: the active one)."""
    ti, n_, rs_, w, xb = _gemv_operands(np.asarray(w_row).view(np.uint8).reshape(1, -1), wtype, xq_raw)
    cdef const uint8_t[:, ::1] wv = w
    cdef const uint8_t[::1] xv = xb
    cdef const fg_type_kernels *k = _table(isa, ti)
    cdef fg_vec_dot_fn dot = k.vec_dot if k.vec_dot else fg_kernels_of(FG_ISA_SCALAR, ti).vec_dot
    return float(dot(n_, &wv[0, 0], &xv[0]))


def read_bandwidth(int64_t nbytes=1 << 29, int repeats=3, int n_threads=1):
    """This machine's memory read bandwidth in GB/s with n_threads threads reading at once: best of `repeats`
    passes, each timed as one window (bytes of all threads over the slowest one's time). Each thread reads a
    buffer of nbytes (make it far larger than the caches) that it allocated and first touched itself, as 4
    sequential streams with software prefetch 1 KB ahead (as the GEMV kernels read their weights): csrc/fg_bandwidth.c.
    n_threads above this build's threads (see build_info) raises ValueError."""
    import time
    if nbytes < 1024 or repeats < 1 or n_threads < 1:
        raise ValueError(f"nbytes >= 1024, repeats >= 1 and n_threads >= 1 required, got {nbytes}, {repeats}, "
                         f"{n_threads}")
    cdef fg_bw *b
    with nogil:
        b = fg_bw_new(n_threads, nbytes)
    if b == NULL:
        raise ValueError(f"cannot start {n_threads} threads with {nbytes} bytes each for the bandwidth probe")
    cdef int rc = 0
    best = 0.0
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            with nogil:
                rc = fg_bw_read(b)
            dt = time.perf_counter() - t0
            if rc != 0:
                raise RuntimeError("bandwidth loop miscounted")
            best = max(best, fg_bw_bytes(b) / dt / 1e9)
    finally:
        fg_bw_free(b)
    return best


def read_bandwidth_curve(int64_t nbytes, int repeats, int max_threads):
    """[GB/s with 1, 2, ..., max_threads threads reading at once]: one team of max_threads threads, each with a
    buffer of nbytes it allocated and first touched, read by the first k threads for k = 1..max_threads, best of
    `repeats` rounds of passes (each round one pass per k, so another process's burst hits no k alone):
    read_bandwidth's measure for every k from one set of buffers (fastgguf._threads' decode_threads probe). ValueError when the threads or the memory cannot be had."""
    import time
    if nbytes < 1024 or repeats < 1 or max_threads < 1:
        raise ValueError(f"nbytes >= 1024, repeats >= 1 and max_threads >= 1 required, got {nbytes}, {repeats}, "
                         f"{max_threads}")
    cdef fg_bw *b
    with nogil:
        b = fg_bw_new(max_threads, nbytes)
    if b == NULL:
        raise ValueError(f"cannot start {max_threads} threads with {nbytes} bytes each for the bandwidth probe")
    cdef int rc = 0, k
    curve = [0.0] * max_threads
    try:
        for _ in range(repeats):
            for k in range(1, max_threads + 1):
                t0 = time.perf_counter()
                with nogil:
                    rc = fg_bw_read_n(b, k)
                dt = time.perf_counter() - t0
                if rc != 0:
                    raise RuntimeError("bandwidth loop miscounted")
                curve[k - 1] = max(curve[k - 1], fg_bw_bytes(b) * k / max_threads / dt / 1e9)
    finally:
        fg_bw_free(b)
    return curve


def matmul(w_raw, wtype, x, int n_threads=0):
    """y = x @ W.T with W given as raw rows (rows, row_bytes) of type wtype; x float (m, n) or (n,).

    The activation is quantized to vec_dot_type(wtype) first, exactly as in the forward pass. n_threads: 0 for all,
    else a positive count already checked by fastgguf._threads.check_n_threads (fastgguf.kernels.matmul does)."""
    cdef int ti = _type_id(wtype)
    if n_threads < 0:
        raise ValueError(f"n_threads must be >= 0, got {n_threads}")
    cdef int nth = _threads_for(n_threads) if n_threads else 0
    if fg_vec_dot_type(ti) < 0:
        raise ValueError(f"type {wtype!r} is an activation-only type: it cannot be a weight matrix")
    xa = np.asarray(x, dtype=np.float32)
    squeeze = xa.ndim == 1
    cdef cnp.ndarray[cnp.float32_t, ndim=2] xs = _floats(xa.reshape(1, -1) if squeeze else xa)
    cdef int64_t n = xs.shape[1], m = xs.shape[0]
    _check_len(ti, n)
    cdef size_t rs = fg_row_size(ti, n)
    w = np.asarray(w_raw)
    if w.dtype != np.uint8:
        w = w.view(np.uint8)
    w = w.reshape(w.shape[0], -1)
    if w.shape[1] != rs:
        raise ValueError(f"weight rows are {w.shape[1]} bytes, expected {rs} for {n} elements of {wtype}")
    if not w.flags.c_contiguous:
        w = np.ascontiguousarray(w)
    cdef const uint8_t[:, ::1] wv = w
    cdef int64_t rows = wv.shape[0]
    cdef cnp.ndarray[cnp.float32_t, ndim=2] y = np.empty((m, rows), dtype=np.float32)
    cdef int rc
    with nogil:
        rc = fg_gemm(ti, &wv[0, 0] if rows and rs else NULL, rs, rows, n, &xs[0, 0] if m and n else NULL, m,
                     &y[0, 0] if m and rows else NULL, nth)
    if rc != 0:
        raise MemoryError("fg_gemm failed")
    return y[0] if squeeze else y
