"""Threads: what the build says about itself (kernels.build_info), the single-thread build's warning, and the
default thread count per platform (physical_cores). The 2-thread forward pass itself: test_model.py
(test_threads_give_same_logits, test_two_threads_really_run_two)."""
import gc
import os
import warnings

import numpy as np
import pytest

import fastgguf._native as native
from fastgguf import kernels
from fastgguf import _threads as threads  # the definitions (fastgguf.engine.threads re-exports them)


def test_build_info():
    info = kernels.build_info()
    assert set(info) >= {"threads", "thread_api", "compiler", "compiled", "platform", "machine"}
    assert info["thread_api"] in ("pthreads", "win32", "none")
    assert info["threads"] is (info["thread_api"] != "none")
    assert info["compiled"] == kernels.compiled()
    assert info["compiler"] and info["compiler"] != "unknown"
    # a build without the pool only where one was asked for (FASTGGUF_NO_THREADS=1 at build time)
    assert info["threads"] or os.environ.get("FASTGGUF_NO_THREADS") == "1"
    if os.name == "posix":
        assert info["thread_api"] in ("pthreads", "none")


@pytest.fixture
def one_thread_build(monkeypatch):
    """A build without the pool: the real one under FASTGGUF_NO_THREADS, else this build told it has none (the C
    team then still runs what Python asks, and Python asks for 1)."""
    if kernels.build_info()["threads"]:
        monkeypatch.setattr(native, "_THREADS", False)
    monkeypatch.setattr(native, "_warned_one_thread", False)


def test_no_threads_build_warns_once_and_runs_one(one_thread_build, default_model_path):
    from fastgguf import Model
    with pytest.warns(RuntimeWarning, match="built without threads.*build_info"):
        m = Model(default_model_path, n_threads=2)
    assert m.n_threads == 1  # never reports threads it does not run
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process: a second request says nothing
        ctx = m.context(16, n_threads=2)
        assert ctx.n_threads == 1
        ctx.eval([1, 2, 3])
        assert ctx.runner.last_threads == 1
        ctx.n_threads = 2
        assert ctx.n_threads == 1
        assert Model(default_model_path).n_threads == 1  # the default is not a request: no warning either


def test_physical_cores_macos(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(threads.sys, "platform", "darwin")
    monkeypatch.setattr(os, "cpu_count", lambda: 10)
    asked = []

    def sysctl(values):
        def f(name):
            asked.append(name)
            return values.get(name)
        return f

    # Apple Silicon (M1 Pro: 8 performance + 2 efficiency cores, no SMT): the performance cores
    monkeypatch.setattr(threads, "_sysctl_int", sysctl({"hw.perflevel0.physicalcpu": 8, "hw.physicalcpu": 10}))
    assert threads.physical_cores() == 8
    assert asked == ["hw.perflevel0.physicalcpu"]
    # an Intel Mac has no perflevels: its physical cores (not its hyperthreads)
    monkeypatch.setattr(threads, "_sysctl_int", sysctl({"hw.physicalcpu": 4}))
    assert threads.physical_cores() == 4
    # sysctl unreadable: the logical CPUs
    monkeypatch.setattr(threads, "_sysctl_int", sysctl({}))
    assert threads.physical_cores() == 10


def test_physical_cores_windows(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(threads.sys, "platform", "win32")
    monkeypatch.setattr(threads, "_sysctl_int", lambda name: pytest.fail("no sysctl on Windows"))
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    assert threads.physical_cores() == 12
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert threads.physical_cores() == 1


def test_engine_threads_is_the_public_home():
    """fastgguf.engine.threads (named by the README) re-exports the bottom module's functions, not copies."""
    from fastgguf.engine import threads as public
    for name in public.__all__ + ["max_threads"]:
        assert getattr(public, name) is getattr(threads, name), name


def test_sysctl_int_unknown_name_is_none():
    assert threads._sysctl_int("fastgguf.no.such.name") is None


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts this process's threads in /proc")
def test_freed_contexts_join_their_workers(default_model_path):
    """Each Context's team starts its workers on its first multi-thread pass and joins them when freed."""
    if not kernels.build_info()["threads"]:
        pytest.skip("a build without threads")
    from fastgguf import Model
    m = Model(default_model_path, n_threads=2)

    def n_threads_now():
        return len(os.listdir("/proc/self/task"))

    before = n_threads_now()
    ctxs = [m.context(16, n_threads=2) for _ in range(3)]
    assert n_threads_now() == before  # no pass yet: no workers
    for c in ctxs:
        c.eval([1, 2])
    assert n_threads_now() == before + 3  # one worker each: the calling thread is the team's thread 0
    del c, ctxs
    gc.collect()
    assert n_threads_now() == before


def test_decode_threads_probe_picks_the_fewest_that_saturate(monkeypatch):
    """decode_threads: one more than the fewest threads within SATURATION of the best rate, probed once per process
    and core count, never with 2 cores or fewer; FASTGGUF_DECODE_THREADS overrides (checked, then at most the
    cores)."""
    calls = []

    def curve(nbytes, repeats, n):
        calls.append(n)
        return {3: [19.0, 20.0, 20.5], 4: [10.0, 11.0, 12.0, 30.0], 6: [10.0, 18.5, 20.0, 20.0, 19.0, 20.0]}[n]

    monkeypatch.delenv(threads.DECODE_THREADS_ENV, raising=False)
    monkeypatch.setattr(native, "read_bandwidth_curve", curve)
    monkeypatch.setattr(threads, "_decode_threads", {})
    assert threads.decode_threads(3) == 2  # 19 >= 0.9 * 20.5: 1, and one more
    assert threads.decode_threads(4) == 4  # only 4 reach it: 4 (at most the cores)
    assert threads.decode_threads(6) == 3  # 18.5 >= 0.9 * 20
    assert threads.decode_threads(3) == 2 and calls == [3, 4, 6]  # cached
    assert threads.decode_threads(2) == 2 and threads.decode_threads(1) == 1 and calls == [3, 4, 6]  # no probe
    monkeypatch.setenv(threads.DECODE_THREADS_ENV, "3")
    assert threads.decode_threads(8) == 3 and threads.decode_threads(2) == 2
    for bad, err in (("x", ValueError), ("0", ValueError)):
        monkeypatch.setenv(threads.DECODE_THREADS_ENV, bad)
        with pytest.raises(err, match=threads.DECODE_THREADS_ENV):
            threads.decode_threads(2)

    def broken(nbytes, repeats, n):
        raise ValueError("no memory")

    monkeypatch.delenv(threads.DECODE_THREADS_ENV)
    monkeypatch.setattr(native, "read_bandwidth_curve", broken)
    assert threads.decode_threads(5) == 5  # no probe: every core, as before
    assert threads.decode_threads(2) == 2


def test_read_bandwidth_curve_measures_each_thread_count():
    n = 2 if kernels.build_info()["threads"] else 1
    curve = native.read_bandwidth_curve(1 << 20, 1, n)
    assert len(curve) == n and all(bw > 0 for bw in curve)


def test_decode_threads_run_decode_steps_only(monkeypatch, default_model_path):
    """A Model given no n_threads decodes with its decode_threads and evaluates prompts with n_threads; an explicit
    n_threads is both; the logits equal 1 thread's bit for bit either way."""
    from fastgguf import Model
    if not kernels.build_info()["threads"]:
        pytest.skip("a build without threads")
    monkeypatch.setattr(threads, "physical_cores", lambda: 2)
    monkeypatch.setenv(threads.DECODE_THREADS_ENV, "1")
    import fastgguf.engine.model as engine_model
    monkeypatch.setattr(engine_model, "physical_cores", lambda: 2)
    m = Model(default_model_path)
    assert (m.n_threads, m.decode_threads) == (2, 1)
    ctx = m.context(32)
    assert (ctx.n_threads, ctx.decode_threads) == (2, 1)
    a = ctx.eval([1, 2, 3, 4], all_logits=True)
    assert ctx.runner.last_threads == 2
    b = ctx.eval([5])
    assert ctx.runner.last_threads == 1
    c = ctx.runner.step_py(6)
    assert ctx.runner.last_threads == 1
    one = Model(default_model_path, n_threads=1).context(32)
    assert one.decode_threads == 1
    np.testing.assert_array_equal(one.eval([1, 2, 3, 4], all_logits=True), a)
    np.testing.assert_array_equal(one.eval([5]), b)
    np.testing.assert_array_equal(one.runner.step_py(6), c)
    ctx.decode_threads = 2
    assert ctx.decode_threads == 2
    ctx.n_threads = 1  # an explicit n_threads: decode follows it
    assert (ctx.n_threads, ctx.decode_threads) == (1, 1)
    assert Model(default_model_path, n_threads=2).context(16).decode_threads == 2
    assert m.context(16, n_threads=2).decode_threads == 2
