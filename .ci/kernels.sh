#!/usr/bin/env bash
# Kernel checks outside Python (called by .ci/run):
#   (a0) every csrc file is ISO C (gcc -std=c11 -pedantic -Werror), with and without SIMD;
#   (a) tests/c/test_kernels.c under AddressSanitizer + UBSan with gcc, on this machine's ISAs, and built with
#       -DFG_NO_SIMD (scalar only: an ISA whose code is not compiled in must not be available);
#   (a5) tests/c/test_sample.c (the masked sampler) under AddressSanitizer + UBSan;
#   (a4) tests/c/test_threads.c (the team of csrc/fg_threads.c) under ASan + UBSan and ThreadSanitizer, with the
#       futex and the condition-variable (macOS, BSD) ways of sleeping;
#   (b) the NEON kernels cross-compiled for aarch64 and run under qemu-user: with i8mm (qemu's default CPU, max;
#       the test also runs base NEON by switching the extensions off), with dotprod and no i8mm (cortex-a76), on a
#       CPU without dotprod (cortex-a57), plus builds with dotprod (-march=armv8.2-a+dotprod) and i8mm
#       (-march=armv8.6-a: __ARM_FEATURE_MATMUL_INT8, no target attributes) enabled at compile time;
#   (c) every csrc/*.c cross-compiled with zig's clang (PyPI ziglang) for macOS x86_64 + arm64 and Windows x86_64
#       (MinGW), each linked into a shared library with no undefined symbol; Windows arm64 compiled only; the NEON
#       kernels as clang builds them (its target attributes, not gcc's) run under qemu, i8mm and dotprod-only; and
#       compiled by zig's clang in MSVC mode (clang-cl) for Windows x86_64 + arm64 with the SIMD kernels in.
# Exits nonzero on any failure; skips (b) or (c) loudly, exit 0, only when its tools cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Only the files the kernels need: other csrc/ files (forward, sampling; ops only in (a3)) are not part of this test.
SRCS="tests/c/test_kernels.c csrc/fg_cpu.c csrc/fg_dispatch.c csrc/fg_quant_float.c csrc/fg_quant_q4_0.c
      csrc/fg_quant_q4_1.c csrc/fg_quant_q8.c csrc/fg_quant_q8_k.c csrc/fg_quant_q4_k.c csrc/fg_quant_q6_k.c
      csrc/fg_quant_q5_0.c csrc/fg_quant_q5_1.c csrc/fg_quant_q5_k.c
      csrc/fg_quant_q3_k.c csrc/fg_quant_q2_k.c csrc/fg_quant_iq4_nl.c csrc/fg_quant_iq4_xs.c csrc/fg_quant_mxfp4.c
      csrc/fg_threads.c"
CFLAGS="-std=gnu11 -ffp-contract=off -Wall -pthread -Icsrc"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

run_test() { # name, command...: runs it, demands the closing line with 0 failed
    local name=$1; shift
    echo "== $name"
    local log="$OUT/$name.log"
    if ! "$@" >"$log" 2>&1; then cat "$log"; echo "FAILED: $name"; exit 1; fi
    grep -v '^FAIL' "$log" | tail -n 6
    grep -Eq '^(kernels|threads): [0-9]+ passed, 0 failed$' "$log" || { echo "FAILED: $name (no clean summary)"; exit 1; }
}

# (a0) ISO C: every csrc file under gcc -std=c11 -pedantic -Werror, with and without SIMD (MSVC rejects what
# -pedantic finds, such as empty initializers; implicit declarations are errors on newer compilers; -Wall has
# -Wunused-function: a static function must sit inside the #if of its callers, or a build without them warns)
for f in csrc/*.c; do
    for simd in "" -DFG_NO_SIMD; do
        gcc -std=c11 -pedantic -Werror -Wall $simd -Icsrc -c "$f" -o "$OUT/pedantic.o" \
            || { echo "FAILED: gcc -std=c11 -pedantic $simd $f"; exit 1; }
    done
done
echo "== pedantic: $(ls csrc/*.c | wc -l) files clean under gcc -std=c11 -pedantic -Werror"

# (a) sanitizers
gcc $CFLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1 \
    $SRCS -lm -o "$OUT/test_kernels_asan"
run_test asan-ubsan "$OUT/test_kernels_asan"

# (a2) a build without SIMD code (as MSVC compiles it): only scalar may be available, and it must pass
gcc $CFLAGS -DFG_NO_SIMD -O1 $SRCS -lm -o "$OUT/test_kernels_nosimd"
run_test no-simd "$OUT/test_kernels_nosimd"
grep -q '^compiled: scalar$' "$OUT/no-simd.log" || { echo "FAILED: FG_NO_SIMD build claims SIMD"; exit 1; }

# (a3) attention tiles (csrc/fg_ops.c) against one query at a time, bit for bit, and float64: sanitizers, no SIMD
ATT_SRCS="tests/c/test_attention.c csrc/fg_ops.c ${SRCS#tests/c/test_kernels.c}"
gcc $CFLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1 \
    $ATT_SRCS -lm -o "$OUT/test_attention_asan"
run_test attention-asan-ubsan "$OUT/test_attention_asan"
gcc $CFLAGS -DFG_NO_SIMD -O1 $ATT_SRCS -lm -o "$OUT/test_attention_nosimd"
run_test attention-no-simd "$OUT/test_attention_nosimd"

# (a5) the masked sampler (csrc/fg_sample.c) against the unmasked one on -inf'd logits: sanitizers (mask over-reads)
gcc $CFLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1 \
    tests/c/test_sample.c csrc/fg_sample.c -lm -o "$OUT/test_sample_asan"
run_test sample-asan-ubsan "$OUT/test_sample_asan"

# (a4) the thread pool: sanitizers; -U__linux__ takes the mutex + condition variable path macOS takes
THR_SRCS="tests/c/test_threads.c csrc/fg_threads.c"
gcc $CFLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1 \
    $THR_SRCS -o "$OUT/test_threads_asan"
run_test threads-asan-ubsan "$OUT/test_threads_asan"
gcc $CFLAGS -fsanitize=thread -g -O1 $THR_SRCS -o "$OUT/test_threads_tsan"
run_test threads-tsan "$OUT/test_threads_tsan"
gcc $CFLAGS -fsanitize=thread -g -O1 -U__linux__ -U__linux -Ulinux $THR_SRCS -o "$OUT/test_threads_tsan_condvar"
run_test threads-tsan-condvar "$OUT/test_threads_tsan_condvar"

# (b) NEON under qemu
neon_tests() { # qemu's CPUs: max has dotprod and i8mm, cortex-a76 dotprod alone, cortex-a57 neither (HWCAP checked)
    aarch64-linux-gnu-gcc $CFLAGS -O2 -static $SRCS -lm -o "$OUT/test_kernels_arm"
    run_test neon-i8mm nice -n 10 qemu-aarch64 -cpu max "$OUT/test_kernels_arm"
    grep -q '^neon+i8mm: ok' "$OUT/neon-i8mm.log" || { echo "FAILED: i8mm path not exercised"; exit 1; }
    run_test neon-dotprod-cpu nice -n 10 qemu-aarch64 -cpu cortex-a76 "$OUT/test_kernels_arm"
    grep -q '^neon+dotprod: ok' "$OUT/neon-dotprod-cpu.log" || { echo "FAILED: dotprod path not exercised"; exit 1; }
    run_test neon-no-dotprod-cpu nice -n 10 qemu-aarch64 -cpu cortex-a57 "$OUT/test_kernels_arm"
    grep -q '^neon+' "$OUT/neon-no-dotprod-cpu.log" && { echo "FAILED: an extension used on a CPU without it"; exit 1; }
    aarch64-linux-gnu-gcc $CFLAGS -O2 -static -march=armv8.2-a+dotprod $SRCS -lm -o "$OUT/test_kernels_arm_dp"
    run_test neon-march-dotprod nice -n 10 qemu-aarch64 -cpu cortex-a76 "$OUT/test_kernels_arm_dp"
    aarch64-linux-gnu-gcc $CFLAGS -O2 -static -march=armv8.6-a $SRCS -lm -o "$OUT/test_kernels_arm_mm"
    run_test neon-march-i8mm nice -n 10 qemu-aarch64 -cpu max "$OUT/test_kernels_arm_mm"
    grep -q '^neon+i8mm: ok' "$OUT/neon-march-i8mm.log" || { echo "FAILED: i8mm path not exercised (-march)"; exit 1; }
}
have_neon_tools=1
command -v aarch64-linux-gnu-gcc >/dev/null || have_neon_tools=0
command -v qemu-aarch64 >/dev/null || have_neon_tools=0
if [ $have_neon_tools = 0 ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    if { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user; } >"$OUT/apt.log" 2>&1; then
        have_neon_tools=1
    else
        tail -n 5 "$OUT/apt.log"
        echo "!!!!! SKIPPED: NEON kernels NOT tested (apt could not install gcc-aarch64-linux-gnu / qemu-user) !!!!!"
    fi
fi
[ $have_neon_tools = 0 ] || neon_tests

# (c) zig cross-compiles: the C must build where the wheels are built (macOS clang, Windows) with nothing undefined
# at link time (a missing platform fallback shows up here, not at import on a user's machine). The flags are
# setup.py's for gcc/clang, at -O1 to save time, unused functions an error (clang also warns of an unused static
# inline function in a .c file, gcc does not). zig builds each target's libc pieces once into its cache (.ci/zig.sh).
# New csrc files are picked up by the glob.
ZIG_TARGETS="x86_64-macos aarch64-macos x86_64-windows-gnu"
ZIG_COMPILE_ONLY="aarch64-windows-gnu"
ZIG_CFLAGS="-O1 -std=gnu11 -fvisibility=hidden -ffp-contract=off -fno-strict-aliasing -Wall -Werror=unused-function
            -Wno-unknown-pragmas"
# shellcheck source=.ci/zig.sh
source .ci/zig.sh
if ! zig_install "$OUT/zig-install.log"; then
    tail -n 5 "$OUT/zig-install.log"
    echo "!!!!! SKIPPED: zig cross-compiles NOT done (pip could not install ziglang) !!!!!"
    echo "kernels.sh: all passed (zig cross-compiles skipped)"
    exit 0
fi
ZIGCC="$ZIG_PY -m ziglang cc"
zig_compile() { # target: every csrc/*.c to $OUT/zig-<target>/*.o, two at a time; shows warnings, fails on errors
    local t=$1 dir="$OUT/zig-$1/obj" root=$PWD
    mkdir -p "$dir"
    # compiled inside $dir: one object per source, named by the compiler (.o; .obj for Windows)
    # shellcheck disable=SC2086
    if ! (cd "$dir" && printf '%s\n' "$root"/csrc/*.c | xargs -P2 -n1 $ZIGCC -target "$t" $ZIG_CFLAGS \
            -I"$root/csrc" -c) >"$dir.log" 2>&1; then
        cat "$dir.log"; echo "FAILED: zig cc -target $t"; exit 1
    fi
    grep -E 'warning|error' "$dir.log" || true # (a file zig has cached compiles silently: warnings only when new)
}
for t in $ZIG_TARGETS $ZIG_COMPILE_ONLY; do
    echo "== zig $t"
    start=$SECONDS
    zig_compile "$t"
    case " $ZIG_TARGETS " in
    *" $t "*)
        case $t in *windows*) lib="$OUT/zig-$t/fastgguf_c.dll" ;; *) lib="$OUT/zig-$t/libfastgguf_c.dylib" ;; esac
        # zig's linkers refuse undefined symbols in a shared library by default (checked: MachO and COFF)
        # shellcheck disable=SC2086
        $ZIGCC -target "$t" -shared "$OUT/zig-$t"/obj/* -o "$lib" >"$OUT/zig-$t-link.log" 2>&1 \
            || { cat "$OUT/zig-$t-link.log"; echo "FAILED: zig link -target $t"; exit 1; }
        echo "linked $(basename "$lib"), $(( SECONDS - start )) s" ;;
    *) echo "compiled, $(( SECONDS - start )) s" ;;
    esac
done

# (c1) the NEON kernels built by clang (target("dotprod,i8mm") where gcc takes "arch=armv8.2-a+dotprod+i8mm"):
# zig's clang, a static aarch64-linux-musl test_kernels under qemu on a CPU with i8mm and on one with dotprod alone
if [ $have_neon_tools = 1 ]; then
    # shellcheck disable=SC2086
    nice -n 10 $ZIGCC -target aarch64-linux-musl $CFLAGS -Werror=unused-function -O2 -static $SRCS -lm \
        -o "$OUT/test_kernels_arm_clang" >"$OUT/zig-arm-test.log" 2>&1 \
        || { cat "$OUT/zig-arm-test.log"; echo "FAILED: zig cc -target aarch64-linux-musl test_kernels"; exit 1; }
    run_test neon-clang-i8mm nice -n 10 qemu-aarch64 -cpu max "$OUT/test_kernels_arm_clang"
    grep -q '^neon+i8mm: ok' "$OUT/neon-clang-i8mm.log" || { echo "FAILED: i8mm path not exercised (clang)"; exit 1; }
    run_test neon-clang-dotprod-cpu nice -n 10 qemu-aarch64 -cpu cortex-a76 "$OUT/test_kernels_arm_clang"
    grep -q '^neon+dotprod: ok' "$OUT/neon-clang-dotprod-cpu.log" \
        || { echo "FAILED: dotprod path not exercised (clang)"; exit 1; }
fi

# (c2) clang in MSVC mode (clang-cl, as setup.py uses on Windows: _MSC_VER without __GNUC__, SIMD kernels compiled
# in), x86_64 and arm64, compile only, warnings shown. The Windows SDK's C headers cannot be had here: these
# stand-ins declare the few C library functions csrc/ uses (a new one needs a line here); clang's own headers give
# stddef, stdint and the intrinsics.
MSVC_INC="$OUT/msvc-include"
mkdir -p "$MSVC_INC"
std_header() { # name, declarations...
    local name=$1; shift
    printf '%s\n' '#include <stddef.h>' "$@" >"$MSVC_INC/$name"
}
std_header string.h 'void *memcpy(void *, const void *, size_t); void *memmove(void *, const void *, size_t);' \
    'void *memset(void *, int, size_t); int memcmp(const void *, const void *, size_t);' \
    'size_t strlen(const char *); int strcmp(const char *, const char *);'
std_header stdlib.h 'void *malloc(size_t); void *calloc(size_t, size_t); void *realloc(void *, size_t);' \
    'void free(void *); void qsort(void *, size_t, size_t, int (*)(const void *, const void *));' \
    'char *getenv(const char *);'
std_header malloc.h 'void *_aligned_malloc(size_t, size_t); void _aligned_free(void *);'
std_header setjmp.h 'typedef struct { unsigned long long p[32]; } jmp_buf[1];' # for <intrin.h>
std_header windows.h '#include <stdint.h>' 'typedef void *HANDLE; typedef unsigned long DWORD; typedef int BOOL;' \
    'typedef unsigned short WORD; typedef size_t SIZE_T;' '#define INFINITE 0xFFFFFFFFul' \
    '#define ALL_PROCESSOR_GROUPS 0xffff' \
    '__declspec(dllimport) int __stdcall IsProcessorFeaturePresent(unsigned long);' \
    '__declspec(dllimport) BOOL __stdcall WaitOnAddress(volatile void *, void *, SIZE_T, DWORD);' \
    '__declspec(dllimport) void __stdcall WakeByAddressAll(void *);' \
    '__declspec(dllimport) DWORD __stdcall WaitForSingleObject(HANDLE, DWORD);' \
    '__declspec(dllimport) BOOL __stdcall CloseHandle(HANDLE);' \
    '__declspec(dllimport) DWORD __stdcall GetActiveProcessorCount(WORD);'
std_header process.h '#include <stdint.h>' \
    'uintptr_t _beginthreadex(void *, unsigned, unsigned (__stdcall *)(void *), void *, unsigned, unsigned *);'
std_header math.h '#define INFINITY __builtin_huge_valf()' '#define NAN __builtin_nanf("")' \
    '#define isnan(x) __builtin_isnan(x)' '#define isinf(x) __builtin_isinf(x)' \
    'float expf(float); float logf(float); float sqrtf(float); float tanhf(float); float fabsf(float);' \
    'float roundf(float); float floorf(float); float ceilf(float); float powf(float, float); float sinf(float);' \
    'float cosf(float); float erff(float); float fmaxf(float, float); float fminf(float, float); float log2f(float);' \
    'double exp(double); double log(double); double sqrt(double); double pow(double, double);' \
    'double sin(double); double cos(double); double fabs(double); double tanh(double);'
CLANG_INC=$("$ZIG_PY" -c \
    "import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), 'lib', 'include'))")
CLANG_CL="$ZIG_PY -m ziglang clang --driver-mode=cl"
for arch in x86_64 aarch64; do
    echo "== clang-cl $arch (zig clang --driver-mode=cl)"
    start=$SECONDS
    dir="$OUT/clang-cl-$arch"
    root=$PWD
    mkdir -p "$dir"
    # setup.py's clang-cl flags after setuptools' own (/O1 for time); --: a path starting with / is no option
    cl_flags="--target=$arch-pc-windows-msvc /nologo /c /O1 /W3 /DNDEBUG /MD /std:c11 /clang:-ffp-contract=off
              /clang:-Werror=unused-function -imsvc $CLANG_INC -imsvc $MSVC_INC -I$root/csrc"
    # shellcheck disable=SC2086
    if ! (cd "$dir" && printf '%s\n' "$root"/csrc/*.c | xargs -P2 -n1 $CLANG_CL $cl_flags --) >"$dir.log" 2>&1; then
        cat "$dir.log"; echo "FAILED: clang-cl $arch"; exit 1
    fi
    grep -E 'warning|error' "$dir.log" || true
    # and the SIMD kernels are in (fg_isa_compiled(): kernels.compiled() lists them on Windows)
    case $arch in x86_64) have=FG_HAVE_X86 ;; aarch64) have=FG_HAVE_NEON ;; esac
    printf '#include "fg_simd.h"\n#if !%s\n#error no SIMD kernels\n#endif\n' "$have" >"$dir/probe.c"
    # shellcheck disable=SC2086
    $CLANG_CL $cl_flags /Fo"$dir/probe.obj" -- "$dir/probe.c" || { echo "FAILED: clang-cl $arch: $have unset"; exit 1; }
    echo "compiled $(find "$dir" -name 'fg_*.obj' | wc -l) files with $have, $(( SECONDS - start )) s"
done
echo "kernels.sh: all passed"
