# The C API of csrc/ as Cython sees it (fg_kernels.h, fg_threads.h, fg_forward.h, fg_sample.h) and the cdef classes of
# fastgguf._native. The only place Cython code declares the C contract.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "fg_kernels.h" nogil:
    enum:
        FG_TYPE_F32
        FG_TYPE_F16
        FG_TYPE_Q4_0
        FG_TYPE_Q4_1
        FG_TYPE_Q8_0
        FG_TYPE_Q8_1
        FG_TYPE_BF16
        FG_ISA_SCALAR
        FG_ISA_AVX2
        FG_ISA_AVX512
        FG_ISA_NEON
        FG_ISA_COUNT

    ctypedef void (*fg_quantize_fn)(const float *x, void *y, int64_t n)
    ctypedef void (*fg_dequantize_fn)(const void *x, float *y, int64_t n)
    ctypedef float (*fg_vec_dot_fn)(int64_t n, const void *w, const void *xq)
    ctypedef void (*fg_gemv_fn)(int64_t n, const void *w, size_t stride, const void *xq, float *y, int64_t nrows)
    ctypedef void (*fg_gemm_fn)(int64_t n, const void *w, size_t stride, const void *xq, size_t xq_stride, int64_t m,
                                float *y, int64_t ldy, int64_t nrows)
    ctypedef void (*fg_pack_fn)(int64_t n, const void *w, size_t stride, void *wp, int64_t ngroups)
    ctypedef void (*fg_gemv_packed_fn)(int64_t n, const void *wp, const void *xq, float *y, int64_t ngroups)
    ctypedef struct fg_type_kernels:
        fg_quantize_fn quantize
        fg_dequantize_fn dequantize
        fg_vec_dot_fn vec_dot
        fg_gemv_fn gemv
        fg_gemm_fn gemm
        fg_pack_fn pack
        fg_gemv_packed_fn gemv_packed

    ctypedef struct fg_type_info:
        int type
        const char *name
        int64_t blck
        size_t size
        int dot_type
        size_t packed_size

    enum:
        FG_K_QUANTIZE
        FG_K_DEQUANTIZE
        FG_K_VEC_DOT
        FG_K_GEMV
        FG_K_GEMM
        FG_K_GEMV_PACKED
        FG_PACK_ROWS

    int fg_type_count()
    const fg_type_info *fg_type_at(int i)
    unsigned fg_kernel_mask(int isa, int type)
    int fg_type_supported(int type)
    int64_t fg_blck_size(int type)
    size_t fg_type_size(int type)
    size_t fg_row_size(int type, int64_t n)
    int fg_vec_dot_type(int wtype)
    size_t fg_packed_size(int type, int64_t rows, int64_t n)
    void fg_pack_rows(int type, const void *w, size_t stride, int64_t rows, int64_t n, void *wp)
    void fg_gemv_rows_packed(int wtype, const void *w, size_t stride, const void *wp, int64_t n, const void *xq,
                             float *y, int64_t r0, int64_t r1)

    int fg_init()
    int fg_isa_compiled(int isa)
    int fg_isa_available(int isa)
    int fg_isa_active()
    int fg_set_isa(int isa)
    const char *fg_isa_name(int isa)
    int fg_isa_from_name(const char *name)
    const char *fg_cpu_features()

    int fg_isa_ext_available(int isa)
    const char *fg_isa_ext_name(int isa)
    int fg_ext_enabled()
    int fg_set_ext(int on)

    void fg_quantize_row(int type, const float *x, void *y, int64_t n)
    void fg_quantize_row_file(int type, const float *x, void *y, int64_t n)
    void fg_dequantize_row(int type, const void *x, float *y, int64_t n)
    float fg_vec_dot(int wtype, int64_t n, const void *w, const void *xq)
    void fg_gemv_rows(int wtype, const void *w, size_t stride, int64_t n, const void *xq, float *y,
                      int64_t r0, int64_t r1)
    void fg_gemm_rows(int wtype, const void *w, size_t stride, int64_t n, const void *xq, size_t xq_stride,
                      int64_t m, float *y, int64_t ldy, int64_t r0, int64_t r1)
    int fg_gemm(int wtype, const void *w, size_t stride, int64_t rows, int64_t n, const float *x, int64_t m,
                float *y, int n_threads)
    const fg_type_kernels *fg_kernels_of(int isa, int type)
    void fg_split_rows(int64_t n, int nth, int ith, int64_t align, int64_t *r0, int64_t *r1)

cdef extern from "fg_threads.h" nogil:
    int fg_cpu_count()
    const char *fg_thread_api()
    const char *fg_compiler()


# ---- the forward pass (csrc/fg_forward.h) ----
cdef extern from "fg_bandwidth.h" nogil:
    ctypedef struct fg_bw:
        pass
    fg_bw *fg_bw_new(int nth, int64_t bytes_per_thread)
    int fg_bw_read(fg_bw *b)
    int fg_bw_read_n(fg_bw *b, int nth)
    int64_t fg_bw_bytes(const fg_bw *b)
    void fg_bw_free(fg_bw *b)


cdef extern from "fg_forward.h" nogil:
    enum:
        FG_MAX_BATCH
        FG_MAX_BATCH_NC
        FG_MAX_SLOTS

    ctypedef struct fg_mat:
        const void *data
        int type
        size_t stride
        int64_t rows, cols
        const void *packed

    ctypedef struct fg_mat3:
        fg_mat m
        size_t expert_stride
        int64_t n_expert

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
        const float *attn_post_norm
        const float *ffn_post_norm
        int swa
        int nope
        int conv
        fg_mat conv_in
        const float *conv_w
        fg_mat conv_out
        const float *bo
        const float *b_up
        const float *b_down
        const float *attn_out_norm
        const float *attn_out_norm_b
        const float *layer_out_norm
        const float *layer_out_norm_b
        fg_mat gate_inp
        fg_mat3 gate_exps, up_exps, down_exps
        const float *gate_inp_shexp
        const float *attn_sinks
        const float *b_gate_inp
        const float *b_gate_exps
        const float *b_up_exps
        const float *b_down_exps
        fg_mat wg
        int deltanet
        fg_mat dn_qkv, dn_z, dn_beta, dn_alpha, dn_out
        const float *dn_conv_w
        const float *dn_dt
        const float *dn_a
        const float *dn_norm
        const float *exp_probs_b
        int ssm
        fg_mat ssm_in, ssm_out
        const float *ssm_conv1d
        const float *ssm_conv1d_b
        const float *ssm_dt_b
        const float *ssm_a
        const float *ssm_d
        const float *ssm_norm
        int n_ff
        int kv_reuse
        fg_mat ple_gate, ple_out
        const float *ple_post_norm
        const float *out_scale
        const float *ffn_post_norm_1
        const float *moe_post_norm
        const float *router_norm
        const float *exp_norm
        const float *down_exps_s

    ctypedef struct fg_hparams:
        int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab
        int n_rot, rope_neox
        float norm_eps, rope_base, rope_freq_scale, attn_scale
        float embd_scale
        int ffn_act
        float attn_softcap, final_softcap
        int n_swa
        float rope_base_swa, rope_freq_scale_swa
        float rope_ext_factor, rope_attn_factor, rope_beta_fast, rope_beta_slow
        int rope_n_ctx_orig
        int non_causal
        float residual_scale, logit_scale
        int n_expert, n_expert_used, n_ff_exp, moe_gating, moe_norm_w, moe_act
        float moe_w_scale
        int qk_norm_full
        int n_conv
        int attn_gate
        int dn_conv, dn_state, dn_k_heads, dn_v_heads
        int dn_kv_grouped
        int ssm_d_conv, ssm_d_inner, ssm_d_state, ssm_n_head, ssm_n_group
        int head_dim_swa, n_head_kv_swa, n_rot_swa, swa_no_freqs, v_norm, n_embd_per_layer
        int moe_dense

    ctypedef struct fg_model:
        fg_hparams hp
        const float *rope_freqs
        const float *rope_freqs_long
        fg_mat tok_embd
        const float *output_norm
        fg_mat output
        const fg_layer *layers
        fg_mat pos_embd
        const float *type_embd0
        const float *tok_norm
        const float *tok_norm_b
        fg_mat ple_embd, ple_proj
        const float *ple_norm

    ctypedef struct fg_kv:
        int n_ctx, n_swa_rows, n_conv_rows
        float *dn_cache
        int64_t *dn_off
        size_t bytes

    ctypedef struct fg_work:
        int n_batch, max_ctx, max_threads
        int last_threads

    ctypedef struct fg_state:
        fg_kv kv
        fg_work work

    int fg_work_init(fg_work *w, const fg_model *m, int n_batch, int max_ctx, int max_threads)
    void fg_work_free(fg_work *w)
    int fg_work_reserve(fg_work *w, const fg_model *m, int n_batch, int max_ctx, int max_threads)
    int fg_state_init(fg_state *s, const fg_model *m, int n_ctx, int n_batch, int max_threads)
    void fg_state_free(fg_state *s)
    int fg_state_set_max_threads(fg_state *s, const fg_model *m, int max_threads)
    int fg_forward(const fg_model *m, fg_state *s, const int32_t *tokens, int n_tokens, int pos, float *logits,
                   int all_logits, int n_threads)
    int fg_forward_multi(const fg_model *m, fg_work *w, fg_kv *const *seqs, int n_seqs, const int32_t *tokens,
                         const int32_t *seq_of_row, const int32_t *pos_of_row, int n_rows,
                         const int32_t *logit_rows, int n_logit_rows, float *logits, const int32_t *hidden_rows,
                         int n_hidden_rows, float *hidden, int n_threads)
    int fg_kv_copy(const fg_model *m, fg_kv *dst, const fg_kv *src, int n)
    size_t fg_kv_bytes(const fg_model *m, int n_ctx, size_t *conv, size_t *rec)
    int64_t fg_kv_state_size(const fg_model *m, int n)
    int64_t fg_rec_state_size(const fg_model *m, int n)
    int fg_kv_save(const fg_model *m, const fg_kv *kv, int n, uint16_t *buf, int64_t n_kv, float *rec,
                   int64_t n_rec)
    int fg_kv_load(const fg_model *m, fg_kv *kv, int n, const uint16_t *buf, int64_t n_kv, const float *rec,
                   int64_t n_rec)


cdef class Weights:
    """The model's weights as C pointers into the mapped file, plus what keeps them alive. Immutable, shared."""
    cdef fg_model m
    cdef fg_layer *layers
    cdef list _keep
    cdef readonly object hparams
    cdef readonly bint repack          # decode reads the matrices that have a packed layout from packed copies
    cdef readonly size_t packed_bytes  # the copies' bytes


cdef class Runner:
    cdef readonly int n_vocab, n_ctx, n_past
    cdef readonly Weights weights
    cdef fg_state st
    cdef int _n_threads
    cdef int _decode_threads  # threads of one-row passes (decode steps); 0: _n_threads
    cdef int _ring_lo[2]        # oldest position the sliding-window [0] and short-convolution [1] rings surely hold
    cdef void _windows_filled(self, int n)
    cdef bint _ready
    cdef float *logits          # (n_vocab,) of the last step / eval
    cdef int32_t *ids           # (n_ctx,) the token ids in the cache, positions 0..n_past-1
    # Run one token at position n_past (then n_past += 1); *logits points at the runner's (n_vocab,) float32 buffer,
    # valid until the next call. Returns 0, or -1 when the context is full or the token is out of range (nothing
    # changed). GIL not needed.
    cdef int step(self, int token, float **logits) noexcept nogil


cdef class Workspace:
    """Scratch of forward_batch (fg_work): rows of one step of several sequences; grows as needed. Not
    thread-safe: one call at a time (fastgguf.engine.batch keeps one per thread)."""
    cdef readonly Weights weights
    cdef fg_work w
    cdef bint _ready
    # Grow to at least n_rows rows (capped at the chunk size), max_ctx and max_threads. Raises MemoryError.
    cdef int reserve(self, int n_rows, int max_ctx, int max_threads) except -1


# ---- samplers (csrc/fg_sample.h) ----
cdef extern from "fg_sample.h" nogil:
    enum:
        FG_SAMPLE_NO_CANDIDATE
        FG_SAMPLE_NO_MEMORY
        FG_SAMPLE_NO_ALLOWED

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
        int32_t *seen
        int32_t n_seen
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
    int32_t fg_sampler_sample_masked(fg_sampler *s, float *logits, int32_t n_vocab, const uint32_t *allow)
    int32_t fg_argmax(const float *x, int32_t n)
    int32_t fg_top_k(const float *x, int32_t n, int32_t k, fg_cand *out)


cdef class Sampler:
    # (its SamplingParams, `params`, is fastgguf.engine.sampler.Sampler's: the extension knows none)
    cdef fg_sampler s
    cdef readonly object seed        # the seed in use (drawn from os.urandom when None was given)
    cdef readonly object logit_bias  # {id: bias} as validated
    cdef readonly object n_vocab     # vocabulary size bias ids and accepted ids are checked against, or None
    # Choose a token from logits (n_vocab,) (left unchanged on return). Returns the id (>= 0), or
    # FG_SAMPLE_NO_CANDIDATE (-1: every logit -inf/NaN) / FG_SAMPLE_NO_MEMORY (-2). Does not record the token.
    cdef int sample_ptr(self, float *logits, int n_vocab) noexcept nogil
    # The same among the tokens allow (ceil(n_vocab / 32) words, bit i = token i allowed; NULL: all) permits; an
    # empty choice is FG_SAMPLE_NO_ALLOWED (-3) instead of -1.
    cdef int sample_masked_ptr(self, float *logits, int n_vocab, const uint32_t *allow) noexcept nogil
