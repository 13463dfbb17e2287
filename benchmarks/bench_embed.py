#!/usr/bin/env python3
"""Embeddings per second of all-MiniLM-L6-v2 (F16 and Q8_0), fastgguf against llama.cpp's llama-embedding on the
same converted file, at batch 1 and 64 and 1 and 2 threads; and the latency of one short query (the RAG hot path).

    python benchmarks/bench_embed.py [--rounds 5] [--types f16,q8_0] [--threads 1,2] [--batch 64]
    python benchmarks/bench_embed.py --smoke        # tiny counts: checks that everything runs, no figures
    python benchmarks/bench_embed.py --json out.json   # the figures as JSON too (with the load average)

Files: the catalogue's source wheel (fastgguf.hub.source_path("all-minilm-l6-v2")) converted by fastgguf.convert
into a temporary folder. Inputs: --batch short sentences (8 to 16 tokens each, deterministic).
- fastgguf: Model(path, n_threads=t); batch 64 is one embed(list) call, batch 1 is embed(str) per input; the
  latency is one embed(str) of a 6-token query; the model is warmed up first.
- llama.cpp: llama-embedding's loop (LlamaEmbedder) on libllama (LLAMA_BIN, default ~/.cache/llama-ref/build/bin,
  from ../shared/tools/build-llama-cpp.sh) with t threads, timed in-process the same way; batch 64 packs the inputs
  into decodes of up to 512 tokens as llama-embedding does.
Each figure is the median over --rounds rounds, alternating fastgguf and llama.cpp round by round; the ratio is
fastgguf's embeddings/s over llama.cpp's (>= 1.0: as fast or faster). Run it on a quiet machine: on a shared one
the figures mean little.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import fastgguf  # noqa: E402
from fastgguf import hub  # noqa: E402
from fastgguf.convert import convert  # noqa: E402

NAME = "all-minilm-l6-v2"
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


def llama_cpp():
    """llama.cpp's C API through the 0.3.36 sdist's ctypes bindings (LLAMA_PY: the unpacked sdist; the library from
    LLAMA_BIN), so its encode is timed in-process like fastgguf's: llama-embedding's own perf line counts no
    encoder time (it reports 0 ms for a BERT), and timing the process would count its start and model load."""
    sys.path.insert(0, os.environ.get("LLAMA_PY", os.path.expanduser("~/.cache/llama-ref/llama_cpp_python-0.3.36")))
    os.environ.setdefault("LLAMA_CPP_LIB_PATH", llama_bin(""))
    try:
        import diskcache  # noqa: F401  (imported by llama_cpp's package, used only by its prompt cache)
    except ImportError:
        sys.modules["diskcache"] = types.ModuleType("diskcache")
    import llama_cpp as L
    L.llama_backend_init()
    L.quiet = L.llama_log_callback(lambda *a: None)   # kept referenced: libllama calls it for every log line
    L.llama_log_set(L.quiet, None)
    return L


class LlamaEmbedder:
    """llama-embedding's loop (examples/embedding/embedding.cpp) through the C API: a context of n_ctx = n_batch =
    n_ubatch = 512 (the model's training context; non-causal: ubatch = batch), a unified cache for up to 256
    sequences, mean pooling; inputs packed into batches of up to 512 tokens, one decode per batch, the memory
    cleared before each, every sequence's pooled vector read back (llama_get_embeddings_seq) and L2-normalized."""

    def __init__(self, L, path, threads):
        self.L = L
        self.model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
        cp = L.llama_context_default_params()
        cp.n_ctx = cp.n_batch = cp.n_ubatch = 512
        cp.n_seq_max, cp.kv_unified = 256, True
        cp.n_threads = cp.n_threads_batch = threads
        cp.embeddings, cp.pooling_type = True, L.LLAMA_POOLING_TYPE_MEAN
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_embd = L.llama_model_n_embd(self.model)
        self.batch = L.llama_batch_init(512, 0, 1)

    def tokenize(self, text):
        buf = (self.L.llama_token * 512)()
        n = self.L.llama_tokenize(self.vocab, text.encode(), len(text.encode()), buf, 512, True, False)
        return list(buf[:n])

    def _decode(self, seqs):
        L, b = self.L, self.batch
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        n = 0
        for s, ids in enumerate(seqs):
            for i, t in enumerate(ids):
                b.token[n], b.pos[n], b.n_seq_id[n], b.logits[n] = t, i, 1, 1
                b.seq_id[n][0] = s
                n += 1
        b.n_tokens = n
        if L.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        out = []
        for s in range(len(seqs)):
            v = np.ctypeslib.as_array(L.llama_get_embeddings_seq(self.ctx, s), shape=(self.n_embd,)).copy()
            out.append(v / max(float(np.linalg.norm(v)), 1e-30))
        return out

    def embed(self, token_lists):
        out, pack = [], []
        for ids in token_lists:
            if pack and sum(map(len, pack)) + len(ids) > 512:
                out += self._decode(pack)
                pack = []
            pack.append(ids)
        return out + self._decode(pack)


class FastggufEmbedder:
    """fastgguf's side: Model.embed on strings (its tokenizer included)."""

    def __init__(self, path, threads, texts):
        self.m, self.texts = fastgguf.Model(path, n_threads=threads), texts
        self.m.embed(texts[:2])      # warm-up: tokenizer, engine thread, buffers

    def batch(self):
        self.m.embed(self.texts)

    def single(self, n):
        for s in self.texts[:n]:
            self.m.embed(s)

    def query(self):
        self.m.embed(QUERY)


class LlamaSide:
    """llama.cpp's side on pre-tokenized inputs (its tokenizer left out: slightly in its favour)."""

    def __init__(self, L, path, threads, texts):
        self.e = LlamaEmbedder(L, path, threads)
        self.ids, self.q = [self.e.tokenize(t) for t in texts], self.e.tokenize(QUERY)
        self.e.embed(self.ids[:2])

    def batch(self):
        self.e.embed(self.ids)

    def single(self, n):
        for x in self.ids[:n]:
            self.e.embed([x])

    def query(self):
        self.e.embed([self.q])


def one_round(side, n_batch, n_single):
    """(batch embeddings/s, one-by-one embeddings/s, query latency ms) of one round."""
    t0 = time.perf_counter()
    side.batch()
    t1 = time.perf_counter()
    side.single(n_single)
    t2 = time.perf_counter()
    side.query()
    t3 = time.perf_counter()
    return n_batch / (t1 - t0), n_single / (t2 - t1), (t3 - t2) * 1e3


def bench(sides, n_batch, rounds, n_single):
    """Rounds alternate between the sides (so drift on a shared machine hits both alike); per side the medians of
    (batch/s, single/s, latency)."""
    runs = [[] for _ in sides]
    for _ in range(rounds):
        for k, side in enumerate(sides):
            runs[k].append(one_round(side, n_batch, n_single))
    return [tuple(statistics.median(r[i] for r in rs) for i in range(3)) for rs in runs]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default="f16,q8_0")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--single", type=int, default=16, help="inputs embedded one by one per round (batch 1)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="tiny counts (1 round, batch 4, 2 singles, 1 thread)")
    ap.add_argument("--no-llama", action="store_true", help="fastgguf only")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    a = ap.parse_args(argv)
    if a.smoke:
        a.batch, a.single, a.rounds, a.threads = 4, 2, 1, "1"
    types = a.types.split(",")
    threads = [int(t) for t in a.threads.split(",")]
    texts = sentences(a.batch)
    have_llama = not a.no_llama and os.path.exists(llama_bin("libllama.so"))
    L = llama_cpp() if have_llama else None
    print(f"cpu: {cpu_model()}; fastgguf {fastgguf.__version__}, kernels {fastgguf.kernels.active()}; "
          f"llama.cpp: {llama_bin('libllama.so') if have_llama else 'not run'}")
    print(f"{a.batch} inputs of 8-16 tokens, {a.single} one by one, median of {a.rounds} rounds")
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    wheel = hub.source_path(NAME)
    hdr = f"{'type':<6} {'thr':>3} {'batch':>5} {'fastgguf emb/s':>15} {'llama.cpp emb/s':>16} {'ratio':>6}"
    with tempfile.TemporaryDirectory() as tmp:
        rows, lat_rows = [], []
        for t in types:
            path = os.path.join(tmp, f"minilm-{t}.gguf")
            convert(wheel, path, t, name=hub.entry(NAME).gguf_name)
            for th in threads:
                sides = [FastggufEmbedder(path, th, texts)] + ([LlamaSide(L, path, th, texts)] if L else [])
                res = bench(sides, len(texts), a.rounds, a.single)
                (fb, fs, lat), (lb, ls, llat) = res[0], (res[1] if L else (None, None, None))
                rows.append((t, th, 1, fs, ls))
                rows.append((t, th, a.batch, fb, lb))
                lat_rows.append((t, th, lat, llat))
        print(hdr)
        for t, th, b, f, ll in rows:
            lls = f"{ll:16.1f}" if ll else f"{'-':>16}"
            ratio = f"{f / ll:6.2f}" if ll else f"{'-':>6}"
            print(f"{t:<6} {th:>3} {b:>5} {f:15.1f} {lls} {ratio}")
        print("single short query latency (embed of a 6-token query), ms:")
        for t, th, lat, llat in lat_rows:
            print(f"  {t:<6} {th} thread(s): fastgguf {lat:.2f}" + (f", llama.cpp {llat:.2f}" if llat else ""))
        load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        print(f"load average (1 min) at start / end: {load0} / {load1}")
        if a.json:
            out = {"cpu": cpu_model(), "isa": fastgguf.kernels.active(), "cores": os.cpu_count(),
                   "load_average": [load0, load1], "batch": a.batch, "single": a.single, "rounds": a.rounds,
                   "rows": [{"type": t, "threads": th, "batch": b, "fastgguf_emb_s": f, "llama_emb_s": ll,
                             "ratio": f / ll if ll else None} for t, th, b, f, ll in rows],
                   "query_latency_ms": [{"type": t, "threads": th, "fastgguf": lat, "llama": llat}
                                        for t, th, lat, llat in lat_rows]}
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
