"""Sequence (engine/sequence.py) on its own: what one step lets out and when it finishes, on a fake tokenizer
(byte tokens) with one-hot logits, so every sampled token is known."""
import numpy as np

from fastgguf.engine.params import SamplingParams
from fastgguf.engine.sequence import Sequence
from gen_fakes import EOS, N_VOCAB, FakeModel


def onehot(tok):
    x = np.full(N_VOCAB, -10.0, dtype=np.float32)
    x[tok] = 10.0
    return x


def run(seq, text, full_at=None):
    """Step seq through text's bytes (then EOS); returns the Steps up to the finishing one."""
    steps = []
    for i, tok in enumerate(list(text.encode()) + [EOS]):
        steps.append(seq.step(onehot(tok), full=(i == full_at)))
        if steps[-1].finish is not None:
            break
    return steps


def test_stop_string_split_across_tokens_is_held_back():
    seq = Sequence(FakeModel(), [1, 2], SamplingParams(temperature=0, stop=("END",)))
    steps = run(seq, "abEN-EN EXENDzz")
    assert "".join(s.text for s in steps) == "abEN-EN EX"
    assert [s.token for s in steps] == list(b"abEN-EN EXEND")
    assert steps[-1].finish == "stop" and seq.finish_reason == "stop" and not steps[-1].eog
    assert steps[2].text == "" and steps[3].text == ""  # "E", "EN": maybe the start of "END"
    assert seq.n_sampled == seq.n_out == len("abEN-EN EXEND")


def test_eog_max_tokens_and_full_context():
    seq = Sequence(FakeModel(), [1], SamplingParams(temperature=0))
    steps = run(seq, "hi")
    assert [(s.token, s.eog, s.finish) for s in steps] == [(104, False, None), (105, False, None), (EOS, True, "stop")]
    assert (seq.n_sampled, seq.n_out) == (3, 2)  # the end-of-generation token is sampled, not a completion token

    seq = Sequence(FakeModel(), [1], SamplingParams(temperature=0, max_tokens=2, stop=("i!",)))
    steps = run(seq, "hi there")
    assert [s.text for s in steps] == ["h", "i"] and steps[-1].finish == "length"  # "i" flushed at the end

    seq = Sequence(FakeModel(), [1], SamplingParams(temperature=0, max_tokens=0))
    assert seq.step(onehot(65)) == (None, False, "", "length", None)

    seq = Sequence(FakeModel(), [1], SamplingParams(temperature=0))
    steps = run(seq, "abc", full_at=1)
    assert "".join(s.text for s in steps) == "ab" and steps[-1].finish == "length"


def test_choice_j_samples_with_seed_plus_j():
    p = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    logits = np.zeros(N_VOCAB, dtype=np.float32)
    draws = [Sequence(FakeModel(), [1], p, choice=j).sample(logits) for j in range(3)]
    assert draws == [Sequence(FakeModel(), [1], p.replace(seed=7 + j)).sample(logits) for j in range(3)]
    assert len(set(draws)) > 1  # (uniform over 260 tokens: the seeds do give different draws)


def test_repetition_window_primed_with_the_prompt():
    """The prompt's last repeat_last_n tokens are penalized as llama.cpp does (generate() and the Scheduler alike)."""
    logits = np.zeros(N_VOCAB, dtype=np.float32)
    logits[65], logits[66] = 2.0, 1.9
    p = SamplingParams(temperature=0, repeat_penalty=1.5, repeat_last_n=1)
    assert Sequence(FakeModel(), [65], p).sample(logits) == 66
    assert Sequence(FakeModel(), [65, 1], p).sample(logits) == 65  # 65 is outside the window of 1


class Recorder:
    """An output parser: records what it was fed; its deltas are the fed pieces, upper-cased."""

    def __init__(self):
        self.fed, self.flushed = [], 0

    def feed(self, text):
        self.fed.append(text)
        return [text.upper()] if text else []

    def flush(self):
        self.flushed += 1
        return ["<end>"]


def test_parser_gets_exactly_the_emitted_text():
    parser = Recorder()
    seq = Sequence(FakeModel(), [1], SamplingParams(temperature=0, stop=("!",)), parser=parser)
    steps = run(seq, "ok!")
    assert "".join(parser.fed) == "ok" == "".join(s.text for s in steps)
    assert parser.flushed == 1 and steps[-1].parsed == ["<end>"]
    assert [d for s in steps for d in s.parsed] == ["O", "K", "<end>"]
    assert Sequence(FakeModel(), [1], SamplingParams(temperature=0)).step(onehot(65)).parsed is None
