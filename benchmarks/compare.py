#!/usr/bin/env python3
"""Head-to-head: fastgguf against llama.cpp on the same GGUF file, same thread count, several alternating rounds.
Each measurement runs in a fresh subprocess, so load time and peak RSS are per engine and nothing stays warm.

    python benchmarks/compare.py                         # SmolLM2 q4_0 q4_1 q8_0 q4_k_m q6_k, 1 thread and all cores
    python benchmarks/compare.py --variants q4_1 gemma3-270m --threads 1 2 --rounds 5 --json out.json --png out.png
    LLAMA_BENCH=/path/to/llama-bench python benchmarks/compare.py --gemv

The reference (--reference, default auto: the first available):
  llama-bench   llama.cpp's own benchmark (--llama-bench PATH, $LLAMA_BENCH, or on PATH), run with flash attention
                off and on (-fa 0,1) and the better of the two kept per metric. Build it natively for the CPU in hand
                (GGML_NATIVE=ON; ../shared/tools/build-llama-cpp.sh): the script prints the build's cmake flags
                when a FLAGS file or CMakeCache.txt sits beside its bin/ directory.
  llama-cpp-python   through its Python API (pip install llama-cpp-python, a native build), the decode loop a
                Python user writes; its internal timers are reported too.
Variants: SmolLM2-135M recipes (q4_1 is the default model; q4_0 q8_0 q4_k_m q6_k ... are made by fastgguf quantize,
the same bytes as llama-quantize's), a catalogue name (gemma3-270m) or a path to a .gguf file.

Reported per engine: load seconds (file open to ready; fastgguf and llama-cpp-python), prompt tokens/s at 128
and 512 tokens (one batch), decode tokens/s over 128 tokens (fastgguf: greedy with end-of-generation tokens
suppressed after an 8-token prompt; llama-bench: tg128 from an empty context), peak RSS. Decode is also shown as a
fraction of the memory-bandwidth ceiling: bytes of weights read per token / read bandwidth measured in the same run.
--gemv adds each format's single-thread GEMV on a 24576x4096 matrix (beyond the last-level cache) as a fraction of
the read bandwidth.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

try:  # run as a script from a source checkout built in place (python setup.py build_ext --inplace)
    import fastgguf  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROMPT_SIZES = (128, 512)
N_CHECK = 16  # greedy ids compared between the engines
NEAR_TIE = 0.5  # top-1 minus top-2 logit under which the two engines' rounding may pick different tokens
TEXT = ("The history of the city begins with a small settlement on the river, where traders met to exchange salt, "
        "grain and cloth. Over the centuries it grew into a market town, then a centre of learning with a library "
        "and a university, and finally a busy modern capital with trams, bridges and museums. ") * 40


def _peak_rss_mb():
    """This process's peak resident set. Linux: VmHWM (the address space's high-water mark, fresh after exec);
    ru_maxrss would also count the parent's RSS at fork time."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 1024.0 if sys.platform != "darwin" else r / (1024.0 * 1024.0)


def _nivcsw():
    """Involuntary context switches of this process so far: high when other processes took our cores."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


def _ids(path, n):
    from fastgguf import Tokenizer
    ids = Tokenizer(path).encode(TEXT, add_special=False)
    if len(ids) < n:
        raise SystemExit(f"benchmark text too short: {len(ids)} < {n} tokens")
    return ids[:n]


def worker_fastgguf(a):
    t = time.perf_counter()
    import numpy as np
    import fastgguf
    out = {"engine": "fastgguf", "import_s": time.perf_counter() - t}
    first = _ids(a.model, 8)
    t0 = time.perf_counter()
    model = fastgguf.Model(a.model, n_threads=a.threads)
    ctx = model.context(n_ctx=max(1024, a.depth + a.gen + 16))
    out["load_s"] = time.perf_counter() - t0
    logits = ctx.eval(first)  # load to first token: open, map, allocate, an 8-token prompt, its argmax
    out["first_top1"] = int(np.argmax(logits))
    out["ttft_s"] = time.perf_counter() - t0
    for n in PROMPT_SIZES:
        ids = _ids(a.model, n)
        ctx.reset()
        t = time.perf_counter()
        logits = ctx.eval(ids)
        out[f"pp{n}_tps"] = n / (time.perf_counter() - t)
        out[f"pp{n}_top1"] = int(np.argmax(logits))
    # decode: the 8-token prompt, then greedy with every end-of-generation token banned; max_tokens=gen+1 makes
    # gen forward steps (the last sampled token is never stepped), as many as the llama.cpp loop below
    ban = {int(t): float("-inf") for t in model.tokenizer.eog_ids}
    res = model.generate(first, max_tokens=a.gen + 1, temperature=0.0, logit_bias=ban, context=ctx)
    if res.usage.completion_tokens != a.gen + 1:
        raise SystemExit(f"fastgguf decoded {res.usage.completion_tokens} tokens, expected {a.gen + 1}")
    out["tg_tps"] = a.gen / res.timings.generation_seconds
    out["tg_ids"] = list(res.token_ids[:N_CHECK])
    if a.depth:  # the same decode after a prompt of `depth` tokens (llama-bench's tg @ d<depth>)
        ctx.reset()
        res = model.generate(_ids(a.model, a.depth), max_tokens=a.gen + 1, temperature=0.0, logit_bias=ban,
                             context=ctx)
        out["tg_depth_tps"] = a.gen / res.timings.generation_seconds
    # our own top-1 minus top-2 margin along that path (teacher-forced): tells a near-tie from a real disagreement
    ctx.reset()
    lg = ctx.eval(first + out["tg_ids"][:-1], all_logits=True)[len(first) - 1:]
    top2 = np.sort(lg, axis=1)[:, -2:]
    out["tg_margins"] = [round(float(x), 3) for x in top2[:, 1] - top2[:, 0]]
    out["peak_rss_mb"] = _peak_rss_mb()
    out["involuntary_switches"] = _nivcsw()
    return out


def worker_llama(a):
    t = time.perf_counter()
    import numpy as np
    import llama_cpp
    out = {"engine": "llama.cpp", "import_s": time.perf_counter() - t}
    first = _ids(a.model, 8)
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=a.threads,
                          n_threads_batch=a.threads, verbose=False)
    out["load_s"] = time.perf_counter() - t0
    vocab = llm.n_vocab()

    def last_logits():  # llama-cpp-python 0.3 fills llm.scores only with logits_all=True: read llama.cpp's buffer
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(vocab,))

    llm.eval(first)
    out["first_top1"] = int(np.argmax(last_logits()))
    out["ttft_s"] = time.perf_counter() - t0
    for n in PROMPT_SIZES:
        ids = _ids(a.model, n)
        llm.reset()
        t = time.perf_counter()
        llm.eval(ids)
        out[f"pp{n}_tps"] = n / (time.perf_counter() - t)
        out[f"pp{n}_top1"] = int(np.argmax(last_logits()))
    # decode the way a llama-cpp-python user does greedy decoding token by token, end-of-generation tokens banned
    eog = [t for t in range(vocab) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t)]
    llm.reset()
    llm.eval(first)
    try:
        llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
    except Exception:
        pass
    toks = []
    t = time.perf_counter()
    for _ in range(a.gen):
        logits = last_logits()
        logits[eog] = -np.inf
        tok = int(np.argmax(logits))
        toks.append(tok)
        llm.eval([tok])
    wall = time.perf_counter() - t
    out["tg_tps"] = a.gen / wall
    out["tg_ids"] = toks[:N_CHECK]
    try:
        perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
        if perf.n_eval > 0 and perf.t_eval_ms > 0:
            out["tg_tps_internal"] = perf.n_eval / (perf.t_eval_ms / 1000.0)
    except Exception:
        pass
    out["peak_rss_mb"] = _peak_rss_mb()
    out["involuntary_switches"] = _nivcsw()
    return out


def find_llama_bench(path=None):
    """llama-bench's path: the argument, $LLAMA_BENCH, or on PATH; None if none is executable."""
    import shutil
    for c in (path, os.environ.get("LLAMA_BENCH"), shutil.which("llama-bench")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


def llama_build_flags(bench):
    """The cmake flags of llama-bench's build (FLAGS written by build-llama-cpp.sh, else CMakeCache's GGML_*)."""
    build = os.path.dirname(os.path.dirname(bench))
    try:
        with open(os.path.join(build, "FLAGS")) as f:
            return f.read().strip()
    except OSError:
        pass
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            return " ".join("-D" + ln.split(":", 1)[0] + "=" + ln.split("=", 1)[1].strip() for ln in f
                            if ln.startswith(("GGML_NATIVE", "GGML_AVX", "GGML_AMX", "CMAKE_BUILD_TYPE")))
    except OSError:
        return None


def worker_llama_bench(a):
    """llama-bench at this thread count: pp128, pp512 and tg<gen>, flash attention off and on, one repetition each
    (rounds alternate in the parent); the better of the two flash settings per metric, and its peak RSS."""
    import tempfile
    cmd = [a.llama_bench, "-m", a.model, "-p", ",".join(map(str, PROMPT_SIZES)), "-n", str(a.gen),
           "-t", str(a.threads), "-fa", "0,1", "-r", "1", "-o", "json"]
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        # its peak RSS: VmHWM, read until it exits (ru_maxrss from wait4 would be at least this process's RSS at
        # fork time, which Linux carries across exec: 513 MB after the bandwidth buffers, whatever llama-bench used)
        hwm = 0.0
        while p.poll() is None:
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    hwm = max([hwm] + [int(ln.split()[1]) / 1024.0 for ln in f if ln.startswith("VmHWM:")])
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        fo.seek(0)
        fe.seek(0)
        out_text, err = fo.read(), fe.read()
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({p.returncode}):\n{err[-3000:]}")
    tests = json.loads(out_text)
    if a.depth:  # decode after a prompt of `depth` tokens: a separate run (-d applies to every test of a run)
        d = subprocess.run([a.llama_bench, "-m", a.model, "-p", "0", "-n", str(a.gen), "-d", str(a.depth), "-t",
                            str(a.threads), "-fa", "0,1", "-r", "1", "-o", "json"], capture_output=True, text=True)
        if d.returncode != 0:
            raise RuntimeError(f"llama-bench -d failed ({d.returncode}):\n{d.stderr[-3000:]}")
        tests += json.loads(d.stdout)
    out = {"engine": "llama.cpp", "load_s": None, "ttft_s": None, "peak_rss_mb": hwm or None,
           "build_commit": tests[0].get("build_commit"), "cpu_info": tests[0].get("cpu_info"),
           "repack": tests[0].get("repack")}
    for t in tests:
        key = f"pp{t['n_prompt']}_tps" if t["n_gen"] == 0 else ("tg_depth_tps" if t.get("n_depth") else "tg_tps")
        if t["avg_ts"] > out.get(key, 0.0):
            out[key] = t["avg_ts"]
            out[key.replace("_tps", "_fa")] = t["flash_attn"]
    return out


def run_worker(engine, model, threads, gen, llama_bench=None, depth=0):
    if engine == "llama-bench":
        return worker_llama_bench(argparse.Namespace(llama_bench=llama_bench, model=model, threads=threads, gen=gen,
                                                     depth=depth))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", engine, "--model", model, "--threads",
           str(threads), "--gen", str(gen), "--depth", str(depth)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{engine} worker failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def model_bytes_per_token(path):
    """Bytes of weights a decode step reads: every matrix once (the embedding only one row)."""
    from fastgguf.gguf import GGUFFile
    with GGUFFile(path) as f:
        total = sum(t.nbytes for t in f.tensors.values())
        emb = f.tensors.get("token_embd.weight")
        if emb is not None and "output.weight" in f.tensors:
            total -= emb.nbytes  # untied: the embedding is only looked up
    return total


DEFAULT_VARIANTS = ["q4_0", "q4_1", "q8_0", "q4_k_m", "q6_k"]
GEMV_FORMATS = {"q4_0": "Q4_0", "q4_1": "Q4_1", "q8_0": "Q8_0", "q4_k_m": "Q4_K", "q6_k": "Q6_K",
                "gemma3-270m": "Q4_K"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=["fastgguf", "llama-cpp-python"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help="GGUF file (a worker's input)")
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS,
                    help="SmolLM2 recipes (q4_1 is the default model; q4_0 q8_0 q4_k_m q6_k ... are made by fastgguf "
                         "quantize), catalogue names (gemma3-270m) or .gguf paths")
    ap.add_argument("--threads", nargs="+", type=int, default=None, help="thread counts (default: 1 and all cores)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen", type=int, default=128, help="tokens to decode")
    ap.add_argument("--depth", type=int, default=0,
                    help="also decode --gen tokens after a prompt of this many tokens (llama-bench -d; e.g. 1024)")
    ap.add_argument("--reference", choices=["auto", "llama-bench", "llama-cpp-python", "none"], default="auto")
    ap.add_argument("--llama-bench", help="llama-bench binary (default: $LLAMA_BENCH, then PATH)")
    ap.add_argument("--gemv", action="store_true", help="also each variant's main format's GEMV fraction of bandwidth")
    ap.add_argument("--json", help="save all samples and medians to this file")
    ap.add_argument("--png", help="draw a bar chart of the ratios (needs matplotlib)")
    ap.add_argument("--replot", metavar="JSON", help="only draw --png from an earlier run's --json file")
    a = ap.parse_args(argv)
    if a.replot:
        with open(a.replot) as f:
            _chart(json.load(f), a.png or os.path.splitext(a.replot)[0] + ".png")
        return 0
    if a.worker:
        fn = worker_fastgguf if a.worker == "fastgguf" else worker_llama
        a.threads = a.threads[0]
        print(json.dumps(fn(a)))
        return 0

    from fastgguf import kernels
    from fastgguf.engine.model import physical_cores
    ref = _pick_reference(a)
    engines = ["fastgguf"] + (["llama.cpp"] if ref != "none" else [])
    workers = {"fastgguf": "fastgguf", "llama.cpp": ref}
    threads = a.threads or sorted({1, physical_cores()})
    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if load_avg is not None and load_avg > 0.5:
        print(f"warning: 1-minute load average is {load_avg:.2f}: other processes share the CPUs, "
              f"expect noisy figures", file=sys.stderr)
    results = {"isa": kernels.active(), "cpu": _cpu_model(), "cores": physical_cores(), "load_average": load_avg,
               "depth": a.depth,
               "reference": ref, "llama_bench": a.llama_bench,
               "llama_build_flags": llama_build_flags(a.llama_bench) if ref == "llama-bench" else None,
               "bandwidth_gbs": {nt: bandwidth(nt) for nt in threads}, "rows": []}
    for v in a.variants:
        path = _variant_path(v)
        bpt = model_bytes_per_token(path)
        for nt in threads:
            samples = {e: [] for e in engines}
            for r in range(a.rounds):
                for e in (engines if r % 2 == 0 else engines[::-1]):
                    s = run_worker(workers[e], path, nt, a.gen, a.llama_bench, a.depth)
                    samples[e].append(s)
                    print(f"  {v} t={nt} round {r + 1} {e}: pp512 {s['pp512_tps']:.0f} tg {s['tg_tps']:.1f} tok/s",
                          file=sys.stderr)
            row = {"variant": v, "threads": nt, "bytes_per_token": bpt, "samples": samples}
            row["agreement"] = _agreement(samples) if ref == "llama-cpp-python" else None
            results["rows"].append(row)
    if a.gemv:
        results["gemv"] = gemv_fractions(sorted({GEMV_FORMATS[v] for v in a.variants if v in GEMV_FORMATS}))
    results["load_average_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    _report(results, engines)
    _summary(results, engines)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.png:
        _chart(results, a.png)
    return 0


def _pick_reference(a):
    """The reference engine: what --reference names (an error if missing) or, with auto, the first available."""
    a.llama_bench = find_llama_bench(a.llama_bench)
    if a.reference in ("auto", "llama-bench") and a.llama_bench:
        return "llama-bench"
    if a.reference in ("auto", "llama-cpp-python"):
        try:
            import llama_cpp  # noqa: F401
            return "llama-cpp-python"
        except ImportError:
            if a.reference == "llama-cpp-python":
                raise SystemExit("llama-cpp-python is not installed (pip install llama-cpp-python)")
    if a.reference == "llama-bench":
        raise SystemExit("llama-bench not found: pass --llama-bench PATH or set LLAMA_BENCH "
                         "(build it with ../shared/tools/build-llama-cpp.sh)")
    if a.reference == "auto":
        print("no llama.cpp reference found (llama-bench or llama-cpp-python): measuring fastgguf alone. Build\n"
              "llama-bench natively (GGML_NATIVE=ON) and pass --llama-bench PATH for the head-to-head run.\n",
              file=sys.stderr)
    return "none"


def _variant_path(v):
    """A SmolLM2 recipe's file (made once in the cache), a catalogue model's file, or a .gguf path."""
    from fastgguf import hub
    if v.endswith(".gguf") or os.sep in v:
        return v
    try:
        return hub.model_path(v)
    except Exception:
        base = hub.default_model_path()
        return base if v == "q4_1" else _variant(base, v)


def gemv_fractions(formats, shape=(24576, 4096), repeats=5):
    """Single-thread GEMV of each format on a random matrix beyond the last-level cache: GB/s of weight bytes read
    (median and best of `repeats`) and that as a fraction of the read bandwidth measured just before."""
    import numpy as np
    from fastgguf import kernels
    rows, n = shape
    rng = np.random.default_rng(0)
    out = {"shape": list(shape), "bandwidth_gbs": kernels.read_bandwidth(1 << 29), "formats": {}}
    for fmt in formats:
        step = (1 << 22) // n
        w = np.concatenate([kernels.quantize(rng.standard_normal((min(step, rows - r), n), dtype=np.float32) * 0.05,
                                             fmt) for r in range(0, rows, step)])
        xq = kernels.quantize(rng.standard_normal(n, dtype=np.float32), kernels.vec_dot_type(fmt))
        kernels.gemv(w, fmt, xq)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            kernels.gemv(w, fmt, xq)
            times.append(time.perf_counter() - t)
        med, best = w.nbytes / statistics.median(times) / 1e9, w.nbytes / min(times) / 1e9
        out["formats"][fmt] = {"bytes": int(w.nbytes), "gbs": med, "gbs_best": best,
                               "fraction": med / out["bandwidth_gbs"], "fraction_best": best / out["bandwidth_gbs"]}
    return out


def _summary(results, engines):
    """The issue's table: per variant and thread count, decode and pp512 tokens/s, fastgguf vs llama.cpp."""
    print(f"summary ({results.get('cpu')}, {results['isa']}; reference {results['reference']}"
          + (f", {results['llama_build_flags']}" if results.get("llama_build_flags") else "") + "), medians:")
    keys = ["tg_tps", "pp512_tps"] + (["tg_depth_tps"] if results.get("depth") else [])
    print("| file | threads | decode tg: fastgguf vs llama.cpp | prompt pp512: fastgguf vs llama.cpp |"
          + (f" decode after {results['depth']} tokens |" if results.get("depth") else ""))
    print("|---" * (2 + len(keys)) + "|")
    for row in results["rows"]:
        cells = []
        for key in keys:
            m = row["medians"].get(key)
            if m is None:
                cells.append("-")
            elif len(engines) > 1:
                cells.append(f"{m['fastgguf']:.0f} vs {m['llama.cpp']:.0f} ({m['fastgguf'] / m['llama.cpp']:.2f}x)")
            else:
                cells.append(f"{m['fastgguf']:.0f}")
        print(f"| {row['variant']} | {row['threads']} | " + " | ".join(cells) + " |")
    g = results.get("gemv")
    if g:
        print(f"\nGEMV, 1 thread, {g['shape'][0]}x{g['shape'][1]} random weights, read bandwidth "
              f"{g['bandwidth_gbs']:.1f} GB/s: " + ", ".join(
                  f"{f} {v['gbs']:.1f} GB/s = {v['fraction']:.2f} (best {v['fraction_best']:.2f})"
                  for f, v in g["formats"].items()))


def _cpu_model():
    """lscpu's "Model name" (None where lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), None)


def bandwidth(n_threads, nbytes=1 << 28):
    """Memory read bandwidth in GB/s with n_threads threads of one team reading at once (each its own buffer of
    nbytes, first touched by the thread that reads it), each pass timed as one window: the ceiling for a decode
    step that streams every weight once (fastgguf.kernels.read_bandwidth). Summing per-thread rates measured
    apart, as this did before, reported 60 GB/s at 2 threads where the two reading together get 30-34."""
    from fastgguf import kernels
    return kernels.read_bandwidth(nbytes, 3, n_threads)


def _agreement(samples):
    """Do both engines pick the same greedy tokens? First differing decode position (None: all N_CHECK equal)."""
    f, l = samples["fastgguf"][0], samples["llama.cpp"][0]
    first_diff = next((i for i, (x, y) in enumerate(zip(f["tg_ids"], l["tg_ids"])) if x != y), None)
    top1 = {k: f[k] == l[k] for k in ("first_top1", "pp128_top1", "pp512_top1")}
    margin = f["tg_margins"][first_diff] if first_diff is not None else None
    return {"decode_first_diff": first_diff, "fastgguf_margin_there": margin, "top1_equal": top1}


def _variant(base, v):
    from fastgguf.gguf.quantize import quantized_variant
    return quantized_variant(base, v, os.path.dirname(base))


METRICS = [("load_s", "load s", False), ("ttft_s", "1st token s", False), ("pp128_tps", "pp128 tok/s", True),
           ("pp512_tps", "pp512 tok/s", True), ("tg_tps", "decode tok/s", True),
           ("tg_depth_tps", "decode@depth", True), ("peak_rss_mb", "peak RSS MB", False)]


def _stats(xs):
    return statistics.median(xs), min(xs), max(xs)


def _report(results, engines):
    bws = results["bandwidth_gbs"]
    print(f"\nfastgguf vs llama.cpp  ({results.get('cpu') or 'CPU ?'}, ISA {results['isa']}, {results['cores']} cores, "
          "read bandwidth "
          + ", ".join(f"{bw:.1f} GB/s at {nt} thr" for nt, bw in bws.items())
          + (f", load average {results['load_average']:.2f}" if results.get("load_average") is not None else "")
          + ")")
    print("medians (min-max) of fresh processes; ratio = fastgguf / llama.cpp of the medians (>1 is better for tok/s, "
          "<1 better for s and MB), best = the same of the best rounds (less sensitive to other load on the machine)"
          "\n1st token s = load + an 8-token prompt; decode: fastgguf greedy after an 8-token prompt, wall clock in "
          f"Python; llama.cpp: {results['reference']}" + (" tg from an empty context, the better of flash attention "
          "off and on per metric" if results["reference"] == "llama-bench" else "") + "\n")
    hdr = f"{'variant':7} {'thr':>3} {'metric':13} " + " ".join(f"{e:>24}" for e in engines) + \
        ("   ratio    best" if len(engines) > 1 else "")
    print(hdr)
    print("-" * len(hdr))
    for row in results["rows"]:
        row["medians"], row["best"] = {}, {}
        for key, label, up in METRICS:
            if any(s.get(key) is None for e in engines for s in row["samples"][e]):
                continue  # llama-bench reports no load time
            cells, meds, bests = [], [], []
            for e in engines:
                m, lo, hi = _stats([s[key] for s in row["samples"][e]])
                meds.append(m)
                bests.append(hi if up else lo)
                cells.append(f"{m:9.3g} ({lo:.3g}-{hi:.3g})")
            row["medians"][key] = dict(zip(engines, meds))
            row["best"][key] = dict(zip(engines, bests))
            ratio = f"  {meds[0] / meds[1]:6.2f}x {bests[0] / bests[1]:6.2f}x" if len(engines) > 1 and meds[1] else ""
            print(f"{row['variant']:7} {row['threads']:>3} {label:13} " + " ".join(f"{c:>24}" for c in cells) + ratio)
        if "llama.cpp" in engines:
            internal = [s["tg_tps_internal"] for s in row["samples"]["llama.cpp"] if "tg_tps_internal" in s]
            if internal:
                m = statistics.median(internal)
                row["medians"]["tg_tps_internal"] = {"llama.cpp": m}
                print(f"{'':7} {'':>3} {'decode (C)':13} {'(llama.cpp internal timer)':>24} {m:9.3g} {'':>14}"
                      f"   {row['medians']['tg_tps']['fastgguf'] / m:6.2f}x")
        bw = bws.get(row["threads"])
        if bw:
            ceil = bw * 1e9 / row["bytes_per_token"]
            row["bandwidth_fraction"] = {}
            for e in engines:
                frac = row["medians"]["tg_tps"][e] / ceil
                row["bandwidth_fraction"][e] = frac
                best = row["best"]["tg_tps"][e] / ceil
                print(f"{'':7} {'':>3} {'':13} {e}: decode at {frac:.0%} (best round {best:.0%}) of the bandwidth "
                      f"ceiling ({ceil:.0f} tok/s = {bw:.1f} GB/s / {row['bytes_per_token'] / 1e6:.0f} MB)")
        sw = {e: statistics.median(s["involuntary_switches"] for s in row["samples"][e]) for e in engines
              if all("involuntary_switches" in s for s in row["samples"][e])}  # not measured for llama-bench
        print(f"{'':7} {'':>3} {'':13} involuntary context switches per run (median): "
              + ", ".join(f"{e} {v:.0f}" for e, v in sw.items()))
        ag = row.get("agreement")
        if ag:
            if ag["decode_first_diff"] is not None or not all(ag["top1_equal"].values()):
                m = ag["fastgguf_margin_there"]
                tie = f" (a near-tie: fastgguf's top-1 leads by {m:.2f})" if m is not None and m < NEAR_TIE else ""
                print(f"{'':7} {'':>3} {'':13} WARNING: the engines disagree: greedy ids differ from decode position "
                      f"{ag['decode_first_diff']}{tie}, prompt top-1 equal: {ag['top1_equal']}")
            else:
                print(f"{'':7} {'':>3} {'':13} same greedy ids for the first {N_CHECK} decode tokens and the same "
                      f"prompt top-1")
        print()


def _chart(results, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no chart (pip install matplotlib)", file=sys.stderr)
        return
    rows = [r for r in results["rows"] if "llama.cpp" in r["medians"]["tg_tps"]]
    if not rows:
        return
    # every bar: how many times faster fastgguf is (>1: fastgguf ahead); first token is a time, so inverted
    keys = [("pp128_tps", "prompt 128", False), ("pp512_tps", "prompt 512", False), ("tg_tps", "decode 128", False),
            ("ttft_s", "load to 1st token", True)]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    w = 0.8 / len(rows)
    top = bottom = 1.0
    keys = [k for k in keys if all(k[0] in r["medians"] for r in rows)]  # llama-bench: no load time
    for i, r in enumerate(rows):
        vals = []
        for k, _, inv in keys:
            f, l = r["medians"][k]["fastgguf"], r["medians"][k]["llama.cpp"]
            vals.append(l / f if inv else f / l)
        top, bottom = max(top, *vals), min(bottom, *vals)
        xs = [j + i * w for j in range(len(keys))]
        bars = ax.bar(xs, vals, w, label=f"{r['variant'].upper()}, {r['threads']} thread{'s' if r['threads'] > 1 else ''}")
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(1.25, color="gray", lw=0.8, ls="--")
    ax.set_xticks([j + w * (len(rows) - 1) / 2 for j in range(len(keys))], [label for _, label, _ in keys])
    ax.set_yscale("log")  # ratios: 0.5x and 2x equally far from parity
    ticks = [t for t in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 8, 16, 32, 64) if t <= top * 1.3]
    ax.set_yticks(ticks, [f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(min(0.4, bottom * 0.8), top * 1.4)
    ax.set_ylabel("fastgguf speed / llama.cpp speed (log)")
    ax.set_title(f"fastgguf vs {results.get('reference', 'llama-cpp-python')}, medians of {len(rows[0]['samples']['fastgguf'])} "
                 f"fresh processes ({results['isa']}, {results['cores']} cores); dashed: 1.25x", fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
