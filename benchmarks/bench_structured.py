"""Structured output's fixed costs: the llguidance vocabulary bridge per model, a schema's compile, a matcher's
first mask and the per-token mask of a JSON document.

    python benchmarks/bench_structured.py [--rounds 5] [--models default,gemma3-270m] [--vocab FILE.gguf ...]

For each model (catalogue name or GGUF path; only its tokenizer is read) and each vocabulary-only GGUF given:
- vocabulary: Vocabulary(tokenizer, n_vocab) built from scratch (the once-per-model cost; budget 0.3 s at 49k
  tokens, ~3 s at 262k);
- compile: Grammar.json_schema(SCHEMA) (llguidance validates it; done per SamplingParams);
- matcher: Matcher(vocab, grammar) + the first fill_mask() (per request, before the first token);
- per token: fill_mask() + consume() over the tokens of one document, mean per token.
Median over rounds. Run it on a quiet machine: the numbers are only as steady as the CPU is idle.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, when not installed
from fastgguf import hub  # noqa: E402
from fastgguf.engine.grammar import Grammar, Matcher, Vocabulary  # noqa: E402
from fastgguf.engine.model import Model  # noqa: E402
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", default="default,gemma3-270m", help="comma list of catalogue names or GGUF paths")
    ap.add_argument("--vocab", nargs="*", default=[], help="vocabulary-only GGUF files (tests/data/vocab, unpacked)")
    args = ap.parse_args()
    print(f"{'model':40s} {'n_vocab':>7s} {'vocab ms':>10s} {'schema ms':>9s} {'first ms':>9s} {'us/token':>10s}")
    for spec in [s for s in args.models.split(",") if s] + args.vocab:
        label, tok, n_vocab = load(spec)
        bench(label, tok, n_vocab, args.rounds)


if __name__ == "__main__":
    main()
