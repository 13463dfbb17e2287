"""Structured output through the Scheduler: constrained and unconstrained requests batched together give, token for
token, what model.generate gives each alone (a matcher per choice: n=2 choices never share one), and the engine
fails closed: a grammar without matchers is refused before it is queued, a matcher that raises fails only its own
request. The model is a random-weight llama with a real BPE vocabulary (tests/models.py "vocab"): its output is noise,
so the masks decide nearly every token."""
import json
import queue

import pytest

pytest.importorskip("llguidance")

from fastgguf import Model  # noqa: E402
from fastgguf.engine.grammar import matchers  # noqa: E402
from fastgguf.engine.params import SamplingParams  # noqa: E402
from fastgguf.engine.scheduler import Delta, Done, Engine, Error, Finish, Request  # noqa: E402
import models  # noqa: E402

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}, "required": ["a", "b"],
     "additionalProperties": False},
    {"type": "array", "items": {"enum": ["x", "y", 3]}, "minItems": 1, "maxItems": 4},
    {"type": "string", "maxLength": 6},
    {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"d": {"type": "string", "format": "date"}},
                                  "required": ["d"], "additionalProperties": False}]},
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return Model(models.build(tmp_path_factory.mktemp("vocab_model") / "bpe.gguf", "vocab", vocab="llama-bpe", seed=3))


def submit(engine, model, prompt, params, n=1, constraints=None):
    """Submit a request (its matchers built here, as api/openai/ does, unless given); its event queue."""
    q = queue.SimpleQueue()
    if constraints is None and params.constraint() is not None:
        constraints = matchers(model, params.constraint(), n)
    engine.submit(Request([list(prompt)], params, q.put, n=n, logprobs=0, constraints=constraints))
    return q


def collect(q):
    """{index: (token ids, text, finish)} of a request's choices, or the Error it ended with."""
    ids, texts, finish = {}, {}, {}
    while True:
        for ev in q.get(timeout=120):
            if isinstance(ev, Delta):
                texts[ev.index] = texts.get(ev.index, "") + ev.text
                ids.setdefault(ev.index, []).extend(e[0] for e in ev.logprobs or ())
            elif isinstance(ev, Finish):
                finish[ev.index] = ev.reason
            elif isinstance(ev, Done):
                return {i: (ids.get(i, []), texts.get(i, ""), finish[i]) for i in finish}
            elif isinstance(ev, Error):
                return ev


def test_batched_equals_solo(model):
    """4 constrained requests (one with n=2) and 2 unconstrained, seeded at temperature 0.9, all in one engine at
    once: each choice's token ids, text and finish reason equal model.generate's alone with seed + j."""
    prompts = [list(model.tokenize(t)) for t in ("JSON please:", "A list", "Say", "Date?", "Hello", "Once upon")]
    jobs = [(prompts[i], SamplingParams(json_schema=s, temperature=0.9, seed=10 + i, max_tokens=40), 2 if i == 1 else 1)
            for i, s in enumerate(SCHEMAS)]
    jobs += [(prompts[4], SamplingParams(temperature=0.9, seed=20, max_tokens=12), 1),
             (prompts[5], SamplingParams(temperature=0.9, seed=21, max_tokens=12, repeat_penalty=1.2), 1)]
    e = Engine(model, parallel=6, n_ctx=256, chunk=4).start()
    try:
        qs = [submit(e, model, p, params, n) for p, params, n in jobs]     # all queued before any finishes
        results = [collect(q) for q in qs]
    finally:
        e.stop()
    n_stop = 0
    for (prompt, params, n), got in zip(jobs, results):
        assert not isinstance(got, Error), got.error
        assert sorted(got) == list(range(n))
        for j in range(n):
            solo = model.generate(prompt, params.replace(seed=params.seed + j))
            assert got[j] == (solo.token_ids, solo.text, solo.finish_reason), (params.json_schema, j)
            if params.json_schema is not None and solo.finish_reason == "stop":
                json.loads(solo.text)
                n_stop += 1
    assert results[1][0][0] != results[1][1][0], "the n=2 choices sample with their own seeds and matchers"
    assert n_stop >= 2, "constrained outputs that ended where their grammar did"


def test_grammar_without_matchers_is_refused(model):
    params = SamplingParams(json_schema=SCHEMAS[0], max_tokens=4)
    with pytest.raises(ValueError, match="one matcher per choice"):
        Request([[1, 2]], params, lambda evs: None)
    with pytest.raises(ValueError, match=r"one matcher per choice \(2\)"):
        Request([[1, 2]], params, lambda evs: None, n=2, constraints=matchers(model, params.constraint(), 1))
    Request([[1, 2]], SamplingParams(max_tokens=4), lambda evs: None)     # no grammar: nothing needed


class Faulty:
    """A matcher that raises in consume() after `after` tokens (a grammar engine's internal failure)."""

    def __init__(self, inner, after):
        self.inner, self.left = inner, after

    def fill_mask(self):
        return self.inner.fill_mask()

    def consume(self, tok):
        if self.left == 0:
            raise RuntimeError("matcher exploded")
        self.left -= 1
        self.inner.consume(tok)


def test_a_failing_matcher_fails_only_its_request(model):
    prompt = list(model.tokenize("Batch:"))
    bad = SamplingParams(json_schema=SCHEMAS[0], temperature=0.9, seed=1, max_tokens=30)
    good = [SamplingParams(json_schema=SCHEMAS[1], temperature=0.9, seed=2, max_tokens=30),
            SamplingParams(temperature=0.9, seed=3, max_tokens=10)]
    e = Engine(model, parallel=3, n_ctx=256).start()
    try:
        q_bad = submit(e, model, prompt, bad, constraints=[Faulty(matchers(model, bad.constraint(), 1)[0], 3)])
        q_good = [submit(e, model, prompt, p) for p in good]
        failed = collect(q_bad)
        results = [collect(q) for q in q_good]
        after = collect(submit(e, model, prompt, good[0]))      # the engine lives on
    finally:
        e.stop()
    assert isinstance(failed, Error) and "matcher exploded" in str(failed.error)
    for p, got in zip(good + [good[0]], results + [after]):
        solo = model.generate(prompt, p)
        assert got == {0: (solo.token_ids, solo.text, solo.finish_reason)}
