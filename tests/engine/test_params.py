"""SamplingParams: the one owner of sampling defaults and validation (0.1.0 wrote the defaults in four places)."""
import dataclasses
import math

import pytest

from fastgguf import SamplingParams
from fastgguf.cli import build_parser
from fastgguf.cli.common import sampling_params
from fastgguf.engine.sampler import Sampler

DEFAULTS = SamplingParams()


def test_sampler_follows_params():
    s = Sampler()
    assert s.params == DEFAULTS
    for name in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "frequency_penalty",
                 "presence_penalty"):
        assert getattr(s, name) == pytest.approx(getattr(DEFAULTS, name)), name
    p = SamplingParams(temperature=0.3, top_k=7, seed=5, logit_bias={"3": -1.0})
    s = Sampler(p, n_vocab=10)
    assert (s.top_k, s.seed, s.logit_bias) == (7, 5, {3: -1.0}) and s.temperature == pytest.approx(0.3)
    assert Sampler(p, top_k=9).top_k == 9  # keywords override fields


@pytest.mark.parametrize("command", ["run", "chat"])
def test_cli_flags_come_from_params(command):
    args = build_parser().parse_args([command, "x"] if command == "run" else [command])
    p = sampling_params(args)
    want = DEFAULTS.replace(max_tokens=512) if command == "chat" else DEFAULTS
    assert p == want
    args = build_parser().parse_args(["run", "--temp", "0", "--top-k", "3", "--stop", "a", "--stop", "b",
                                      "--logit-bias", "5=-inf", "--logit-bias", "7=1.5", "-n", "9", "x"])
    p = sampling_params(args)
    assert (p.temperature, p.top_k, p.stop, p.max_tokens) == (0.0, 3, ("a", "b"), 9)
    assert p.logit_bias == {5: -math.inf, 7: 1.5}


def test_every_field_has_a_flag():
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for f in dataclasses.fields(SamplingParams):
        assert f.metadata["flags"][-1] in text, f.name


def test_generate_defaults_are_the_params_defaults():
    import inspect

    from fastgguf.engine.generate import generate
    sig = inspect.signature(generate)
    assert not set(sig.parameters) & set(SamplingParams.names()), "generate() must not redeclare sampling defaults"


@pytest.mark.parametrize("kw", [dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-1),
                                dict(min_p=2.0), dict(max_tokens=-1), dict(max_tokens=10 ** 12),
                                dict(repeat_penalty=0.0), dict(frequency_penalty=math.nan),
                                dict(logit_bias={-1: 0.0}), dict(logit_bias={1: math.inf})])
def test_value_errors(kw):
    with pytest.raises(ValueError, match=next(iter(kw)).split("_")[0]):
        SamplingParams(**kw)


@pytest.mark.parametrize("kw", [dict(top_k=2.5), dict(seed="1"), dict(stop=[1]), dict(max_tokens=True),
                                dict(logit_bias=[1])])
def test_type_errors(kw):
    with pytest.raises(TypeError):
        SamplingParams(**kw)


def test_from_args():
    assert SamplingParams.from_args(None) == DEFAULTS
    assert SamplingParams.from_args({"top_k": 3}).top_k == 3
    assert SamplingParams.from_args(SamplingParams(top_k=3), seed=2) == SamplingParams(top_k=3, seed=2)
    with pytest.raises(TypeError, match="temprature"):
        SamplingParams.from_args(None, temprature=0.5)
    with pytest.raises(TypeError):
        SamplingParams.from_args(5)
    assert SamplingParams(stop="x").stop == ("x",)
    assert hash(SamplingParams(logit_bias={1: 2.0})) == hash(SamplingParams(logit_bias={1: 2.0}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULTS.top_k = 3


def test_generate_params_equals_keywords(default_model_path):
    import fastgguf
    m = fastgguf.Model(default_model_path, n_threads=1)
    p = SamplingParams(temperature=0.9, seed=11, max_tokens=12, stop=["\n\n"])
    a = m.generate("Once upon a time", p)
    b = m.generate("Once upon a time", temperature=0.9, seed=11, max_tokens=12, stop=["\n\n"])
    c = m.generate("Once upon a time", params=SamplingParams(temperature=0.1), temperature=0.9, seed=11,
                   max_tokens=12, stop="\n\n")
    assert a.token_ids == b.token_ids == c.token_ids and a.text == b.text
    with pytest.raises(TypeError, match="temprature"):
        m.generate("x", temprature=0)
