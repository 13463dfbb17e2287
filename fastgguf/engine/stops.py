"""Stop strings: one automaton over all of a request's stop strings, and the streaming filter that uses it.

    m = StopMatcher(("\\n\\n", "User:"))     # built once per set of stops (SamplingParams builds it where the request
                                          # is made, never on the engine thread; stop_matcher caches the last few)
    st = StopText(m)                      # one per sequence: carries the automaton's state across pieces
    out = st.feed(piece)                  # text safe to emit now; st.stopped once a stop string was found
    out = st.flush(tail)                  # at the end: the held-back text, stop applied

Why an automaton (Aho-Corasick): checking every stop string after every token costs (number of stops) x (their
length) per token, on the engine thread that every client shares: 10,000 stops slowed every other stream 4x, and
long ones that kept text held back brought the server to 0.6 tokens/s (issue 24). Here a token costs one transition
per new character (amortized), whatever the number and length of the stops; the held-back text is the automaton's
current depth, so it is never scanned again. The limits (MAX_STOPS stops of at most MAX_STOP_CHARS characters) bound
what building one costs (at most MAX_STOPS * MAX_STOP_CHARS nodes, a few milliseconds) and its memory.
"""
import collections
import functools

__all__ = ["StopMatcher", "StopText", "stop_matcher", "MAX_STOPS", "MAX_STOP_CHARS"]

# OpenAI allows 4 stops; llama-server has no limit. 64 stops of 500 characters cover every stop list seen in
# practice (a few short markers) with room to spare, and keep an automaton under 32,000 nodes.
MAX_STOPS = 64
MAX_STOP_CHARS = 500


class StopMatcher:
    """The Aho-Corasick automaton of a tuple of non-empty stop strings (immutable, shared by every sequence of a
    request). State 0 is the root; a state's depth is the length of the text it stands for."""
    __slots__ = ("stops", "goto", "fail", "depth", "out", "max_len")

    def __init__(self, stops):
        self.stops = tuple(stops)
        goto, depth, term = [{}], [0], [0]
        for s in self.stops:
            node = 0
            for ch in s:
                nxt = goto[node].get(ch)
                if nxt is None:
                    nxt = len(goto)
                    goto[node][ch] = nxt
                    goto.append({})
                    depth.append(depth[node] + 1)
                    term.append(0)
                node = nxt
            term[node] = depth[node]
        fail, out = [0] * len(goto), [0] * len(goto)  # out: the length of the longest stop ending at the state
        todo = collections.deque(goto[0].values())
        while todo:  # breadth first: a state's failure link (a shorter state) is finished before it
            u = todo.popleft()
            out[u] = term[u] or out[fail[u]]
            for ch, v in goto[u].items():
                f = fail[u]
                while f and ch not in goto[f]:
                    f = fail[f]
                fail[v] = goto[f].get(ch, 0) if u else 0
                todo.append(v)
        self.goto, self.fail, self.depth, self.out = goto, fail, depth, out
        self.max_len = max(map(len, self.stops), default=0)

    def scan(self, state, text):
        """Run text from state: (the state after it, the offset in text where the earliest-starting stop that ends
        in text starts (negative: it started before text), or None). Stops scanning once no later match can start
        earlier than the one found."""
        goto, fail, out = self.goto, self.fail, self.out
        cut = None
        for i, ch in enumerate(text):
            while True:
                nxt = goto[state].get(ch)
                if nxt is not None:
                    state = nxt
                    break
                if not state:
                    break
                state = fail[state]
            n = out[state]
            if n and (cut is None or i + 1 - n < cut):
                cut = i + 1 - n
            if cut is not None and i + 1 - cut >= self.max_len:
                break
        return state, cut


@functools.lru_cache(maxsize=8)
def stop_matcher(stops):
    """The StopMatcher of a tuple of stop strings, cached: every SamplingParams.replace() and every choice of a
    request reuses it."""
    return StopMatcher(stops)


class StopText:
    """Streaming stop-string filter: feed decoded text pieces, get back what may be emitted now.

    Text that could be the start of a stop string is held back until it is known not to be one, so a stop string is
    never emitted, even when it arrives split across tokens. The text cut is the earliest-starting stop string in the
    held-back text and the new piece (as str.find over them would give).

        st = StopText(("\\n\\n",))   # or a StopMatcher (SamplingParams.stop_matcher())
        out = st.feed(piece)       # text safe to emit now ('' while held back)
        if st.stopped: ...         # a stop string (st.matched) was found: out is the text before it; feed no more
        out = st.flush(tail)       # at the end: the held-back text (plus a decoder's flushed tail), stop applied
    """
    __slots__ = ("matcher", "state", "pending", "stopped", "matched")

    def __init__(self, stops=()):
        self.matcher = stops if isinstance(stops, StopMatcher) else stop_matcher(tuple(s for s in stops if s))
        self.state = 0
        self.pending = ""
        self.stopped = False
        self.matched = None  # the stop string found (the shortest of those starting at the cut)

    @property
    def stops(self):
        return self.matcher.stops

    def _run(self, text):
        """(pending + text, the cut in it or None); the state advanced over text."""
        start = len(self.pending)
        self.state, cut = self.matcher.scan(self.state, text)
        return self.pending + text, None if cut is None else start + cut

    def feed(self, text):
        if not self.matcher.stops:
            return text
        pending, cut = self._run(text)
        if cut is not None:
            self.pending, self.stopped, self.state = "", True, 0
            self._found(pending, cut)
            return pending[:cut]
        hold = self.matcher.depth[self.state]  # the longest tail that may still become a stop string
        self.pending = pending[len(pending) - hold:] if hold else ""
        return pending[:len(pending) - hold]

    def flush(self, tail=""):
        """Everything still held back (with `tail` appended), cut at a stop string it completes."""
        pending, cut = self._run(tail) if self.matcher.stops else (self.pending + tail, None)
        self.pending, self.state = "", 0
        if cut is not None:
            self.stopped = True
            self._found(pending, cut)
            return pending[:cut]
        return pending

    def _found(self, text, cut):
        self.matched = min((s for s in self.stops if text.startswith(s, cut)), key=len, default=None)
