"""Aggregate generation throughput of a running server (plain or --ray), or of one it starts.

    python benchmarks/serve_load.py --base http://127.0.0.1:8080            # a server already running
    python benchmarks/serve_load.py -- --ray --replicas 2 --threads 1     # start `fastgguf serve ARGS`, load, stop

`--requests` completion requests (greedy, `--max-tokens` each, prompt "Once upon a time") from `--concurrency`
threads; prints completion tokens / wall seconds (and the server's start time when it started one). Stdlib only.
"""
import argparse
import concurrent.futures as cf
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def post(base, path, body, key, timeout=600):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def load(base, key, requests, concurrency, max_tokens):
    body = {"prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0}
    post(base, "/v1/completions", dict(body, max_tokens=2), key)  # warm-up: the first request sets up routing
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(concurrency) as ex:
        rs = list(ex.map(lambda _: post(base, "/v1/completions", body, key), range(requests)))
    dt = time.perf_counter() - t0
    toks = sum(r["usage"]["completion_tokens"] for r in rs)
    return toks, dt


def start(args, key):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile("w+b", suffix=".log", delete=False)
    cmd = [sys.executable, "-m", "fastgguf", "serve", "--port", str(port), "--api-key", key, *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=tempfile.gettempdir())
    base = f"http://127.0.0.1:{port}"
    ray = "--ray" in args
    while True:
        if proc.poll() is not None:
            raise SystemExit(open(log.name, "rb").read().decode(errors="replace")[-3000:])
        if ray:
            if b"fastgguf serve --ray:" in open(log.name, "rb").read():
                break
        else:
            try:
                urllib.request.urlopen(base + "/health", timeout=1).close()
                break
            except OSError:
                pass
        time.sleep(0.2)
    return proc, base, time.perf_counter() - t0, log.name


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="URL of a running server (else: start one with the arguments after --)")
    ap.add_argument("--api-key", default="bench")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("serve_args", nargs="*", help="arguments of `fastgguf serve` (after --)")
    a = ap.parse_args()
    proc = None
    if a.base:
        base, started = a.base.rstrip("/"), None
    else:
        proc, base, started, logname = start(a.serve_args, a.api_key)
    try:
        toks, dt = load(base, a.api_key, a.requests, a.concurrency, a.max_tokens)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)  # --ray: the CLI shuts its own Ray cluster down
            proc.wait(120)
            os.unlink(logname)
    what = " ".join(a.serve_args) or base
    st = f", started in {started:.1f} s" if started is not None else ""
    print(f"{what}: {toks} tokens in {dt:.1f} s = {toks / dt:.1f} tok/s ({a.requests} requests, "
          f"concurrency {a.concurrency}{st})", flush=True)


if __name__ == "__main__":
    main()
