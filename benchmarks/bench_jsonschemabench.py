"""JSONSchemaBench through the chat completions API (issue 33): which real-world schemas each server enforces, and
whether what it returns under them is valid. fastgguf serve against llama.cpp's llama-server, same model.

    python benchmarks/bench_jsonschemabench.py                        # 1000 schemas, both engines when found
    python benchmarks/bench_jsonschemabench.py --n 20 --engines fastgguf          # a smoke test
    python benchmarks/bench_jsonschemabench.py --n 200 --json FILE --resume      # a killed run's command + --resume
    python benchmarks/bench_jsonschemabench.py --data DIR --n 1000 --seed 0 --concurrency 2 --max-tokens 1024 \\
        --llama-server ~/.cache/llama-ref/build/bin/llama-server --engines fastgguf,llama-server

The schemas: JSONSchemaBench (Geng et al. 2025, https://github.com/guidance-ai/jsonschemabench), its data/ folder:
<category>/*.json, one JSON Schema per file, 9,557 files in 10 categories (Github_trivial ... Github_ultra,
Glaiveai2K, JsonSchemaStore, Kubernetes, Snowplow, WashingtonPost). It is not part of this repository: clone that
repository and pass its data/ folder as --data (default /work/jsb/data). --n files are drawn from all of them with
random.Random(--seed) (uniform over files, so categories come in their proportions).

Per engine one server (fastgguf serve / llama-server, a native build: ../shared/tools/build-llama-cpp.sh; found as
--llama-server, $LLAMA_SERVER, ~/.cache/llama-ref/build/bin/llama-server, then PATH) with --concurrency slots of
--ctx-per-slot positions and --threads threads; --concurrency requests in flight. Every schema gets the same request
on both: POST /v1/chat/completions, streamed, temperature 0 (greedy), max_tokens --max-tokens, one user message
asking for a realistic JSON instance of the schema with the schema's JSON in it (cut at --schema-tokens tokens of
the model's tokenizer), and response_format {"type": "json_schema", "json_schema": {"name": "x", "schema": S,
"strict": true}}. Each outcome is one of:
  refused      HTTP 4xx before any token (the engine says it cannot enforce the schema); its error message,
               normalised (digits -> N, long quoted strings and JSON cut), counted per reason
  stop         finish_reason "stop"; the text is parsed (json.loads, no NaN/Infinity) and validated with
               jsonschema: the Draft validator its $schema names (default 2020-12), format checking on for the
               formats jsonschema checks here (the list goes in the JSON), no remote $ref fetched. Then:
      valid        no validation error
      FAILED OPEN  not JSON, or a validation error: output that claims to follow the schema and does not.
                   Must be 0 for fastgguf; every case is printed with the validator's message
      unchecked    the validator itself could not run (a pattern Python's re cannot compile, an unresolvable
                   $ref, an invalid schema): neither valid nor failed open
  length       finish_reason "length": cut by max_tokens (or the context)
  5xx          HTTP 5xx, an error event in the stream, a dropped connection, or a server crash (always listed)
  timeout      no end within --timeout seconds: the stream is closed (the server cancels it), and the server is
               restarted only if /health then does not answer
"compiled" = everything the server accepted (stop + length + 5xx/timeouts after acceptance).
A server that dies mid-run is restarted and the run goes on; the requests in flight at the time are re-sent one at a
time at the end, so the schema that crashes it alone is named (a crash not reproduced alone is listed with its
suspects). Also measured: fastgguf's compile cost in-process, Grammar.json_schema(S) (the min of --compile-rounds
calls, in a child process that survives a crash), p50 / p99 / max per category, and for both servers the time to
the first content token (TTFT, which adds the prompt's prefill and, with 2 in flight, the other stream's steps) as
llama-server's proxy for its grammar set-up.

Reading the tables: llama-server's converter (common/json-schema.cpp) allows no key outside `properties` when a schema
has `properties` and no `additionalProperties`; fastgguf allows them, as JSON Schema says. A small model that invents
keys until max_tokens therefore ends in "length" more often on fastgguf and in "stop" more often on llama-server.
llama-server also accepts keywords it does not enforce (not, uniqueItems, if/then, overlapping oneOf, ...): those
are where its FAILED OPEN cases come from, and what fastgguf refuses.

Prints per engine a markdown table by category, the top refusal reasons, every failed-open / 5xx / crash case and
the compile table, and writes everything (per schema records, failed-open outputs) as JSON to
benchmarks/results/bench-jsonschemabench-DATE.json (or --json), with the date and lscpu's model name. The file is
rewritten every 10 replies, also on SIGTERM / Ctrl-C: the same command line with --resume goes on where a killed run
stopped (same sample and settings; it keeps the compile costs and replies, the wall time adds up over sessions).

Cost (2-vCPU AMD EPYC shared with other work, SmolLM2-135M Q4_1, 2 threads, 2 in flight, max_tokens 1024): under
greedy decoding the 135M model often loops (repeating a key, a word, a digit) until max_tokens, and those 1024-token
replies take most of the time. --n 200: fastgguf 2580 s (1-min load ~4), llama-server 2010 s (load ~2.5), so --n
1000 takes about 3.5 h + 3 h. llama-server slows down sharply when the cores are busy: in an --n 20 run at load ~5
it took 2034 s (1.5-8 tok/s per stream on big schemas) against fastgguf's 250 s. The in-process compile takes ~2 s
per 200 schemas. benchmarks/results/bench-jsonschemabench-2026-12-03-n200.txt has that run's tables.
"""
import argparse
import asyncio
import glob
import json
import os
import queue
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the fastgguf of this checkout (built in place), also for the server
sys.path.insert(0, HERE)
from bench_server import Server, cpu_model, percentile  # noqa: E402

DATA = "/work/jsb/data"
LLAMA_REF = os.path.expanduser("~/.cache/llama-ref/build/bin/llama-server")
ENGINES = ("fastgguf", "llama-server")
OUTCOMES = ("valid", "failed_open", "unchecked", "refused", "length", "5xx", "timeout")
PROMPT = ("Here is a JSON Schema:\n\n{schema}\n\nWrite one realistic example of a JSON document that is valid under "
          "this schema, with plausible values. Reply with the JSON only.")


def find_llama_server():
    for p in (os.environ.get("LLAMA_SERVER"), LLAMA_REF, shutil.which("llama-server")):
        if p and os.access(p, os.X_OK):
            return p
    return None


def sample(data, n, seed):
    """[(category, path)] of n files drawn from data/<category>/*.json with random.Random(seed)."""
    files = sorted(glob.glob(os.path.join(data, "*", "*.json")))
    if not files:
        raise SystemExit(f"no schemas under {data}/<category>/*.json: clone github.com/guidance-ai/jsonschemabench "
                         "and pass its data/ folder as --data")
    files = random.Random(seed).sample(files, min(n, len(files)))
    return [(os.path.basename(os.path.dirname(f)), f) for f in files]


def rel(path):
    return os.path.join(*path.split(os.sep)[-2:])


def reason(message):
    """An error message with what varies per schema taken out, so that equal reasons count together."""
    m = " ".join(str(message).split())
    m = re.sub(r"^(response_format|json_schema): ", "", m)
    m = re.sub(r" while processing \S+$", "", m)     # llguidance's location of the keyword
    m = re.sub(r"\{.*\}", "{...}", m)               # a dumped schema or value
    m = re.sub(r'"[^"]{32,}"', '"..."', m)
    m = re.sub(r"\d+", "N", m)
    return m[:160]


# ---------------------------------------------------------------------------------------------- validation


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def validate(schema, text):
    """(outcome, message) of a "stop" text: valid, failed_open (not JSON / a validation error) or unchecked."""
    import referencing
    from jsonschema import validators
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except ValueError as e:
        return "failed_open", f"not JSON: {e}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cls = validators.validator_for(schema, default=validators.Draft202012Validator)
            v = cls(schema, format_checker=cls.FORMAT_CHECKER, registry=referencing.Registry())
            err = next(iter(v.iter_errors(doc)), None)
        except Exception as e:  # noqa: BLE001 - the validator could not run: neither valid nor failed open
            return "unchecked", f"{type(e).__name__}: {str(e)[:300]}"
    if err is None:
        return "valid", None
    path = "/".join(str(p) for p in err.absolute_path)
    return "failed_open", f"{cls.__name__} at /{path}: {err.message[:300]}"


def checked_formats():
    from jsonschema import validators
    return {c.__name__: sorted(c.FORMAT_CHECKER.checkers) for c in (validators.Draft4Validator,
                                                                   validators.Draft7Validator,
                                                                   validators.Draft202012Validator)}


# ---------------------------------------------------------------------------------------------- compile cost


def compile_worker(rounds):
    """Child process: for each path on stdin, one JSON line {ok, s, error} on stdout (s: min over rounds)."""
    from fastgguf.engine.grammar import Grammar
    for line in sys.stdin:
        path = line.rstrip("\n")
        with open(path) as f:
            schema = json.load(f)
        best, error = float("inf"), None
        for _ in range(rounds):
            t = time.perf_counter()
            try:
                Grammar.json_schema(schema)
            except Exception as e:  # noqa: BLE001 - GrammarError, TypeError, ...: a refusal
                error = f"{type(e).__name__}: {e}"
            best = min(best, time.perf_counter() - t)
        print(json.dumps({"file": path, "ok": error is None, "s": best, "error": error}), flush=True)


def compile_costs(items, rounds, timeout=120):
    """{path: {ok, s, error}} of Grammar.json_schema over the items, in a child process restarted after a crash or
    a schema that takes over `timeout` seconds (that schema's entry then says so)."""
    out, todo = {}, [p for _, p in items]
    while todo:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--compile-worker",
                                 "--compile-rounds", str(rounds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=dict(os.environ, PYTHONPATH=os.path.dirname(HERE)))
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        try:
            proc.stdin.write("".join(p + "\n" for p in todo))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        while todo:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                line = "timeout"
            if line is None or line == "timeout":
                proc.kill()
                proc.wait()
                what = "timeout" if line else f"crash (exit {proc.returncode})"
                out[todo[0]] = {"ok": False, "s": None, "error": f"compile {what}"}
                print(f"  compile {what}: {rel(todo[0])}", flush=True)
                todo = todo[1:]
                break
            if not line.startswith("{"):
                continue                  # anything else the child prints
            r = json.loads(line)
            out[r.pop("file")] = r
            todo = todo[1:]
        else:
            proc.wait()
    return out


# ---------------------------------------------------------------------------------------------- one engine


class Run:
    """One engine over the sample: its server (restarted after a crash or a timeout) and the outcome per schema."""

    def __init__(self, engine, a, model_path, prompts):
        self.engine, self.a, self.model_path, self.prompts = engine, a, model_path, prompts
        self.server, self.gen, self.model_id = None, 0, None
        self.ready = asyncio.Event()
        self.lock = asyncio.Lock()
        self.inflight = defaultdict(set)     # gen -> paths in flight on that server
        self.crashes, self.restarts = [], 0
        self.recs, self.wall0, self.sessions, self.complete = {}, 0.0, 0, False   # --resume: what a run left
        self.t0, self.on_progress = None, None
        self.loads = []                      # the 1-minute load average at each progress line: the machine is shared
        self.alone = False                   # re-sending the requests a crash took down, one at a time

    def _start(self):
        s = Server(self.engine, self.model_path, self.a.concurrency, self.a.ctx_per_slot, self.a.threads,
                   self.a.llama_server)
        import urllib.request
        with urllib.request.urlopen(s.base + "/v1/models", timeout=10) as r:
            self.model_id = json.load(r)["data"][0]["id"]
        return s

    async def start(self):
        self.server = await asyncio.to_thread(self._start)
        self.ready.set()

    async def restart(self, gen, why, path=None):
        """Replace the server of generation gen (once, whoever asks first). why: "crash" or "timeout"."""
        async with self.lock:
            if self.gen != gen:
                return
            self.ready.clear()
            self.gen += 1
            old = self.server
            if why == "crash":
                self.crashes.append({"exit_code": old.proc.poll(), "alone": self.alone,
                                     "in_flight": sorted(rel(p) for p in self.inflight[gen]), "culprits": [],
                                     "log_tail": old.log_tail(3000)})
                print(f"  {self.engine} CRASHED (exit {old.proc.poll()}); in flight: "
                      f"{', '.join(sorted(rel(p) for p in self.inflight[gen]))}; restarting", flush=True)
            else:
                print(f"  {self.engine}: {rel(path)} timed out and /health does not answer; restarting the server",
                      flush=True)
            await asyncio.to_thread(old.stop)
            self.restarts += 1
            await self.start()

    async def _dead(self, gen, wait=3.0):
        """Whether the server of generation gen has exited (waiting up to `wait` s for it to be reaped)."""
        t = time.time()
        while time.time() - t < wait:
            if self.gen != gen or self.server.proc.poll() is not None:
                return self.gen == gen
            await asyncio.sleep(0.1)
        return False

    async def _healthy(self, client, gen):
        """Whether the server of generation gen still answers /health within 10 s."""
        import httpx
        if self.gen != gen:
            return True
        try:
            r = await client.get(self.server.base + "/health", timeout=10)
            return r.status_code == 200
        except httpx.HTTPError:
            return False

    async def one(self, client, path, schema):
        """The record of one schema, or None when the request died with a server we restarted (re-send it)."""
        await self.ready.wait()
        gen, base = self.gen, self.server.base
        self.inflight[gen].add(path)
        import httpx
        try:
            seen = {}                    # what the stream has shown so far: ttft_s, chunks
            rec = await asyncio.wait_for(self._send(client, base, path, schema, seen), self.a.timeout)
        except asyncio.TimeoutError:      # the stream is closed: the server cancels it; restarted if it is stuck
            if not await self._healthy(client, gen):
                await self.restart(gen, "timeout", path)
            return {"outcome": "timeout", "message": f"no end in {self.a.timeout:.0f} s", "wall_s": self.a.timeout,
                    **seen}
        except (httpx.TransportError, httpx.StreamError) as e:
            if await self._dead(gen):
                await self.restart(gen, "crash")
                return None
            if self.gen != gen:
                return None               # killed by a restart for another request
            return {"outcome": "5xx", "message": f"transport: {type(e).__name__}: {e}"}
        finally:
            self.inflight[gen].discard(path)
        return rec

    async def _send(self, client, base, path, schema, seen):
        body = {"model": self.model_id, "messages": [{"role": "user", "content": self.prompts[path]}],
                "temperature": 0, "max_tokens": self.a.max_tokens, "stream": True,
                "stream_options": {"include_usage": True},
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "x", "schema": schema, "strict": True}}}
        t0 = time.perf_counter()
        ttft, parts, finish, usage, error = None, [], None, None, None
        async with client.stream("POST", base + "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                raw = (await r.aread()).decode(errors="replace")
                try:
                    msg = json.loads(raw)["error"]
                    msg = msg.get("message", msg) if isinstance(msg, dict) else msg
                except (ValueError, KeyError, TypeError):
                    msg = raw
                kind = "refused" if 400 <= r.status_code < 500 else "5xx"
                return {"outcome": kind, "status": r.status_code, "message": str(msg)[:2000],
                        "wall_s": time.perf_counter() - t0}
            async for line in r.aiter_lines():
                if line.startswith("error:"):
                    error = line[6:].strip()
                    continue
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                ev = json.loads(data)
                if "error" in ev:
                    error = json.dumps(ev["error"])[:2000]
                    continue
                usage = ev.get("usage") or usage
                for c in ev.get("choices") or []:
                    text = (c.get("delta") or {}).get("content")
                    if text:
                        if ttft is None:
                            ttft = seen["ttft_s"] = time.perf_counter() - t0
                        parts.append(text)
                        seen["chunks"] = len(parts)
                    finish = c.get("finish_reason") or finish
        rec = {"wall_s": time.perf_counter() - t0, "ttft_s": ttft, "finish": finish,
               "completion_tokens": (usage or {}).get("completion_tokens")}
        text = "".join(parts)
        if error is not None:
            rec.update(outcome="5xx", message=f"stream error: {error}")
        elif finish == "length":
            rec.update(outcome="length", output_head=text[:300], output_tail=text[-300:])
        elif finish == "stop":
            outcome, msg = validate(schema, text)
            rec.update(outcome=outcome, message=msg)
            if outcome != "valid":
                rec["output"] = text
        else:
            rec.update(outcome="5xx", message=f"finish_reason {finish!r}", output=text[:2000])
        return rec

    def wall(self):
        """Seconds this engine has run, over all sessions (--resume)."""
        return self.wall0 + (time.perf_counter() - self.t0 if self.t0 else 0.0)

    async def run(self, items, schemas):
        """Send every item not in self.recs; ({path: record}, wall seconds over all sessions)."""
        import httpx
        recs = self.recs
        self.sessions += 1
        await self.start()
        t0 = self.t0 = time.perf_counter()
        todo = [(c, p) for c, p in items if p not in recs]
        retry = []
        done, shown = [len(recs)], [t0]
        limits = httpx.Limits(max_connections=self.a.concurrency + 2)
        async with httpx.AsyncClient(timeout=httpx.Timeout(self.a.timeout + 30, connect=10), limits=limits) as client:
            async def worker():
                while todo:
                    cat, path = todo.pop(0)
                    rec = await self.one(client, path, schemas[path])
                    if rec is None:
                        retry.append((cat, path))
                        continue
                    recs[path] = dict(rec, category=cat)
                    done[0] += 1
                    if done[0] % 10 == 0 or done[0] == len(items) or time.perf_counter() - shown[0] > 120:
                        shown[0] = time.perf_counter()
                        self.loads.append(os.getloadavg()[0])
                        if self.on_progress:
                            self.on_progress()
                        c = Counter(r["outcome"] for r in recs.values())
                        print(f"  {self.engine}: {done[0]}/{len(items)} in {self.wall():.0f} s  "
                              + " ".join(f"{k} {c[k]}" for k in OUTCOMES if c[k]), flush=True)
            try:
                await asyncio.gather(*(worker() for _ in range(self.a.concurrency)))
                # requests that died with a crashed server: one at a time, so the one that crashes it is named
                self.alone = True
                for cat, path in retry:
                    rec = await self.one(client, path, schemas[path])
                    if rec is None:
                        for c in self.crashes:
                            if rel(path) in c["in_flight"]:
                                c["culprits"].append(rel(path))
                        rec = {"outcome": "5xx", "message": f"server crashed (exit {self.crashes[-1]['exit_code']})"}
                    rec["retried_alone"] = True
                    recs[path] = dict(rec, category=cat)
            finally:
                wall = self.wall()
                self.wall0, self.t0 = wall, None
                await asyncio.to_thread(self.server.stop)
        self.complete = True
        return recs, wall


# ---------------------------------------------------------------------------------------------- report


def counts(recs):
    c = Counter(r["outcome"] for r in recs)
    c["n"] = len(recs)
    c["stop"] = c["valid"] + c["failed_open"] + c["unchecked"]
    c["compiled"] = c["n"] - c["refused"]
    return c


def pct(a, b):
    return f"{a} ({100 * a / b:.0f}%)" if b else str(a)


def ms(xs, p):
    xs = sorted(x for x in xs if x is not None)
    return f"{1e3 * percentile(xs, p):.0f}" if xs else "-"


def engine_table(engine, recs, wall, cats, run):
    by = defaultdict(list)
    for r in recs.values():
        by[r["category"]].append(r)
    toks = sum(r.get("completion_tokens") or 0 for r in recs.values())
    lines = [f"### {engine}: {len(recs)} schemas in {wall:.0f} s ({toks} completion tokens, "
             f"{toks / wall:.1f} tok/s aggregate; server crashes {sum(not c['alone'] for c in run.crashes)}, "
             f"restarts {run.restarts}; mean 1-min load average "
             f"{f'{statistics.mean(run.loads):.1f}' if run.loads else 'n/a'})", "",
             "| category | n | compiled | valid / stop | FAILED OPEN | unchecked | refused | length | 5xx | timeout |"
             " TTFT p50 / p99 ms |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for cat in cats + ["all"]:
        rs = list(recs.values()) if cat == "all" else by.get(cat, [])
        if not rs:
            continue
        c = counts(rs)
        ttft = [r.get("ttft_s") for r in rs]
        name = f"**{cat}**" if cat == "all" else cat
        lines.append(f"| {name} | {c['n']} | {pct(c['compiled'], c['n'])} | {c['valid']} / {c['stop']} | "
                     f"{c['failed_open']} | {c['unchecked']} | {c['refused']} | {c['length']} | {c['5xx']} | "
                     f"{c['timeout']} | {ms(ttft, 50)} / {ms(ttft, 99)} |")
    return lines


def reasons_table(engine, recs, top):
    c = Counter(reason(r["message"]) for r in recs.values() if r["outcome"] == "refused")
    if not c:
        return [f"{engine}: no refusals"]
    lines = [f"{engine}: top refusal reasons ({sum(c.values())} refused, {len(c)} distinct)", "",
             "| count | reason |", "|---:|---|"]
    lines += [f"| {k} | {m.replace('|', '/')} |" for m, k in c.most_common(top)]
    return lines


def compile_table(costs, items, runs, cats):
    cat_of = dict((p, c) for c, p in items)
    by = defaultdict(list)
    for p, r in costs.items():
        by[cat_of[p]].append((p, r))
    engines = [e for e in ENGINES if e in runs]
    head = ("| category | n | compiles in-process | compile p50 ms | p99 ms | max ms | "
            + " | ".join(f"{e} TTFT p50 / p99 ms" for e in engines) + " |")
    lines = ["fastgguf's compile cost in-process (Grammar.json_schema, min of rounds; refusals included) and each "
             "server's time to first token (prefill included; accepted requests)", "", head,
             "|---|---:|---:|---:|---:|---:|" + "---:|" * len(engines)]
    for cat in cats + ["all"]:
        rs = [r for c in by for r in by[c]] if cat == "all" else by.get(cat, [])
        if not rs:
            continue
        s = sorted(r["s"] for _, r in rs if r["s"] is not None)
        ok = sum(r["ok"] for _, r in rs)
        cells = []
        for e in engines:
            ttft = [r.get("ttft_s") for p, r in runs[e][0].items() if cat in ("all", r["category"])]
            cells.append(f"{ms(ttft, 50)} / {ms(ttft, 99)}")
        name = f"**{cat}**" if cat == "all" else cat
        lines.append(f"| {name} | {len(rs)} | {ok} | {1e3 * percentile(s, 50):.2f} | {1e3 * percentile(s, 99):.2f} | "
                     f"{1e3 * max(s):.1f} | " + " | ".join(cells) + " |")
    slow = max(((r["s"], p) for p, r in costs.items() if r["s"] is not None), default=None)
    if slow:
        lines += ["", f"slowest compile: {rel(slow[1])} {1e3 * slow[0]:.1f} ms"]
    return lines


def cases(engine, recs, outcome, limit=40):
    rs = [(p, r) for p, r in sorted(recs.items()) if r["outcome"] == outcome]
    lines = [f"- {engine} {outcome}: {rel(p)}: {(r.get('message') or '')[:300]}" for p, r in rs[:limit]]
    if len(rs) > limit:
        lines.append(f"- ... and {len(rs) - limit} more (in the JSON)")
    return lines


# ---------------------------------------------------------------------------------------------- main


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DATA, help="JSONSchemaBench's data/ folder: <category>/*.json")
    ap.add_argument("--n", type=int, default=1000, help="schemas drawn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-m", "--model", default=None, help="GGUF file (default: the default model)")
    ap.add_argument("--engines", default=None,
                    help="comma list of fastgguf, llama-server (default: both when llama-server is found)")
    ap.add_argument("--llama-server", default=None,
                    help=f"llama-server binary (default: $LLAMA_SERVER, {LLAMA_REF}, then PATH)")
    ap.add_argument("--concurrency", type=int, default=2, help="requests in flight = server slots")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--schema-tokens", type=int, default=1500, help="the schema's JSON in the prompt is cut here")
    ap.add_argument("--ctx-per-slot", type=int, default=4096)
    ap.add_argument("--timeout", type=float, default=600, help="seconds one request may take")
    ap.add_argument("--compile-rounds", type=int, default=3, help="Grammar.json_schema calls per schema (min kept)")
    ap.add_argument("--top", type=int, default=15, help="refusal reasons shown per engine")
    ap.add_argument("--json", help="output file (default: benchmarks/results/bench-jsonschemabench-DATE.json)")
    ap.add_argument("--resume", action="store_true",
                    help="continue the run in --json's file (same sample and settings): keep its compile costs and "
                         "replies, send only the schemas it lacks (it is rewritten every 10 replies)")
    ap.add_argument("--compile-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.compile_worker:
        return compile_worker(a.compile_rounds)
    a.llama_server = a.llama_server or find_llama_server()
    have_llama = bool(a.llama_server and os.access(a.llama_server, os.X_OK))
    engines = a.engines.split(",") if a.engines else ["fastgguf"] + (["llama-server"] if have_llama else [])
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        ap.error(f"unknown engine(s) {bad}: choose from {', '.join(ENGINES)}")
    if "llama-server" in engines and not have_llama:
        ap.error("llama-server not found: pass --llama-server PATH (a native build: "
                 "../shared/tools/build-llama-cpp.sh), or --engines fastgguf")
    if not a.engines and not have_llama:
        print("llama-server not found: fastgguf only", flush=True)

    from fastgguf import hub
    from fastgguf.tokenizer import Tokenizer
    model_path = a.model or hub.default_model_path(download=True)
    tok = Tokenizer(model_path)
    items = sample(a.data, a.n, a.seed)
    cats = sorted({c for c, _ in items})
    schemas, prompts, cut = {}, {}, 0
    for _, p in items:
        with open(p) as f:
            schemas[p] = json.load(f)
        text = json.dumps(schemas[p], ensure_ascii=False)
        ids = tok.tokenize_raw(text)
        if len(ids) > a.schema_tokens:
            text, cut = tok.detokenize(ids[:a.schema_tokens]) + "\n... (the schema goes on; cut here)", cut + 1
        prompts[p] = PROMPT.format(schema=text)
    print(f"{len(items)} schemas from {a.data} (seed {a.seed}), {cut} cut at {a.schema_tokens} tokens in the prompt; "
          f"engines: {', '.join(engines)}", flush=True)

    path = a.json or os.path.join(HERE, "results", f"bench-jsonschemabench-{time.strftime('%Y-%m-%d')}.json")
    prior = resumable(path, a, model_path, items) if a.resume else None
    full = {rel(p): p for _, p in items}
    costs = {full[k]: v for k, v in prior["compile"].items()} if prior else {}
    if "fastgguf" in engines and len(costs) < len(items):
        t = time.perf_counter()
        costs = compile_costs(items, a.compile_rounds)
        print(f"compiled in-process: {sum(r['ok'] for r in costs.values())}/{len(costs)} in "
              f"{time.perf_counter() - t:.1f} s", flush=True)

    signal.signal(signal.SIGTERM, _interrupt)   # a kill still stops the server and saves what was measured
    runs = {}
    try:
        for e in engines:
            r = Run(e, a, model_path, prompts)
            old = (prior or {}).get("results", {}).get(e)
            if old:
                r.recs = {full[k]: v for k, v in old["records"].items()}
                r.wall0, r.restarts, r.crashes = old["wall_s"], old["restarts"], old["crashes"]
                r.sessions, r.complete = old.get("sessions", 1), e in prior.get("engines_done", [])
                r.loads = old.get("loadavg_samples", [])
            runs[e] = (r.recs, r.wall0, r)
            if not (r.complete and len(r.recs) == len(items)):
                print(f"{e}: {len(items) - len(r.recs)} requests{f' (resumed at {len(r.recs)})' if r.recs else ''}, "
                      f"{a.concurrency} in flight", flush=True)
                r.complete = False

                def progress(e=e, r=r):
                    runs[e] = (r.recs, r.wall(), r)
                    save(path, a, model_path, items, cats, costs, runs)
                r.on_progress = progress
                runs[e] = asyncio.run(r.run(items, schemas)) + (r,)
            recs, wall, _ = runs[e]
            print("\n".join([""] + engine_table(e, recs, wall, cats, r) + [""]), flush=True)
            save(path, a, model_path, items, cats, costs, runs)
    except KeyboardInterrupt:
        for e, (recs, wall, r) in list(runs.items()):
            runs[e] = (r.recs, r.wall(), r)
        save(path, a, model_path, items, cats, costs, runs)
        raise SystemExit(f"interrupted: what was measured is in {path}; go on with --resume")
    print("\n".join(report(a, model_path, items, cats, costs, runs)))
    save(path, a, model_path, items, cats, costs, runs)
    print(f"wrote {path}")


def _interrupt(signum, frame):
    raise KeyboardInterrupt


RESUME_KEYS = ("data", "n", "seed", "max_tokens", "schema_tokens", "ctx_per_slot", "concurrency", "threads")


def resumable(path, a, model_path, items):
    """The JSON of an earlier run to go on with, checked to be the same sample and settings."""
    if not os.path.exists(path):
        print(f"--resume: no {path} yet, starting afresh", flush=True)
        return None
    with open(path) as f:
        prior = json.load(f)
    diff = [k for k in RESUME_KEYS if prior["args"].get(k) != getattr(a, k)]
    if prior["model"] != os.path.basename(model_path):
        diff.append("model")
    if prior["sample"] != [rel(p) for _, p in items]:
        diff.append("sample")
    if prior.get("prompt") != PROMPT:
        diff.append("prompt")
    if diff:
        raise SystemExit(f"--resume: {path} was run with other {', '.join(diff)}")
    return prior


def header(a, model_path, items):
    return (f"JSONSchemaBench, {len(items)} schemas (seed {a.seed}), {os.path.basename(model_path)}, {a.threads} "
            f"threads, {a.concurrency} in flight, max_tokens {a.max_tokens}, greedy; {cpu_model()}")


def report(a, model_path, items, cats, costs, runs):
    """The markdown report (lines) of the engines run so far."""
    out = ["", header(a, model_path, items), ""]
    for e, (recs, wall, r) in runs.items():
        out += engine_table(e, recs, wall, cats, r) + [""]
    for e, (recs, wall, r) in runs.items():
        out += reasons_table(e, recs, a.top) + [""]
    for e, (recs, wall, r) in runs.items():
        listed = cases(e, recs, "failed_open") + cases(e, recs, "5xx") + cases(e, recs, "timeout")
        listed += [f"- {e} crash (exit {c['exit_code']}){' re-sent alone' if c['alone'] else ''}: culprit "
                   f"{', '.join(c['culprits']) or 'not reproduced alone'}; in flight: {', '.join(c['in_flight'])}"
                   for c in r.crashes]
        if listed:
            out += [f"{e}: failed open / 5xx / timeouts / crashes", ""] + listed + [""]
    if costs:
        out += compile_table(costs, items, runs, cats) + [""]
        if "fastgguf" in runs:
            srv = {p for p, r in runs["fastgguf"][0].items() if r["outcome"] == "refused"}
            inp = {p for p, r in costs.items() if not r["ok"]}
            out.append(f"fastgguf: refused in-process {len(inp)}, by the server {len(srv)}; in-process only: "
                       f"{sorted(rel(p) for p in inp - srv)[:10]}, "
                       f"server only: {sorted(rel(p) for p in srv - inp)[:10]}")
    return out


def save(path, a, model_path, items, cats, costs, runs, started=time.strftime("%Y-%m-%d %H:%M")):
    if a.resume and os.path.exists(path):
        with open(path) as f:
            started = json.load(f).get("date", started)
    res = {"date": started, "updated": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(),
           "model": os.path.basename(model_path), "header": header(a, model_path, items),
           "args": {k: v for k, v in vars(a).items() if k not in ("compile_worker", "resume")},
           "engines_done": [e for e, (_, _, r) in runs.items() if r.complete],
           "checked_formats": checked_formats(), "sample": [rel(p) for _, p in items], "prompt": PROMPT,
           "compile": {rel(p): r for p, r in costs.items()}, "results": {}}
    for e, (recs, wall, r) in runs.items():
        res["results"][e] = {"complete": r.complete, "wall_s": wall, "sessions": r.sessions,
                             "restarts": r.restarts, "crashes": r.crashes, "loadavg_samples": r.loads,
                             "summary": {cat: dict(counts([x for x in recs.values() if cat in ("all", x["category"])]))
                                         for cat in cats + ["all"]},
                             "refusal_reasons": Counter(reason(x["message"]) for x in recs.values()
                                                        if x["outcome"] == "refused").most_common(),
                             "records": {rel(p): x for p, x in recs.items()}}
    with open(path + ".tmp", "w") as f:
        json.dump(res, f, indent=1)
    os.replace(path + ".tmp", path)                 # a kill mid-write leaves the previous file


if __name__ == "__main__":
    main()
