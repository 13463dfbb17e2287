"""uniqueItems' per-step cost where the items are a large enum of strings: JSON Schema Store's
github-workflow-template-properties (tests/data/schemas; `categories`: distinct items of 865 language names).

    PYTHONPATH=. python benchmarks/bench_unique_items.py              # mask cost at 4 places in the array
    PYTHONPATH=. python benchmarks/bench_unique_items.py --generate   # and a greedy 768-token generation

Mask cost: Matcher._compute (llguidance's mask, then unique_items) after a prefix with 3 items written, the first
call (unique_items' per-prefix cache emptied before it) and the median of 15. Generation: Model.chat as
JSONSchemaBench's runs ask (the schema's JSON, cut at 3,000 characters, in the prompt), with the time spent in
UniqueItems.forbid and the lookahead (grammar._restrict) summed over its steps. Run it with another checkout on
PYTHONPATH for a before/after, alternating."""
import argparse
import json
import os
import statistics
import time

import fastgguf
from fastgguf.engine import grammar
from fastgguf.engine.grammar import Grammar, Matcher, vocabulary

SCHEMA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data", "schemas",
                      "github-workflow-template-properties.json")
HEAD = '{"name": "x", "description": "y", "categories": ["Python", "C", "Cloud Firestore Security Rules", '
PLACES = [("after ', '", HEAD), ("item start", HEAD + '"'), ("in 'Csound Sc'", HEAD + '"Csound Sc'),
          ("in 'Java'", HEAD + '"Java')]


def mask_cost(model, schema):
    vocab, g, tok = vocabulary(model), Grammar.json_schema(schema), model.tokenizer
    out = {}
    for name, text in PLACES:
        m = Matcher(vocab, g)
        for t in tok.tokenize_raw(text):
            m.fill_mask()
            m.consume(t)
        m.fill_mask()
        for ch in getattr(m._unique.places, "_choices", {}).values():
            if ch is not None:
                ch._steps.clear()
        ts = []
        for _ in range(15):
            t0 = time.perf_counter()
            m._compute()
            ts.append(time.perf_counter() - t0)
        n = sum(bin(int(w)).count("1") for w in m.mask)
        out[name] = f"first {ts[0] * 1e3:.2f} ms, median {statistics.median(ts) * 1e3:.2f} ms, {n} tokens allowed"
    return out


def generation(model, schema):
    spent = [0.0, 0]
    restrict = grammar._restrict

    def timed(*a):
        t0 = time.perf_counter()
        try:
            return restrict(*a)
        finally:
            spent[0] += time.perf_counter() - t0
            spent[1] += 1
    grammar._restrict = timed
    t0 = time.perf_counter()
    try:
        r = model.chat([{"role": "user", "content": "Write a realistic JSON instance of this JSON Schema:\n"
                         + json.dumps(schema)[:3000]}], max_tokens=768, temperature=0, json_schema=schema)
        end = f"{r.finish_reason}, {r.usage.completion_tokens} tokens"
    except RuntimeError as e:
        end = f"RuntimeError: {e}"
    finally:
        grammar._restrict = restrict
    return {"end": end, "wall_s": round(time.perf_counter() - t0, 1), "steps": spent[1],
            "unique_items_ms_per_step": round(spent[0] * 1e3 / max(spent[1], 1), 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--generate", action="store_true")
    args = ap.parse_args()
    with open(SCHEMA) as f:
        schema = json.load(f)
    model = fastgguf.Model(fastgguf.hub.default_model_path(), n_threads=1)
    print(os.path.dirname(fastgguf.__file__), json.dumps(mask_cost(model, schema)))
    if args.generate:
        print(os.path.dirname(fastgguf.__file__), json.dumps(generation(model, schema)))


if __name__ == "__main__":
    main()
