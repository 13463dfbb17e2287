"""Batched forward: evaluate the new tokens of several sequences at once.

This is the REFERENCE implementation: it loops `ctx.eval(ids)` over the items, one sequence after another. It has
the exact signature and contract of the real batched forward (one fg_forward over the tokens of every sequence, each
with its own KV cache and positions), which replaces it; the server's Engine is built only on this function, so the
swap changes speed, never results.
"""
__all__ = ["forward_batch"]


def forward_batch(model, items, n_threads=None):
    """Evaluate each item's token ids after the tokens already cached in its context.

    model: the Model every context belongs to. items: a list of (context, token_ids), each context at most once,
    each token_ids non-empty. n_threads: threads for the pass (default: each context's own).
    Returns a list of float32 (n_vocab,) logits of each item's last token, in the order of items: bit-identical to
    running `context.eval(token_ids)` for each item alone."""
    out = []
    for ctx, ids in items:
        if ctx.model is not model:
            raise ValueError("every context of a batch must belong to the batch's model")
        if n_threads is not None and ctx.n_threads != n_threads:
            ctx.n_threads = n_threads
        out.append(ctx.eval(ids))
    return out
