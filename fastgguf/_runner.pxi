# Included by _native.pyx. Runner: one conversation's forward pass over shared Weights (csrc/fg_forward.h).


cdef inline const void *_ptr(arr):
    return <const void *><uintptr_t>arr.__array_interface__["data"][0]


cdef const float *_vec(Weights w, arr, int64_t n, str name) except? NULL:
    """A float32 (n,) vector, or NULL for None."""
    if arr is None:
        return NULL
    a = _floats(arr)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"{name}: expected shape ({n},), got {np.shape(arr)}")
    w._keep.append(a)
    return <const float *>_ptr(a)


cdef const float *_vec2(Weights w, arr, int64_t rows, int64_t cols, str name) except? NULL:
    """A float32 (rows, cols) array (expert biases: one row per expert) as one vector, or NULL for None."""
    if arr is None:
        return NULL
    if np.shape(arr) != (rows, cols):
        raise ValueError(f"{name}: expected shape ({rows}, {cols}), got {np.shape(arr)}")
    return _vec(w, np.reshape(_floats(arr), -1), rows * cols, name)


cdef fg_mat _mat(Weights w, spec, int64_t rows, int64_t cols, str name, bint packable=True) except *:
    """spec = (array, ggml_type, rows, cols): array rows of raw blocks (or floats), each row contiguous; None: an
    absent matrix (data NULL). rows < 0: any number of rows. packable (a matrix decode multiplies by) and w.repack:
    with its packed copy too (_pack)."""
    cdef fg_mat m
    memset(&m, 0, sizeof(fg_mat))
    if spec is None:
        return m
    arr, t, r, c = spec
    if rows < 0:
        rows = r
    if r != rows or c != cols:
        raise ValueError(f"{name}: expected shape ({rows}, {cols}), got ({r}, {c})")
    a = np.asarray(arr)
    if a.ndim != 2 or a.shape[0] != rows or a.strides[a.ndim - 1] != a.itemsize:
        raise ValueError(f"{name}: expected a 2-D array of {rows} rows with contiguous rows")
    w._keep.append(a)
    m.data = _ptr(a)
    m.type = int(t)
    m.stride = a.strides[0]
    m.rows = rows
    m.cols = cols
    if packable and w.repack:
        _pack(w, &m)
    return m


cdef _pack(Weights w, fg_mat *m):
    """m's row-interleaved copy for decode (fastgguf.kernels.pack_rows), where its type has that layout and the active
    SIMD kernels a packed gemv of their own (AVX2, AVX-512 VNNI for Q4_K): elsewhere (the scalar reference, NEON)
    decode would not gain from it."""
    cdef size_t nbytes = fg_packed_size(m.type, m.rows, m.cols)
    cdef int isa = fg_isa_active()
    if not nbytes or isa == FG_ISA_SCALAR or not fg_kernel_mask(isa, m.type) & FG_K_GEMV_PACKED:
        return
    buf = _aligned_bytes(nbytes)
    cdef uint8_t[::1] bv = buf
    with nogil:
        fg_pack_rows(m.type, m.data, m.stride, m.rows, m.cols, &bv[0])
    w._keep.append(buf)
    m.packed = &bv[0]
    w.packed_bytes += nbytes


cdef fg_mat3 _mat3(Weights w, spec, int64_t n_expert, int64_t rows, int64_t cols, str name) except *:
    """spec = (array, ggml_type, n_expert, rows, cols): a stack of experts' matrices (a 3-D GGUF tensor), each
    expert's rows contiguous and evenly spaced; None: absent."""
    cdef fg_mat3 m
    memset(&m, 0, sizeof(fg_mat3))
    if spec is None:
        return m
    arr, t, ne, r, c = spec
    if ne != n_expert or r != rows or c != cols:
        raise ValueError(f"{name}: expected shape ({n_expert}, {rows}, {cols}), got ({ne}, {r}, {c})")
    a = np.asarray(arr)
    if a.ndim != 3 or a.shape[0] != ne or a.shape[1] != r or a.strides[2] != a.itemsize:
        raise ValueError(f"{name}: expected a 3-D array of {ne} x {r} contiguous rows")
    m.m = _mat(w, (a[0], t, r, c), rows, cols, name, packable=False)
    w._keep.append(a)
    m.expert_stride = a.strides[0]
    m.n_expert = ne
    return m


cdef int _experts(Weights w, fg_layer *L, d, int64_t NE, int64_t FE, int64_t E, str p) except -1:
    """A mixture-of-experts layer's router, expert stacks and shared-expert gate (Weights.__init__)."""
    L.gate_inp = _mat(w, d["gate_inp"], NE, E, p + "ffn_gate_inp")
    L.gate_exps = _mat3(w, d["gate_exps"], NE, FE, E, p + "ffn_gate_exps")
    L.up_exps = _mat3(w, d["up_exps"], NE, FE, E, p + "ffn_up_exps")
    L.down_exps = _mat3(w, d["down_exps"], NE, E, FE, p + "ffn_down_exps")
    L.gate_inp_shexp = _vec(w, d.get("gate_inp_shexp"), E, p + "ffn_gate_inp_shexp")
    L.b_gate_inp = _vec(w, d.get("b_gate_inp"), NE, p + "ffn_gate_inp.bias")
    L.b_gate_exps = _vec2(w, d.get("b_gate_exps"), NE, FE, p + "ffn_gate_exps.bias")
    L.b_up_exps = _vec2(w, d.get("b_up_exps"), NE, FE, p + "ffn_up_exps.bias")
    L.b_down_exps = _vec2(w, d.get("b_down_exps"), NE, E, p + "ffn_down_exps.bias")
    L.exp_probs_b = _vec(w, d.get("exp_probs_b"), NE, p + "exp_probs_b.bias")
    shared = [L.w_gate.data != NULL, L.w_up.data != NULL, L.w_down.data != NULL]
    if any(shared) != all(shared) or (L.gate_inp_shexp != NULL and not all(shared)):
        raise ValueError(f"{p}: a shared expert needs ffn_gate/up/down_shexp (and its gate vector, them)")
    dots = {fg_vec_dot_type(L.gate_inp.type), fg_vec_dot_type(L.gate_exps.m.type), fg_vec_dot_type(L.up_exps.m.type)}
    if all(shared):
        dots |= {fg_vec_dot_type(L.w_gate.type), fg_vec_dot_type(L.w_up.type)}
    if len(dots) > FG_MAX_SLOTS:  # the FFN input is quantized once per activation type (csrc prep)
        raise ValueError(f"{p}: the router and expert matrices need {len(dots)} activation types; at most "
                         f"{FG_MAX_SLOTS} are supported")
    return 0


cdef int _check_slots(types, str p) except -1:
    """Matrices quantizing one input need at most FG_MAX_SLOTS activation types (csrc prep)."""
    dots = {fg_vec_dot_type(t) for t in types}
    if len(dots) > FG_MAX_SLOTS:
        raise ValueError(f"{p}: these matrices need {len(dots)} activation types; at most {FG_MAX_SLOTS} are supported")
    return 0


cdef int _deltanet(Weights w, fg_layer *L, d, str p) except -1:
    """A gated DeltaNet layer's tensors (fg_layer deltanet), checked against fg_hparams dn_*."""
    cdef const fg_hparams *hp = &w.m.hp
    cdef int64_t E = hp.n_embd, S = hp.dn_state, HV = hp.dn_v_heads, VD = HV * S
    cdef int64_t CD = (2 * <int64_t>hp.dn_k_heads + HV) * S
    L.dn_qkv = _mat(w, d["dn_qkv"], CD, E, p + "attn_qkv")
    L.dn_z = _mat(w, d["dn_z"], VD, E, p + "attn_gate")
    L.dn_beta = _mat(w, d["dn_beta"], HV, E, p + "ssm_beta")
    L.dn_alpha = _mat(w, d["dn_alpha"], HV, E, p + "ssm_alpha")
    L.dn_out = _mat(w, d["dn_out"], E, VD, p + "ssm_out")
    L.dn_conv_w = _vec2(w, d["dn_conv_w"], CD, hp.dn_conv, p + "ssm_conv1d")
    L.dn_dt = _vec(w, d["dn_dt"], HV, p + "ssm_dt.bias")
    L.dn_a = _vec(w, d["dn_a"], HV, p + "ssm_a")
    L.dn_norm = _vec(w, d["dn_norm"], S, p + "ssm_norm")
    _check_slots([L.dn_qkv.type, L.dn_z.type], p + "attn_qkv/attn_gate")
    _check_slots([L.dn_beta.type, L.dn_alpha.type], p + "ssm_beta/ssm_alpha")
    return 0


cdef int _mamba2(Weights w, fg_layer *L, d, str p) except -1:
    """A Mamba-2 layer's tensors (fg_layer ssm), checked against fg_hparams ssm_*."""
    cdef const fg_hparams *hp = &w.m.hp
    cdef int64_t E = hp.n_embd, D = hp.ssm_d_inner, CD = hp.ssm_d_inner + 2 * <int64_t>hp.ssm_n_group * hp.ssm_d_state
    L.ssm_in = _mat(w, d["ssm_in"], D + CD + hp.ssm_n_head, E, p + "ssm_in")
    L.ssm_conv1d = _vec2(w, d["ssm_conv1d"], CD, hp.ssm_d_conv, p + "ssm_conv1d")
    L.ssm_conv1d_b = _vec(w, d.get("ssm_conv1d_b"), CD, p + "ssm_conv1d.bias")
    L.ssm_dt_b = _vec(w, d["ssm_dt_b"], hp.ssm_n_head, p + "ssm_dt.bias")
    L.ssm_a = _vec(w, d["ssm_a"], hp.ssm_n_head, p + "ssm_a")
    L.ssm_d = _vec(w, d["ssm_d"], hp.ssm_n_head, p + "ssm_d")
    L.ssm_norm = _vec(w, d["ssm_norm"], D, p + "ssm_norm")
    L.ssm_out = _mat(w, d["ssm_out"], E, D, p + "ssm_out")
    return 0


cdef int _layer(Weights w, fg_layer *L, d, str p, bint moe) except -1:
    """Layer d's tensors into L, each checked against its shape (Weights.__init__); moe: a mixture-of-experts layer
    (in a model with experts, all but its leading dense layers, Hparams.moe_layer)."""
    cdef const fg_hparams *hp = &w.m.hp
    # a sliding-window layer may have its own head size and KV heads, a layer its own FFN width (gemma4)
    cdef int64_t hd = hp.head_dim_swa if L.swa and hp.head_dim_swa > 0 else hp.head_dim
    cdef int64_t G = hp.n_head_kv_swa if L.swa and hp.n_head_kv_swa > 0 else hp.n_head_kv
    cdef int64_t E = hp.n_embd, QD = <int64_t>hp.n_head * hd, KV = G * hd
    # in an expert layer F is the shared expert's width (a model with leading dense layers has none: Hparams.check)
    cdef int64_t F = L.n_ff if L.n_ff > 0 else hp.n_ff, NE = hp.n_expert if moe else 0
    L.attn_norm = _vec(w, d.get("attn_norm"), E, p + "attn_norm")
    if L.conv:  # a short-convolution layer instead of attention (Weights.__init__ set L.conv)
        L.conv_in = _mat(w, d["conv_in"], 3 * E, E, p + "shortconv.in_proj")
        L.conv_w = _vec2(w, d["conv_w"], E, hp.n_conv, p + "shortconv.conv")
        L.conv_out = _mat(w, d["conv_out"], E, E, p + "shortconv.out_proj")
    elif L.deltanet:  # a gated DeltaNet layer instead of attention (Weights.__init__ set L.deltanet)
        _deltanet(w, L, d, p)
    elif L.ssm:  # a Mamba-2 layer instead of attention (Weights.__init__ set L.ssm)
        _mamba2(w, L, d, p)
    else:
        L.wq = _mat(w, d["wq"], QD, E, p + "attn_q")
        L.wk = _mat(w, d["wk"] if not L.kv_reuse else None, KV, E, p + "attn_k")
        L.wv = _mat(w, d["wv"] if not L.kv_reuse else None, KV, E, p + "attn_v")
        L.wo = _mat(w, d["wo"], E, QD, p + "attn_output")
        if hp.attn_gate:
            L.wg = _mat(w, d["wg"], QD, E, p + "attn_q (gate rows)")
            _check_slots([L.wq.type, L.wk.type, L.wv.type, L.wg.type], p + "attn_q/k/v")
    L.bq = _vec(w, d.get("bq"), QD, p + "attn_q.bias")
    L.bk = _vec(w, d.get("bk"), KV, p + "attn_k.bias")
    L.bv = _vec(w, d.get("bv"), KV, p + "attn_v.bias")
    L.q_norm = _vec(w, d.get("q_norm"), QD if hp.qk_norm_full else hd, p + "attn_q_norm")
    L.k_norm = _vec(w, d.get("k_norm"), KV if hp.qk_norm_full else hd, p + "attn_k_norm")
    L.ffn_norm = _vec(w, d.get("ffn_norm"), E, p + "ffn_norm")
    L.w_gate = _mat(w, d.get("w_gate"), F, E, p + "ffn_gate")
    L.w_up = _mat(w, d.get("w_up") if NE > 0 else d["w_up"], F, E, p + "ffn_up")
    L.w_down = _mat(w, d.get("w_down") if NE > 0 else d["w_down"], E, F, p + "ffn_down")
    if NE > 0:  # experts; the dense FFN's fields hold the optional shared expert
        _experts(w, L, d, NE, hp.n_ff_exp, E, p)
    L.attn_post_norm = _vec(w, d.get("attn_post_norm"), E, p + "post_attention_norm")
    L.ffn_post_norm = _vec(w, d.get("ffn_post_norm"), E, p + "post_ffw_norm")
    L.bo = _vec(w, d.get("bo"), E, p + "attn_output.bias")
    L.attn_sinks = _vec(w, d.get("attn_sinks"), hp.n_head, p + "attn_sinks")
    L.b_up = _vec(w, d.get("b_up"), F, p + "ffn_up.bias")
    L.b_down = _vec(w, d.get("b_down"), E, p + "ffn_down.bias")
    L.attn_out_norm = _vec(w, d.get("attn_out_norm"), E, p + "attn_output_norm")
    L.attn_out_norm_b = _vec(w, d.get("attn_out_norm_b"), E, p + "attn_output_norm.bias")
    L.layer_out_norm = _vec(w, d.get("layer_out_norm"), E, p + "layer_output_norm")
    L.layer_out_norm_b = _vec(w, d.get("layer_out_norm_b"), E, p + "layer_output_norm.bias")
    if hp.n_embd_per_layer > 0:  # gemma4's per-layer input
        L.ple_gate = _mat(w, d["ple_gate"], hp.n_embd_per_layer, E, p + "inp_gate")
        L.ple_out = _mat(w, d["ple_out"], E, hp.n_embd_per_layer, p + "proj")
        L.ple_post_norm = _vec(w, d["ple_post_norm"], E, p + "post_norm")
    L.out_scale = _vec(w, d.get("out_scale"), 1, p + "layer_output_scale")
    if NE > 0 and hp.moe_dense:  # gemma4's experts beside the dense FFN
        L.ffn_post_norm_1 = _vec(w, d["ffn_post_norm_1"], E, p + "post_ffw_norm_1")
        L.moe_post_norm = _vec(w, d["moe_post_norm"], E, p + "post_ffw_norm_2")
        L.router_norm = _vec(w, d["router_norm"], E, p + "ffn_gate_inp.scale")
        L.exp_norm = _vec(w, d["exp_norm"], E, p + "pre_ffw_norm_2")
        L.down_exps_s = _vec(w, d.get("down_exps_s"), NE, p + "ffn_down_exps.scale")
    if not hp.non_causal and (L.attn_norm == NULL or L.ffn_norm == NULL):
        raise ValueError(f"{p}: a causal model needs attn_norm and ffn_norm")
    return 0


cdef class Weights:
    def __cinit__(self):
        self.layers = NULL
        self._keep = []

    def __init__(self, hp, tensors, repack=False):
        """hp: hyperparameters (fastgguf.arch.Hparams: its as_c() checks them and gives the C struct's values);
        tensors: dict with tok_embd, output_norm, output, rope_freqs (or None) and layers (list of dicts); matrices
        as (array, type, rows, cols) tuples.
        Encoders (bert, nomic-bert: hp.causal False) may lack output_norm and output (None: no lm_head) and add
        pos_embd (a matrix), type_embd (float32 (n_types, n_embd): row 0 is used), tok_norm, tok_norm_b; their
        layers lack attn_norm, ffn_norm (and w_gate: a plain GELU FFN) and add bo, b_up, b_down, attn_out_norm(_b),
        layer_out_norm(_b).
        Mixtures of experts (hp.n_expert > 0): every layer but the hp.n_dense_lead first (dense) has gate_inp (a
        matrix (n_expert, n_embd)), gate_exps, up_exps, down_exps ((array, type, n_expert, rows, cols) stacks),
        optionally exp_probs_b (n_expert,) and a shared expert as w_gate/w_up/w_down (hp.n_ff_shexp wide) with an
        optional gate vector gate_inp_shexp (n_embd,).
        repack: decode reads the matrices whose type has a packed layout (Q4_K) from row-interleaved copies made here
        (packed_bytes of them), where the active kernels have a packed gemv of their own (AVX2, AVX-512 VNNI)."""
        cdef int i
        self.repack = bool(repack)
        self.packed_bytes = 0
        memset(&self.m, 0, sizeof(fg_model))
        self.m.hp = hp.as_c()  # a dict of exactly fg_hparams's fields (Cython refuses one missing)
        self.hparams = hp
        cdef int64_t E = self.m.hp.n_embd, n_vocab = self.m.hp.n_vocab, n_rot = self.m.hp.n_rot
        self.m.rope_freqs = _vec(self, tensors.get("rope_freqs"), n_rot // 2, "rope_freqs")
        self.m.rope_freqs_long = _vec(self, tensors.get("rope_freqs_long"), n_rot // 2, "rope_freqs_long")
        self.m.tok_embd = _mat(self, tensors["tok_embd"], n_vocab, E, "token_embd", packable=False)
        self.m.output_norm = _vec(self, tensors.get("output_norm"), E, "output_norm")
        self.m.output = _mat(self, tensors.get("output"), n_vocab, E, "output")
        # the encoders' (BERT family) input: + position embeddings, + token type 0, then LayerNorm
        self.m.pos_embd = _mat(self, tensors.get("pos_embd"), -1, E, "position_embd", packable=False)
        te = tensors.get("type_embd")
        if te is not None:
            te = np.asarray(te, dtype=np.float32)
            if te.ndim != 2 or te.shape[0] < 1 or te.shape[1] != E:
                raise ValueError(f"token_types: expected shape (n_types >= 1, {E}), got {te.shape}")
            te = te[0]
        self.m.type_embd0 = _vec(self, te, E, "token_types")
        self.m.tok_norm = _vec(self, tensors.get("tok_norm"), E, "token_embd_norm")
        self.m.tok_norm_b = _vec(self, tensors.get("tok_norm_b"), E, "token_embd_norm.bias")
        cdef int64_t NP = <int64_t>self.m.hp.n_layer * self.m.hp.n_embd_per_layer
        if NP > 0:  # gemma4's per-layer inputs
            self.m.ple_embd = _mat(self, tensors["ple_embd"], n_vocab, NP, "per_layer_token_embd", packable=False)
            self.m.ple_proj = _mat(self, tensors["ple_proj"], NP, E, "per_layer_model_proj")
            self.m.ple_norm = _vec(self, tensors["ple_norm"], self.m.hp.n_embd_per_layer, "per_layer_proj_norm")
        layers = tensors["layers"]
        if len(layers) != self.m.hp.n_layer:
            raise ValueError(f"expected {self.m.hp.n_layer} layers, got {len(layers)}")
        self.layers = <fg_layer *>calloc(self.m.hp.n_layer, sizeof(fg_layer))
        if self.layers == NULL:
            raise MemoryError()
        swa_layers, nope_layers = frozenset(hp.swa_layers), frozenset(hp.nope_layers)
        conv_layers, dn_layers = frozenset(hp.conv_layers), frozenset(hp.dn_layers)
        ssm_layers = frozenset(hp.ssm_layers)
        for i in range(self.m.hp.n_layer):
            self.layers[i].swa = 1 if i in swa_layers else 0
            self.layers[i].nope = 1 if i in nope_layers else 0
            self.layers[i].conv = 1 if i in conv_layers else 0
            self.layers[i].deltanet = 1 if i in dn_layers else 0
            self.layers[i].ssm = 1 if i in ssm_layers else 0
            self.layers[i].n_ff = hp.ff_layers[i] if hp.ff_layers else 0
            self.layers[i].kv_reuse = hp.kv_source(i) + 1 if hp.kv_source(i) != i else 0
            _layer(self, &self.layers[i], layers[i], f"blk.{i}.", hp.moe_layer(i))
        self.m.layers = self.layers

    def __dealloc__(self):
        free(self.layers)

    @property
    def c_hparams(self):
        """fg_hparams as the C holds it: a dict (floats rounded to float32)."""
        return self.m.hp

    @property
    def n_expert(self):
        return self.m.hp.n_expert

    @property
    def has_logits(self):
        """False for an encoder (no lm_head): it gives hidden states only."""
        return self.m.output.data != NULL

    def cache_bytes(self, int n_ctx):
        """(all, conv, recurrent): the bytes of one sequence's cache of n_ctx positions (Runner.kv_bytes): K and V,
        the short-convolution layers' state rings and the DeltaNet and Mamba-2 layers' states; those rings alone;
        those states alone (conv rings or inputs and recurrent matrices: fixed, whatever n_ctx)."""
        cdef size_t conv = 0, rec = 0
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be >= 1, got {n_ctx}")
        return fg_kv_bytes(&self.m, n_ctx, &conv, &rec), conv, rec

    @property
    def max_tokens(self):
        """The longest input a non-causal model (an encoder) takes in one call, which must be its whole input: the
        rows of its position embeddings (bert), else its training context (0: unknown), at most FG_MAX_BATCH_NC.
        0 for a causal model (no such limit)."""
        if not self.m.hp.non_causal:
            return 0
        n = self.m.pos_embd.rows if self.m.pos_embd.data != NULL else self.hparams.n_ctx_train
        return min(n, FG_MAX_BATCH_NC) if n > 0 else FG_MAX_BATCH_NC


# rows per internal chunk of a forward call (at most FG_MAX_BATCH): each weight matrix is read once per chunk
cdef int _CHUNK_ROWS = 256


cdef class Runner:
    """The forward pass of one conversation: KV cache (layer, n_ctx, kv_dim) F16 and scratch, over shared Weights.

    Not thread-safe: one thread at a time (fastgguf.model.Context guards it)."""

    def __cinit__(self):
        self._ready = False
        self.logits = NULL
        self.ids = NULL

    def __init__(self, Weights weights, int n_ctx, int n_threads=1, int n_batch=16):
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be >= 1, got {n_ctx}")
        if n_threads < 1:
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        n_threads = _threads_for(n_threads)
        self.weights = weights
        self.n_vocab = weights.m.hp.n_vocab
        self.n_ctx = n_ctx
        self.n_past = 0
        self._ring_lo[0] = self._ring_lo[1] = 0
        self._n_threads = n_threads
        self.logits = <float *>calloc(self.n_vocab, sizeof(float))
        self.ids = <int32_t *>calloc(n_ctx, sizeof(int32_t))
        if self.logits == NULL or self.ids == NULL:
            raise MemoryError()
        if fg_state_init(&self.st, &weights.m, n_ctx, n_batch, n_threads) != 0:
            raise MemoryError(f"cannot allocate the KV cache and buffers for n_ctx={n_ctx}")
        self._ready = True

    def __dealloc__(self):
        if self._ready:
            fg_state_free(&self.st)
        free(self.logits)
        free(self.ids)

    @property
    def n_threads(self):
        """Threads of each forward pass of several rows (1 on a build without threads, whatever was asked: see
        build_info), and of one-row passes (decode steps) unless decode_threads was set."""
        return self._n_threads

    @property
    def decode_threads(self):
        """Threads of one-row passes (a decode step): n_threads unless set (fastgguf._threads.decode_threads picks
        it for a Model given no n_threads). Setting n_threads resets it."""
        return self._decode_threads or self._n_threads

    @decode_threads.setter
    def decode_threads(self, int n):
        if n < 1:
            raise ValueError(f"decode_threads must be >= 1, got {n}")
        n = _threads_for(n)
        if fg_state_set_max_threads(&self.st, &self.weights.m, n) != 0:
            raise MemoryError()
        self._decode_threads = n

    @property
    def last_threads(self):
        """Threads that ran the last forward pass (0 before the first): the C team's own count."""
        return self.st.work.last_threads

    @property
    def kv_bytes(self):
        """Bytes of this runner's cache: K and V (F16; sliding-window layers keep a ring, not n_ctx rows) and the
        short-convolution layers' rings of their inputs (F32)."""
        return self.st.kv.bytes

    def can_rewind(self, int n_past):
        """Whether rewind(n_past) keeps a usable cache: always for full-attention models; a ring (sliding-window
        layers: the n_swa positions a query sees; short-convolution layers: their n_conv - 1 inputs) must still
        hold the window before n_past (else reset and evaluate again): none overwritten since (by the newest
        position ever written, before a rewind too) nor left out (copy_prefix and load_kv fill only the last
        window). DeltaNet and Mamba-2 layers hold the state of the newest position only: to 0 or n_past alone."""
        if n_past < 0 or n_past > self.n_past:
            return False
        if n_past == 0 or n_past == self.n_past:
            return True
        cdef const fg_hparams *hp = &self.weights.m.hp
        if hp.dn_conv > 0 or hp.ssm_d_state > 0:  # DeltaNet / Mamba-2 layers keep only the newest position's state
            return False
        rings = ((hp.n_swa, self.st.kv.n_swa_rows), (hp.n_conv - 1, self.st.kv.n_conv_rows))
        for k, (window, rows) in enumerate(rings):
            if window > 0 and max(0, n_past - window) < max(self._ring_lo[k], self.n_past - rows):
                return False
        return True

    @n_threads.setter
    def n_threads(self, int n):
        if n < 1:
            raise ValueError(f"n_threads must be >= 1, got {n}")
        n = _threads_for(n)
        if fg_state_set_max_threads(&self.st, &self.weights.m, n) != 0:
            raise MemoryError()
        self._n_threads = n
        self._decode_threads = 0

    def reset(self):
        """Forget the conversation (the cache is overwritten as new tokens come)."""
        self.n_past = 0
        self._ring_lo[0] = self._ring_lo[1] = 0

    def rewind(self, int n_past):
        """Keep only the first n_past tokens of the cache (0 <= n_past <= current n_past)."""
        if n_past < 0 or n_past > self.n_past:
            raise ValueError(f"cannot rewind to {n_past}: {self.n_past} tokens in the cache")
        if not self.can_rewind(n_past):
            raise ValueError(f"cannot rewind to {n_past} from {self.n_past}: the sliding-window or short-convolution "
                             f"layers' rings no longer hold the positions before it, or Mamba-2 layers hold only "
                             f"the newest position's state (see can_rewind; reset instead)")
        self._ring_lo[0] = max(self._ring_lo[0], self.n_past - self.st.kv.n_swa_rows)
        self._ring_lo[1] = max(self._ring_lo[1], self.n_past - self.st.kv.n_conv_rows)
        self.n_past = n_past

    def copy_prefix(self, Runner src, int n):
        """Make this cache the first n positions of src's (K/V rows copied, no forward pass): afterwards n_past == n
        and tokens == src.tokens[:n]. ValueError if src is this runner or runs other weights, n is outside
        [0, src.n_past] or over this n_ctx, or src's sliding-window rings no longer hold the positions before n."""
        if src is self or src.weights is not self.weights:
            raise ValueError("copy_prefix needs another Runner over the same weights")
        if n < 0 or n > src.n_past or n > self.n_ctx:
            raise ValueError(f"cannot copy {n} positions: the source holds {src.n_past}, this cache {self.n_ctx}")
        if not src.can_rewind(n):
            raise ValueError(f"the source's sliding-window or short-convolution layers' rings no longer hold the "
                             f"positions before {n} (DeltaNet / Mamba-2 layers: only all its positions can be copied)")
        if fg_kv_copy(&self.weights.m, &self.st.kv, &src.st.kv, n) != 0:
            raise RuntimeError("fg_kv_copy failed")
        memcpy(self.ids, src.ids, n * sizeof(int32_t))
        self.n_past = n
        self._windows_filled(n)

    def snapshot(self):
        """What restore() needs to bring the cache back to now: (n_past, the token ids, a copy of the recurrent
        (DeltaNet, Mamba-2) layers' states (float32; empty without such layers)). Taken before a forward whose rows may be dropped
        (speculative drafts): a recurrent state cannot be rewound, only restored."""
        cdef int64_t n = self.st.kv.dn_off[self.weights.m.hp.n_layer]
        cdef cnp.ndarray[float, ndim=1] states = np.empty(n, dtype=np.float32)
        if n:
            memcpy(&states[0], self.st.kv.dn_cache, n * sizeof(float))
        return self.n_past, self.tokens, states

    def restore(self, snap):
        """Bring the cache back to a snapshot() of it taken at n_past <= now, with the same tokens since: its
        recurrent (DeltaNet, Mamba-2) states copied back and n_past set (the attention layers' later rows are dropped
        as by a rewind). Without such layers it is rewind(n_past). ValueError (nothing changed) if the snapshot does
        not fit."""
        n_past, ids, states = snap
        cdef cnp.ndarray[float, ndim=1] st = np.ascontiguousarray(states, dtype=np.float32)
        cdef int64_t n = self.st.kv.dn_off[self.weights.m.hp.n_layer]
        if not 0 <= n_past <= self.n_past or st.shape[0] != n or list(ids) != self.tokens[:n_past]:
            raise ValueError("the snapshot is not of this cache's tokens (or holds other states)")
        if n == 0:
            self.rewind(n_past)
            return
        memcpy(self.st.kv.dn_cache, &st[0], n * sizeof(float))
        self._ring_lo[0] = max(self._ring_lo[0], self.n_past - self.st.kv.n_swa_rows)
        self._ring_lo[1] = max(self._ring_lo[1], self.n_past - self.st.kv.n_conv_rows)
        self.n_past = n_past

    cdef void _windows_filled(self, int n):
        """The cache holds n positions of which the rings hold only the last window (copy_prefix, load_kv)."""
        self._ring_lo[0] = max(0, n - self.weights.m.hp.n_swa)
        self._ring_lo[1] = max(0, n - (self.weights.m.hp.n_conv - 1))

    def kv_state_size(self, int n):
        """uint16 values of the attention layers' K/V of n positions in a saved state's order (fg_kv_state_size;
        n_ctx plays no part)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return fg_kv_state_size(&self.weights.m, n)

    def rec_state_size(self, int n):
        """float32 values of the recurrent layers' states at n positions in a saved state's order (short-convolution
        rings' last n_conv - 1 inputs, DeltaNet and Mamba-2 states: fg_rec_state_size; 0 without such layers)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return fg_rec_state_size(&self.weights.m, n)

    def save_kv(self):
        """(token ids (n_past,) int32, K/V (kv_state_size(n_past),) uint16 F16 bits, recurrent states
        (rec_state_size(n_past),) float32): what load_kv takes back."""
        cdef int n = self.n_past
        cdef cnp.ndarray[int32_t, ndim=1] ids = np.empty(n, dtype=np.int32)
        cdef cnp.ndarray[uint16_t, ndim=1] kv = np.empty(fg_kv_state_size(&self.weights.m, n), dtype=np.uint16)
        cdef cnp.ndarray[float, ndim=1] rec = np.empty(fg_rec_state_size(&self.weights.m, n), dtype=np.float32)
        cdef int rc
        if n:
            memcpy(&ids[0], self.ids, n * sizeof(int32_t))
        with nogil:
            rc = fg_kv_save(&self.weights.m, &self.st.kv, n, <uint16_t *>kv.data, kv.shape[0], <float *>rec.data,
                            rec.shape[0])
        if rc != 0:
            raise RuntimeError("fg_kv_save failed")
        return ids, kv, rec

    def load_kv(self, ids, kv, rec):
        """Make the cache hold token ids (int32, each < n_vocab), their K/V (uint16, kv_state_size(len(ids)) values)
        and the recurrent states after them (float32, rec_state_size(len(ids)) values), as save_kv gave them: n_past
        == len(ids) afterwards. ValueError (nothing changed) on a bad length, id or dtype, or more ids than n_ctx."""
        cdef cnp.ndarray[int32_t, ndim=1] t = np.ascontiguousarray(ids)
        cdef cnp.ndarray[uint16_t, ndim=1] k = np.ascontiguousarray(kv)
        cdef cnp.ndarray[float, ndim=1] r = np.ascontiguousarray(rec)
        cdef int n = t.shape[0], rc
        if n and (t.min() < 0 or t.max() >= self.n_vocab):
            raise ValueError(f"a token id is out of range [0, {self.n_vocab})")
        with nogil:  # C checks n against n_ctx and the lengths against n's sizes before it copies anything
            rc = fg_kv_load(&self.weights.m, &self.st.kv, n, <const uint16_t *>k.data, k.shape[0],
                            <const float *>r.data, r.shape[0])
        if rc != 0:
            raise ValueError(f"{n} positions (this context's n_ctx={self.n_ctx}) with {k.shape[0]} K/V values and "
                             f"{r.shape[0]} recurrent-state values: expected {self.kv_state_size(n)} and "
                             f"{self.rec_state_size(n)}")
        if n:
            memcpy(self.ids, &t[0], n * sizeof(int32_t))
        self.n_past = n
        self._windows_filled(n)

    @property
    def long_rope(self):
        """Whether this cache's keys use the model's LongRoPE long factors (n_ctx past rope_n_ctx_orig)."""
        return self.weights.m.rope_freqs_long != NULL and self.n_ctx > self.weights.m.hp.rope_n_ctx_orig

    def eval(self, ids, bint all_logits=False):
        """Run ids at positions n_past.. and return float32 logits: (n_vocab,) of the last token, or
        (len(ids), n_vocab) with all_logits."""
        cdef cnp.ndarray[int32_t, ndim=1] toks
        if not self.weights.has_logits:
            raise ValueError(f"{self.weights.hparams.arch} is an encoder: it has no logits (use forward_batch with "
                             f"outputs 'hidden')")
        a = np.asarray(ids)
        if a.ndim != 1 or a.shape[0] == 0:
            raise ValueError(f"ids must be a non-empty 1-D sequence of token ids, got shape {a.shape}")
        if a.dtype.kind not in "iu":
            raise ValueError(f"token ids must be integers, got {a.dtype}")
        cdef int n = a.shape[0]
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi >= self.n_vocab:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} out of range [0, {self.n_vocab})")
        if self.n_past + n > self.n_ctx:
            raise ValueError(f"{n} tokens at position {self.n_past} exceed the context size n_ctx={self.n_ctx} "
                             f"({self.n_past + n} > {self.n_ctx})")
        toks = np.ascontiguousarray(a, dtype=np.int32)
        cdef cnp.ndarray[float, ndim=2] out
        cdef float *dst = self.logits
        if all_logits:
            out = np.empty((n, self.n_vocab), dtype=np.float32)
            dst = &out[0, 0]
        cdef int rc, pos = self.n_past, nth = self._n_threads if n > 1 else self.decode_threads
        if n > self.st.work.n_batch and self.st.work.n_batch < _CHUNK_ROWS:
            # a prompt: chunks of up to _CHUNK_ROWS rows (each weight matrix streamed once per chunk); the scratch
            # grows on the first long one and stays (a context that only decodes keeps the small one)
            if fg_work_reserve(&self.st.work, &self.weights.m, min(n, _CHUNK_ROWS), self.st.work.max_ctx,
                               self.st.work.max_threads) != 0:
                raise MemoryError(f"cannot grow the scratch to {min(n, _CHUNK_ROWS)} rows")
        with nogil:
            rc = fg_forward(&self.weights.m, &self.st, &toks[0], n, pos, dst, all_logits, nth)
        if rc != 0:
            raise RuntimeError("fg_forward failed")
        _check_team(nth, self.st.work.last_threads)
        memcpy(&self.ids[pos], &toks[0], n * sizeof(int32_t))
        self.n_past += n
        if all_logits:
            return out
        return np.asarray(<float[:self.n_vocab]> self.logits).copy()

    @property
    def tokens(self):
        """The token ids in the cache (positions 0..n_past-1), as a list."""
        return [self.ids[i] for i in range(self.n_past)]

    def logits_view(self):
        """A (n_vocab,) float32 view of the runner's logits buffer: overwritten by the next step/eval, and it keeps
        the Runner (so the buffer) alive as long as it lives."""
        cdef cnp.npy_intp n = self.n_vocab
        cdef cnp.ndarray arr = cnp.PyArray_SimpleNewFromData(1, &n, cnp.NPY_FLOAT32, <void *>self.logits)
        cnp.set_array_base(arr, self)
        return arr

    cdef int step(self, int token, float **logits) noexcept nogil:
        cdef int32_t t = token
        cdef int nth = self._decode_threads or self._n_threads
        if self.n_past >= self.n_ctx:
            return -1
        if fg_forward(&self.weights.m, &self.st, &t, 1, self.n_past, self.logits, 0, nth) != 0:
            return -1
        self.ids[self.n_past] = t
        self.n_past += 1
        logits[0] = self.logits
        return 0

    def step_py(self, int token):
        """Python access to step() (tests): logits (n_vocab,) copy, or None when the context is full."""
        cdef float *lg
        cdef int rc
        with nogil:
            rc = self.step(token, &lg)
        if rc != 0:
            return None
        return np.asarray(<float[:self.n_vocab]> lg).copy()


# ---- one forward pass over several sequences (the basis of continuous batching) ----



cdef class Workspace:
    def __cinit__(self):
        self._ready = False

    def __init__(self, Weights weights, int n_rows=1, int max_ctx=1, int max_threads=1):
        if n_rows < 1 or max_ctx < 1 or max_threads < 1:
            raise ValueError(f"n_rows, max_ctx and max_threads must be >= 1, got {n_rows}, {max_ctx}, {max_threads}")
        self.weights = weights
        if fg_work_init(&self.w, &weights.m, min(n_rows, _CHUNK_ROWS), max_ctx, max_threads) != 0:
            raise MemoryError("cannot allocate the batch workspace")
        self._ready = True

    def __dealloc__(self):
        if self._ready:
            fg_work_free(&self.w)

    cdef int reserve(self, int n_rows, int max_ctx, int max_threads) except -1:
        # a causal model's chunks take _CHUNK_ROWS rows at most; an encoder's must take its longest input
        n_rows = min(n_rows, FG_MAX_BATCH_NC if self.weights.m.hp.non_causal else _CHUNK_ROWS)
        if fg_work_reserve(&self.w, &self.weights.m, n_rows, max_ctx, max_threads) != 0:
            raise MemoryError(f"cannot grow the batch workspace to {n_rows} rows, n_ctx={max_ctx}, "
                              f"{max_threads} threads")
        return 0

    @property
    def n_rows(self):
        """Rows per internal chunk (grows up to the chunk size as larger steps come)."""
        return self.w.n_batch

    @property
    def max_ctx(self):
        return self.w.max_ctx

    @property
    def max_threads(self):
        return self.w.max_threads

    @property
    def last_threads(self):
        """Threads that ran the last forward pass on this workspace (0 before the first)."""
        return self.w.last_threads


_OUTPUTS = ("last", "all", "hidden")


def forward_batch(Weights w, Workspace ws, list runners, list token_lists, int n_threads=1, outputs=None):
    """One forward pass over several sequences: runners[i] (a Runner over w, each at most once) gets
    token_lists[i] (a non-empty 1-D sequence of ids) at positions n_past.., all rows in one pass (each weight
    matrix read once per chunk of up to 256 rows), with the GIL released. Returns a list with, per sequence, by
    outputs[i] (default "last"): "last": float32 (n_vocab,) logits of its last token; "all": (len, n_vocab) logits
    of every token; "hidden": (len, n_embd) final hidden states output_norm(x) of every token, and no lm_head at
    all. Each runner's n_past and tokens advance as with runner.eval(token_lists[i]) (its logits buffer too,
    except with "hidden"), and the results are bit-identical to that. Raises ValueError / TypeError on bad input
    (naming the sequence), with no runner changed.
    An encoder (w.has_logits False, non-causal: bert, nomic-bert) takes only "hidden", and each input whole: its
    runner at n_past 0 and at most w.max_tokens ids (every token attends to all of them; the C keeps an input in
    one chunk). Its hidden states are the last layer's output (no output_norm)."""
    cdef Py_ssize_t n = len(runners), i
    cdef Runner r
    if n == 0:
        raise ValueError("forward_batch needs at least one sequence")
    if len(token_lists) != n:
        raise ValueError(f"{n} runners but {len(token_lists)} token lists")
    if n_threads < 1:
        raise ValueError(f"n_threads must be >= 1, got {n_threads}")
    n_threads = _threads_for(n_threads)
    if ws.weights is not w:
        raise ValueError("the workspace belongs to other weights")
    outs = ["last"] * n if outputs is None else list(outputs)
    if len(outs) != n or any(o not in _OUTPUTS for o in outs):
        raise ValueError(f"outputs must be {n} of {', '.join(_OUTPUTS)}, got {outputs!r}")
    cdef int max_tokens = w.max_tokens, longest = 0
    if not w.has_logits and any(o != "hidden" for o in outs):
        raise ValueError(f"{w.hparams.arch} is an encoder: it has no logits, only outputs 'hidden'")
    rs = list(runners)  # our own references: the list may change while the GIL is released
    seen = set()
    arrays = []
    cdef int64_t total = 0
    cdef int max_ctx = 1
    for i in range(n):
        obj = rs[i]
        if not isinstance(obj, Runner):
            raise TypeError(f"sequence {i}: expected a Runner, got {type(obj).__name__}")
        r = <Runner>obj
        if r.weights is not w:
            raise ValueError(f"sequence {i}: its Runner runs other weights")
        if id(r) in seen:
            raise ValueError(f"sequence {i}: the same Runner appears more than once")
        seen.add(id(r))
        a = np.asarray(token_lists[i])
        if a.ndim != 1 or a.shape[0] == 0:
            raise ValueError(f"sequence {i}: expected a non-empty 1-D sequence of token ids, got shape {a.shape}")
        if a.dtype.kind not in "iu":
            raise ValueError(f"sequence {i}: token ids must be integers, got {a.dtype}")
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi >= w.m.hp.n_vocab:
            raise ValueError(f"sequence {i}: token id {lo if lo < 0 else hi} out of range [0, {w.m.hp.n_vocab})")
        if max_tokens:   # an encoder: each input whole, in one call (the C keeps it in one chunk)
            if r.n_past != 0:
                raise ValueError(f"sequence {i}: {w.hparams.arch} is an encoder: an input must be given whole in "
                                 f"one call from position 0 (reset the Runner), not after {r.n_past} tokens")
            if a.shape[0] > max_tokens:
                raise ValueError(f"sequence {i}: {a.shape[0]} tokens exceed the {max_tokens} that {w.hparams.arch} "
                                 f"takes in one input (its training context)")
            longest = max(longest, a.shape[0])
        if r.n_past + a.shape[0] > r.n_ctx:
            raise ValueError(f"sequence {i}: {a.shape[0]} tokens at position {r.n_past} exceed the context size "
                             f"n_ctx={r.n_ctx} ({r.n_past + a.shape[0]} > {r.n_ctx})")
        arrays.append(np.ascontiguousarray(a, dtype=np.int32))
        total += a.shape[0]
        max_ctx = max(max_ctx, r.n_ctx)
    if total > 0x7FFFFFFF:
        raise ValueError(f"{total} rows in one step is too many")

    # rows: each sequence's tokens in turn; logit rows: each "last" sequence's last row and every row of an "all"
    # one; hidden rows: every row of a "hidden" one
    lens = np.array([a.shape[0] for a in arrays], dtype=np.int64)
    ends = np.cumsum(lens)
    kind = np.array([_OUTPUTS.index(o) for o in outs], dtype=np.int8)
    row_kind = np.repeat(kind, lens)
    is_last = np.zeros(<Py_ssize_t>total, dtype=bool)
    is_last[ends - 1] = True
    cdef cnp.ndarray[int32_t, ndim=1] tokens = np.concatenate(arrays)
    cdef cnp.ndarray[int32_t, ndim=1] seq_of_row = np.repeat(np.arange(n, dtype=np.int32), lens)
    cdef cnp.ndarray[int32_t, ndim=1] pos_of_row = np.concatenate(
        [np.arange((<Runner>rs[i]).n_past, (<Runner>rs[i]).n_past + lens[i], dtype=np.int32) for i in range(n)])
    cdef cnp.ndarray[int32_t, ndim=1] logit_rows = np.flatnonzero(
        ((row_kind == 0) & is_last) | (row_kind == 1)).astype(np.int32)
    cdef cnp.ndarray[int32_t, ndim=1] hidden_rows = np.flatnonzero(row_kind == 2).astype(np.int32)
    cdef int n_lr = logit_rows.shape[0], n_hr = hidden_rows.shape[0]
    cdef cnp.ndarray[float, ndim=2] out = np.empty((max(n_lr, 1), w.m.hp.n_vocab), dtype=np.float32)
    cdef cnp.ndarray[float, ndim=2] hid = np.empty((max(n_hr, 1), w.m.hp.n_embd), dtype=np.float32)
    cdef int32_t dummy = 0
    cdef const int32_t *lrp = &logit_rows[0] if n_lr > 0 else &dummy
    cdef const int32_t *hrp = &hidden_rows[0] if n_hr > 0 else &dummy
    # chunks: up to _CHUNK_ROWS rows; an encoder's hold whole inputs, so at least its longest
    ws.reserve(max(min(<int>total, _CHUNK_ROWS), longest), max_ctx, n_threads)
    cdef fg_kv **kvs = <fg_kv **>malloc(n * sizeof(fg_kv *))
    if kvs == NULL:
        raise MemoryError()
    for i in range(n):
        kvs[i] = &(<Runner>rs[i]).st.kv
    cdef int rc, n_rows = <int>total, n_seqs = <int>n
    with nogil:
        rc = fg_forward_multi(&w.m, &ws.w, kvs, n_seqs, &tokens[0], &seq_of_row[0], &pos_of_row[0], n_rows,
                              lrp, n_lr, &out[0, 0], hrp, n_hr, &hid[0, 0], n_threads)
    free(kvs)
    if rc != 0:
        raise RuntimeError("fg_forward_multi failed")
    _check_team(n_threads, ws.w.last_threads)
    cdef int k, first = 0, lo_l = 0, lo_h = 0
    res = []
    for i in range(n):
        r = <Runner>rs[i]
        k = <int>lens[i]
        memcpy(&r.ids[r.n_past], &tokens[first], k * sizeof(int32_t))
        first += k
        r.n_past += k
        if kind[i] == 2:
            res.append(hid[lo_h:lo_h + k])
            lo_h += k
            continue
        if kind[i] == 1:
            res.append(out[lo_l:lo_l + k])
            lo_l += k
        else:
            res.append(out[lo_l])
            lo_l += 1
        memcpy(r.logits, &out[lo_l - 1, 0], w.m.hp.n_vocab * sizeof(float))
    return res


def _forward_rows(Weights w, Workspace ws, list runners, tokens, seq_of_row, pos_of_row, logit_rows,
                  int n_threads=1, hidden_rows=()):
    """Test hook: fg_forward_multi on raw row arrays, with only the array lengths checked here (the C entry
    point validates the rest). The workspace keeps its chunk size (rows are not reserved). Runners' n_past and
    tokens are not touched. Returns (rc, logits (len(logit_rows), n_vocab), hidden (len(hidden_rows), n_embd))."""
    cdef Py_ssize_t n = len(runners), i
    rs = list(runners)
    for obj in rs:
        if not isinstance(obj, Runner) or (<Runner>obj).weights is not w:
            raise ValueError("expected Runners over w")
    cdef cnp.ndarray[int32_t, ndim=1] tk = np.ascontiguousarray(tokens, dtype=np.int32)
    cdef cnp.ndarray[int32_t, ndim=1] sq = np.ascontiguousarray(seq_of_row, dtype=np.int32)
    cdef cnp.ndarray[int32_t, ndim=1] ps = np.ascontiguousarray(pos_of_row, dtype=np.int32)
    cdef cnp.ndarray[int32_t, ndim=1] lr = np.ascontiguousarray(logit_rows, dtype=np.int32)
    cdef cnp.ndarray[int32_t, ndim=1] hr = np.ascontiguousarray(hidden_rows, dtype=np.int32)
    if n == 0 or tk.shape[0] == 0 or sq.shape[0] != tk.shape[0] or ps.shape[0] != tk.shape[0]:
        raise ValueError("need runners and rows, with tokens, seq_of_row and pos_of_row of one length")
    cdef cnp.ndarray[float, ndim=2] out = np.zeros((max(lr.shape[0], 1), w.m.hp.n_vocab), dtype=np.float32)
    cdef cnp.ndarray[float, ndim=2] hid = np.zeros((max(hr.shape[0], 1), w.m.hp.n_embd), dtype=np.float32)
    ws.reserve(1, max((<Runner>r).n_ctx for r in rs), n_threads)
    cdef fg_kv **kvs = <fg_kv **>malloc(n * sizeof(fg_kv *))
    if kvs == NULL:
        raise MemoryError()
    for i in range(n):
        kvs[i] = &(<Runner>rs[i]).st.kv
    cdef int rc, n_rows = tk.shape[0], n_seqs = <int>n, n_lr = lr.shape[0], n_hr = hr.shape[0]
    cdef int32_t dummy = 0
    cdef const int32_t *lrp = &lr[0] if n_lr > 0 else &dummy
    cdef const int32_t *hrp = &hr[0] if n_hr > 0 else &dummy
    with nogil:
        rc = fg_forward_multi(&w.m, &ws.w, kvs, n_seqs, &tk[0], &sq[0], &ps[0], n_rows, lrp, n_lr, &out[0, 0],
                              hrp, n_hr, &hid[0, 0], n_threads)
    free(kvs)
    return rc, out[:n_lr], hid[:n_hr]
