"""One error-to-exit-code table for every command (0.1.0: a bad GGUF exited `run`/`chat` with 2, `info` with 1)."""
import pytest

from fastgguf import cli
from fastgguf.errors import FastGGUFError


@pytest.fixture
def bad_gguf(tmp_path):
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 40)
    return str(p)


@pytest.mark.parametrize("argv", [["info", "{}"], ["run", "-m", "{}", "hi"], ["chat", "-m", "{}"],
                                  ["tokenize", "-m", "{}", "hi"]])
def test_bad_gguf_exits_1_everywhere(bad_gguf, argv, capsys):
    rc = cli.main([a.format(bad_gguf) for a in argv])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "error:" in err and "Traceback" not in err


def test_bad_arguments_exit_2(default_model_path, capsys):
    assert cli.main(["run", "-m", default_model_path, "--temp", "-1", "hi"]) == 2
    assert "temperature" in capsys.readouterr().err


def test_help_documents_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "exit codes:" in out
    for cls, code, meaning in cli.EXIT_CODES:
        assert f"{code:>3}  {meaning}" in out


def test_exit_code_table():
    from fastgguf.errors import GGUFError, HubError
    assert cli.exit_code(GGUFError("x")) == 1  # a ValueError too, but a file error first
    assert cli.exit_code(HubError("x")) == 1
    assert cli.exit_code(FileNotFoundError("x")) == 1
    assert cli.exit_code(ValueError("x")) == 2
    assert cli.exit_code(KeyboardInterrupt()) == 130
    assert cli.exit_code(RuntimeError("x")) is None  # not ours: a traceback, a bug to report


def test_debug_shows_the_traceback(bad_gguf):
    with pytest.raises(FastGGUFError):
        cli.main(["--debug", "info", bad_gguf])


def test_a_model_computing_nan_exits_1(tmp_path, capsys):
    """0.2: `fastgguf run` on a model whose logits are NaN (inf/NaN weights) printed a FloatingPointError traceback:
    the table had no row for it."""
    import models
    path = models.build(tmp_path / "nan.gguf", "vocab", vocab="llama-bpe", nan_logits=[5])
    rc = cli.main(["run", "-m", path, "-n", "2", "hi"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "NaN" in err and "Traceback" not in err
    assert cli.exit_code(FloatingPointError("x")) == 1
