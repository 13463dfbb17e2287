"""The fuzz targets (tests/fuzz) stay runnable: each runs its seed corpus plus a few hundred mutations without a
finding (the seeded fallback loop, no atheris needed), on the fastgguf this pytest imported (first on the
targets' PYTHONPATH). .ci/fuzz.sh runs them for longer."""
import os
import subprocess
import sys

import pytest

import fastgguf

FUZZ = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("target", ["gguf", "tokenizer", "chat_template", "hparams", "grammar", "state"])
def test_fuzz_target_runs_clean(target, tmp_path):
    if target == "grammar":
        pytest.importorskip("llguidance")
    tree = os.path.dirname(os.path.dirname(os.path.abspath(fastgguf.__file__)))
    env = dict(os.environ, FUZZ_NO_ATHERIS="1",
               PYTHONPATH=os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p))
    p = subprocess.run([sys.executable, os.path.join(FUZZ, f"fuzz_{target}.py"), "-runs=300", "-max_total_time=60",
                        os.path.join(FUZZ, "corpus", target)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Done 300 runs" in p.stdout
