"""The wheels a release builds (pyproject.toml's [tool.cibuildwheel], run by .github/workflows/wheels.yml): CPython
3.10-3.14 with the GIL for manylinux x86_64 and aarch64, macOS x86_64 and arm64 and Windows AMD64, and nothing else
(no musllinux, 32-bit, PyPy, free-threaded or end-of-life Pythons), as cibuildwheel itself reads the configuration.
cibuildwheel lists any platform's builds from any host without building anything."""
import os
import platform
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the source tree these tests belong to
PYPROJECT = os.path.join(REPO, "pyproject.toml")

pytestmark = [
    pytest.mark.skipif(not os.path.exists(PYPROJECT), reason="source tree not available (tests of an installed wheel)"),
    pytest.mark.skipif(sys.version_info < (3, 11), reason="cibuildwheel 4 needs Python >= 3.11"),
]
if os.path.exists(PYPROJECT) and sys.version_info >= (3, 11):  # (else a mark above skips, saying why)
    pytest.importorskip("cibuildwheel", reason="cibuildwheel is not installed: pip install '.[packaging-test]'")

PYTHONS = ("cp310", "cp311", "cp312", "cp313", "cp314")
# platform -> {the archs its release runners build: the platform tag of their build identifiers}
SHIPPED = {"linux": {"x86_64": "manylinux_x86_64", "aarch64": "manylinux_aarch64"},
           "macos": {"x86_64": "macosx_x86_64", "arm64": "macosx_arm64"},
           "windows": {"AMD64": "win_amd64"}}
# this machine's architecture -> its builds' platform tag per platform (archs = ["native"] builds only that one)
NATIVE = {"x86_64": {"linux": "manylinux_x86_64", "macos": "macosx_x86_64", "windows": "win_amd64"},
          "aarch64": {"linux": "manylinux_aarch64", "macos": "macosx_arm64", "windows": "win_arm64"}}


def identifiers(plat, archs=None):
    """cibuildwheel's build identifiers for plat from pyproject.toml; archs: its --archs (None: the configured)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}   # pyproject.toml alone decides
    cmd = [sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform", plat]
    if archs:
        cmd += ["--archs", archs]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return set(r.stdout.split())


def test_cibuildwheel_is_the_pinned_version():
    """The packaging-test extra and the release workflow pin one cibuildwheel: the one whose reading of the
    configuration these tests check."""
    import tomllib

    import cibuildwheel
    with open(PYPROJECT, "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["packaging-test"]
    pins = [m.group(1) for d in extra if (m := re.match(r"cibuildwheel==([\w.]+)", d))]
    assert pins == [cibuildwheel.__version__], (pins, cibuildwheel.__version__)
    workflow = os.path.join(REPO, ".github", "workflows", "wheels.yml")
    if os.path.exists(workflow):                 # (the sdist carries no .github)
        with open(workflow, encoding="utf-8") as f:
            assert set(re.findall(r"cibuildwheel==([\w.]+)", f.read())) == {cibuildwheel.__version__}


@pytest.mark.parametrize("plat", sorted(SHIPPED))
def test_shipped_builds(plat):
    """On each release runner's architecture: CPython 3.10-3.14, one wheel each."""
    want = {f"{py}-{tag}" for py in PYTHONS for tag in SHIPPED[plat].values()}
    assert identifiers(plat, ",".join(SHIPPED[plat])) == want


@pytest.mark.parametrize("plat", sorted(SHIPPED))
def test_nothing_else_on_any_arch(plat):
    """Every architecture cibuildwheel knows for plat: still only CPython 3.10-3.14 with the GIL (no cp39, no
    cp313t / cp314t, no PyPy), and the skip list holds: no musllinux, no 32-bit x86."""
    ids = identifiers(plat, "all")
    assert ids and {i.split("-")[0] for i in ids} == set(PYTHONS), sorted(ids)
    assert not [i for i in ids if "musllinux" in i or i.endswith(("_i686", "-win32"))], sorted(ids)


@pytest.mark.parametrize("plat", sorted(SHIPPED))
def test_native_arch_only(plat):
    """archs = ["native"]: a runner builds its own architecture only (x86_64 runners never build aarch64 under
    emulation), so this host's list is its one architecture's."""
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    if machine not in NATIVE:
        pytest.skip(f"no release runner is {platform.machine()}")
    assert identifiers(plat) == {f"{py}-{NATIVE[machine][plat]}" for py in PYTHONS}
