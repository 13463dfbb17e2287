#!/usr/bin/env bash
# Kernel checks outside Python (called by .ci/run):
#   (a) tests/c/test_kernels.c under AddressSanitizer + UBSan with gcc, on this machine's ISAs, and built with
#       -DFG_NO_SIMD (scalar only: an ISA whose code is not compiled in must not be available);
#   (a4) tests/c/test_threads.c (the team of csrc/fg_threads.c) under ASan + UBSan and ThreadSanitizer, with the
#       futex and the condition-variable (macOS, BSD) ways of sleeping;
#   (b) the NEON kernels cross-compiled for aarch64 and run under qemu-user: with dotprod (qemu's default CPU,
#       the test also runs the emulation path by switching the extension off) and on a CPU without dotprod,
#       plus a build with dotprod enabled at compile time (-march=armv8.2-a+dotprod).
# Exits nonzero on any failure; skips (b) loudly, exit 0, only when its tools cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Only the files the kernels need: other csrc/ files (forward, sampling; ops only in (a3)) are not part of this test.
SRCS="tests/c/test_kernels.c csrc/fg_cpu.c csrc/fg_dispatch.c csrc/fg_quant_float.c csrc/fg_quant_q4_0.c
      csrc/fg_quant_q4_1.c csrc/fg_quant_q8.c csrc/fg_quant_q8_k.c csrc/fg_quant_q4_k.c csrc/fg_quant_q6_k.c
      csrc/fg_quant_q5_0.c csrc/fg_quant_q5_1.c csrc/fg_quant_q5_k.c
      csrc/fg_quant_q3_k.c csrc/fg_quant_q2_k.c csrc/fg_quant_iq4_nl.c csrc/fg_quant_iq4_xs.c csrc/fg_threads.c"
CFLAGS="-std=gnu11 -ffp-contract=off -Wall -Wno-unused-function -pthread -Icsrc"
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
need_install=0
command -v aarch64-linux-gnu-gcc >/dev/null || need_install=1
command -v qemu-aarch64 >/dev/null || need_install=1
if [ $need_install = 1 ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user; } >"$OUT/apt.log" 2>&1; then
        tail -n 5 "$OUT/apt.log"
        echo "!!!!! SKIPPED: NEON kernels NOT tested (apt could not install gcc-aarch64-linux-gnu / qemu-user) !!!!!"
        exit 0
    fi
fi
aarch64-linux-gnu-gcc $CFLAGS -O2 -static $SRCS -lm -o "$OUT/test_kernels_arm"
run_test neon-dotprod qemu-aarch64 "$OUT/test_kernels_arm"
grep -q '^neon+dotprod: ok' "$OUT/neon-dotprod.log" || { echo "FAILED: dotprod path not exercised"; exit 1; }
run_test neon-no-dotprod-cpu qemu-aarch64 -cpu cortex-a57 "$OUT/test_kernels_arm"
grep -q '^neon+dotprod' "$OUT/neon-no-dotprod-cpu.log" && { echo "FAILED: dotprod used on a CPU without it"; exit 1; }
aarch64-linux-gnu-gcc $CFLAGS -O2 -static -march=armv8.2-a+dotprod $SRCS -lm -o "$OUT/test_kernels_arm_dp"
run_test neon-march-dotprod qemu-aarch64 "$OUT/test_kernels_arm_dp"
echo "kernels.sh: all passed"
