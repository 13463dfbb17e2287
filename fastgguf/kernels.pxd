# The C kernel API (csrc/fg_kernels.h): the only place Cython code declares it.
from libc.stdint cimport int64_t

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
    ctypedef struct fg_type_kernels:
        fg_quantize_fn quantize
        fg_dequantize_fn dequantize
        fg_vec_dot_fn vec_dot
        fg_gemv_fn gemv
        fg_gemm_fn gemm

    int fg_type_supported(int type)
    int64_t fg_blck_size(int type)
    size_t fg_type_size(int type)
    size_t fg_row_size(int type, int64_t n)
    int fg_vec_dot_type(int wtype)

    int fg_init()
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
