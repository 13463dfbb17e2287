# cython: language_level=3, boundscheck=False, wraparound=False
"""The merge loop of fastgguf.tokenizer in C: same algorithm as tokenizer._merge (the Python reference), with
the pair queue as a C binary heap and the symbol links as C arrays. One huge word (megabytes of one letter: n log n,
seconds) must not stall the other threads (a server's event loop), so the loop pauses (_pause) every YIELD_SECONDS.
Letting go of the GIL for an instant is not enough: a waiting thread is woken by each release, finds the GIL taken
again and goes back to wait without ever asking for it (CPython asks only after a whole switch interval without a
release), so releases more frequent than that starve it; a short sleep lets it in.

Repeatedly merge the adjacent pair with the lowest priority, leftmost first (llama.cpp's llm_bigram_bpe /
llm_bigram_spm queues):
- merge_ranked: byte-level BPE, priority = ranks[left + " " + right] (the merge's rank).
- merge_scored: SentencePiece, priority = -scores[vocab[left + right]] (highest score first).
"""
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from libc.stdlib cimport free, malloc
from time import perf_counter, sleep


cdef enum:
    CHECK_EVERY = 1024          # steps between two looks at the clock
cdef double YIELD_SECONDS = 0.004   # work between two pauses (under CPython's 5 ms switch interval)
cdef double PAUSE_SECONDS = 0.0002  # long enough for a woken thread to take the GIL


cdef double _pause(double last):
    """Sleep PAUSE_SECONDS (letting go of the GIL) if YIELD_SECONDS passed since `last`; the new `last`."""
    cdef double now = perf_counter()
    if now - last < YIELD_SECONDS:
        return last
    sleep(PAUSE_SECONDS)
    return perf_counter()


cdef struct Pair:
    double prio          # lower merges first
    Py_ssize_t i         # left symbol
    Py_ssize_t j         # right symbol
    Py_ssize_t size      # len(left) + len(right) when queued: the pair is outdated if this changed


cdef inline bint _before(Pair * a, Pair * b) noexcept nogil:
    return a.prio < b.prio or (a.prio == b.prio and a.i < b.i)


cdef inline void _push(Pair * heap, Py_ssize_t * n, Pair p) noexcept nogil:
    cdef Py_ssize_t k = n[0], parent
    n[0] += 1
    while k > 0:
        parent = (k - 1) >> 1
        if not _before(&p, &heap[parent]):
            break
        heap[k] = heap[parent]
        k = parent
    heap[k] = p


cdef inline Pair _pop(Pair * heap, Py_ssize_t * n) noexcept nogil:
    cdef Pair top = heap[0], last
    cdef Py_ssize_t k = 0, c
    n[0] -= 1
    if n[0] == 0:
        return top
    last = heap[n[0]]
    while True:
        c = 2 * k + 1
        if c >= n[0]:
            break
        if c + 1 < n[0] and _before(&heap[c + 1], &heap[c]):
            c += 1
        if not _before(&heap[c], &last):
            break
        heap[k] = heap[c]
        k = c
    heap[k] = last
    return top


cdef int _priority(bint scored, str a, str b, dict table, list scores, double * out) except -1:
    """1 and out = priority if a and b merge, else 0."""
    cdef PyObject * v
    if scored:
        v = PyDict_GetItem(table, a + b)
        if v is NULL:
            return 0
        out[0] = -<double>(scores[<Py_ssize_t><object>v])
    else:
        v = PyDict_GetItem(table, a + " " + b)
        if v is NULL:
            return 0
        out[0] = <double><object>v
    return 1


cdef list _merge(list syms, bint scored, dict table, list scores):
    cdef Py_ssize_t n = len(syms), i, j, k, h, nheap = 0, pops = 0
    cdef double p, last = perf_counter()
    cdef Pair pair
    cdef str merged
    if n < 2:
        return syms
    cdef Pair * heap = <Pair *> malloc(3 * n * sizeof(Pair))          # (3n,) n-1 initial + 2 per merge
    cdef Py_ssize_t * nxt = <Py_ssize_t *> malloc(3 * n * sizeof(Py_ssize_t))
    cdef Py_ssize_t * prv = nxt + n                                    # (n,) previous live symbol, -1 none
    cdef Py_ssize_t * lens = nxt + 2 * n                               # (n,) 0 once merged away
    if heap is NULL or nxt is NULL:
        free(heap)
        free(nxt)
        raise MemoryError()
    try:
        for i in range(n):
            nxt[i] = i + 1                                             # n = none
            prv[i] = i - 1
            lens[i] = len(<str>syms[i])
        for i in range(n - 1):
            if _priority(scored, syms[i], syms[i + 1], table, scores, &p):
                _push(heap, &nheap, Pair(p, i, i + 1, lens[i] + lens[i + 1]))
            if i % CHECK_EVERY == CHECK_EVERY - 1:
                last = _pause(last)
        while nheap > 0:
            pair = _pop(heap, &nheap)
            pops += 1
            if pops % CHECK_EVERY == 0:
                last = _pause(last)
            i, j = pair.i, pair.j
            if lens[i] == 0 or lens[j] == 0 or lens[i] + lens[j] != pair.size:
                continue
            merged = <str>syms[i] + <str>syms[j]
            syms[i] = merged
            lens[i] = pair.size
            lens[j] = 0
            k = nxt[j]
            nxt[i] = k
            if k < n:
                prv[k] = i
            h = prv[i]
            if h >= 0 and _priority(scored, syms[h], merged, table, scores, &p):
                _push(heap, &nheap, Pair(p, h, i, lens[h] + pair.size))
            if k < n and _priority(scored, merged, syms[k], table, scores, &p):
                _push(heap, &nheap, Pair(p, i, k, pair.size + lens[k]))
        out = []
        i = 0
        while i < n:
            out.append(syms[i])
            i = nxt[i]
        return out
    finally:
        free(heap)
        free(nxt)


def merge_ranked(list syms, dict ranks):
    """BPE: merge symbols (list of str) by rank; ranks maps "left right" -> rank."""
    return _merge(syms, False, ranks, None)


def merge_scored(list syms, dict vocab, list scores):
    """SPM: merge symbols by the score of the merged token (vocab: text -> id, scores: id -> score)."""
    return _merge(syms, True, vocab, scores)
