"""Issue 24 (defects 4 and 6) before/after figures: does one client's huge request stall the others, and are idle
connections closed?

    python benchmarks/isolation_transport.py                  # default model, 7 MB bodies
    python benchmarks/isolation_transport.py -m FILE.gguf --mb 7 --idle 200

Starts `fastgguf serve` (--max-body large enough for the body) and measures, each while one big request runs:
  tokenize s        wall time of /tokenize of MB megabytes of one letter (the single-word BPE merge)
  health max / p50  /health latency polled every 20 ms during that /tokenize, and during a chat completion whose
                    one message is MB megabytes (refused before tokenizing since the context bound; before, the
                    template and tokenizer ran first)
  idle open after   of --idle connections that connect and send nothing, how many are still open after the
                    header timeout + 2 s (the issue: all of them, forever)
Prints one table; run it on a quiet machine (the figures are wall times).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def health_during(base, fn):
    """(seconds fn took, its result, /health latencies meanwhile)."""
    out, lat = {}, []

    def run():
        t0 = time.perf_counter()
        out["result"] = fn()
        out["seconds"] = time.perf_counter() - t0
    th = threading.Thread(target=run)
    th.start()
    while th.is_alive():
        t0 = time.perf_counter()
        with urllib.request.urlopen(base + "/health", timeout=600):
            pass
        lat.append(time.perf_counter() - t0)
        time.sleep(0.02)
    th.join()
    return out["seconds"], out["result"], lat


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--mb", type=float, default=7.0)
    ap.add_argument("--idle", type=int, default=200)
    ap.add_argument("--header-timeout", type=float, default=10.0)
    a = ap.parse_args()
    port, n = free_port(), int(a.mb * 1e6)
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "fastgguf", "serve", "--port", str(port), "--max-body", str(n + 4096)]
    cmd += ["-m", a.model] if a.model else []
    help_ = subprocess.run([sys.executable, "-m", "fastgguf", "serve", "--help"], capture_output=True, text=True).stdout
    if "--timeout-header" in help_:
        cmd += ["--timeout-header", str(a.header_timeout)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        rows = []
        s, status, lat = health_during(base, lambda: post(base, "/tokenize", {"content": "a" * n}))
        rows.append((f"/tokenize {a.mb:g} MB", status, s, max(lat), statistics.median(lat)))
        s, status, lat = health_during(base, lambda: post(base, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "a" * n}], "max_tokens": 1}))
        rows.append((f"chat {a.mb:g} MB prompt", status, s, max(lat), statistics.median(lat)))
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(a.idle)]
        time.sleep(a.header_timeout + 2)
        still = 0
        for sk in socks:
            sk.setblocking(False)
            try:
                still += sk.recv(1) != b""
            except BlockingIOError:
                still += 1
            except OSError:
                pass
            sk.close()
        print(f"{'request':<24} {'status':>6} {'seconds':>8} {'health max':>11} {'health p50':>11}")
        for name, st, sec, mx, p50 in rows:
            print(f"{name:<24} {st:>6} {sec:>8.2f} {mx:>11.3f} {p50:>11.3f}")
        print(f"idle connections still open after {a.header_timeout + 2:g} s: {still} of {a.idle}")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
