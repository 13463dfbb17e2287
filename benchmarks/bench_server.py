"""Server throughput and latency: fastgguf serve against llama.cpp's llama-server, same file, threads and slots.

    python benchmarks/bench_server.py                                   # default model, 2 threads, 32 tokens
    python benchmarks/bench_server.py -m FILE.gguf --threads 4 --max-tokens 64 --concurrency 1 8 32

For each concurrency c (1, 2, 4, 8, 16, 32) each server is started with c slots (fastgguf: --parallel c
--ctx-size S; llama-server: --parallel c -c c*S, so S positions per slot too) and --threads T, then c clients
(the official openai async client, streamed /v1/completions) each send --rounds requests one after the other.
Every request decodes exactly --max-tokens tokens: end-of-generation is banned (logit_bias -100 on the model's
end-of-generation ids; llama-server also gets ignore_eos). Measured per level:
  aggregate tok/s  completion tokens of all requests / wall time of the level (first send to last token)
  TTFT p50         from sending a request to its first text chunk
  ITL p50 / p99    gaps between successive text chunks of a request, all requests pooled
  CPU s/token     the server process's user + system CPU time over the level / completion tokens (less
                  sensitive than wall time to other processes sharing the cores, though spinning counts)
and, at the largest concurrency, each server's peak RSS (VmHWM of /proc/PID/status). A warm-up request runs
before each level. Prints a table and writes JSON to benchmarks/results/ (or --json).
"""
import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the fastgguf of this checkout (built in place), also for the server
LLAMA_SERVER = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")  # a native build (GGML_NATIVE=ON)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), None)


def cpu_seconds(pid):
    """User + system CPU seconds of a process and its threads so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_hwm_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


class Server:
    """A server subprocess on a free port, up once /health answers 200; extra: more command-line arguments."""

    def __init__(self, engine, model, slots, ctx_per_slot, threads, llama_server, extra=()):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        if engine == "fastgguf":
            cmd = [sys.executable, "-m", "fastgguf", "serve", "-m", model, "--port", str(self.port), "--parallel",
                   str(slots), "--ctx-size", str(ctx_per_slot), "--threads", str(threads)]
        else:
            cmd = [llama_server, "-m", model, "--port", str(self.port), "--parallel", str(slots), "-c",
                   str(slots * ctx_per_slot), "-t", str(threads), "-tb", str(threads), "--no-webui"]
        cmd += list(extra)
        self.log = tempfile.NamedTemporaryFile("w+b", prefix="bench_server_", suffix=".log", delete=False)
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 120
        while True:
            if self.proc.poll() is not None:
                log = open(self.log.name, "rb").read().decode(errors="replace")
                raise SystemExit(f"{engine} exited:\n{log[-3000:]}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                self.stop()
                raise SystemExit(f"{engine} did not start in 120 s")
            time.sleep(0.2)

    def log_tail(self, n=2000):
        return open(self.log.name, "rb").read().decode(errors="replace")[-n:]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.log.name)


async def one_request(client, body, extra):
    """(ttft, [inter-token gaps], completion chunks with text, finish_reason) of one streamed completion; a
    request that fails (connection dropped, HTTP error) gives finish_reason "error: ..." and counts no tokens."""
    t0 = time.perf_counter()
    times, finish = [], None
    try:
        stream = await client.completions.create(stream=True, extra_body=extra, **body)
        async for chunk in stream:
            for c in chunk.choices:
                if c.text:
                    times.append(time.perf_counter())
                finish = c.finish_reason or finish
    except Exception as e:  # noqa: BLE001 - reported in the level's "failed" count
        return None, [], 0, f"error: {type(e).__name__}: {e}"
    gaps = [b - a for a, b in zip(times, times[1:])]
    return (times[0] - t0 if times else None), gaps, len(times), finish


async def level(base, pid, model_name, c, rounds, max_tokens, eog_ids, extra):
    import openai
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
    bias = {str(t): -100 for t in eog_ids}

    def body(i):
        return dict(model=model_name, prompt=f"Story number {i}. Once upon a time", max_tokens=max_tokens,
                    temperature=0, logit_bias=bias)

    try:
        await one_request(client, body(-1), extra)  # warm-up
        results = []

        async def worker(w):
            for r in range(rounds):
                results.append(await one_request(client, body(w * rounds + r), extra))
        t0, cpu0 = time.perf_counter(), cpu_seconds(pid)
        await asyncio.gather(*(worker(w) for w in range(c)))
        wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    finally:
        await client.close()
    ttft = [r[0] for r in results if r[0] is not None]
    gaps = sorted(g for r in results for g in r[1])
    failed = [r[3] for r in results if r[3] is None or r[3].startswith("error")]
    done = sum(1 for r in results if r[3] == "length")  # requests that decoded all max_tokens
    tokens = done * max_tokens
    return {"concurrency": c, "requests": len(results), "failed": len(failed), "errors": sorted(set(failed))[:3],
            "wall_s": wall, "tokens": tokens, "tok_s": tokens / wall,
            "cpu_ms_per_token": 1e3 * cpu / max(tokens, 1),
            "ttft_p50_ms": 1e3 * statistics.median(ttft) if ttft else float("nan"),
            "itl_p50_ms": 1e3 * percentile(gaps, 50), "itl_p99_ms": 1e3 * percentile(gaps, 99),
            "text_chunks": sum(r[2] for r in results)}


def percentile(xs, p):
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=None, help="GGUF file (default: the default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2, help="requests per client, one after the other")
    ap.add_argument("--ctx-per-slot", type=int, default=256)
    ap.add_argument("--engines", nargs="+", default=["fastgguf", "llama.cpp"], choices=["fastgguf", "llama.cpp"])
    ap.add_argument("--llama-server", default=LLAMA_SERVER, help="llama-server binary (default: $LLAMA_SERVER, then PATH)")
    ap.add_argument("--json", help="output file (default: benchmarks/results/bench-server-DATE.json)")
    a = ap.parse_args(argv)
    if "llama.cpp" in a.engines and not (a.llama_server and os.access(a.llama_server, os.X_OK)):
        ap.error("llama-server not found: pass --llama-server PATH or set LLAMA_SERVER (a native build: "
                 "../shared/tools/build-llama-cpp.sh), or --engines fastgguf")
    from fastgguf import Model, hub
    model_path = a.model or hub.default_model_path(download=True)
    m = Model(model_path, n_threads=1)
    eog = sorted(int(t) for t in m.tokenizer.eog_ids)
    from fastgguf.api.openai.protocol import model_id
    names = {"fastgguf": model_id(m), "llama.cpp": os.path.basename(model_path)}
    del m
    rows = {e: [] for e in a.engines}
    rss = {}
    for c in a.concurrency:
        for e in a.engines:  # alternate the engines within each level (the machine's load drifts)
            s = Server(e, model_path, c, a.ctx_per_slot, a.threads, a.llama_server)
            try:
                extra = {"ignore_eos": True} if e == "llama.cpp" else None
                r = asyncio.run(level(s.base, s.proc.pid, names[e], c, a.rounds, a.max_tokens, eog, extra))
                if c == max(a.concurrency):
                    rss[e] = vm_hwm_mb(s.proc.pid)
                if r["failed"]:
                    print(f"{e} server log (tail):\n{s.log_tail()}", flush=True)
            finally:
                s.stop()
            rows[e].append(r)
            print(f"{e:9s} c={c:2d}: {r['tok_s']:7.1f} tok/s  TTFT p50 {r['ttft_p50_ms']:7.1f} ms  "
                  f"ITL p50 {r['itl_p50_ms']:6.1f} ms  p99 {r['itl_p99_ms']:6.1f} ms  "
                  f"CPU {r['cpu_ms_per_token']:5.1f} ms/token"
                  + (f"  FAILED {r['failed']}/{r['requests']}: {r['errors']}" if r["failed"] else ""), flush=True)
    cpu = cpu_model()
    load = os.getloadavg()
    print(f"\n{os.path.basename(model_path)}, {a.threads} threads, {a.max_tokens} tokens/request, {a.rounds} "
          f"requests/client, {cpu}, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    head = "| conc | " + " | ".join(f"{e} tok/s | TTFT p50 ms | ITL p50/p99 ms | CPU ms/tok" for e in a.engines)
    if len(a.engines) == 2:
        head += " | tok/s ratio"
    head += " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for i, c in enumerate(a.concurrency):
        cells = []
        for e in a.engines:
            r = rows[e][i]
            cells.append(f"{r['tok_s']:.1f} | {r['ttft_p50_ms']:.0f} | {r['itl_p50_ms']:.1f} / {r['itl_p99_ms']:.1f} | "
                         f"{r['cpu_ms_per_token']:.1f}")
        line = f"| {c} | " + " | ".join(cells)
        if len(a.engines) == 2:
            line += f" | {rows[a.engines[0]][i]['tok_s'] / rows[a.engines[1]][i]['tok_s']:.2f}x"
        print(line + " |")
    for e in a.engines:
        one = next((r for r in rows[e] if r["concurrency"] == 1), None)
        eight = next((r for r in rows[e] if r["concurrency"] == 8), None)
        if one and eight:
            print(f"{e}: aggregate at 8 streams / 1 stream = {eight['tok_s'] / one['tok_s']:.2f}x")
    for e, v in rss.items():
        print(f"{e}: peak RSS at {max(a.concurrency)} streams {v:.0f} MB")
    out = a.json or os.path.join(HERE, "results", f"bench-server-{time.strftime('%Y-%m-%d')}.json")
    with open(out, "w") as f:
        json.dump({"model": os.path.basename(model_path), "threads": a.threads, "max_tokens": a.max_tokens,
                   "rounds": a.rounds, "ctx_per_slot": a.ctx_per_slot, "cpu": cpu, "loadavg": load,
                   "results": rows, "peak_rss_mb": rss}, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
