# Samplers: the C API of csrc/fg_sample.h and the Sampler class other Cython code (the decode loop) cimports.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

cdef extern from "fg_sample.h" nogil:
    enum:
        FG_SAMPLE_NO_CANDIDATE
        FG_SAMPLE_NO_MEMORY

    ctypedef struct fg_rng:
        uint64_t s[4]

    ctypedef struct fg_cand:
        float logit
        int32_t id

    ctypedef struct fg_sampler:
        float temperature
        int32_t top_k
        float top_p
        float min_p
        float repeat_penalty
        int32_t repeat_last_n
        float frequency_penalty
        float presence_penalty
        int32_t n_bias
        int32_t *hist
        int64_t n_hist
        int32_t *counts
        int32_t cap_tok
        fg_rng rng

    void fg_rng_seed(fg_rng *r, uint64_t seed)
    uint64_t fg_rng_next(fg_rng *r)
    double fg_rng_uniform(fg_rng *r)
    void fg_sampler_init(fg_sampler *s, uint64_t seed)
    void fg_sampler_free(fg_sampler *s)
    int fg_sampler_set_bias(fg_sampler *s, const int32_t *ids, const float *vals, int32_t n)
    void fg_sampler_reset(fg_sampler *s)
    int fg_sampler_accept(fg_sampler *s, int32_t id, int generated)
    int fg_sampler_apply(fg_sampler *s, float *logits, int32_t n_vocab)
    int32_t fg_sampler_sample(fg_sampler *s, float *logits, int32_t n_vocab)
    int32_t fg_argmax(const float *x, int32_t n)
    int32_t fg_top_k(const float *x, int32_t n, int32_t k, fg_cand *out)


cdef class Sampler:
    cdef fg_sampler s
    cdef readonly object seed        # the seed in use (drawn from os.urandom when None was given)
    cdef readonly object logit_bias  # {id: bias} as validated
    cdef readonly object n_vocab     # vocabulary size bias ids and accepted ids are checked against, or None
    # Choose a token from logits (n_vocab,) (left unchanged on return). Returns the id (>= 0), or
    # FG_SAMPLE_NO_CANDIDATE (-1: every logit -inf/NaN) / FG_SAMPLE_NO_MEMORY (-2). Does not record the token.
    cdef int sample_ptr(self, float *logits, int n_vocab) noexcept nogil
