"""The merge loop of BPE and SentencePiece: repeatedly merge the adjacent pair of symbols with the best priority,
leftmost first (llama.cpp's llm_bigram_bpe / llm_bigram_spm priority queues).

- merge_ranked (BPE, bpe.py): priority = ranks[left + " " + right], the merge's rank, lowest first.
- merge_scored (SentencePiece, spm.py): priority = -scores[vocab[left + right]], highest score first.

Both are the compiled loop (fastgguf/tokenizer/_bpe.pyx); the Python one here (_merge) is its reference.
"""
import heapq


def _merge(syms, priority):
    """syms: list of symbol strings (modified). priority(a, b) -> number (lower merges first) or None."""
    n = len(syms)
    if n < 2:
        return syms
    heap = []
    for i in range(n - 1):
        p = priority(syms[i], syms[i + 1])
        if p is not None:
            heap.append((p, i, i + 1, len(syms[i]) + len(syms[i + 1])))
    if not heap:
        return syms
    heapq.heapify(heap)
    nxt = list(range(1, n + 1))                  # (n,) next live symbol, n = none
    prv = list(range(-1, n - 1))                 # (n,) previous live symbol, -1 = none
    lens = [len(s) for s in syms]                # (n,) 0 once merged away
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        p, i, j, size = pop(heap)
        if lens[i] == 0 or lens[j] == 0 or lens[i] + lens[j] != size:
            continue                              # outdated: one side changed since the pair was queued
        merged = syms[i] + syms[j]
        syms[i] = merged
        lens[i] = size
        lens[j] = 0
        k = nxt[j]
        nxt[i] = k
        if k < n:
            prv[k] = i
        h = prv[i]
        if h >= 0:
            q = priority(syms[h], merged)
            if q is not None:
                push(heap, (q, h, i, lens[h] + size))
        if k < n:
            q = priority(merged, syms[k])
            if q is not None:
                push(heap, (q, i, k, size + lens[k]))
    out = []
    i = 0
    while i < n:
        out.append(syms[i])
        i = nxt[i]
    return out


def merge_ranked_py(syms, ranks):
    return _merge(syms, lambda a, b: ranks.get(a + " " + b))


def merge_scored_py(syms, vocab, scores):
    def priority(a, b):
        i = vocab.get(a + b)
        return None if i is None else -scores[i]
    return _merge(syms, priority)


try:                                    # the same loop compiled (fastgguf/_bpe.pyx); the Python one is the reference
    from fastgguf.tokenizer._bpe import merge_ranked, merge_scored
except ImportError:                     # pragma: no cover - source checkout without a build
    merge_ranked, merge_scored = merge_ranked_py, merge_scored_py
