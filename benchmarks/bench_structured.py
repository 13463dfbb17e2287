"""Structured output's fixed costs: the llguidance vocabulary bridge per model, a schema's compile, a matcher's
first mask and the per-token mask of a JSON document.

    python benchmarks/bench_structured.py [--rounds 5] [--models default,gemma3-270m] [--vocab FILE.gguf ...]
                                          [--tokens 128] [--concurrent] [--skip-fixed] [--skip-decode]

For each model (catalogue name or GGUF path; only its tokenizer is read) and each vocabulary-only GGUF given:
- vocabulary: Vocabulary(tokenizer, n_vocab) built from scratch (the once-per-model cost; budget 0.3 s at 49k
  tokens, ~3 s at 262k);
- compile: Grammar.json_schema(SCHEMA) (llguidance validates it; done per SamplingParams);
- matcher: Matcher(vocab, grammar) + the first fill_mask() (per request, before the first token);
- per token: fill_mask() + consume() over the tokens of one document, mean per token.
Median over rounds. Run it on a quiet machine: the numbers are only as steady as the CPU is idle.

Then, per model (not for vocabulary-only files), the decode cost of a constraint, as a markdown table:
- per token, one thread, greedy, same prompt, same token count: generate() under LONG_SCHEMA (its value cannot end
  before max_tokens=--tokens) against generate() unconstrained with max_tokens = the constrained count and every
  end-of-generation id banned (logit_bias -inf: it cannot stop early either). Cost = a --tokens run minus a
  1-token run (the prompt and its first token), over tokens - 1, on three clocks: wall, the decoding thread's CPU
  and the process's CPU (which includes the mask computed in the background while the forward pass runs); the two
  modes alternate round by round and the median is kept;
- with --concurrent: aggregate tok/s (wall clock) of 4 constrained streams against 4 unconstrained ones through
  one Scheduler (parallel=4, one thread), every stream --tokens long; median over rounds, the modes alternating.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, when not installed
from fastgguf import hub  # noqa: E402
from fastgguf.engine.generate import generate  # noqa: E402
from fastgguf.engine.grammar import Grammar, Matcher, Vocabulary, matchers  # noqa: E402
from fastgguf.engine.model import Model  # noqa: E402
from fastgguf.engine.params import SamplingParams  # noqa: E402
from fastgguf.engine.scheduler import Done, Error, Request, Scheduler  # noqa: E402
from fastgguf.tokenizer import Tokenizer  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 200},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "owner": {"type": "object", "properties": {"id": {"type": "integer"}, "email": {"type": "string"}},
                  "required": ["id"]},
    },
    "required": ["name", "kind", "age", "tags", "owner"],
}
DOCUMENT = json.dumps({"name": "Tom the third", "kind": "cat", "age": 12, "tags": ["grey", "loud", "old"],
                       "owner": {"id": 7, "email": "someone@example.com"}}, indent=2)


# a JSON value that cannot end before a few hundred tokens: 64+ objects of a fixed shape
LONG_SCHEMA = {"type": "array", "minItems": 64, "items": {
    "type": "object", "properties": {"name": {"type": "string", "minLength": 3, "maxLength": 12},
                                     "n": {"type": "integer", "minimum": 0, "maximum": 999}, "ok": {"type": "boolean"}},
    "required": ["name", "n", "ok"], "additionalProperties": False}}
PROMPT = "A JSON list of records, one per person in the story:"


def timed(fn, rounds):
    times, out = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def load(spec):
    """(label, Tokenizer, n_vocab) of a catalogue name / GGUF path of a model, or of a vocabulary-only GGUF."""
    path = hub.resolve(None if spec == "default" else spec)
    try:
        model = Model(path)
        return os.path.basename(path), model.tokenizer, model.n_vocab
    except (ValueError, KeyError):          # vocabulary only: no weights, no hparams
        tok = Tokenizer(path)
        return os.path.basename(path), tok, tok.n_vocab


def bench(label, tok, n_vocab, rounds):
    t_vocab, vocab = timed(lambda: Vocabulary(tok, n_vocab), rounds)
    t_compile, grammar = timed(lambda: Grammar.json_schema(SCHEMA), rounds)

    def first_mask():
        m = Matcher(vocab, grammar)
        m.fill_mask()
        return m
    t_matcher, _ = timed(first_mask, rounds)
    ids = tok.tokenize_raw(DOCUMENT)

    def document():
        m = Matcher(vocab, grammar)
        for t in ids:
            m.fill_mask()
            m.consume(t)
    t_doc, _ = timed(document, rounds)
    per_token = (t_doc - t_matcher) / len(ids)
    print(f"{label:40s} {n_vocab:>7d} {t_vocab * 1e3:10.1f} {t_compile * 1e3:9.2f} {t_matcher * 1e3:9.2f} "
          f"{per_token * 1e6:10.1f}")


def decode_params(model, tokens, constrained):
    if constrained:
        return SamplingParams(json_schema=LONG_SCHEMA, temperature=0, max_tokens=tokens)
    return SamplingParams(temperature=0, max_tokens=tokens,
                          logit_bias={int(i): float("-inf") for i in model.tokenizer.eog_ids})


CLOCKS = ("wall", "thread", "process")  # wall clock; the decoding thread's CPU; the process's CPU (mask worker too)


def cpu(model, params):
    """({clock: seconds}, completion tokens) of one generate() call."""
    w, t, p = time.perf_counter(), time.thread_time(), time.process_time()
    r = generate(model, PROMPT, params)
    return {"wall": time.perf_counter() - w, "thread": time.thread_time() - t,
            "process": time.process_time() - p}, len(r.token_ids)


def decode_cost(model, tokens, rounds):
    """{mode: {clock: median s per decoded token}} for "constrained" and "unconstrained"."""
    first, n = cpu(model, decode_params(model, tokens, True))        # warm: vocabulary, compile, caches
    if n != tokens:
        raise SystemExit(f"the constrained run ended after {n} of {tokens} tokens: raise LONG_SCHEMA's minItems")
    per = {"constrained": [], "unconstrained": []}
    for r in range(rounds):
        for mode in (("constrained", "unconstrained") if r % 2 == 0 else ("unconstrained", "constrained")):
            full, n_full = cpu(model, decode_params(model, tokens, mode == "constrained"))
            one, _ = cpu(model, decode_params(model, 1, mode == "constrained"))
            assert n_full == tokens, (mode, n_full)
            per[mode].append({c: (full[c] - one[c]) / (tokens - 1) for c in CLOCKS})
    return {mode: {c: statistics.median(x[c] for x in v) for c in CLOCKS} for mode, v in per.items()}


def concurrent(model, tokens, rounds, streams=4):
    """{mode: median aggregate tok/s} of `streams` requests at once through one Scheduler (one thread), the two
    modes alternating round by round."""
    per = {"constrained": [], "unconstrained": []}
    for r in range(rounds):
        for mode in (("constrained", "unconstrained") if r % 2 == 0 else ("unconstrained", "constrained")):
            per[mode].append(_concurrent_once(model, tokens, streams, mode))
    return {mode: statistics.median(v) for mode, v in per.items()}


def _concurrent_once(model, tokens, streams, mode):
    """Aggregate tok/s (wall clock) of `streams` requests of one mode at once."""
    prompt = list(model.tokenize(PROMPT))
    params = decode_params(model, tokens, mode == "constrained")
    eng = Scheduler(model, parallel=streams, n_ctx=len(prompt) + tokens + 8, n_threads=1).start()
    try:
        done, all_done = [], threading.Event()

        def sink(evs):
            for ev in evs:
                if isinstance(ev, (Done, Error)):
                    done.append(ev)
                    if len(done) == streams:
                        all_done.set()
        reqs = [Request([prompt], params, sink, constraints=matchers(model, params.constraint(), 1)
                        if mode == "constrained" else None) for _ in range(streams)]
        t = time.perf_counter()
        for req in reqs:
            eng.submit(req)
        all_done.wait()
        wall = time.perf_counter() - t
    finally:
        eng.stop()
    errors = [ev.error for ev in done if isinstance(ev, Error)]
    if errors:
        raise errors[0]
    return sum(ev.usage.completion_tokens for ev in done) / wall


def decode_table(specs, tokens, rounds, with_concurrent):
    print()
    print(f"{tokens} tokens, one thread, greedy; ms per token (median); ratio = constrained / unconstrained")
    print()
    print("| model | mode | wall ms | thread CPU ms | process CPU ms | wall ratio | thread ratio | process ratio |"
          + (" 4 streams tok/s |" if with_concurrent else ""))
    print("|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if with_concurrent else ""))
    for spec in specs:
        path = hub.resolve(None if spec == "default" else spec)
        model = Model(path, n_threads=1)
        cost = decode_cost(model, tokens, rounds)
        agg = concurrent(model, tokens, rounds) if with_concurrent else {}
        base = cost["unconstrained"]
        for mode in ("unconstrained", "constrained"):
            c = cost[mode]
            row = (f"| {os.path.basename(path)} | {mode} | " + " | ".join(f"{c[k] * 1e3:.3f}" for k in CLOCKS)
                   + " | " + " | ".join(f"{c[k] / base[k]:.3f}" for k in CLOCKS) + " |")
            print(row + (f" {agg[mode]:.1f} |" if with_concurrent else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", default="default,gemma3-270m", help="comma list of catalogue names or GGUF paths")
    ap.add_argument("--vocab", nargs="*", default=[], help="vocabulary-only GGUF files (tests/data/vocab, unpacked)")
    ap.add_argument("--tokens", type=int, default=128, help="decoded tokens per run of the decode table (>= 2)")
    ap.add_argument("--concurrent", action="store_true", help="also 4 streams at once through the Scheduler")
    ap.add_argument("--skip-fixed", action="store_true", help="only the decode table")
    ap.add_argument("--skip-decode", action="store_true", help="only the fixed costs")
    args = ap.parse_args()
    if args.tokens < 2:
        ap.error("--tokens must be >= 2")
    models = [s for s in args.models.split(",") if s]
    if not args.skip_fixed:
        fixed(models + args.vocab, args.rounds)
    if not args.skip_decode:
        decode_table(models, args.tokens, args.rounds, args.concurrent)


def fixed(specs, rounds):
    print(f"{'model':40s} {'n_vocab':>7s} {'vocab ms':>10s} {'schema ms':>9s} {'first ms':>9s} {'us/token':>10s}")
    for spec in specs:
        label, tok, n_vocab = load(spec)
        bench(label, tok, n_vocab, rounds)


if __name__ == "__main__":
    main()
