"""Build fastgguf's two extensions: fastgguf._native (every C file of csrc/, compiled once, with the Cython layers
fastgguf/_native.pyx + *.pxi) and fastgguf.tokenizer._bpe (the BPE merge loop; no C kernels).

- One set of compiler flags for every file. SIMD code carries target attributes and is chosen at run time,
  so no -march=native: a wheel runs on any CPU of its platform.
- Symbols are hidden (-fvisibility=hidden): the module exports its init function only, so two builds never clash.
- Threads: fastgguf's own pool (csrc/fg_threads.c: pthreads, or Win32 threads), no OpenMP, so a wheel needs no
  runtime library beside it. FASTGGUF_NO_THREADS=1 builds single-threaded (-DFG_NO_THREADS; n_threads > 1 then
  warns and runs one thread).
- FASTGGUF_DEBUG=1 builds with -O0 -g; FASTGGUF_SANITIZE=1 adds ASan+UBSan (development only).
- Windows: clang-cl when it is on PATH (it takes the target attributes, so the AVX2/AVX-512 kernels are compiled
  in), else cl.exe with scalar kernels only. FASTGGUF_CC=cl forces cl.exe, FASTGGUF_CC=clang-cl (or a path to it)
  demands clang-cl.
"""
import glob
import os
import shutil
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "csrc", "fg_*.c")))


def _flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _clang_cl():
    """The clang-cl to compile with on Windows (FASTGGUF_CC, else clang-cl on PATH), or None for cl.exe."""
    want = os.environ.get("FASTGGUF_CC", "").strip()
    if want.lower() in ("cl", "cl.exe", "msvc"):
        return None
    path = shutil.which(want or "clang-cl")
    if want and path is None:
        raise RuntimeError(f"FASTGGUF_CC={want}: not found")
    return path


class BuildExt(build_ext):
    """Adds per-compiler flags once the compiler is known (on Windows, clang-cl where there is one)."""

    def _msvc_flags(self):
        """Windows: compile with clang-cl in place of cl.exe where there is one (MSVC's linker, CRT and setuptools'
        flags stay); returns the compiler flags. /std:c11: _Static_assert and the C11 the sources are written in."""
        clang_cl = _clang_cl()
        print(f"fastgguf: C compiler {clang_cl or 'cl.exe (scalar kernels only)'}")
        if not clang_cl:
            return ["/O2", "/fp:precise", "/std:c11"]
        if not self.compiler.initialized:
            self.compiler.initialize()  # finds cl.exe and Visual Studio's environment; then swap the compiler
        self.compiler.cc = clang_cl
        # clang-cl's /fp:precise fuses a*b+c in the FMA kernels (checked): contraction off, as on gcc and clang
        return ["/O2", "/std:c11", "/clang:-ffp-contract=off"]

    def build_extensions(self):
        ctype = self.compiler.compiler_type
        macros = [("FG_NO_THREADS", "1")] if _flag("FASTGGUF_NO_THREADS") else []
        if ctype == "msvc":
            cflags, ldflags = self._msvc_flags(), []  # synchronization.lib: a #pragma in fg_threads.c
        else:
            debug = _flag("FASTGGUF_DEBUG")
            cflags = ["-O0", "-g"] if debug else ["-O3"]
            cflags += ["-std=c11", "-fvisibility=hidden", "-ffp-contract=off", "-fno-strict-aliasing", "-Wall", "-Wno-unknown-pragmas"]
            ldflags = []
            if sys.platform != "win32":  # (mingw: Win32 threads, nothing to link)
                cflags += ["-pthread"]
                ldflags += ["-pthread"]
            if _flag("FASTGGUF_SANITIZE"):
                cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
                ldflags += ["-fsanitize=address,undefined"]
        print(f"fastgguf: threads {'disabled (FASTGGUF_NO_THREADS)' if macros else 'enabled'}")
        for ext in self.extensions:
            ext.define_macros = list(ext.define_macros) + macros
            ext.extra_compile_args = list(cflags)
            ext.extra_link_args = list(ldflags)
            if ctype != "msvc":
                # Cython's generated C is not c11-clean on every compiler; keep -std for csrc only via pragma-free code.
                ext.extra_compile_args = [a for a in ext.extra_compile_args if a != "-std=c11"] + ["-std=gnu11"]
        super().build_extensions()


def ext(name, pyx, sources=(), include_dirs=()):
    return Extension(
        name,
        sources=[pyx, *sources],
        include_dirs=[*include_dirs, numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )


extensions = [
    ext("fastgguf._native", "fastgguf/_native.pyx", CSRC, ["csrc"]),
    ext("fastgguf.tokenizer._bpe", "fastgguf/tokenizer/_bpe.pyx"),
]

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={"embedsignature": True},  # hot loops opt out of checks locally,
    ),
    cmdclass={"build_ext": BuildExt},
)
