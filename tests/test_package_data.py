"""Files that are not Python ship: the chat page's (fastgguf/server/static/, server/page.py) and the JSON Schema
meta-schemas (fastgguf/engine/meta_schemas.json) are in the sdist and
in what a wheel built from that sdist installs, as .ci/run builds it (pyproject.toml's package-data: setuptools puts
package data in the sdist too, MANIFEST.in needs no line for them). Checked with setuptools' own commands: sdist,
then build_py in the unpacked sdist (no compiler; setup.py runs Cython on the .pyx files, about 10 s). Where the
source tree or the build requirements are missing, tests/server/test_chat_page.py checks the installed package."""
import glob
import os
import subprocess
import sys
import tarfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(REPO, "setup.py")),
                                reason="source tree not available (tests of an installed wheel)")
STATIC = os.path.join("fastgguf", "server", "static")
META = os.path.join("fastgguf", "engine", "meta_schemas.json")


def setup_py(cwd, *args):
    r = subprocess.run([sys.executable, "setup.py", "-q", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_chat_page_files_ship(tmp_path):
    for module in ("setuptools", "Cython", "numpy"):   # setup.py's imports (pyproject.toml's build requirements)
        pytest.importorskip(module, reason=f"{module} (a build requirement) is not installed")
    want = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, STATIC, "*")))
    assert {"index.html", "chat.js", "markdown.js", "chat.css"} <= set(want)
    setup_py(REPO, "egg_info", "--egg-base", str(tmp_path), "sdist", "--dist-dir", str(tmp_path), "--formats=gztar")
    with tarfile.open(glob.glob(str(tmp_path / "*.tar.gz"))[0]) as tar:
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    root = glob.glob(str(tmp_path / "fastgguf-*" / ""))[0]
    assert sorted(os.listdir(os.path.join(root, STATIC))) == want
    setup_py(root, "build_py", "--build-lib", str(tmp_path / "lib"))
    assert sorted(os.listdir(tmp_path / "lib" / STATIC)) == want
    assert os.path.exists(tmp_path / "lib" / META), "the JSON Schema meta-schemas (engine/schema_rewrite.py)"
