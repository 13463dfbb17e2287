"""`fastgguf serve` without the server extra says which extra to install (the server itself: tests/server)."""
import sys

from fastgguf.cli import main


def test_serve_without_fastapi_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi -> ImportError
    assert main(["serve", "-m", "nonexistent.gguf"]) == 1
    assert 'pip install "fastgguf[server]"' in capsys.readouterr().err


def test_serve_ray_without_ray_names_the_extra(monkeypatch, capsys):
    import pytest
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert main(["serve", "--ray", "-m", "nonexistent.gguf"]) == 1
    assert 'pip install "fastgguf[ray]"' in capsys.readouterr().err


def test_serve_is_a_command(capsys):
    try:
        main(["serve", "--help"])
    except SystemExit as e:
        assert e.code == 0
    out = capsys.readouterr().out
    for flag in ("--parallel", "--ctx-size", "--api-key", "--port", "--host", "--threads", "--ray", "--replicas",
                 "--max-replicas", "--address"):
        assert flag in out


def test_serve_many_models_refuses_bad_flags_before_serving(tmp_path, capsys):
    import pytest
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"GGUF")
    b.write_bytes(b"GGUF")
    for extra, words in ((["-m", str(tmp_path / "missing.gguf")], "missing.gguf"),
                         (["-m", str(a)], "two -m models have the name 'a'"),
                         (["-m", str(b), "--max-memory", "lots"], "not a size"),
                         (["-m", str(b), "--keep-alive", "5 parsecs"], "--keep-alive"),
                         (["--models-dir", str(tmp_path / "nowhere")], "is not a folder")):
        assert main(["serve", "-m", str(a), *extra]) != 0
        assert words in capsys.readouterr().err


def test_serve_without_models_serves_the_catalogue_with_its_default(tmp_path):
    import pytest
    pytest.importorskip("fastapi")
    from fastgguf import hub
    from fastgguf.cli import build_parser
    from fastgguf.cli.serve import many_models, serves_many
    args = build_parser().parse_args(["serve"])
    assert serves_many(args)
    reg = many_models(args, {})
    assert set(hub.CATALOGUE) <= set(reg.entries) and reg.default == hub.DEFAULT_NAME
    assert reg.resolve("gpt-4").name == hub.DEFAULT_NAME                 # any name, as a one-model server
    assert reg.keep_alive == 300 and reg.max_memory > 0
    (tmp_path / "x.gguf").write_bytes(b"GGUF")
    args = build_parser().parse_args(["serve", "--models-dir", str(tmp_path), "--keep-alive", "-1",
                                      "--max-memory", "2G"])
    reg = many_models(args, {})
    assert list(reg.entries) == ["x"] and reg.default is None and reg.keep_alive is None
    assert reg.max_memory == 2 << 30
