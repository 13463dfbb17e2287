"""A real server for the tests: `python -m fastgguf serve` in a subprocess on a free port of 127.0.0.1, default model,
--parallel 5 (4 streams and an embedding at once), an API key; the official `openai` client talks to it. Skipped
when fastapi/uvicorn are missing."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed: pip install 'fastgguf[server]'")
pytest.importorskip("uvicorn", reason="the server extra is not installed: pip install 'fastgguf[server]'")

API_KEY = "test-key-123"
import fastgguf  # noqa: E402

# the server subprocess imports the same fastgguf as this test run (installed, or built in place), never whatever
# the current directory holds
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastgguf.__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model_path, *extra, api_key=API_KEY, path_first=None, host="127.0.0.1"):
        """model_path: the -m model (None: none, e.g. with --models-dir). path_first: a folder searched before
        everything else, fastgguf's own site included (a test's stand-in for an installed package): the server runs
        in it (`python -m` puts the working directory first on sys.path) and it heads PYTHONPATH. host: the IPv4
        address it listens on."""
        self.host, self.port = host, free_port()
        self.base = f"http://{host}:{self.port}"
        self.api_key = api_key
        path = [str(path_first)] if path_first else []
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path + [ROOT, os.environ.get("PYTHONPATH", "")]))
        env.pop("FASTGGUF_API_KEY", None)
        cmd = [sys.executable, "-m", "fastgguf", "serve", *(["-m", model_path] if model_path else []), "--host", host,
               "--port", str(self.port), *extra]
        if api_key:
            cmd += ["--api-key", api_key]
        self.proc = subprocess.Popen(cmd, env=env, cwd=str(path_first or ROOT), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stdout.read().decode(errors='replace')}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError("server did not start in 60 s")
            time.sleep(0.2)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def http(server, method, path, body=None, key=API_KEY, raw=None, headers=None, timeout=60):
    """The server tests' one HTTP helper: (status, parsed JSON or text, headers) of one raw request (body: JSON to
    send; raw: bytes to send as they are; key: the Bearer token, None for none)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    h = {"Content-Type": "application/json", **(headers or {})}
    if key:
        h["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(server.base + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text, hdrs = r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        status, text, hdrs = e.code, e.read().decode(), e.headers
    try:
        return status, json.loads(text), hdrs
    except ValueError:
        return status, text, hdrs


@pytest.fixture(scope="session")
def server(default_model_path):
    s = Server(default_model_path, "--parallel", "5", "--ctx-size", "512", "--max-body", "2000000",
               "--strict-model-names")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.base + "/v1", api_key=server.api_key, max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def model(default_model_path):
    import fastgguf
    return fastgguf.Model(default_model_path)


@pytest.fixture(scope="session")
def model_name(model):
    from fastgguf.api.openai.protocol import model_id
    return model_id(model)
