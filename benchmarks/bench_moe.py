#!/usr/bin/env python3
"""Mixture-of-experts speed: fastgguf against native llama-bench on the same files, 1 and 2 threads, alternating
rounds, medians and ratios; plus the bytes a decoded token reads (Model.memory()['per_token'], the physical floor)
as achieved bandwidth next to this machine's read bandwidth.

    python benchmarks/bench_moe.py [--rounds 3] [--threads 1 2] [--json OUT]   # the integrator's run
    python benchmarks/bench_moe.py --tiny                                     # a seconds-long smoke run

Files (built once, cached under ~/.cache/fastgguf/bench):
  qwen3moe-a3b-mini.gguf  random weights shaped like a scaled-down Qwen3-30B-A3B: 4 of its 48 layers, each of
                          its shape (n_embd 2048, 128 experts of n_ff_exp 768, 8 used, 32 q heads x 128 over 4 KV
                          heads: a narrower layer would break Q4_K's 256-wide blocks in ffn_down_exps), vocabulary
                          32000; experts Q4_K (1.36 GB), attention Q8_0, token_embd/output Q8_0, norms and router
                          F32 (1.5 GB in all; a token reads 0.24 GB, 15% of it). Random rows
                          are quantized once into a pool and the experts filled by drawing rows from it (the bytes a
                          kernel reads are as varied; quantizing 2.4 G values would take long).
  gpt-oss-20b-mini.gguf   random weights shaped like gpt-oss-20b: 2 of its 24 layers (one sliding-window layer of
                          window 128, one full), each of its shape (n_embd 2880, 32 experts of n_ff_exp 2880, 4
                          used, 64 q heads x 64 over 8 KV heads, attention sinks, every bias), vocabulary 32000;
                          experts MXFP4 as the released files (0.85 GB), attention, token_embd and output Q8_0.
  smollm2-upcycled-4x2.gguf  tests/models.py upcycle: the default model's FFN as 4 experts, 2 used, random router.
Measured per engine and thread count: pp512 (one 512-token batch from an empty context) and tg128 (128 decode
steps; fastgguf: Context.eval one token at a time after an 8-token prompt; llama-bench: tg128, flash attention
off and on, the better kept). Results: benchmarks/results/bench-moe-<date>.json. Do not trust a run on a busy
machine: each measurement is a fresh subprocess and its involuntary context switches are recorded."""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests"), os.path.join(HERE, "..")]

CACHE = os.path.expanduser("~/.cache/fastgguf/bench")
# name -> (arch, shape (n_embd, n_ff_exp, n_head, n_head_kv, head_dim, n_layer, n_expert, n_used, n_vocab))
SHAPES = {"qwen3moe-a3b-mini": ("qwen3moe", (2048, 768, 32, 4, 128, 4, 128, 8, 32000)),
          "qwen3moe-tiny": ("qwen3moe", (256, 256, 4, 2, 64, 2, 16, 4, 1000)),
          "gpt-oss-20b-mini": ("gpt-oss", (2880, 2880, 64, 8, 64, 2, 32, 4, 32000)),
          "gpt-oss-tiny": ("gpt-oss", (256, 256, 4, 2, 64, 2, 8, 2, 1000))}


def build_moe(path, arch, shape, seed=0):
    """The random `arch` (qwen3moe or gpt-oss) file of `shape` (SHAPES) at path (see the module docstring)."""
    import numpy as np
    import gguf
    from fastgguf import kernels
    E, FE, H, KVH, HD, L, NE, NU, V = shape
    oss = arch == "gpt-oss"
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    w.add_tokenizer_model("no_vocab")
    w.add_vocab_size(V)
    w.add_block_count(L)
    w.add_context_length(4096)
    w.add_embedding_length(E)
    w.add_feed_forward_length(3 * E)
    w.add_head_count(H)
    w.add_head_count_kv(KVH)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(NE)
    w.add_expert_used_count(NU)
    w.add_expert_feed_forward_length(FE)
    if oss:   # gpt-oss-20b's window and YaRN (factor 32 over 4096 positions)
        w.add_sliding_window(128)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)
    pools = {}

    def drawn(name, rows, cols, wtype, lead=()):
        """rows x cols (times lead) of wtype, rows drawn from a pool of 2048 quantized random rows."""
        if (cols, wtype) not in pools:
            a = (rng.standard_normal((2048, cols)) / np.sqrt(cols)).astype(np.float32)
            pools[cols, wtype] = kernels.quantize_as_llama_file(a, wtype)
        pool = pools[cols, wtype]
        data = pool[rng.integers(0, len(pool), size=lead + (rows,))]
        w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType[wtype])

    def f32(name, *shape, s=1.0):
        w.add_tensor(name, (1.0 + s * rng.standard_normal(shape) * 0.1).astype(np.float32))

    def bias(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    drawn("token_embd.weight", V, E, "Q8_0")
    f32("output_norm.weight", E)
    drawn("output.weight", V, E, "Q8_0")
    for i in range(L):
        p = f"blk.{i}."
        f32(p + "attn_norm.weight", E)
        drawn(p + "attn_q.weight", H * HD, E, "Q8_0")
        drawn(p + "attn_k.weight", KVH * HD, E, "Q8_0")
        drawn(p + "attn_v.weight", KVH * HD, E, "Q8_0")
        drawn(p + "attn_output.weight", E, H * HD, "Q8_0")
        if oss:   # biases (about 0), sinks; the FFN's norm is post_attention_norm
            for name, n in (("attn_q.bias", H * HD), ("attn_k.bias", KVH * HD), ("attn_v.bias", KVH * HD),
                            ("attn_output.bias", E), ("attn_sinks.weight", H), ("ffn_gate_inp.bias", NE)):
                bias(p + name, n)
            for x, n in (("gate", FE), ("up", FE), ("down", E)):
                bias(p + f"ffn_{x}_exps.bias", NE, n)
            f32(p + "post_attention_norm.weight", E)
        else:
            f32(p + "attn_q_norm.weight", HD)
            f32(p + "attn_k_norm.weight", HD)
            f32(p + "ffn_norm.weight", E)
        w.add_tensor(p + "ffn_gate_inp.weight", (rng.standard_normal((NE, E)) / np.sqrt(E)).astype(np.float32))
        xt = "MXFP4" if oss else "Q4_K"
        drawn(p + "ffn_gate_exps.weight", FE, E, xt, (NE,))
        drawn(p + "ffn_up_exps.weight", FE, E, xt, (NE,))
        drawn(p + "ffn_down_exps.weight", E, FE, xt, (NE,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def files(tiny, only=None):
    """name -> path of the benchmark files (those in `only` where given), built if missing."""
    from fastgguf import hub
    from models import upcycle
    os.makedirs(CACHE, exist_ok=True)
    out = {}
    for name in ("qwen3moe-tiny", "gpt-oss-tiny") if tiny else ("qwen3moe-a3b-mini", "gpt-oss-20b-mini"):
        if only and name not in only:
            continue
        out[name] = os.path.join(CACHE, f"{name}.gguf")
        if not os.path.exists(out[name]):
            build_moe(out[name] + ".part", *SHAPES[name])
            os.replace(out[name] + ".part", out[name])
    up = os.path.join(CACHE, "smollm2-upcycled-4x2.gguf")
    if only and "smollm2-upcycled-4x2" not in only:
        return out
    if not os.path.exists(up):
        upcycle(hub.default_model_path(), up + ".part")
        os.replace(up + ".part", up)
    out["smollm2-upcycled-4x2"] = up
    return out


def worker(a):
    """One fastgguf measurement in this (fresh) process: pp<prompt> and tg<gen> at a.threads; prints JSON."""
    import resource
    import numpy as np
    from fastgguf.engine.model import Model
    m = Model(a.model, n_threads=a.threads)
    ids = [int(t) for t in np.random.default_rng(1).integers(1, m.n_vocab, a.prompt + 8)]
    ctx = m.context(max(a.prompt, 8 + a.gen) + 16)
    t = time.perf_counter()
    ctx.eval(ids[:a.prompt])
    pp = a.prompt / (time.perf_counter() - t)
    ctx.reset()
    logits = ctx.eval(ids[:8])
    t = time.perf_counter()
    for _ in range(a.gen):
        logits = ctx.eval([int(np.argmax(logits))])
    tg = a.gen / (time.perf_counter() - t)
    print(json.dumps({"pp_tps": pp, "tg_tps": tg, "memory": m.memory(),
                      "involuntary_switches": resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw}))


def warm_page_cache(path):
    """Read path once, so that no engine's first run reads the file from disk (a 1.5 GB file read cold made one
    fastgguf pp512 run 2.5x slower than the next, 2026-12-04)."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def run_measured(cmd, env=None):
    """cmd run to its end: (exit status, stdout, stderr, the child's own peak RSS in MB). os.wait4 reaps it, so the
    peak is this child's alone (RUSAGE_CHILDREN would be the largest of every child so far)."""
    import tempfile
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return p.returncode, out.read(), err.read(), usage.ru_maxrss / 1024


def run_fastgguf(model, threads, prompt, gen):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", model, "--threads", str(threads),
           "--prompt", str(prompt), "--gen", str(gen)]
    rc, out, err, rss = run_measured(cmd, env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..")))
    if rc != 0:
        raise RuntimeError(f"fastgguf worker failed:\n{err[-3000:]}")
    return dict(json.loads(out.strip().splitlines()[-1]), peak_rss_mb=rss)


def run_llama_bench(bench, model, threads, prompt, gen):
    cmd = [bench, "-m", model, "-p", str(prompt), "-n", str(gen), "-t", str(threads), "-fa", "0,1", "-r", "1",
           "-o", "json"]
    rc, stdout, err, rss = run_measured(cmd)
    if rc != 0:
        raise RuntimeError(f"llama-bench failed ({rc}):\n{err[-3000:]}")
    out = {"peak_rss_mb": rss}
    for t in json.loads(stdout):
        key = "pp_tps" if t["n_gen"] == 0 else "tg_tps"
        out[key] = max(out.get(key, 0.0), t["avg_ts"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="a smoke run: tiny file, pp32 tg8, one round, 1 thread, "
                                                        "JSON to /tmp")
    ap.add_argument("--llama-bench", default=os.environ.get(
        "LLAMA_BENCH", os.path.expanduser("~/.cache/llama-ref/build/bin/llama-bench")))
    ap.add_argument("--json", help="output path (default benchmarks/results/bench-moe-<date>.json)")
    ap.add_argument("--only", nargs="+", help="just these files (qwen3moe-a3b-mini, gpt-oss-20b-mini, "
                                              "smollm2-upcycled-4x2; the -tiny ones with --tiny)")
    a = ap.parse_args(argv)
    if a.worker:
        a.threads = a.threads[0]
        return worker(a)
    if a.tiny:
        a.prompt, a.gen, a.rounds, a.threads = 32, 8, 1, [1]
    from fastgguf import kernels
    bench = a.llama_bench if os.access(a.llama_bench, os.X_OK) else None
    # the concurrent probe at each thread count (compare.bandwidth): a 2-thread decode against what 2 threads read
    # together, where this once divided every row by one thread's rate
    bws = {th: kernels.read_bandwidth(1 << 26 if a.tiny else 1 << 28, 3, th) for th in a.threads}
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "prompt": a.prompt, "gen": a.gen,
               "rounds": a.rounds, "llama_bench": bench, "read_bandwidth": bws[a.threads[0]],
               "read_bandwidth_gbs": bws, "models": {}}
    for name, path in files(a.tiny, a.only).items():
        per = results["models"][name] = {"path": path, "threads": {}}
        for th in a.threads:
            runs = {"fastgguf": [], "llama.cpp": []}
            warm_page_cache(path)
            for r in range(a.rounds):   # alternating rounds and order: drift hits both engines alike
                for eng in ("fastgguf", "llama.cpp")[::1 if r % 2 == 0 else -1]:
                    if eng == "fastgguf":
                        runs[eng].append(run_fastgguf(path, th, a.prompt, a.gen))
                    elif bench:
                        runs[eng].append(run_llama_bench(bench, path, th, a.prompt, a.gen))
            mem = runs["fastgguf"][0]["memory"]
            row = {"runs": runs, "memory": mem}
            for eng, rs in runs.items():
                for k in ("pp_tps", "tg_tps"):
                    if rs:
                        row[f"{eng}_{k}"] = statistics.median(r[k] for r in rs)
            if bench:
                row["ratio_pp"] = row["fastgguf_pp_tps"] / row["llama.cpp_pp_tps"]
                row["ratio_tg"] = row["fastgguf_tg_tps"] / row["llama.cpp_tg_tps"]
            # decode's bytes: per_token (the floor) x tokens/s = the bandwidth decoding achieves
            row["decode_gbps"] = mem["per_token"] * row["fastgguf_tg_tps"] / 1e9
            row["read_bandwidth_gbs"] = bws[th]
            row["decode_fraction_of_read_bandwidth"] = row["decode_gbps"] / bws[th]  # of th threads' probe
            per["threads"][str(th)] = row
            print(f"{name} t{th}: fastgguf pp{a.prompt} {row['fastgguf_pp_tps']:.1f} tg{a.gen} "
                  f"{row['fastgguf_tg_tps']:.2f} t/s" + (f"; llama.cpp pp {row['llama.cpp_pp_tps']:.1f} tg "
                                                          f"{row['llama.cpp_tg_tps']:.2f}; ratios pp "
                                                          f"{row['ratio_pp']:.2f} tg {row['ratio_tg']:.2f}"
                                                          if bench else "")
                  + f"; {mem['per_token'] / 2**20:.1f} MiB/token ({100 * mem['active_fraction']:.1f}% of "
                    f"the weights), {100 * row['decode_fraction_of_read_bandwidth']:.0f}% of read bandwidth")
    out = a.json or (os.path.join("/tmp", "bench-moe-tiny.json") if a.tiny else
                     os.path.join(HERE, "results", f"bench-moe-{datetime.date.today()}.json"))
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
