"""`fastgguf run` / `fastgguf chat` through cli.main on the default model."""
import io
import sys

import pytest

from fastgguf.cli import main


@pytest.fixture()
def model_args(default_model_path):
    return ["-m", default_model_path, "-t", "2"]


def test_run_streams_completion(model_args, capsys):
    rc = main(["run", *model_args, "--temp", "0", "-n", "4", "The capital of France is"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert out.startswith(" Paris") and out.endswith("\n")
    assert "tok/s" in err and "generation: 4 tokens" in err


def test_run_stop_and_seed(model_args, capsys):
    args = ["run", *model_args, "-n", "6", "--seed", "3", "--top-k", "20", "--quiet", "Once upon a time"]
    assert main(args) == 0
    first = capsys.readouterr()
    assert main(args) == 0
    second = capsys.readouterr()
    assert first.out == second.out and first.err == "" == second.err
    assert main(["run", *model_args, "--temp", "0", "-n", "6", "--stop", "ris", "The capital of France is"]) == 0
    assert capsys.readouterr().out == " Pa\n"


def test_run_speculative(model_args, default_model_path, capsys):
    """--speculative prompt_lookup and --draft-model give plain decoding's text and report the drafts."""
    prompt = "Copy: a b c d e f g h. Copy again: a b c"
    outs = []
    for extra in ([], ["--speculative", "prompt_lookup", "--draft-max", "4"], ["--draft-model", default_model_path]):
        assert main(["run", *model_args, "--temp", "0", "-n", "8", *extra, prompt]) == 0
        out, err = capsys.readouterr()
        outs.append(out)
        assert ("drafts:" in err) == bool(extra)
    assert outs[0] == outs[1] == outs[2]
    assert main(["run", *model_args, "--speculative", "ngram", "hi"]) == 2
    assert "speculative" in capsys.readouterr().err


def test_run_bad_arguments(model_args, capsys):
    assert main(["run", *model_args, "--top-p", "0", "hi"]) == 2
    assert "top_p" in capsys.readouterr().err
    assert main(["run", "-m", "/nonexistent/model.gguf", "hi"]) != 0


def test_chat_reads_turns_until_exit(model_args, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("What is 2+2?\n/exit\nnot read\n"))
    rc = main(["chat", *model_args, "--temp", "0", "-n", "12", "--ctx", "256"])
    out, err = capsys.readouterr()
    assert rc == 0 and "4" in out and "not read" not in out


def test_chat_history_is_trimmed_to_fit():
    from fastgguf.cli.chat import fit_history
    from gen_fakes import FakeModel
    m = FakeModel(chat_template="{% for m in messages %}{{ m.content }}{% endfor %}")
    hist = [{"role": "user", "content": "a" * 10}, {"role": "assistant", "content": "b" * 10},
            {"role": "user", "content": "c" * 10}, {"role": "assistant", "content": "d" * 10}]
    user = {"role": "user", "content": "e" * 5}
    assert fit_history(m, [], hist, user, 100) == (hist, 0)
    assert fit_history(m, [], hist, user, 30) == (hist[2:], 2)
    assert fit_history(m, [], hist, user, 3) == ([], 4)


def test_repack_flag_reaches_the_model(tmp_path, monkeypatch, repack_copies):
    """--repack (run, chat, serve): fastgguf.Model(repack=True), so a Q4_K model decodes from its packed copy where
    the kernels have a packed gemv (x86); without the flag the keyword is left out (FASTGGUF_REPACK decides)."""
    import models
    from fastgguf.cli import build_parser
    from fastgguf.cli.common import load_model
    from fastgguf.cli.serve import model_options
    monkeypatch.delenv("FASTGGUF_REPACK", raising=False)
    path = str(models.build(tmp_path / "q4k.gguf", "kq", wtype="Q4_K"))
    packed = load_model(build_parser().parse_args(["run", "-m", path, "--repack", "hi"]))
    assert (packed.memory()["packed"] > 0) == repack_copies("Q4_K")
    assert load_model(build_parser().parse_args(["run", "-m", path, "hi"])).memory()["packed"] == 0
    assert model_options(build_parser().parse_args(["serve", "--repack"])) == {"repack": True}
    assert "repack" not in model_options(build_parser().parse_args(["serve"]))

