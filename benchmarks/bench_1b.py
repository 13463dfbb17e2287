#!/usr/bin/env python3
"""A 1B-shaped model at memory speed (issue 23): fastgguf against native llama-bench on the same files, 1 and 2
threads, alternating rounds, medians and ratios; decode as a fraction of the read bandwidth measured in the same run.

    python benchmarks/bench_1b.py --rounds 3 --threads 1 2 --out       # the integrator's run (quiet machine)
    python benchmarks/bench_1b.py --tiny                               # a smoke run: 2 layers, seconds
    python benchmarks/bench_1b.py --arch lfm2 --quants q4_0 q4_k_m --out  # the hybrid rows (issue 36; also qwen35)
    python benchmarks/bench_1b.py --arch qwen3 --out                   # a second dense shape, 1.7B (issue 35)

Files (built once, cached under ~/.cache/fastgguf/bench):
  llama3.2-1b-shaped.F16.gguf  random weights shaped like Llama 3.2 1B: 16 layers, n_embd 2048, FFN 8192, 32 query
                               heads of 64 over 8 KV heads, vocabulary 128256 ("no_vocab": token ids only, as
                               bench_moe.py; both engines load it), tied embeddings, rope theta 500000. Written
                               tensor by tensor (one tensor in memory at a time): 2.47 GB.
  llama3.2-1b-shaped.{Q4_0,Q4_K_M,Q8_0}.gguf  that file through fastgguf's own quantizer (quantize_file: q4_0 and
                               q8_0 keep the tied token embedding at Q8_0, q4_k_m makes it Q6_K as llama-quantize):
                               0.83, 0.80 and 1.31 GB, each read whole by a decoded token (the tied embedding is
                               the output matrix). llama-bench names it "llama 1B", 1,235,814,400 parameters.
  Building all four took 3 minutes (F16 44 s, Q4_0 15 s, Q4_K_M 111 s, Q8_0 12 s) on the 2-vCPU EPYC under nice
  while other work shared it; peak RSS 3.8 GB (the quantizer holds one output file's tensors); --build-only.
  lfm2-1.2b-shaped.F16.gguf    (--arch lfm2, issue 36's hybrid row) random weights shaped like LFM2-1.2B: 16 layers,
                               10 gated short-convolution layers (l_cache 3) and 6 attention layers (2, 5, 8, 10,
                               12, 14; 32 query heads of 64 over 8 KV heads, q/k norms), n_embd 2048, FFN 8192,
                               vocabulary 65536 (no_vocab), tied embeddings; made by tests/models.py's writer
                               (2.61 GB, 76 s), then quantized by llama-quantize as users get such files (Q4_0
                               0.69 GB in 25 s, Q4_K_M 0.73 GB in 100 s; fastgguf's quantizer where llama-quantize
                               is not found). llama-bench names it "lfm2 1.2B".
  qwen35-0.8b-shaped.F16.gguf  (--arch qwen35) random weights shaped like a Qwen3.5-0.8B: 24 layers, 18 gated DeltaNet
                               (conv 4, state 128, 16 q/k and 16 v heads) and every 4th gated attention (8 query heads
                               of 128 over 2 KV heads, 32 rotated dims), n_embd 1024, FFN 3584, vocabulary 151936,
                               tied; 1.58 GB in 18 s; Q4_0 0.40 GB, Q4_K_M 0.42 GB by llama-quantize ("qwen35 0.8B").
  qwen3-1.7b-shaped.F16.gguf   (--arch qwen3, issue 35's second dense shape) random weights shaped like Qwen3-1.7B:
                               28 layers, n_embd 2048, FFN 6144, 16 query heads of 128 over 8 KV heads, q/k norms,
                               vocabulary 151936, tied embeddings, rope theta 1e6; made by tests/models.py's writer,
                               quantized by llama-quantize ("qwen3 1.7B").
Measured per file and thread count (fresh subprocesses, engines in alternating order each round): pp512 (one
512-token batch from an empty context) and tg128 (128 greedy steps after an 8-token prompt; fastgguf: Context.eval
one token at a time, bench_moe.py's worker; llama-bench: -p 512 -n 128, flash attention off and on, the better
kept). Decode's share of the bandwidth: Model.memory()['per_token'] (the tied embedding counted whole: it is the
output matrix) x tokens/s / the read bandwidth at that thread count (compare.bandwidth), measured before the files.
Targets (issue 35): pp512 >= 1.3x llama.cpp; decode >= 90% of the read bandwidth, and >= 1.25x llama.cpp where
llama.cpp reads less than 75% of it (where both sit at the wall, >= 1.0x); peak RSS (each process's own, pp512 and
tg128 in one process for both) no more than llama.cpp's + 10%.
--long (issue 35, long context: attention dominates): pp4096 (one 4096-token eval from an empty context) and tg64 at
depth 4096 (64 greedy steps after it), the Q4_0 file by default. fastgguf: one fresh worker per round, a context of
4096 + 64 + 64 rows, the timed 4096-token eval then the timed steps (long_worker; also per second of its CPU
time, for comparing builds on a busy machine); llama-bench: two runs per round,
-p 4096 -n 0 and -p 0 -n 64 -d 4096 (the depth filled untimed), -fa 0,1, the better kept. Target: both >= 1.3x.
--long --tiny: the 2-layer file, pp64 and tg8 at depth 64, seconds.
JSON: only with --out (benchmarks/results/bench-1b-<date>.json, or the path given)."""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from bench_moe import CACHE, run_fastgguf, run_llama_bench, warm_page_cache  # noqa: E402
from compare import _cpu_model, bandwidth  # noqa: E402

# name -> (n_embd, n_ff, n_head, n_head_kv, head_dim, n_layer, n_vocab)
SHAPES = {"llama3.2-1b-shaped": (2048, 8192, 32, 8, 64, 16, 128256),
          "llama-1b-tiny": (256, 512, 4, 2, 64, 2, 2048)}
QUANTS = ("q4_0", "q4_k_m", "q8_0", "q6_k")
TARGETS = {"ratio_tg": 1.25, "decode_fraction": 0.9, "ratio_pp": 1.3, "llama_wall": 0.75, "rss": 1.1}
LONG_TARGETS = {"ratio_pp": 1.3, "ratio_tg": 1.3}
# --arch lfm2 / qwen35: name -> tests/models.build's keywords (preset: its tiny preset, else "tiny")
HYBRID = {"lfm2-1.2b-shaped": dict(arch="lfm2", n_vocab=65536, n_embd=2048, n_layer=16, n_head=32, n_head_kv=8,
                                   n_ff=8192, n_ctx=4096, conv_layers=(0, 1, 3, 4, 6, 7, 9, 11, 13, 15)),
          "lfm2-tiny": dict(arch="lfm2", n_vocab=2048, n_embd=256, n_layer=4, n_head=4, n_head_kv=2, n_ff=512,
                            n_ctx=4096, conv_layers=(0, 1, 3)),
          "qwen35-0.8b-shaped": dict(preset="qwen35", n_vocab=151936, n_embd=1024, n_layer=24, n_head=8, n_head_kv=2,
                                     n_ff=3584, n_ctx=4096, n_rot=32, ssm=(4, 128, 16, 16), tied=True,
                                     dn_layers=tuple(i for i in range(24) if (i + 1) % 4)),
          "qwen35-tiny": dict(preset="qwen35", n_vocab=2048, n_embd=256, n_layer=4, n_head=4, n_head_kv=2, n_ff=512,
                              n_ctx=4096, n_rot=16, ssm=(4, 32, 4, 4), tied=True, dn_layers=(0, 1, 2)),
          "qwen3-1.7b-shaped": dict(arch="qwen3", n_vocab=151936, n_embd=2048, n_layer=28, n_head=16, n_head_kv=8,
                                    n_ff=6144, n_ctx=4096, rope_base=1000000.0, tied=True),
          "qwen3-tiny": dict(arch="qwen3", n_vocab=2048, n_embd=256, n_layer=2, n_head=2, n_head_kv=1, n_ff=512,
                             n_ctx=4096, tied=True)}
LLAMA_QUANTIZE = os.environ.get("LLAMA_QUANTIZE", os.path.expanduser("~/.cache/llama-ref/build/bin/llama-quantize"))


def build_f16(path, shape, seed=0):
    """The random llama of `shape` (SHAPES) at path, F16 matrices and F32 norms, one tensor in memory at a time:
    tensor infos first, then each tensor drawn and written in the same order."""
    import numpy as np
    import gguf
    E, F, H, KVH, HD, L, V = shape
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("no_vocab")
    w.add_vocab_size(V)
    w.add_block_count(L)
    w.add_context_length(131072)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KVH)
    w.add_rope_dimension_count(HD)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)
    # (name, shape in numpy order); no output.weight: tied embeddings
    tensors = [("token_embd.weight", (V, E)), ("output_norm.weight", (E,))]
    for i in range(L):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", (E,)), (p + "attn_q.weight", (H * HD, E)),
                    (p + "attn_k.weight", (KVH * HD, E)), (p + "attn_v.weight", (KVH * HD, E)),
                    (p + "attn_output.weight", (E, H * HD)), (p + "ffn_norm.weight", (E,)),
                    (p + "ffn_gate.weight", (F, E)), (p + "ffn_up.weight", (F, E)), (p + "ffn_down.weight", (E, F))]
    for name, shp in tensors:
        dt = np.float32 if len(shp) == 1 else np.float16
        w.add_tensor_info(name, shp, np.dtype(dt), int(np.prod(shp)) * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shp in tensors:
        if len(shp) == 1:   # a norm: about 1
            w.write_tensor_data((1.0 + 0.1 * rng.standard_normal(shp)).astype(np.float32))
            continue
        a = np.empty(shp, np.float16)
        step = max(1, (1 << 24) // shp[1])   # 16 M values of float32 in flight
        for r in range(0, shp[0], step):     # rows of scale 1/sqrt(cols): activations stay of order 1
            a[r:r + step] = rng.standard_normal((min(step, shp[0] - r), shp[1]), dtype=np.float32) / np.sqrt(shp[1])
        w.write_tensor_data(a)
        del a
    w.close()


def build_hybrid(path, name):
    """The random hybrid of HYBRID[name] at path, through the tests' GGUF writer (a development checkout)."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import models
    kw = dict(HYBRID[name])
    models.build(path, kw.pop("preset", "tiny"), wtype="F16", vocab="no_vocab", **kw)


def quantize(src, dst, q, hybrid):
    """src quantized to q at dst: a file of tests/models.py's writer (hybrids, qwen3) by llama-quantize where it is
    found (as users get such files), else by fastgguf's quantizer."""
    if hybrid and os.access(LLAMA_QUANTIZE, os.X_OK):
        subprocess.run([LLAMA_QUANTIZE, src, dst, q.upper()], check=True, capture_output=True)
        return
    from fastgguf.gguf.quantize import quantize_file
    quantize_file(src, dst, q)


def files(tiny, quants, arch="llama"):
    """quant -> path of the benchmark files, built if missing; and what building them took."""
    os.makedirs(CACHE, exist_ok=True)
    hybrid = arch != "llama"
    name = {("llama", True): "llama-1b-tiny", ("llama", False): "llama3.2-1b-shaped",
            ("lfm2", True): "lfm2-tiny", ("lfm2", False): "lfm2-1.2b-shaped",
            ("qwen35", True): "qwen35-tiny", ("qwen35", False): "qwen35-0.8b-shaped",
            ("qwen3", True): "qwen3-tiny", ("qwen3", False): "qwen3-1.7b-shaped"}[arch, tiny]
    src = os.path.join(CACHE, f"{name}.F16.gguf")
    built = {}
    if not os.path.exists(src):
        t = time.perf_counter()
        (build_hybrid(src + ".part", name) if hybrid else build_f16(src + ".part", SHAPES[name]))
        os.replace(src + ".part", src)
        built["F16"] = time.perf_counter() - t
    out = {}
    for q in quants:
        out[q] = os.path.join(CACHE, f"{name}.{q.upper()}.gguf")
        if not os.path.exists(out[q]):
            t = time.perf_counter()
            quantize(src, out[q] + ".part", q, hybrid)
            os.replace(out[q] + ".part", out[q])
            built[q] = time.perf_counter() - t
    for label, s in built.items():
        p = src if label == "F16" else out[label]
        print(f"built {os.path.basename(p)}: {os.path.getsize(p) / 1e9:.2f} GB in {s:.0f} s", file=sys.stderr)
    return name, out, built


def long_worker(a):
    """One fastgguf long-context measurement in this (fresh) process: a.prompt tokens in one eval (pp), then a.gen
    greedy steps at that depth (tg); prints JSON."""
    import numpy as np
    from fastgguf.engine.model import Model
    m = Model(a.model, n_threads=a.threads[0])
    ids = [int(t) for t in np.random.default_rng(1).integers(1, m.n_vocab, a.prompt)]
    ctx = m.context(a.prompt + a.gen + 64)
    t, c = time.perf_counter(), time.process_time()
    logits = ctx.eval(ids)
    pp, pp_cpu = a.prompt / (time.perf_counter() - t), a.prompt / (time.process_time() - c)
    t, c = time.perf_counter(), time.process_time()
    for _ in range(a.gen):
        logits = ctx.eval([int(np.argmax(logits))])
    tg, tg_cpu = a.gen / (time.perf_counter() - t), a.gen / (time.process_time() - c)
    # *_cpu_tps: tokens per second of the process's CPU time (all its threads): on a busy machine, where the wall
    # clock counts the time other processes hold the cores, the steadier figure for comparing builds at 1 thread
    print(json.dumps({"pp_tps": pp, "tg_tps": tg, "pp_cpu_tps": pp_cpu, "tg_cpu_tps": tg_cpu}))


def run_long_fastgguf(path, threads, prompt, gen):
    cmd = [sys.executable, os.path.abspath(__file__), "--long-worker", "--model", path, "--threads", str(threads),
           "--prompt", str(prompt), "--gen", str(gen)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..")))
    if p.returncode != 0:
        raise RuntimeError(f"fastgguf long worker failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_long_llama(bench, path, threads, prompt, gen):
    """llama-bench's pp<prompt> from an empty context and tg<gen> at depth <prompt>, flash attention off and on, the
    better of each."""
    pp = run_llama_bench(bench, path, threads, prompt, 0)
    tg = run_llama_bench_depth(bench, path, threads, gen, prompt)
    return {"pp_tps": pp["pp_tps"], "tg_tps": tg}


def run_llama_bench_depth(bench, path, threads, gen, depth):
    cmd = [bench, "-m", path, "-p", "0", "-n", str(gen), "-d", str(depth), "-t", str(threads), "-fa", "0,1",
           "-r", "1", "-o", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return max(t["avg_ts"] for t in json.loads(p.stdout))


def long_main(a, name, paths, bench):
    """--long: pp<prompt> and tg<gen> at depth <prompt>, per file and thread count, alternating rounds."""
    from fastgguf import kernels
    engines = ["fastgguf"] + (["llama.cpp"] if bench else [])
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu": _cpu_model(), "shape": name,
               "mode": "long", "isa": kernels.active(), "load_average": os.getloadavg(),
               "prompt": a.prompt, "gen": a.gen, "depth": a.prompt, "rounds": a.rounds, "llama_bench": bench,
               "targets": LONG_TARGETS, "rows": []}
    for q, path in paths.items():
        warm_page_cache(path)
        for th in a.threads:
            runs = {e: [] for e in engines}
            for r in range(a.rounds):
                for e in engines if r % 2 == 0 else engines[::-1]:
                    runs[e].append(run_long_fastgguf(path, th, a.prompt, a.gen) if e == "fastgguf"
                                   else run_long_llama(bench, path, th, a.prompt, a.gen))
                    print(f"  {q} t{th} round {r} {e}: {runs[e][-1]}", file=sys.stderr)
            row = {"quant": q, "threads": th, "path": path, "runs": runs, "load_average_after": os.getloadavg()}
            for e in engines:
                for k in ("pp_tps", "tg_tps"):
                    row[f"{e}_{k}"] = statistics.median(x[k] for x in runs[e])
            if bench:
                row["ratio_pp"] = row["fastgguf_pp_tps"] / row["llama.cpp_pp_tps"]
                row["ratio_tg"] = row["fastgguf_tg_tps"] / row["llama.cpp_tg_tps"]
            results["rows"].append(row)
    long_report(results, bench is not None)
    return results


def long_report(results, with_llama):
    p, g = results["prompt"], results["gen"]
    print(f"\n{results['shape']} long context ({results['cpu']}, ISA {results['isa']}, load average "
          f"{results['load_average'][0]:.2f} at start), medians of {results['rounds']} alternating rounds")
    print(f"targets: pp{p} and tg{g} at depth {p} >= {LONG_TARGETS['ratio_pp']}x llama.cpp")
    print(f"| file | thr | pp{p} fastgguf | pp llama.cpp | pp ratio | tg{g}@d{p} fastgguf | tg llama.cpp | tg ratio |")
    print("|---" * 8 + "|")
    for r in results["rows"]:
        def ratio(k):
            return f"{r[k]:.2f}x {'met' if r[k] >= LONG_TARGETS[k] else 'NOT met'}" if with_llama else "-"
        cells = [r["quant"], str(r["threads"]), f"{r['fastgguf_pp_tps']:.1f}",
                 f"{r['llama.cpp_pp_tps']:.1f}" if with_llama else "-", ratio("ratio_pp"),
                 f"{r['fastgguf_tg_tps']:.2f}", f"{r['llama.cpp_tg_tps']:.2f}" if with_llama else "-",
                 ratio("ratio_tg")]
        print("| " + " | ".join(cells) + " |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--quants", nargs="+", default=None, choices=QUANTS,
                    help="default: all (--long: q4_0)")
    ap.add_argument("--prompt", type=int, default=None, help="default 512 (--long: 4096, the depth of its tg)")
    ap.add_argument("--gen", type=int, default=None, help="default 128 (--long: 64)")
    ap.add_argument("--long", action="store_true", help="pp4096 and tg64 at depth 4096 (issue 35's long context)")
    ap.add_argument("--long-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="a smoke run: the 2-layer file, pp32 tg8, one round")
    ap.add_argument("--arch", choices=("llama", "lfm2", "qwen35", "qwen3"), default="llama",
                    help="lfm2 / qwen35: the LFM2-1.2B- or Qwen3.5-0.8B-shaped hybrid (issue 36's rows); qwen3: a "
                    "Qwen3-1.7B-shaped dense model")
    ap.add_argument("--build-only", action="store_true", help="build the files and stop")
    ap.add_argument("--llama-bench", default=os.environ.get(
        "LLAMA_BENCH", os.path.expanduser("~/.cache/llama-ref/build/bin/llama-bench")))
    ap.add_argument("--out", nargs="?", const="", default=None,
                    help="write the JSON (default path benchmarks/results/bench-1b-<date>.json)")
    a = ap.parse_args(argv)
    if a.long_worker:
        return long_worker(a)
    a.quants = a.quants or (["q4_0"] if a.long else list(QUANTS))
    a.prompt = a.prompt or (4096 if a.long else 512)
    if a.gen is not None and a.gen < 1:
        ap.error("--gen must be at least 1 (every row reports decode; use a small --gen to time prompts)")
    a.gen = a.gen or (64 if a.long else 128)
    if a.tiny:
        a.prompt, a.gen, a.rounds = (64 if a.long else 32), 8, 1
    name, paths, built = files(a.tiny, a.quants, a.arch)
    if a.build_only:
        return 0
    bench = a.llama_bench if os.access(a.llama_bench, os.X_OK) else None
    if bench is None:
        print(f"llama-bench not found at {a.llama_bench}: fastgguf alone", file=sys.stderr)
    if a.long:
        results = long_main(a, name, paths, bench)
        if a.out is not None:
            out = a.out or os.path.join(HERE, "results", f"bench-1b-long-{datetime.date.today()}.json")
            with open(out, "w") as f:
                json.dump(results, f, indent=1)
            print("wrote", out)
        return 0
    from fastgguf import kernels
    bws = {th: bandwidth(th, 1 << 26 if a.tiny else 1 << 28) for th in a.threads}
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu": _cpu_model(), "shape": name,
               "isa": kernels.active(), "load_average": os.getloadavg()[0], "prompt": a.prompt, "gen": a.gen,
               "rounds": a.rounds, "llama_bench": bench, "read_bandwidth_gbs": bws, "build_seconds": built,
               "repack": os.environ.get("FASTGGUF_REPACK", "0") not in ("", "0"),  # Model(repack=None)'s default
               "targets": TARGETS, "rows": []}
    engines = ["fastgguf"] + (["llama.cpp"] if bench else [])
    for q, path in paths.items():
        warm_page_cache(path)
        for th in a.threads:
            runs = {e: [] for e in engines}
            for r in range(a.rounds):   # alternating order: drift and warm caches hit both engines alike
                for e in engines if r % 2 == 0 else engines[::-1]:
                    runs[e].append(run_fastgguf(path, th, a.prompt, a.gen) if e == "fastgguf"
                                   else run_llama_bench(bench, path, th, a.prompt, a.gen))
            mem = runs["fastgguf"][0]["memory"]
            row = {"quant": q, "threads": th, "path": path, "file_bytes": os.path.getsize(path), "memory": mem,
                   "runs": runs}
            for e in engines:
                for k in ("pp_tps", "tg_tps", "peak_rss_mb"):
                    row[f"{e}_{k}"] = statistics.median(x[k] for x in runs[e])
            row["decode_gbps"] = mem["per_token"] * row["fastgguf_tg_tps"] / 1e9
            row["decode_fraction"] = row["decode_gbps"] / bws[th]
            if bench:
                row["ratio_pp"] = row["fastgguf_pp_tps"] / row["llama.cpp_pp_tps"]
                row["ratio_tg"] = row["fastgguf_tg_tps"] / row["llama.cpp_tg_tps"]
                row["llama.cpp_decode_fraction"] = mem["per_token"] * row["llama.cpp_tg_tps"] / 1e9 / bws[th]
            results["rows"].append(row)
            print(f"  {q} t{th}: fastgguf pp{a.prompt} {row['fastgguf_pp_tps']:.1f} tg{a.gen} "
                  f"{row['fastgguf_tg_tps']:.2f}" + (f"; llama.cpp pp {row['llama.cpp_pp_tps']:.1f} tg "
                                                     f"{row['llama.cpp_tg_tps']:.2f}" if bench else ""),
                  file=sys.stderr)
    report(results, bench is not None)
    if a.out is not None:
        stem = "bench-1b" if a.arch == "llama" else f"bench-{a.arch}"
        out = a.out or os.path.join(HERE, "results", f"{stem}-{datetime.date.today()}.json")
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
        print("wrote", out)
    return 0


def _rss(row, with_llama):
    """The peak RSS cell: fastgguf's (llama.cpp's), and the memory target (<= llama.cpp's + 10%)."""
    f = row.get("fastgguf_peak_rss_mb")
    if f is None:
        return "-"
    if not with_llama:
        return f"{f:.0f}"
    ll = row["llama.cpp_peak_rss_mb"]
    return f"{f:.0f} ({ll:.0f}) {'met' if f <= ll * TARGETS['rss'] else 'NOT met'}"


def report(results, with_llama):
    def mark(v, target):
        return f"{v:.2f}x {'met' if v >= target else 'NOT met'}"

    def mark_tg(r):   # 1.25x where llama.cpp is below 75% of the bandwidth; else both sit at the wall: 1.0x
        target = TARGETS["ratio_tg"] if r["llama.cpp_decode_fraction"] < TARGETS["llama_wall"] else 1.0
        return mark(r["ratio_tg"], target)

    shape = results.get("shape", "llama3.2-1b-shaped")
    print(f"\n{shape} ({results['cpu']}, ISA {results['isa']}, load average {results['load_average']:.2f}), "
          f"medians of {results['rounds']} alternating rounds; read bandwidth "
          + ", ".join(f"{bw:.1f} GB/s at {th} thr" for th, bw in results["read_bandwidth_gbs"].items()))
    print(f"targets: decode >= {TARGETS['decode_fraction']:.0%} of the read bandwidth and >= {TARGETS['ratio_tg']}x "
          f"llama.cpp where llama.cpp reads < {TARGETS['llama_wall']:.0%} of it (else >= 1.0x); "
          f"pp{results['prompt']} >= {TARGETS['ratio_pp']}x")
    print(f"| file | thr | MB/token | tg{results['gen']} fastgguf | tg llama.cpp | tg ratio | fastgguf % of bandwidth "
          f"(llama.cpp) | pp{results['prompt']} fastgguf | pp llama.cpp | pp ratio | peak RSS MB (llama.cpp) |")
    print("|---" * 11 + "|")
    for r in results["rows"]:
        met = r["decode_fraction"] >= TARGETS["decode_fraction"]
        frac = f"{r['decode_fraction']:.0%} {'met' if met else 'NOT met'}"
        if with_llama:
            frac += f" ({r['llama.cpp_decode_fraction']:.0%})"
        cells = [r["quant"], str(r["threads"]), f"{r['memory']['per_token'] / 1e6:.0f}", f"{r['fastgguf_tg_tps']:.2f}",
                 f"{r['llama.cpp_tg_tps']:.2f}" if with_llama else "-",
                 mark_tg(r) if with_llama else "-", frac,
                 f"{r['fastgguf_pp_tps']:.1f}", f"{r['llama.cpp_pp_tps']:.1f}" if with_llama else "-",
                 mark(r["ratio_pp"], TARGETS["ratio_pp"]) if with_llama else "-", _rss(r, with_llama)]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
