# shellcheck shell=bash
# zig's C compiler (PyPI ziglang) for .ci/kernels.sh and .ci/wheels.sh, sourced by both: one pinned version in a venv
# of fixed path, its cache beside it. zig's cache keys on where zig is installed, so a throwaway install rebuilt the
# libc pieces (the MinGW CRT: 1.5-3 min on 2 cores) on every run; installed once here, both scripts reuse them.
# Sets ZIG_PY (a python with ziglang: `$ZIG_PY -m ziglang cc ...`); zig_install LOG installs it when missing and
# returns nonzero when pip cannot (its output in LOG).
ZIG_VERSION=0.17.1
ZIG_HOME="${XDG_CACHE_HOME:-$HOME/.cache}/fastgguf-zig"
ZIG_PY="$ZIG_HOME/venv-$ZIG_VERSION/bin/python"
export ZIG_GLOBAL_CACHE_DIR="$ZIG_HOME/cache"
export ZIG_LOCAL_CACHE_DIR="$ZIG_GLOBAL_CACHE_DIR"

zig_install() {
    "$ZIG_PY" -m ziglang version 2>/dev/null | grep -qx "$ZIG_VERSION" && return 0
    rm -rf "$ZIG_HOME/venv-$ZIG_VERSION"
    { python3 -m venv "$ZIG_HOME/venv-$ZIG_VERSION" \
        && "$ZIG_PY" -m pip install -q --disable-pip-version-check "ziglang==$ZIG_VERSION"; } >"$1" 2>&1
}
