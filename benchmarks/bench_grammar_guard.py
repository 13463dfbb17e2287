"""Hostile grammars against a real `fastgguf serve` (issue 32): what each costs the server and the other clients.

    python benchmarks/bench_grammar_guard.py [--checkout DIR] [--cases chain1000,gbnf2500,...] [--json FILE]

--checkout runs the server from another source tree (a git worktree of an older commit with its extension built
or copied in), for before/after tables. Per case, one request through /v1/chat/completions (schemas) or
/v1/completions (GBNF), default model, 1 thread, while a thread polls GET /health every 50 ms:
  status / message  the answer (or "server died" when the process exited)
  wall s            request sent -> answer
  CPU s             user + system CPU of the server process and its children (the compile sandbox's workers),
                    from /proc, over the request
  health max ms     the slowest /health answer during it
The "abandoned" case sends a GBNF grammar of 80,000 alternatives, hangs up after 2 s and reports how many more seconds the
server kept burning CPU (until its CPU stops rising for 1 s). Linux only (/proc). A full run takes about a minute
(before the fix: longer, and the crash case restarts the server).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.expanduser("~/.cache/fastgguf/SmolLM2-135M-Instruct.Q4_1.gguf")


def chain(n):
    defs = {f"a{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/a{i + 1}"}}} for i in range(n)}
    defs[f"a{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/a0", "$defs": defs}


def rules(n):
    return "root ::= r0\n" + "".join(f'r{i} ::= "a" r{i + 1} | "b"\n' for i in range(n)) + f'r{n} ::= "c"\n'


def alternatives(n):
    return "root ::= " + " | ".join(f'"word{i}"' for i in range(n)) + "\n"


CASES = {
    "chain1000": ("schema", lambda: chain(1000)),
    "self_ref": ("schema", lambda: {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}),
    "gbnf2500": ("gbnf", lambda: rules(2500)),
    "gbnf10000": ("gbnf", lambda: rules(10000)),
    "alts100000": ("gbnf", lambda: alternatives(100000)),
    "alts40000": ("gbnf", lambda: alternatives(40000)),
    "repeat1e6": ("gbnf", lambda: 'root ::= "a"{1000000}'),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_cpu(pid):
    """User + system seconds of pid and its direct children (Linux /proc)."""
    tck = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(p) == pid or int(f[1]) == pid:
            total += (int(f[11]) + int(f[12])) / tck
    return total


class Server:
    def __init__(self, checkout):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, PYTHONPATH=checkout)
        self.proc = subprocess.Popen([sys.executable, "-m", "fastgguf", "serve", "-m", MODEL, "--port",
                                      str(self.port), "--threads", "1", "--parallel", "2", "--ctx-size", "2048",
                                      "--max-body", "4000000"], cwd=checkout, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            if self.health() is not None:
                return
            time.sleep(0.1)
        raise SystemExit("server did not start")

    def health(self):
        try:
            t = time.perf_counter()
            with urllib.request.urlopen(self.base + "/health", timeout=5):
                return time.perf_counter() - t
        except OSError:
            return None

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def body_of(kind, src):
    if kind == "schema":
        return "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                                        "response_format": {"type": "json_schema",
                                                            "json_schema": {"name": "x", "schema": src}}}
    return "/v1/completions", {"prompt": "x", "max_tokens": 4, "grammar": src}


def post(server, path, body, timeout=600):
    req = urllib.request.Request(server.base + path, json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def measure(server, kind, src):
    path, body = body_of(kind, src)
    worst, stop = [0.0], threading.Event()

    def poll():
        while not stop.is_set():
            h = server.health()
            worst[0] = max(worst[0], h if h is not None else 5.0)
            time.sleep(0.05)
    t = threading.Thread(target=poll)
    c0, w0 = tree_cpu(server.proc.pid), time.perf_counter()
    t.start()
    status, text = post(server, path, body)
    wall = time.perf_counter() - w0
    stop.set()
    t.join()
    died = server.proc.poll() is not None
    cpu = tree_cpu(server.proc.pid) - c0 if not died else float("nan")
    try:
        msg = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        msg = text
    return {"status": "server died" if died else status, "message": msg[:160], "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "health_max_ms": round(worst[0] * 1000, 1)}


def abandoned(server):
    """A grammar of 80,000 alternatives (870 kB: 4-8 CPU-s to compile, before and after), the client gone after
    2 s: seconds of server CPU after the hang-up."""
    path, body = body_of("gbnf", alternatives(80000))
    th = threading.Thread(target=post, args=(server, path, body, 2), daemon=True)
    th.start()
    th.join()
    t_hang, last, last_t = time.perf_counter(), tree_cpu(server.proc.pid), time.perf_counter()
    while time.perf_counter() - last_t < 1.0 and time.perf_counter() - t_hang < 120:
        time.sleep(0.25)
        now = tree_cpu(server.proc.pid)
        if now - last > 0.05:
            last, last_t = now, time.perf_counter()
    return {"busy_after_hangup_s": round(last_t - t_hang, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkout", default=os.path.dirname(HERE))
    ap.add_argument("--cases", default=",".join(CASES) + ",abandoned")
    ap.add_argument("--json")
    a = ap.parse_args()
    out = {}
    server = Server(a.checkout)
    try:
        for name in a.cases.split(","):
            if server.proc.poll() is not None:
                server = Server(a.checkout)
            out[name] = abandoned(server) if name == "abandoned" else measure(server, *[
                (k, f()) for k, f in [CASES[name]]][0])
            print(name, out[name], flush=True)
    finally:
        server.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
