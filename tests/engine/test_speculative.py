"""Exact speculative decoding (fastgguf.engine.speculative): the same tokens as plain decoding, greedy or seeded, in
generate() and the Scheduler; the token sampled at a verified (draft) row follows the target softmax."""
import math
import threading

import numpy as np
import pytest

import fastgguf
from fastgguf.engine.params import SamplingParams
from fastgguf.engine.scheduler import Delta, Done, Error, Finish, Request, Scheduler
from fastgguf.engine.speculative import PromptLookup
import models

REPEAT = ("Copy the list exactly. List: apple, banana, cherry, date, elderberry, fig, grape, honeydew, kiwi, lemon. "
          "Copy: apple, banana, cherry, date,")
RANDOM = "Zebras quietly improvise twelve orange theories about"


@pytest.fixture(scope="module")
def model(default_model_path):
    return fastgguf.Model(default_model_path, n_threads=2)


@pytest.fixture(scope="module")
def noise_draft(default_model_path, tmp_path_factory):
    """A random-weight llama with the default model's vocabulary: its drafts are mostly rejected."""
    path = models.build(tmp_path_factory.mktemp("spec") / "noise.gguf", "vocab", vocab=default_model_path, seed=3)
    return fastgguf.Model(path, n_threads=1)


_plain = {}


def plain(model, prompt, **kw):
    key = (prompt, repr(sorted(kw.items())))
    if key not in _plain:
        _plain[key] = model.generate(prompt, **kw)
    return _plain[key]


def test_rows_of_one_forward_equal_single_steps(model):
    """What greedy equality rests on: the rows of a verification forward (1 + draft_max tokens, all rows' logits)
    are bit-identical to evaluating the tokens one step at a time."""
    prompt = model.tokenize(REPEAT)
    toks = model.tokenize(" elderberry, fig, grape, honeydew, kiwi, lemon, mango", add_special=False)[:17]
    solo, batch = model.context(n_ctx=256), model.context(n_ctx=256)
    solo.eval(prompt)
    batch.eval(prompt)
    rows = batch.eval(toks, all_logits=True)
    for t, row in zip(toks, rows):
        assert np.array_equal(solo.eval([t]), row)


def test_prompt_lookup_matches_a_scan():
    """The incremental index proposes what a scan for the most recent earlier occurrence of the longest suffix
    n-gram proposes."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        ids = rng.integers(0, 4, rng.integers(1, 30)).tolist()
        nmin, nmax, k = 1, int(rng.integers(1, 4)), int(rng.integers(1, 6))
        pl = PromptLookup(ids[:5], nmax, nmin)
        for t in ids[5:]:
            pl.accept(t)
        want = []
        for n in range(nmax, nmin - 1, -1):
            starts = [j for j in range(len(ids) - n) if ids[j:j + n] == ids[len(ids) - n:]]
            if starts:
                want = ids[starts[-1] + n:starts[-1] + n + k]
                break
        assert pl.propose(k) == want, (ids, nmax, k)


def test_params():
    p = SamplingParams(speculative="none")
    assert p.speculative is None and p.draft_max == 8
    assert SamplingParams(speculative="prompt_lookup", draft_max=64).draft_max == 64
    for bad in (dict(speculative="ngram"), dict(draft_max=0), dict(draft_max=65),
                dict(draft_ngram_max=2, draft_ngram_min=3)):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
    with pytest.raises(TypeError):
        SamplingParams(speculative={"model": "x"})


def test_draft_model_vocabulary_mismatch(model, tmp_path):
    other = fastgguf.Model(models.build(tmp_path / "other.gguf", "vocab", vocab="llama-spm"), n_threads=1)
    with pytest.raises(ValueError, match="vocabulary"):
        model.generate("Hi", speculative=other, max_tokens=2)


@pytest.mark.parametrize("prompt", [REPEAT, RANDOM])
@pytest.mark.parametrize("k", [1, 4, 16])
def test_greedy_prompt_lookup_equals_plain(model, prompt, k):
    ref = plain(model, prompt, temperature=0, max_tokens=16)
    r = model.generate(prompt, temperature=0, max_tokens=16, speculative="prompt_lookup", draft_max=k)
    assert r.token_ids == ref.token_ids and r.text == ref.text and r.finish_reason == ref.finish_reason
    assert r.timings.draft_tokens >= r.timings.draft_accepted
    if prompt is REPEAT:
        assert r.timings.draft_accepted > 0
    assert ref.timings.draft_tokens == ref.timings.draft_accepted == 0


def test_greedy_draft_models_equal_plain(model, noise_draft):
    ref = plain(model, REPEAT, temperature=0, max_tokens=24)
    own = model.generate(REPEAT, temperature=0, max_tokens=24, speculative=model, draft_max=4)
    assert own.token_ids == ref.token_ids
    assert own.timings.draft_accepted == own.timings.draft_tokens > 0  # the model drafts its own greedy tokens
    noise = model.generate(REPEAT, temperature=0, max_tokens=24, speculative=noise_draft, draft_max=4)
    assert noise.token_ids == ref.token_ids
    assert noise.timings.draft_accepted < noise.timings.draft_tokens / 2


def test_max_tokens_stop_and_full_context(model):
    ref = plain(model, REPEAT, temperature=0, max_tokens=24)
    for n in (0, 1, 3, 7):  # max_tokens ends inside an accepted run (0: nothing is sampled)
        r = model.generate(REPEAT, temperature=0, max_tokens=n, speculative="prompt_lookup", draft_max=16)
        assert r.token_ids == ref.token_ids[:n] and r.finish_reason == "length"
    stop = ref.text[len(ref.text) // 2:len(ref.text) // 2 + 4]
    want = plain(model, REPEAT, temperature=0, max_tokens=24, stop=(stop,))
    r = model.generate(REPEAT, temperature=0, max_tokens=24, stop=[stop], speculative="prompt_lookup", draft_max=16)
    assert (r.text, r.finish_reason) == (want.text, want.finish_reason) == (ref.text.split(stop)[0], "stop")
    n_prompt = len(model.tokenize(REPEAT))
    outs = []
    for spec in (None, "prompt_lookup"):
        ctx = model.context(n_ctx=n_prompt + 9)
        outs.append(model.generate(REPEAT, temperature=0, max_tokens=None, context=ctx, speculative=spec,
                                   draft_max=16))
        assert ctx.n_past <= ctx.n_ctx
    assert outs[0].token_ids == outs[1].token_ids and len(outs[1].token_ids) == 10
    assert outs[1].finish_reason == "length"


def test_failing_drafter_is_dropped(model, tmp_path):
    """A draft model whose logits are NaN fails to draft: generate() and the Scheduler alike go on without drafts,
    with plain decoding's tokens."""
    path = models.build(tmp_path / "nan.gguf", "vocab", vocab=model.path, seed=3, nan_logits=(5,))
    broken = fastgguf.Model(path, n_threads=1)
    kw = dict(temperature=0, max_tokens=12)
    ref = plain(model, REPEAT, **kw)
    r = model.generate(REPEAT, speculative=broken, **kw)
    assert r.token_ids == ref.token_ids and r.timings.draft_tokens == 0
    sch = Scheduler(model, parallel=1, n_ctx=256, n_threads=2).start()
    try:
        text, fin = _collect(sch, list(model.tokenize(REPEAT)), dict(kw, speculative=broken))()
        assert sch.m["draft_tokens"] == 0
    finally:
        sch.stop()
    assert (text, fin) == (ref.text, [ref.finish_reason])


def test_seeded_sampling_equals_plain(model):
    """Each emitted token takes one draw from the sampler, as in plain decoding: same seed, same tokens."""
    kw = dict(temperature=0.9, seed=5, max_tokens=24, repeat_penalty=1.1, frequency_penalty=0.3)
    ref = model.generate(REPEAT, **kw)
    r = model.generate(REPEAT, speculative="prompt_lookup", draft_max=4, **kw)
    assert r.token_ids == ref.token_ids and r.timings.draft_accepted > 0


def test_grammar_and_penalties_equal_plain(model):
    """A grammar masks each row after the tokens before it were accepted; penalties count the accepted tokens only."""
    pytest.importorskip("llguidance")
    schema = {"type": "object", "properties": {"fruits": {"type": "array", "items": {"type": "string"}}},
              "required": ["fruits"]}
    prompt = REPEAT + ' As JSON: {"fruits": ["apple", "banana", "cherry", "date", "'
    for kw in (dict(json_schema=schema), dict(repeat_penalty=1.3, presence_penalty=0.5, logit_bias={28: -2.0})):
        ref = model.generate(prompt, temperature=0, max_tokens=30, **kw)
        r = model.generate(prompt, temperature=0, max_tokens=30, speculative="prompt_lookup", draft_max=8, **kw)
        assert r.token_ids == ref.token_ids and r.finish_reason == ref.finish_reason, kw


def _chi2_critical_999(df):
    """The 0.999 quantile of chi-square with df degrees of freedom (Wilson-Hilferty; within 1% for df >= 5)."""
    z = 3.0902
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_verified_row_follows_the_target_softmax(noise_draft):
    """The token sampled from a draft row follows the target's softmax at temperature 1. The prompt holds "B a c" and
    ends in B; logit_bias +30 on a and c with presence_penalty 30 (which takes a token's bias back once it is
    generated): the prompt's row samples a (the pair is picked so that a's raw logit leads c's there), prompt lookup
    then drafts c after "B a", row 0 samples c (accepted), and row 1, the verified row, samples from the plain
    softmax of prompt + [a, c]. Its samples (fixed seeds) are binned (groups of tokens of equal probability) and
    tested by chi-square against that softmax."""
    m = noise_draft
    ctx = m.context(n_ctx=64)
    for a, c in ((1000 + i, 2000 + i) for i in range(50)):
        prompt = [5, 6, 300, a, c, 8, 9, 300]
        ctx.reset()
        lg = ctx.eval(prompt)
        if lg[a] > lg[c] + 5:
            break
    p = ctx.eval([a, c]).astype(np.float64)
    p = np.exp(p - p.max())
    p /= p.sum()
    n, n_bins = 1000, 10
    # the vocabulary in n_bins groups of about equal probability, likeliest tokens first (the softmax is flat here:
    # no single token has enough of it for a bin of its own)
    order = np.argsort(-p, kind="stable")
    bin_of = np.empty(len(p), dtype=int)
    bin_of[order] = np.minimum((np.cumsum(p[order]) - p[order] / 2) * n_bins, n_bins - 1).astype(int)
    mass = np.bincount(bin_of, weights=p, minlength=n_bins)
    counts = np.zeros(n_bins)
    kw = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=3, logit_bias={a: 30.0, c: 30.0},
              presence_penalty=30.0, speculative="prompt_lookup", draft_max=1)
    for seed in range(n):
        r = m.generate(prompt, seed=seed, context=ctx, **kw)
        if r.token_ids[0] != a:  # (rare: c can still win the prompt's row) the rows after differ: not counted
            continue
        assert r.token_ids[1] == c and r.timings.draft_accepted == 1  # the third token is the draft row's
        counts[bin_of[r.token_ids[2]]] += 1
    assert counts.sum() > 0.9 * n
    expect = mass * counts.sum()
    assert expect.min() >= 5
    chi2 = float(((counts - expect) ** 2 / expect).sum())
    assert chi2 < _chi2_critical_999(n_bins - 1), (chi2, counts, expect)


def _collect(sch, prompt_ids, params, logprobs=None, lps=None):
    done, text, fin = threading.Event(), [], []

    def sink(events):
        for e in events:
            if isinstance(e, Delta):
                text.append(e.text)
                if lps is not None:
                    lps.extend(e.logprobs or ())
            elif isinstance(e, Finish):
                fin.append(e.reason)
            elif isinstance(e, Error):
                fin.append(e.error)
                done.set()
            elif isinstance(e, Done):
                done.set()
    sch.submit(Request([prompt_ids], params, sink, logprobs=logprobs))
    return lambda: (done.wait(120), "".join(text), fin)[1:]


def test_scheduler_mixed_batch_equals_plain(model, noise_draft):
    """Speculative and plain sequences in the same batched steps: each gives its plain generate() text."""
    rep, rnd = REPEAT, RANDOM
    cases = [(rep, dict(speculative="prompt_lookup", draft_max=16)), (rnd, {}), (rep, {}), (rep, dict(speculative=model, draft_max=4)), (rep, dict(speculative=noise_draft)),
             (rep, dict(speculative="prompt_lookup", draft_max=4, max_tokens=5)),
             (rep, dict(speculative="prompt_lookup", draft_max=16, stop=[" grape"])),
             (rep, dict(speculative="prompt_lookup", temperature=0.9, seed=2))]
    sch = Scheduler(model, parallel=4, n_ctx=256, n_threads=2).start()
    try:
        waits = [_collect(sch, list(model.tokenize(p)), dict(dict(temperature=0, max_tokens=12), **kw))
                 for p, kw in cases]
        got = [w() for w in waits]
        assert sch.m["draft_accepted"] > 0 and sch.m["draft_tokens"] > sch.m["draft_accepted"]
    finally:
        sch.stop()
    for (prompt, kw), (text, fin) in zip(cases, got):
        ref = plain(model, prompt, **dict(dict(temperature=0, max_tokens=12),
                                          **{k: v for k, v in kw.items() if k not in ("speculative", "draft_max")}))
        assert (text, fin) == (ref.text, [ref.finish_reason]), kw
        assert ref.finish_reason == ("stop" if "stop" in kw else "length")


def test_scheduler_full_slot(model):
    """A draft never pushes a sequence past its slot: a context that fills up ends as plain decoding does."""
    ids = list(model.tokenize(REPEAT))
    outs = []
    for spec in (None, "prompt_lookup"):
        sch = Scheduler(model, parallel=1, n_ctx=len(ids) + 6, n_threads=2).start()
        try:
            outs.append(_collect(sch, ids, dict(temperature=0, max_tokens=None, speculative=spec, draft_max=16))())
        finally:
            sch.stop()
        assert sch._slots[0].ctx.n_past <= len(ids) + 6
    assert outs[0] == outs[1] and outs[0][1] == ["length"]


def test_scheduler_logprobs(model):
    """Each verified row gives its token's logprobs, as the plain step does."""
    ids = list(model.tokenize(REPEAT))
    got = []
    sch = Scheduler(model, parallel=2, n_ctx=256, n_threads=2).start()
    try:
        for spec in (None, "prompt_lookup"):
            lps = []
            text = _collect(sch, ids, dict(temperature=0, max_tokens=12, speculative=spec), logprobs=2, lps=lps)()
            got.append((text, lps))
        assert sch.m["draft_accepted"] > 0
    finally:
        sch.stop()
    assert got[0] == got[1] and len(got[0][1]) == 12
