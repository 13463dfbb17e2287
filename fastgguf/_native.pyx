# cython: language_level=3
"""fastgguf._native: every C kernel of csrc/, compiled once, and the Cython layers over it.

One extension means one kernel table: `fastgguf.kernels.set_isa()` (or FASTGGUF_ISA at import) switches the
kernels of the wrappers, the forward pass and the samplers together. The Cython code lives in four included
files, each a layer: _kernels.pxi (array-level quantize/dequantize/matmul, ISA control), _runner.pxi (Weights and
Runner: the forward pass of one conversation), _sampling.pxi (samplers) and _decode.pxi (the decode loop).
Declarations of the C API and of the cdef classes are in _native.pxd."""
import math
import os
import platform
import sys
import warnings
from collections.abc import Mapping

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

cnp.import_array()

include "_kernels.pxi"
include "_runner.pxi"
include "_sampling.pxi"
include "_decode.pxi"

_init()
