"""Stop strings (issue 24, defect 1): one automaton over all of a request's stops (fastgguf.engine.stops) gives what
checking each stop after each piece gave (the reference below, the code it replaced), at a per-piece cost that does
not grow with the number of stops; their number and length are bounded."""
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fastgguf import SamplingParams  # noqa: E402
from fastgguf.engine.stops import MAX_STOP_CHARS, MAX_STOPS, StopMatcher, StopText  # noqa: E402


class NaiveStopText:
    """The reference: after each piece, find every stop in the held-back text and hold back the longest tail that
    is a proper prefix of a stop."""

    def __init__(self, stops):
        self.stops, self.pending, self.stopped, self.matched = [s for s in stops if s], "", False, None

    def _find(self, text):
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:  # the stop found: the shortest starting there
            self.matched = min((s for s in self.stops if text.startswith(s, cut)), key=len)
        return cut

    def feed(self, text):
        pending = self.pending + text
        cut = self._find(pending)
        if cut >= 0:
            self.pending, self.stopped = "", True
            return pending[:cut]
        hold = max((k for s in self.stops for k in range(1, min(len(s) - 1, len(pending)) + 1)
                    if pending.endswith(s[:k])), default=0)
        self.pending = pending[len(pending) - hold:]
        return pending[:len(pending) - hold]

    def flush(self, tail=""):
        pending, self.pending = self.pending + tail, ""
        cut = self._find(pending)
        if cut >= 0:
            self.stopped = True
            return pending[:cut]
        return pending


def run(filter_, pieces, tail):
    out = []
    for p in pieces:
        out.append(filter_.feed(p))
        if filter_.stopped:
            return out, True, filter_.matched
    out.append(filter_.flush(tail))
    return out, filter_.stopped, filter_.matched


small = st.text(alphabet="ab\u00e9c", max_size=6)  # a small alphabet: stops overlap, nest and repeat


@settings(max_examples=300, deadline=None)
@given(stops=st.lists(small, max_size=6), pieces=st.lists(st.text(alphabet="ab\u00e9cd", max_size=5), max_size=12),
       tail=st.text(alphabet="abc", max_size=3))
def test_automaton_equals_the_naive_reference(stops, pieces, tail):
    """Same emitted pieces, same stop (and the same stop string found), for random stops and texts split at random
    piece boundaries."""
    assert run(StopText(stops), pieces, tail) == run(NaiveStopText(stops), pieces, tail)


def test_earliest_start_wins_within_a_piece():
    """'bc' ends first but 'abcd' starts first: in one piece, the earliest start is cut (as str.find over the
    text gives); split, 'bc' is found before 'abcd' is complete."""
    assert run(StopText(["abcd", "bc"]), ["xabcd"], "") == (["x"], True, "abcd")
    assert run(StopText(["abcd", "bc"]), ["xabc", "d"], "") == (["xa"], True, "bc")


def test_held_back_text_is_the_automatons_depth():
    m = StopMatcher(["hello world"])
    s = StopText(m)
    assert s.feed("say hello wor") == "say " and s.pending == "hello wor"
    assert s.feed("ld!") == "" and s.stopped


def test_limits_are_named():
    SamplingParams(stop=["x"] * MAX_STOPS)
    SamplingParams(stop=["x" * MAX_STOP_CHARS])
    with pytest.raises(ValueError, match=f"at most {MAX_STOPS}"):
        SamplingParams(stop=["x"] * (MAX_STOPS + 1))
    with pytest.raises(ValueError, match=f"at most {MAX_STOP_CHARS}"):
        SamplingParams(stop=["x" * (MAX_STOP_CHARS + 1)])


def test_cost_per_piece_does_not_grow_with_the_stops():
    """The automaton's work for a piece is one transition per character (amortized), whatever the stops: counted,
    not timed. The maximal stop set (MAX_STOPS stops of MAX_STOP_CHARS characters, all sharing the text's prefix so
    that text stays held back) costs the same transitions per character as one short stop."""
    text = "a" * 2000

    def transitions(stops):
        m = StopMatcher(stops)
        calls = 0
        goto = m.goto

        class Counting(dict):
            def get(self, *a):
                nonlocal calls
                calls += 1
                return dict.get(self, *a)
        m.goto = [Counting(g) for g in goto]
        s = StopText(m)
        for i in range(0, len(text), 3):
            s.feed(text[i:i + 3])
        return calls

    worst = [("a" * (MAX_STOP_CHARS - 1)) + chr(0x100 + i) for i in range(MAX_STOPS)]
    assert transitions(worst) <= 2 * len(text) + 2
    assert transitions(["ab"]) <= 2 * len(text) + 2
