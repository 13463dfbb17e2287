"""`fastgguf serve --ray`: a real local Ray cluster of 2 CPUs (the CLI in a subprocess, --num-cpus 2) with two
replicas of 1 thread behind Ray Serve, driven by the official openai client. Texts are checked against the same
request run in-process (model.chat / model.generate at temperature 0).

Skipped where ray is not installed (pip install "fastgguf[ray]"). The cluster is the CLI's own: SIGTERM makes it
ray.shutdown() it, and whatever of its processes is still alive afterwards is killed by pid (never `ray stop`, which
would stop every Ray cluster on the machine)."""
import concurrent.futures as cf
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pytest

if not sys.platform.startswith("linux"):
    pytest.skip("the replica processes are found through /proc (Linux)", allow_module_level=True)
pytest.importorskip("ray", reason="ray is not installed: pip install 'fastgguf[ray]'")
pytest.importorskip("ray.serve", reason="ray[serve] is not installed: pip install 'fastgguf[ray]'")

from conftest import API_KEY, free_port  # noqa: E402

MSGS = [{"role": "user", "content": "Name three colors."}]
PARALLEL = 2  # per replica; also each replica's max_ongoing_requests


def _children():
    """{pid: [child pids]} of every process."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(pid):
    kids, out, todo = _children(), [], [pid]
    while todo:
        for c in kids.get(todo.pop(), ()):
            out.append(c)
            todo.append(c)
    return out


class RayServer:
    """`python -m fastgguf serve --ray --replicas 2 --threads 1 --num-cpus 2` on a free port of 127.0.0.1."""

    def __init__(self, model_path, *extra):
        import fastgguf
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(fastgguf.__file__)))  # the fastgguf tested here
        env = dict(os.environ, PYTHONPATH=pkg_root + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   RAY_USAGE_STATS_ENABLED="0")
        env.pop("FASTGGUF_API_KEY", None)
        env.pop("RAY_ADDRESS", None)
        self.log = tempfile.NamedTemporaryFile("w+b", suffix=".log", delete=False)
        cmd = [sys.executable, "-m", "fastgguf", "serve", "--ray", "-m", model_path, "--port", str(self.port),
               "--replicas", "2", "--threads", "1", "--num-cpus", "2", "--parallel", str(PARALLEL),
               "--ctx-size", "512", "--api-key", API_KEY, *extra]
        t0 = time.perf_counter()
        # (cwd: not the source tree, which `python -m` and Ray workers would import instead of the package tested)
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=tempfile.gettempdir(), start_new_session=True)
        self.seen = set()  # every process of the cluster seen (for the final clean-up)
        deadline = time.time() + 180
        while b"fastgguf serve --ray:" not in self.output():
            if self.proc.poll() is not None or time.time() > deadline:
                out = self.output().decode(errors="replace")[-4000:]
                self.stop()
                raise RuntimeError(f"fastgguf serve --ray did not start:\n{out}")
            time.sleep(0.3)
        self.start_seconds = time.perf_counter() - t0
        self.replica_pids()

    def output(self):
        with open(self.log.name, "rb") as f:
            return f.read()

    def replica_pids(self):
        """Live replica processes of this cluster (descendants of the CLI process)."""
        procs = descendants(self.proc.pid)
        self.seen.update(procs)
        return sorted(p for p in procs if "ServeReplica:" in _cmdline(p))

    def stop(self):
        self.seen.update(descendants(self.proc.pid))
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        time.sleep(1)
        for pid in self.seen:  # only processes this cluster started, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os.unlink(self.log.name)


def test_deployment_options(tmp_path, monkeypatch):
    """num_cpus = threads per replica, max_ongoing_requests = parallel, autoscaling with --max-replicas, a local
    path made absolute (no cluster needed: options and bind are local)."""
    from fastgguf.server.ray import deployment
    f = tmp_path / "m.gguf"
    f.write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    d = deployment("m.gguf", replicas=2, threads=3, parallel=5)._bound_deployment
    assert d.num_replicas == 2 and d.ray_actor_options["num_cpus"] == 3 and d.max_ongoing_requests == 5
    assert d.init_args == (str(f), 3)
    assert deployment("some-name", threads=1)._bound_deployment.init_args == ("some-name", 1)
    a = deployment(None, replicas=1, max_replicas=4, threads=1, parallel=2)._bound_deployment
    cfg = a._deployment_config.autoscaling_config
    assert (cfg.min_replicas, cfg.max_replicas, cfg.target_ongoing_requests) == (1, 4, 2)
    with pytest.raises(ValueError):
        deployment(None, replicas=3, max_replicas=2)


@pytest.fixture(scope="module")
def ray_server(default_model_path):
    s = RayServer(default_model_path)
    print(f"\nfastgguf serve --ray: 2 replicas ready in {s.start_seconds:.1f} s")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def rclient(ray_server):
    import openai
    return openai.OpenAI(base_url=ray_server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def test_two_replicas_running(ray_server):
    assert len(ray_server.replica_pids()) == 2


def test_health_models_and_key(ray_server, rclient, model_name):
    with urllib.request.urlopen(ray_server.base + "/health", timeout=30) as r:
        assert r.status == 200
    assert [m.id for m in rclient.models.list().data] == [model_name]
    import openai
    bad = openai.OpenAI(base_url=ray_server.base + "/v1", api_key="wrong", max_retries=0, timeout=30)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_greedy_text_matches_in_process(rclient, model, model_name):
    """Several requests at once, so both replicas answer: each text is the in-process one."""
    solo_chat = model.chat(MSGS, max_tokens=10, temperature=0)
    solo_gen = model.generate("The sky is", max_tokens=8, temperature=0)

    def chat(_):
        return rclient.chat.completions.create(model=model_name, messages=MSGS, max_tokens=10, temperature=0)

    def gen(_):
        return rclient.completions.create(model=model_name, prompt="The sky is", max_tokens=8, temperature=0)
    with cf.ThreadPoolExecutor(6) as ex:
        chats = list(ex.map(chat, range(4)))
        gens = list(ex.map(gen, range(2)))
    for r in chats:
        assert r.choices[0].message.content == solo_chat.text
        assert r.usage.completion_tokens == solo_chat.usage.completion_tokens
    for r in gens:
        assert r.choices[0].text == solo_gen.text


def test_streaming_through_serve(rclient, model, model_name):
    solo = model.chat(MSGS, max_tokens=12, temperature=0)
    chunks = list(rclient.chat.completions.create(model=model_name, messages=MSGS, max_tokens=12, temperature=0,
                                                  stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len(chunks) > 3  # token by token, not one buffered body
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == solo.text
    assert chunks[-1].usage.completion_tokens == solo.usage.completion_tokens


def _streamed(rclient, model_name, started, **kw):
    """One streamed completion: (text, finish_reason), finish_reason None when the stream was cut short, or the
    exception that ended it. `started` is released at its first token: it is decoding on a replica."""
    text, finish = [], None
    try:
        for chunk in rclient.completions.create(model=model_name, stream=True, **kw):
            if not text:
                started.release()
            for c in chunk.choices:
                text.append(c.text)
                finish = c.finish_reason or finish
    except Exception as e:  # a replica killed mid-stream: openai's error or the connection's
        return e
    return "".join(text), finish


def test_killed_replica_restarts_and_waiting_requests_are_served(ray_server, rclient, model, model_name):
    """2 replicas x PARALLEL slots: of 8 requests, 4 run and 4 wait in Serve's router. SIGKILL one replica once the
    4 are decoding: at most its PARALLEL running requests fail; every other one (all that had not started) gets the
    right text, the endpoint keeps serving, and Serve starts a new replica.

    The kill waits for that state, not for a fixed time (was: 0.5 s, after which the requests could be done, or not
    yet on a replica): each request streams, and the first 4 have each had a token. /metrics cannot say it here:
    through Serve it is a request like the others, waiting for a free slot (measured: it answered once the first
    requests were done, with 0 running)."""
    # long enough that the first requests are still decoding at the kill even on a fast, idle machine (end-of-
    # generation banned so every request decodes all its tokens)
    n, max_tokens = 8, 200
    ban = {int(t): -100.0 for t in model.tokenizer.eog_ids}
    solo = model.generate("Once upon a time", max_tokens=max_tokens, temperature=0, logit_bias=ban)
    before = ray_server.replica_pids()
    assert len(before) == 2
    victim = before[0]
    started = threading.Semaphore(0)
    kw = dict(prompt="Once upon a time", max_tokens=max_tokens, temperature=0,
              logit_bias={str(k): v for k, v in ban.items()})
    with cf.ThreadPoolExecutor(n) as ex:
        futs = [ex.submit(_streamed, rclient, model_name, started, **kw) for _ in range(n)]
        deadline = time.time() + 120
        for i in range(2 * PARALLEL):  # every slot of both replicas decoding
            assert started.acquire(timeout=max(0.0, deadline - time.time())), f"only {i} requests started decoding"
        assert not all(f.done() for f in futs), "the requests finished before the kill: make them longer"
        os.kill(victim, signal.SIGKILL)
        t_kill = time.perf_counter()
        results = [f.result() for f in futs]
    failed = [r for r in results if isinstance(r, Exception) or r[1] is None]
    served = [r for r in results if not (isinstance(r, Exception) or r[1] is None)]
    why = [type(r).__name__ if isinstance(r, Exception) else "cut short" for r in failed]
    print(f"\nkill: {len(failed)} of {n} failed: {why}")
    assert len(failed) <= PARALLEL, [repr(r) for r in failed]
    assert all(r == (solo.text, "length") for r in served), [r for r in served if r != (solo.text, "length")]
    # the endpoint keeps serving meanwhile
    r = rclient.completions.create(model=model_name, prompt="The sky is", max_tokens=4, temperature=0)
    assert r.choices[0].text == model.generate("The sky is", max_tokens=4, temperature=0).text
    # and Serve replaces the killed replica
    deadline = time.time() + 120
    while True:
        now = ray_server.replica_pids()
        if len(now) == 2 and victim not in now:
            print(f"kill: a new replica process {time.perf_counter() - t_kill:.1f} s after the kill")
            break
        assert time.time() < deadline, f"no new replica: {before} -> {now}"
        time.sleep(0.5)
    with cf.ThreadPoolExecutor(4) as ex:
        rs = list(ex.map(lambda _: rclient.chat.completions.create(
            model=model_name, messages=MSGS, max_tokens=6, temperature=0), range(4)))
    assert len({x.choices[0].message.content for x in rs}) == 1
