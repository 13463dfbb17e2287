#!/usr/bin/env python3
"""Embeddings per second of all-MiniLM-L6-v2 (F16 and Q8_0), fastgguf against llama.cpp's llama-embedding on the
same converted file, at batch 1 and 64 and 1 and 2 threads; and the latency of one short query (the RAG hot path).

    python benchmarks/bench_embed.py [--rounds 5] [--types f16,q8_0] [--threads 1,2] [--batch 64]
    python benchmarks/bench_embed.py --smoke        # tiny counts: checks that everything runs, no figures

Files: the catalogue's source wheel (fastgguf.hub.source_path("all-minilm-l6-v2")) converted by fastgguf.convert
into a temporary folder. Inputs: --batch short sentences (8 to 16 tokens each, deterministic).
- fastgguf: Model(path, n_threads=t); batch 64 is one embed(list) call, batch 1 is embed(str) per input; the
  latency is one embed(str) of a 6-token query; the model is warmed up first.
- llama.cpp: llama-embedding (LLAMA_BIN, default ~/.cache/llama-ref/build/bin) with -t t, its own timer
  ("prompt eval time" of llama_perf_context_print, so the process start and model load are not counted): batch 64 is
  one run with the inputs separated by --embd-separator (llama-embedding packs them into batches of up to 512
  tokens), batch 1 one run per input (its eval time each); it has no single-query latency figure apart from that.
Each figure is the median over --rounds rounds; the ratio is fastgguf's embeddings/s over llama.cpp's (>= 1.0: as
fast or faster). Run it on a quiet machine: on a shared one the figures mean little.
"""
import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import fastgguf  # noqa: E402
from fastgguf import hub  # noqa: E402
from fastgguf.convert import convert  # noqa: E402

NAME = "all-minilm-l6-v2"
SEP = "<#fastgguf-sep#>"
QUERY = "what do cats eat?"
_SUBJ = ["The old library", "A quiet river", "Our new server", "The city council", "This small robot",
         "Every morning the baker", "The research team", "A young violinist"]
_VERB = ["opened a window onto", "slowly carried", "quickly indexed", "argued about", "carefully painted",
         "wrote a long report on", "could not find", "happily shared"]
_OBJ = ["the autumn festival.", "thousands of scanned letters.", "the price of fresh bread.",
        "a map of the northern coast.", "every question from the audience.", "the results of the survey."]


def sentences(n):
    return [f"{_SUBJ[i % 8]} {_VERB[(i // 8) % 8]} {_OBJ[(i * 5) % 6]}" for i in range(n)]


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def llama_bin(name):
    return os.path.join(os.environ.get("LLAMA_BIN", os.path.expanduser("~/.cache/llama-ref/build/bin")), name)


def llama_eval_s(path, texts, threads, tmp, tries=3):
    """llama-embedding's own prompt-eval time (seconds) for texts in one run. Its log is written by a thread that
    can lose the last lines at exit (the perf lines among them): such a run is repeated."""
    f = os.path.join(tmp, "prompts.txt")
    with open(f, "w", encoding="utf-8") as fh:
        fh.write(SEP.join(texts))
    for _ in range(tries):
        r = subprocess.run([llama_bin("llama-embedding"), "-m", path, "-f", f, "--embd-separator", SEP, "--pooling",
                            "mean", "-t", str(threads), "-c", "512", "--no-escape", "--embd-output-format", "array",
                            "--perf", "-v"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"llama-embedding failed: {r.stderr[-2000:]}")
        m = re.search(r"prompt eval time\s*=\s*([\d.]+)\s*ms", r.stderr + r.stdout)
        if m:
            return float(m.group(1)) / 1e3
    raise RuntimeError(f"no 'prompt eval time' in llama-embedding's output ({tries} runs)")


def bench_fastgguf(path, threads, texts, rounds, n_single):
    m = fastgguf.Model(path, n_threads=threads)
    m.embed(texts[:2])      # warm-up: tokenizer, engine thread, buffers
    batch, single, lat = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        m.embed(texts)
        batch.append(len(texts) / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for s in texts[:n_single]:
            m.embed(s)
        single.append(n_single / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        m.embed(QUERY)
        lat.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(batch), statistics.median(single), statistics.median(lat)


def bench_llama(path, threads, texts, rounds, n_single, tmp):
    batch, single = [], []
    for _ in range(rounds):
        batch.append(len(texts) / llama_eval_s(path, texts, threads, tmp))
        single.append(n_single / sum(llama_eval_s(path, [s], threads, tmp) for s in texts[:n_single]))
    return statistics.median(batch), statistics.median(single)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default="f16,q8_0")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--single", type=int, default=16, help="inputs embedded one by one per round (batch 1)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="tiny counts (1 round, batch 4, 2 singles, 1 thread)")
    ap.add_argument("--no-llama", action="store_true", help="fastgguf only")
    a = ap.parse_args(argv)
    if a.smoke:
        a.batch, a.single, a.rounds, a.threads = 4, 2, 1, "1"
    types = a.types.split(",")
    threads = [int(t) for t in a.threads.split(",")]
    texts = sentences(a.batch)
    have_llama = not a.no_llama and os.path.exists(llama_bin("llama-embedding"))
    print(f"cpu: {cpu_model()}; fastgguf {fastgguf.__version__}, kernels {fastgguf.kernels.active()}; "
          f"llama.cpp: {llama_bin('llama-embedding') if have_llama else 'not run'}")
    print(f"{a.batch} inputs of 8-16 tokens, {a.single} one by one, median of {a.rounds} rounds")
    wheel = hub.source_path(NAME)
    hdr = f"{'type':<6} {'thr':>3} {'batch':>5} {'fastgguf emb/s':>15} {'llama.cpp emb/s':>16} {'ratio':>6}"
    with tempfile.TemporaryDirectory() as tmp:
        rows, lat_rows = [], []
        for t in types:
            path = os.path.join(tmp, f"minilm-{t}.gguf")
            convert(wheel, path, t, name=hub.entry(NAME).gguf_name)
            for th in threads:
                fb, fs, lat = bench_fastgguf(path, th, texts, a.rounds, a.single)
                lb, ls = bench_llama(path, th, texts, a.rounds, a.single, tmp) if have_llama else (None, None)
                rows.append((t, th, 1, fs, ls))
                rows.append((t, th, a.batch, fb, lb))
                lat_rows.append((t, th, lat))
        print(hdr)
        for t, th, b, f, ll in rows:
            lls = f"{ll:16.1f}" if ll else f"{'-':>16}"
            ratio = f"{f / ll:6.2f}" if ll else f"{'-':>6}"
            print(f"{t:<6} {th:>3} {b:>5} {f:15.1f} {lls} {ratio}")
        print("single short query latency (fastgguf, embed of a 6-token query):")
        for t, th, lat in lat_rows:
            print(f"  {t:<6} {th} thread(s): {lat:.2f} ms")


if __name__ == "__main__":
    main()
