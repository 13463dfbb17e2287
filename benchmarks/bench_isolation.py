"""One request's stop list must not slow the others (issue 24, defect 1): a victim's decode rate alone and beside an
attacker that sends the most stop strings allowed, on one Scheduler (the engine thread every client shares).

    python benchmarks/bench_isolation.py [--rounds 3] [--tokens 48] [--threads 2] [--naive]
    python benchmarks/bench_isolation.py --naive --stops 10000 --stop-chars 700   # the issue's "before" attack

The attacker: MAX_STOPS stop strings of MAX_STOP_CHARS characters (--stops / --stop-chars lift the limits): decoys
that never start to match, then the repetition of one token's text plus another last character, and a logit_bias
forcing that token: its text stays held back (a prefix of the last stop) for as long as it runs, the worst case for
a per-stop scan (every length of every decoy tried after each token). The victim: a greedy completion of --tokens tokens. Prints the
victim's tokens/s alone, beside the same forced request without stops, and beside the attacker; the stops' slowdown
is the ratio of the last two (the issue's bound: within 1.5x), median over rounds.
--naive swaps in the per-stop scan that engine/stops.py replaced (the "before" figure). Run on a quiet machine.
"""
import argparse
import os
import queue
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, when not installed
from fastgguf import hub  # noqa: E402
from fastgguf.engine import params as params_module, sequence  # noqa: E402
from fastgguf.engine.model import Model  # noqa: E402
from fastgguf.engine.params import SamplingParams  # noqa: E402
from fastgguf.engine.scheduler import Done, Error, Request, Scheduler  # noqa: E402
from fastgguf.engine.stops import MAX_STOP_CHARS, MAX_STOPS  # noqa: E402


class NaiveStopText:
    """The matcher before issue 24: every stop searched in the held-back text after every piece."""

    def __init__(self, matcher):
        self.stops, self.pending, self.stopped, self.matched = list(matcher.stops), "", False, None

    def feed(self, text):
        pending = self.pending + text
        cut, self.matched = min(((i, s) for s, i in ((s, pending.find(s)) for s in self.stops) if i >= 0),
                                default=(-1, None))
        if cut >= 0:
            self.pending, self.stopped = "", True
            return pending[:cut]
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(pending)), hold, -1):
                if pending.endswith(s[:k]):
                    hold = k
                    break
        self.pending = pending[len(pending) - hold:]
        return pending[:len(pending) - hold]

    def flush(self, tail=""):
        pending, self.pending = self.pending + tail, ""
        return pending


def victim_rate(eng, ids, tokens):
    q = queue.SimpleQueue()
    t0 = time.perf_counter()
    eng.submit(Request([ids], SamplingParams(temperature=0, max_tokens=tokens), q.put))
    while True:
        for ev in q.get():
            if isinstance(ev, Error):
                raise ev.error
            if isinstance(ev, Done):
                return ev.usage.completion_tokens / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--naive", action="store_true", help="the per-stop scan of before issue 24")
    ap.add_argument("--stops", type=int, default=MAX_STOPS, help="stop strings (beyond the limit: lifted here)")
    ap.add_argument("--stop-chars", type=int, default=MAX_STOP_CHARS, help="characters per stop string")
    args = ap.parse_args()
    if args.naive:
        sequence.StopText = NaiveStopText
    params_module.MAX_STOPS, params_module.MAX_STOP_CHARS = max(args.stops, 1), max(args.stop_chars, 1)
    model = Model(hub.default_model_path(), n_threads=args.threads)
    eng = Scheduler(model, parallel=2, n_ctx=2048, n_threads=args.threads).start()
    ids = list(model.tokenize("The history of the city"))
    tok = next(t for t in range(1000, model.n_vocab) if model.detokenize([t]).strip())  # a token with visible text
    piece = model.detokenize([tok])
    # decoys first (a letter of their own, repeated: no prefix of them is ever in the text, so a per-stop scan tries
    # every length of each), then the stop that holds the forced text back
    stops = [chr(0x4E00 + i) * args.stop_chars for i in range(args.stops - 1)]
    stops.append((piece * args.stop_chars)[:args.stop_chars - 1] + chr(0x4DFF))
    forced = dict(temperature=0, max_tokens=2000 - len(ids), logit_bias={tok: 100.0})
    rates = {"alone": [], "beside a plain request": [], f"beside {args.stops} stops": []}
    for _ in range(args.rounds):
        for name, params in zip(rates, (None, SamplingParams(**forced), SamplingParams(**forced, stop=stops))):
            a = None
            if params is not None:
                a = eng.submit(Request([ids], params, lambda evs: None))
                time.sleep(0.2)  # the other request is decoding (the attacker's text held back)
            rates[name].append(victim_rate(eng, ids, args.tokens))
            if a is not None:
                a.cancel()
                while eng.live_sequences():
                    time.sleep(0.01)
    med = {k: statistics.median(v) for k, v in rates.items()}
    plain, attacked = list(med.values())[1:]
    print(f"matcher: {'naive (before)' if args.naive else 'automaton'}; victim tok/s: "
          + ", ".join(f"{k} {v:.1f}" for k, v in med.items())
          + f"; the stops' slowdown {plain / attacked:.2f}x (bound: 1.5x)")
    eng.stop()


if __name__ == "__main__":
    main()
