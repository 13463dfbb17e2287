"""One forward pass over several sequences (the basis of a server's continuous batching).

`forward_batch(model, [(ctx_a, ids_a), (ctx_b, ids_b), ...])` evaluates each context's new tokens after its cached
ones in ONE pass: every weight matrix is read once for all the step's rows (the cost of a decode step is mostly
reading the weights, so N sequences cost far less than N steps), and attention runs per sequence against its own
KV cache. A sequence may bring one token (a decode step) or many (a prompt chunk) in the same call; the call
returns when all its rows are done, so a server bounds the latency of a step by splitting long prompts into chunks
(rows run in internal chunks of up to 256).

Results are bit-identical to running each context alone (`ctx.eval(ids)`), whatever the other sequences and the
number of threads: every op is row-wise and the matrix kernels give a row the same result in a GEMM as in a GEMV.

Thread safety: each context is taken (its `_guard()`) for the duration of the call, so a context in use by another
thread makes the call raise RuntimeError. The scratch of the pass (a `Workspace`, sized for the largest step seen)
is kept per model and per thread, so threads may batch over one shared Model concurrently.
"""
import contextlib
import threading

from fastgguf._native import Workspace
from fastgguf._native import forward_batch as _forward_batch
from fastgguf.engine.threads import check_n_threads

_ws_lock = threading.Lock()  # creating a model's per-thread holder


def _workspace(model, n_threads):
    """This thread's Workspace for model (made on first use; forward_batch grows it as needed)."""
    local = getattr(model, "_batch_local", None)
    if local is None:
        with _ws_lock:
            local = getattr(model, "_batch_local", None)
            if local is None:
                local = model._batch_local = threading.local()
    ws = getattr(local, "workspace", None)
    if ws is None:
        ws = local.workspace = Workspace(model.weights, 1, 1, n_threads)
    return ws


def forward_batch(model, items, n_threads=None, outputs=None):
    """Evaluate several contexts' new tokens in one forward pass.

    items: list of (context, token_ids); each context (of this model, at most once) gets its token_ids (a
    non-empty sequence of ints) after the tokens already in its cache. n_threads: defaults to model.n_threads.
    Returns, in the order of items, what outputs[i] asks for (default "last"): "last": float32 (n_vocab,) logits
    of the item's last token; "all": (len(ids), n_vocab) logits of each of its tokens; "hidden": (len(ids),
    n_embd) final hidden states (the output norm applied, the lm_head skipped: embeddings). Raises
    ValueError on bad input (empty list, a context twice, another model's context, a bad token id, a context that
    would overflow its n_ctx; the message names the sequence by its index in items), with nothing changed;
    RuntimeError when a context is in use by another thread."""
    items = list(items)
    if not items:
        raise ValueError("forward_batch needs at least one (context, token_ids) item")
    n_threads = model.n_threads if n_threads is None else check_n_threads(n_threads)
    contexts, token_lists, seen = [], [], set()
    for i, item in enumerate(items):
        try:
            ctx, ids = item
        except (TypeError, ValueError):
            raise ValueError(f"sequence {i}: expected a (context, token_ids) pair") from None
        if getattr(ctx, "model", None) is not model:
            raise ValueError(f"sequence {i}: not a Context of this model")
        if id(ctx) in seen:
            raise ValueError(f"sequence {i}: the same context appears more than once")
        seen.add(id(ctx))
        contexts.append(ctx)
        token_lists.append(ids)
    with contextlib.ExitStack() as stack:
        for ctx in contexts:
            stack.enter_context(ctx._guard())
        ws = _workspace(model, n_threads)
        return _forward_batch(model.weights, ws, [c.runner for c in contexts], token_lists, n_threads, outputs)
