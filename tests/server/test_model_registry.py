"""The ModelRegistry of a server of several models (fastgguf.server.models), with fake loaders and a fake clock: no
model file, no HTTP. Keep-alive expiry, the memory budget (least recently used first, never a model a request
holds), one load for many waiters, a failed load's error to every waiter and a retry on the next request, names;
parse_keep_alive and parse_size at their edges."""
import asyncio
import math
import threading

import pytest

from fastgguf.api.openai.protocol import APIError
from fastgguf.server.models import Entry, ModelRegistry, discovery, parse_keep_alive, parse_size


class FakeEngine:
    n_ctx, parallel = 64, 1

    def __init__(self, name):
        self.name, self.stopped = name, False


class FakeModel:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def memory(self, n_ctx):
        return {"weights": self.size, "cache": 0}


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def make(sizes, *, max_memory=None, gate=None, fail=(), default=None, strict=False, keep_alive=300.0, **kw):
    """A registry of models named by `sizes` ({name: bytes}); calls[name]: its loads; unloaded: the names unloaded,
    in order; gate: a threading.Event each load waits for; fail: names whose next load raises (once)."""
    calls, unloaded, failing = {}, [], set(fail)

    def load(entry):
        calls[entry.name] = calls.get(entry.name, 0) + 1
        if gate is not None:
            assert gate.wait(10)
        if entry.name in failing:
            failing.discard(entry.name)
            raise OSError(f"{entry.source}: not a GGUF file")
        return FakeModel(entry.name, sizes[entry.name]), FakeEngine(entry.name)

    def unload(engine):
        engine.stopped = True
        unloaded.append(engine.name)

    clock = Clock()
    entries = [Entry(n, f"/models/{n}.gguf", size=s, keep_alive=keep_alive) for n, s in sizes.items()]
    reg = ModelRegistry(entries, load=load, unload=unload, max_memory=max_memory, default=default, strict=strict,
                        keep_alive=keep_alive, clock=clock, **kw)
    return reg, calls, unloaded, clock


async def settle():
    """Let the tasks a release started (an unload in a worker thread) finish."""
    await asyncio.sleep(0.05)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


# -- keep-alive ------------------------------------------------------------------------------------------------

def test_keep_alive_expiry():
    async def main():
        reg, calls, unloaded, clock = make({"a": 10})
        lease = await reg.acquire("a")
        clock.t += 10_000
        await reg.expire()
        assert reg.entries["a"].state == "loaded" and not unloaded      # held: never expires
        lease.release()
        clock.t += 299
        await reg.expire()
        assert reg.entries["a"].state == "loaded"
        clock.t += 2
        await reg.expire()
        assert reg.entries["a"].state == "unloaded" and unloaded == ["a"]
        await reg.acquire("a")                                           # loads again on the next request
        assert calls["a"] == 2
    run(main())


def test_keep_alive_zero_unloads_after_the_request_and_minus_one_never():
    async def main():
        reg, _, unloaded, clock = make({"a": 10, "b": 10})
        lease = await reg.acquire("a", keep_alive=0)
        await settle()
        assert reg.entries["a"].state == "loaded"                        # still running
        lease.release()
        await settle()
        assert unloaded == ["a"]
        (await reg.acquire("b", keep_alive=None)).release()
        clock.t += 1e9
        await reg.expire()
        assert reg.entries["b"].state == "loaded" and unloaded == ["a"]
        assert await reg.unload("b") and unloaded == ["a", "b"]         # when told
    run(main())


def test_unload_of_a_held_model_waits_for_its_last_request():
    async def main():
        reg, _, unloaded, _ = make({"a": 10})
        lease = await reg.acquire("a")
        assert not await reg.unload("a") and reg.entries["a"].state == "loaded"
        lease.release()
        await settle()
        assert unloaded == ["a"]
    run(main())


# -- the memory budget -----------------------------------------------------------------------------------------

def test_least_recently_used_idle_model_unloads_first():
    async def main():
        reg, _, unloaded, clock = make({"a": 100, "b": 100, "c": 100}, max_memory=250)
        (await reg.acquire("a")).release()
        clock.t += 1
        (await reg.acquire("b")).release()
        clock.t += 1
        (await reg.acquire("a")).release()                               # a used after b: b is the LRU now
        clock.t += 1
        (await reg.acquire("c")).release()
        assert unloaded == ["b"]
        assert {e.name for e in reg.loaded()} == {"a", "c"}
    run(main())


def test_a_held_model_is_never_unloaded_for_room():
    async def main():
        reg, _, unloaded, clock = make({"a": 100, "b": 100, "c": 100}, max_memory=250)
        held = await reg.acquire("a")
        clock.t += 1
        (await reg.acquire("b")).release()
        clock.t += 1
        c = await reg.acquire("c")                                       # a is older, but held: b goes
        assert unloaded == ["b"]
        waiting = asyncio.ensure_future(reg.acquire("b"))                # a and c held: b waits for room
        await asyncio.sleep(0.05)
        assert not waiting.done() and unloaded == ["b"]
        held.release()
        b = await waiting
        assert unloaded == ["b", "a"] and b.model.name == "b"
        c.release()
        b.release()
    run(main())


def test_loads_waiting_for_room_do_not_wait_for_each_other():
    async def main():
        reg, _, unloaded, _ = make({"a": 100, "b": 100, "c": 100}, max_memory=150)
        held = await reg.acquire("a")
        waiting = [asyncio.ensure_future(reg.acquire(n)) for n in ("b", "c")]
        await asyncio.sleep(0.05)
        assert not any(w.done() for w in waiting)
        held.release()
        done, _ = await asyncio.wait(waiting, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert unloaded == ["a"] and len(done) == 1 and len(reg.loaded()) == 1
        done.pop().result().release()                                   # the other then gets its turn
        leases = await asyncio.gather(*waiting)
        assert {lease.model.name for lease in leases} == {"b", "c"} and len(reg.loaded()) == 1
    run(main())


def test_a_model_larger_than_the_budget_is_a_clear_error():
    async def main():
        reg, calls, _, _ = make({"big": 300, "a": 10}, max_memory=250)
        with pytest.raises(APIError) as e:
            await reg.acquire("big")
        assert e.value.status == 500 and "--max-memory" in e.value.message and "big" in e.value.message
        assert calls == {} and reg.entries["big"].state == "unloaded"
        (await reg.acquire("a")).release()                               # the rest still serve
    run(main())


# -- loading ---------------------------------------------------------------------------------------------------

def test_one_load_however_many_wait_and_other_models_go_on():
    async def main():
        gate = threading.Event()
        reg, calls, _, _ = make({"a": 10, "b": 10}, gate=gate)
        gate.set()
        (await reg.acquire("b")).release()
        gate.clear()
        waiters = [asyncio.ensure_future(reg.acquire("a")) for _ in range(5)]
        await asyncio.sleep(0.05)
        assert reg.entries["a"].state == "loading" and not any(w.done() for w in waiters)
        other = await reg.acquire("b")                                   # the event loop is not blocked
        other.release()
        gate.set()
        leases = await asyncio.gather(*waiters)
        assert calls["a"] == 1 and len({id(lease.model) for lease in leases}) == 1
        assert reg.entries["a"].leases == 5
        for lease in leases:
            lease.release()
        assert reg.entries["a"].leases == 0
    run(main())


def test_a_failed_load_answers_every_waiter_and_is_retried_on_a_new_request():
    async def main():
        gate = threading.Event()
        reg, calls, _, _ = make({"a": 10}, gate=gate, fail={"a"})
        waiters = [asyncio.ensure_future(reg.acquire("a")) for _ in range(3)]
        await asyncio.sleep(0.05)
        gate.set()
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert calls["a"] == 1
        for r in results:
            assert isinstance(r, APIError) and r.status == 500 and "not a GGUF file" in r.message
        e = reg.entries["a"]
        assert e.state == "unloaded" and "not a GGUF file" in e.error and e.leases == 0
        lease = await reg.acquire("a")                                   # a new request tries again
        assert calls["a"] == 2 and lease.model.name == "a" and e.error is None
    run(main())


# -- names -----------------------------------------------------------------------------------------------------

def test_names_resolve_with_spellings_and_unknown_ones_are_404():
    reg, _, _, _ = make({"a": 10, "b": 10})
    assert reg.resolve("a").name == "a" and reg.resolve("b:latest").name == "b" and reg.resolve("a.gguf").name == "a"
    with pytest.raises(APIError) as e:
        reg.resolve("gpt-4")
    assert e.value.status == 404 and e.value.code == "model_not_found" and "gpt-4" in e.value.message
    with pytest.raises(APIError) as e:
        reg.resolve("llama3", ollama=True)
    assert e.value.message == "model 'llama3' not found"
    for bad in (None, ""):
        with pytest.raises(APIError) as e:
            reg.resolve(bad)
        assert e.value.status == 400 and e.value.param == "model"
    with pytest.raises(APIError) as e:
        reg.resolve(7)
    assert e.value.status == 400


def test_a_default_serves_any_name_unless_strict():
    lenient, _, _, _ = make({"a": 10, "b": 10}, default="a")
    assert lenient.resolve("gpt-3.5-turbo").name == "a" and lenient.resolve(None).name == "a"
    assert lenient.resolve("b").name == "b"
    strict, _, _, _ = make({"a": 10, "b": 10}, default="a", strict=True)
    with pytest.raises(APIError):
        strict.resolve("gpt-3.5-turbo")


def test_models_dir_is_discovered_when_asked(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"GGUF" + bytes(12))
    (tmp_path / "notes.txt").write_text("not a model")
    reg, _, _, _ = make({"a": 10}, discover=discovery(str(tmp_path)))
    assert sorted(reg.listing()) == ["a", "x"] and reg.entries["x"].kind == "dir" and reg.entries["x"].size == 16
    (tmp_path / "y.gguf").write_bytes(b"GGUF")
    assert reg.resolve("y").source == str(tmp_path / "y.gguf")          # a new file: found on a lookup
    (tmp_path / "y.gguf").unlink()
    reg.forget("y")
    assert "y" not in reg.listing()


# -- parsing ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, seconds", [
    ("5m", 300.0), (300, 300.0), ("300", 300.0), (2.5, 2.5), ("1h30m", 5400.0), ("250ms", 0.25), ("1.5h", 5400.0),
    (0, 0.0), ("0", 0.0), ("0s", 0.0), (-1, None), ("-1", None), ("-1m", None), (-0.5, None),
    (9223372036, 9223372036.0),
])
def test_parse_keep_alive(value, seconds):
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", [True, None, [], {}, "", "5x", "m", "5 m", "5m3", "abc", math.nan, "nan",
                                   math.inf, 1e12, "-1e12", "300000000000s", "9223372037"])
def test_parse_keep_alive_refuses(value):
    with pytest.raises(APIError) as e:
        parse_keep_alive(value)
    assert e.value.status == 400 and e.value.param == "keep_alive"


@pytest.mark.parametrize("text, n", [("12G", 12 << 30), ("512MiB", 512 << 20), ("1.5GB", 3 << 29), ("100", 100),
                                     ("100B", 100), ("1k", 1024), ("2T", 2 << 40), (" 8 g ", 8 << 30)])
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "G", "-1G", "0", "0.1", "12X", "1iB", "1e9", "lots"])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError):
        parse_size(text)
