#!/usr/bin/env python3
"""Exact speculative decoding on a code edit (issue 23): fastgguf serve against llama-server, plain and with each
engine's draft-model-free speculative modes, same file, threads and client; decode tokens/s, acceptance, and
whether the speculative text equals the plain one (it must: greedy).

    python benchmarks/bench_speculative.py --threads 1 2 --rounds 3 --out        # the integrator's run
    python benchmarks/bench_speculative.py -m gemma3-270m --threads 1 2 --rounds 3 --out RESULTS/....json
    python benchmarks/bench_speculative.py --tiny                                # a smoke run (~1 minute)

The task: benchmarks/data/library_loans.py (306 lines, ~3.8k tokens with SmolLM2's tokenizer) in a chat message,
followed by "Rename the identifier `catalog` to `registry` everywhere ... return the whole file." (57
occurrences), greedy (temperature 0), max_tokens enough for the whole file (--max-tokens N measures the first N),
one slot, --ctx-size 8192. Whether the model does the task decides how much there is to copy: the column "file
lines reproduced" says it (the share of the renamed file's lines found in the output). SmolLM2-135M (the default)
describes the file instead, falling into repetition; gemma3-270m starts copying it, then wanders. Every measurement starts a fresh server (no prompt cache, and no n-gram pool that a previous request of the
same text filled: llama-server's ngram-mod pool is shared across requests), sends one request through the official
openai client (streamed /v1/chat/completions with usage), and stops the server; the configurations alternate in
order between rounds and the medians are reported.
  decode tok/s   (completion tokens - 1) / (time of the last streamed text chunk - time of the first): the prompt
                 is excluded; a step that accepts several drafted tokens may stream them in one chunk, so tokens
                 are counted from the usage, not from chunks
  fastgguf       plain, and extra_body {"speculative": "prompt_lookup", "draft_max": K} for K in --draft-max;
                 acceptance from /metrics (fastgguf_draft_tokens_total / fastgguf_draft_accepted_total, read
                 before and after the request). A fastgguf without those counters has no speculative decoding:
                 its speculative runs are skipped and the script says so.
  llama-server   plain, and --spec-type M for M in --llama-modes with K as each mode's draft length:
                 ngram-simple --spec-ngram-simple-size-m K, ngram-map-k --spec-ngram-map-k-size-m K, ngram-mod
                 --spec-ngram-mod-n-max K --spec-ngram-mod-n-min max(1, 3K/4) (its defaults 64/48 keep that
                 ratio), ngram-cache (its draft length is fixed at 8: run once); --spec-draft-n-max K as well.
                 Acceptance from the response's timings (draft_n, draft_n_accepted).
Also printed: the plain texts of the two engines compared (they may differ at a near tie). llama.cpp's speculative
text can differ from its plain one (its batched verification is not bit-exact: seen with gemma3-270m); fastgguf's
must not. Cost: 15 configurations per round and thread count (with the defaults), each a server start, a ~3.8k-token
prompt and up to ~4k decoded tokens: with --rounds 3 --threads 1 2 over an hour; --max-tokens 1024 cuts it to a
fraction.
Targets (issue 23): fastgguf's best speculative decode >= 2x fastgguf plain and >= 1.5x llama.cpp's best mode.
JSON: only with --out (benchmarks/results/bench-speculative-<date>.json, or the path given)."""
import argparse
import datetime
import json
import os
import re
import statistics
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from bench_server import Server  # noqa: E402
from compare import _cpu_model, _variant_path  # noqa: E402

DATA = os.path.join(HERE, "data", "library_loans.py")
LLAMA_SERVER = os.environ.get("LLAMA_SERVER", os.path.expanduser("~/.cache/llama-ref/build/bin/llama-server"))
LLAMA_MODES = ("ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache")
TARGETS = {"vs_plain": 2.0, "vs_llama_best": 1.5}


def prompt(code, old, new):
    """The file first, the instruction after it (small models follow it better there: gemma3-270m then starts
    copying the file; SmolLM2-135M describes it either way)."""
    return (f"```python\n{code}```\n\nRename the identifier `{old}` to `{new}` everywhere in the Python file above "
            f"(functions, parameters, variables, docstrings and comments), change nothing else, and return the "
            f"whole file.")


def lines_reproduced(text, code, old, new):
    """Share of the renamed file's non-blank lines that occur in text: did the model do the task (1.0) or write
    something else (near 0)? Speculative decoding gains most on the copy."""
    want = [ln.strip() for ln in re.sub(rf"\b{re.escape(old)}\b", new, code).splitlines() if ln.strip()]
    got = {ln.strip() for ln in text.splitlines()}
    return sum(ln in got for ln in want) / len(want) if want else 0.0


def llama_args(mode, k):
    """llama-server's arguments for speculative mode `mode` drafting up to k tokens."""
    size = {"ngram-simple": ["--spec-ngram-simple-size-m", str(k)],
            "ngram-map-k": ["--spec-ngram-map-k-size-m", str(k)],
            "ngram-map-k4v": ["--spec-ngram-map-k4v-size-m", str(k)],
            "ngram-mod": ["--spec-ngram-mod-n-max", str(k), "--spec-ngram-mod-n-min", str(max(1, 3 * k // 4))]}
    return ["--spec-type", mode, "--spec-draft-n-max", str(k)] + size.get(mode, [])


def draft_counters(base):
    """fastgguf's (drafted, accepted) totals from /metrics; None when it has no such counters."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    vals = {}
    for line in text.splitlines():
        name, _, v = line.partition(" ")
        if name in ("fastgguf_draft_tokens_total", "fastgguf_draft_accepted_total"):
            vals[name] = float(v)
    if len(vals) < 2:
        return None
    return vals["fastgguf_draft_tokens_total"], vals["fastgguf_draft_accepted_total"]


def request(base, messages, max_tokens, extra):
    """One streamed chat completion: text, usage, times of the first and last text chunks, llama's timings."""
    import openai
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=3600)
    name = client.models.list().data[0].id   # the name each server gives its model
    t_send = time.perf_counter()
    stream = client.chat.completions.create(model=name, messages=messages, max_tokens=max_tokens, temperature=0.0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body=extra or None)
    parts, first, last, usage, timings, finish = [], None, None, None, None, None
    for chunk in stream:
        now = time.perf_counter()
        for c in chunk.choices:
            if c.delta and c.delta.content:
                parts.append(c.delta.content)
                first = first or now
                last = now
            finish = c.finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
        timings = (chunk.model_extra or {}).get("timings") or timings   # llama-server's, on the last chunk
    n = usage.completion_tokens if usage else None
    return {"text": "".join(parts), "completion_tokens": n, "prompt_tokens": usage.prompt_tokens if usage else None,
            "finish_reason": finish, "ttft_s": first - t_send if first else None,
            "decode_tps": (n - 1) / (last - first) if n and n > 1 and last > first else None, "timings": timings}


def measure(cfg, a, model, threads, messages):
    """A fresh server for one configuration, one request, the server stopped."""
    engine, mode, k = cfg
    extra_args = [] if engine == "fastgguf" or mode == "plain" else llama_args(mode, k)
    srv = Server(engine, model, 1, a.ctx_size, threads, a.llama_server, extra_args)
    try:
        before = draft_counters(srv.base) if engine == "fastgguf" else None
        extra = {"speculative": "prompt_lookup", "draft_max": k} if engine == "fastgguf" and mode != "plain" else {}
        r = request(srv.base, messages, a.max_tokens, extra)
        if engine == "fastgguf" and before is not None:
            after = draft_counters(srv.base)
            r["draft_n"], r["draft_accepted"] = after[0] - before[0], after[1] - before[1]
        elif engine == "llama.cpp" and mode != "plain" and r["timings"]:   # no draft_n: nothing was drafted
            r["draft_n"], r["draft_accepted"] = r["timings"].get("draft_n", 0), r["timings"].get("draft_n_accepted", 0)
    finally:
        srv.stop()
    return r


def fastgguf_has_speculative(model, a):
    """Does this checkout's fastgguf serve count drafts (the spec branch of issue 23)?"""
    srv = Server("fastgguf", model, 1, 512, 1, a.llama_server)
    try:
        return draft_counters(srv.base) is not None
    finally:
        srv.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", help="GGUF file or catalogue name such as gemma3-270m (default: the default "
                                          "model, SmolLM2-135M-Instruct Q4_1)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--draft-max", type=int, nargs="+", help="K: tokens drafted per step (default 4 8 16)")
    ap.add_argument("--llama-modes", nargs="*", help="llama-server --spec-type values to run (default: "
                                                     f"{' '.join(LLAMA_MODES)}; none given: plain only)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="cap the completion (default: the file's tokens + 256: the whole file)")
    ap.add_argument("--ctx-size", type=int, default=8192)
    ap.add_argument("--rename", nargs=2, default=["catalog", "registry"], metavar=("OLD", "NEW"))
    ap.add_argument("--tiny", action="store_true", help="a smoke run: the file's first 60 lines, 48 tokens, one "
                                                        "round, 1 thread; K=4 and ngram-simple unless given")
    ap.add_argument("--llama-server", default=LLAMA_SERVER)
    ap.add_argument("--out", nargs="?", const="", default=None,
                    help="write the JSON (default path benchmarks/results/bench-speculative-<date>.json)")
    a = ap.parse_args(argv)
    with open(DATA) as f:
        code = f.read()
    if a.tiny:
        code = "".join(code.splitlines(keepends=True)[:60])
        a.max_tokens, a.rounds, a.threads, a.ctx_size = a.max_tokens or 48, 1, [1], 2048
        a.draft_max, a.llama_modes = a.draft_max or [4], ["ngram-simple"] if a.llama_modes is None else a.llama_modes
    a.draft_max = a.draft_max or [4, 8, 16]
    a.llama_modes = list(LLAMA_MODES) if a.llama_modes is None else a.llama_modes
    from fastgguf import Tokenizer, hub
    model = _variant_path(a.model) if a.model else hub.default_model_path()
    if a.max_tokens is None:
        a.max_tokens = len(Tokenizer(model).encode(code, add_special=False)) + 256
    messages = [{"role": "user", "content": prompt(code, *a.rename)}]
    llama = a.llama_server if os.access(a.llama_server, os.X_OK) else None
    if llama is None:
        print(f"llama-server not found at {a.llama_server}: fastgguf alone", file=sys.stderr)
    spec_ok = fastgguf_has_speculative(model, a)
    if not spec_ok:
        print("NOTE: this fastgguf has no speculative decoding (no fastgguf_draft_tokens_total in /metrics: the "
              "request fields speculative/draft_max are not implemented, the spec branch is not merged): its "
              "speculative runs are skipped", file=sys.stderr)
    cfgs = [("fastgguf", "plain", None)] + [("fastgguf", "prompt_lookup", k) for k in a.draft_max if spec_ok]
    if llama:
        cfgs.append(("llama.cpp", "plain", None))
        for m in a.llama_modes:
            cfgs += [("llama.cpp", m, 8)] if m == "ngram-cache" else [("llama.cpp", m, k) for k in a.draft_max]
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu": _cpu_model(),
               "load_average": os.getloadavg()[0], "model": model, "data": os.path.relpath(DATA, HERE),
               "rename": a.rename, "max_tokens": a.max_tokens, "ctx_size": a.ctx_size, "rounds": a.rounds,
               "llama_server": llama, "fastgguf_speculative": spec_ok, "targets": TARGETS, "threads": {}}
    for th in a.threads:
        runs = {c: [] for c in cfgs}
        for r in range(a.rounds):   # alternating order: drift hits every configuration alike
            for c in cfgs if r % 2 == 0 else cfgs[::-1]:
                try:
                    x = measure(c, a, model, th, messages)
                except (Exception, SystemExit) as e:   # a mode this llama-server lacks: said, not fatal
                    x = {"error": str(e)[-500:]}
                runs[c].append(x)
                print(f"  t{th} round {r + 1} {c[0]} {c[1]}" + (f" K={c[2]}" if c[2] else "") + ": "
                      + (f"error {x['error'][-200:]}" if "error" in x else
                         f"{x['decode_tps'] or 0:.1f} tok/s, {x['completion_tokens']} tokens"
                         + (f", accepted {x['draft_accepted']:.0f}/{x['draft_n']:.0f}" if x.get("draft_n") else "")),
                      file=sys.stderr)
        results["threads"][str(th)] = summarize(runs, code, *a.rename)
    report(results)
    if a.out is not None:
        out = a.out or os.path.join(HERE, "results", f"bench-speculative-{datetime.date.today()}.json")
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
        print("wrote", out)
    return 0


def summarize(runs, code, old, new):
    """Per configuration: medians, acceptance, the text compared with its engine's plain text (first round)."""
    rows = []
    plain = {e: next((x["text"] for x in rs if "text" in x), None) for (e, m, _), rs in runs.items() if m == "plain"}
    for (engine, mode, k), rs in runs.items():
        ok = [x for x in rs if "error" not in x and x["decode_tps"]]
        row = {"engine": engine, "mode": mode, "k": k, "runs": rs, "errors": len(rs) - len(ok)}
        if ok:
            row["decode_tps"] = statistics.median(x["decode_tps"] for x in ok)
            row["completion_tokens"] = ok[0]["completion_tokens"]
            row["prompt_tokens"] = ok[0]["prompt_tokens"]
            drafted = sum(x.get("draft_n") or 0 for x in ok)
            row["acceptance"] = sum(x.get("draft_accepted") or 0 for x in ok) / drafted if drafted else None
            row["drafted_per_run"] = drafted / len(ok)
            row["same_text_as_plain"] = all(x["text"] == plain.get(engine) for x in ok)
            row["same_text_across_rounds"] = len({x["text"] for x in ok}) == 1
            row["file_lines_reproduced"] = lines_reproduced(ok[0]["text"], code, old, new)
        rows.append(row)
    base = next((r.get("decode_tps") for r in rows if r["engine"] == "fastgguf" and r["mode"] == "plain"), None)
    spec_llama = [r for r in rows if r["engine"] == "llama.cpp" and r["mode"] != "plain" and r.get("decode_tps")]
    best_llama = max(spec_llama, key=lambda r: r["decode_tps"], default=None)
    for r in rows:
        if r.get("decode_tps"):
            r["vs_fastgguf_plain"] = r["decode_tps"] / base if base else None
            r["vs_llama_best_spec"] = r["decode_tps"] / best_llama["decode_tps"] if best_llama else None
    spec_ours = [r for r in rows if r["engine"] == "fastgguf" and r["mode"] != "plain" and r.get("decode_tps")]
    best = max(spec_ours, key=lambda r: r["decode_tps"], default=None)
    texts = {e: t for e, t in plain.items() if t is not None}
    return {"rows": rows, "best_fastgguf": best and {"k": best["k"], "decode_tps": best["decode_tps"]},
            "best_llama": best_llama and {"mode": best_llama["mode"], "k": best_llama["k"],
                                          "decode_tps": best_llama["decode_tps"]},
            "plain_texts_equal_across_engines": len(set(texts.values())) == 1 if len(texts) == 2 else None}


def report(results):
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    print(f"\nspeculative decoding on a code edit ({results['cpu']}, load average {results['load_average']:.2f}); "
          f"{os.path.basename(results['model'])}, rename {results['rename'][0]} -> {results['rename'][1]}, "
          f"max_tokens {results['max_tokens']}, medians of {results['rounds']} alternating rounds")
    if not results["fastgguf_speculative"]:
        print("fastgguf speculative: NOT AVAILABLE in this checkout (no draft counters in /metrics): skipped")
    for th, s in results["threads"].items():
        print(f"\n{th} thread(s):")
        print("| engine | mode | K | decode tok/s | x fastgguf plain | x llama.cpp best spec | acceptance | "
              "drafted/run | tokens | file lines reproduced | text == plain |")
        print("|---" * 11 + "|")
        for r in s["rows"]:
            if not r.get("decode_tps"):
                print(f"| {r['engine']} | {r['mode']} | {f(r['k'], 'd')} | failed: "
                      f"{(r['runs'][0].get('error') or 'no tokens')[-120:]!r} |")
                continue
            acc = r["acceptance"]
            print(f"| {r['engine']} | {r['mode']} | {f(r['k'], 'd')} | {r['decode_tps']:.1f} | "
                  f"{f(r['vs_fastgguf_plain'], '.2f')} | {f(r['vs_llama_best_spec'], '.2f')} | "
                  f"{'-' if acc is None else f'{acc:.0%}'} | {r['drafted_per_run']:.0f} | {r['completion_tokens']} | "
                  f"{r['file_lines_reproduced']:.0%} | "
                  + ("-" if r["mode"] == "plain" else "yes" if r["same_text_as_plain"] else
                     "NO (must be equal)" if r["engine"] == "fastgguf" else "NO")
                  + ("" if r["same_text_across_rounds"] else ", differs between rounds") + " |")
        if s["plain_texts_equal_across_engines"] is not None:
            print(f"plain texts equal across the two engines: {s['plain_texts_equal_across_engines']}")
        best, bl = s["best_fastgguf"], s["best_llama"]
        base = next((r["decode_tps"] for r in s["rows"] if r["engine"] == "fastgguf" and r["mode"] == "plain"
                     and r.get("decode_tps")), None)
        if best and base:
            v = best["decode_tps"] / base
            print(f"target fastgguf speculative (best K={best['k']}) >= {TARGETS['vs_plain']}x fastgguf plain: "
                  f"{v:.2f}x {'met' if v >= TARGETS['vs_plain'] else 'NOT met'}")
        if best and bl:
            v = best["decode_tps"] / bl["decode_tps"]
            print(f"target >= {TARGETS['vs_llama_best']}x llama.cpp's best mode ({bl['mode']} K={bl['k']}, "
                  f"{bl['decode_tps']:.1f} tok/s): {v:.2f}x {'met' if v >= TARGETS['vs_llama_best'] else 'NOT met'}")
        if not best:
            print("targets: not measurable (no fastgguf speculative run)")


if __name__ == "__main__":
    sys.exit(main())
