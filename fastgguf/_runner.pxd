# The forward pass (csrc/fg_forward.h) and the Runner that the decode loop cimports.
from libc.stdint cimport int32_t, int64_t

cdef extern from "fg_forward.h" nogil:
    ctypedef struct fg_mat:
        const void *data
        int type
        size_t stride
        int64_t rows, cols

    ctypedef struct fg_layer:
        const float *attn_norm
        fg_mat wq, wk, wv
        const float *bq
        const float *bk
        const float *bv
        const float *q_norm
        const float *k_norm
        fg_mat wo
        const float *ffn_norm
        fg_mat w_gate, w_up, w_down

    ctypedef struct fg_model:
        int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab
        int n_rot, rope_neox
        float norm_eps, rope_base, rope_freq_scale, attn_scale
        const float *rope_freqs
        fg_mat tok_embd
        const float *output_norm
        fg_mat output
        const fg_layer *layers

    ctypedef struct fg_state:
        int n_ctx, n_batch, max_threads

    int fg_state_init(fg_state *s, const fg_model *m, int n_ctx, int n_batch, int max_threads)
    void fg_state_free(fg_state *s)
    int fg_state_set_max_threads(fg_state *s, const fg_model *m, int max_threads)
    int fg_forward(const fg_model *m, fg_state *s, const int32_t *tokens, int n_tokens, int pos, float *logits,
                   int all_logits, int n_threads)


cdef class Weights:
    """The model's weights as C pointers into the mapped file, plus what keeps them alive. Immutable, shared."""
    cdef fg_model m
    cdef fg_layer *layers
    cdef list _keep
    cdef readonly object hparams


cdef class Runner:
    cdef readonly int n_vocab, n_ctx, n_past
    cdef readonly Weights weights
    cdef fg_state st
    cdef int _n_threads
    cdef bint _ready
    cdef float *logits          # (n_vocab,) of the last step / eval
    cdef int32_t *ids           # (n_ctx,) the token ids in the cache, positions 0..n_past-1
    # Run one token at position n_past (then n_past += 1); *logits points at the runner's (n_vocab,) float32 buffer,
    # valid until the next call. Returns 0, or -1 when the context is full or the token is out of range (nothing
    # changed). GIL not needed.
    cdef int step(self, int token, float **logits) noexcept nogil
