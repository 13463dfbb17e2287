"""Runs a fuzz target with atheris (libFuzzer) when it is installed, else with a plain random-mutation loop.

    python tests/fuzz/fuzz_<name>.py [-max_total_time=SECONDS] [-runs=N] [-seed=N] [CORPUS_DIR ...]

Both ways print libFuzzer's closing line, ``Done N runs in T second(s)``, and exit non-zero on a finding (an
exception escaping the target): atheris writes the input to crash-<sha1>; the fallback loop writes it to
crash-<sha1> in the current directory too. The fallback (FUZZ_NO_ATHERIS=1, or atheris not importable) uses a
fixed seed (-seed, default 0), mutates the corpus files (bit flips, byte edits, splices, truncation) and stops at
-max_total_time (default 60 s) or -runs; it explores far less than libFuzzer but needs no compiler."""
import hashlib
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def import_fastgguf():
    """fastgguf as installed, else the source tree's in-place build (python setup.py build_ext --inplace)."""
    try:
        import fastgguf  # noqa: F401
    except ImportError:
        sys.path.insert(0, ROOT)
        import fastgguf  # noqa: F401


def _atheris():
    if os.environ.get("FUZZ_NO_ATHERIS") == "1":
        return None
    try:
        import atheris
    except ImportError:
        return None
    return atheris


def instrumented():
    """Context manager for the target's imports: atheris coverage instrumentation of fastgguf and jinja2."""
    import contextlib
    atheris = _atheris()
    if atheris is None:
        return contextlib.nullcontext()
    return atheris.instrument_imports(include=["fastgguf", "jinja2"])


def _args(argv):
    opts, dirs = {}, []
    for a in argv[1:]:
        if a.startswith("-") and "=" in a:
            k, v = a[1:].split("=", 1)
            opts[k] = v
        elif not a.startswith("-"):
            dirs.append(a)
    return opts, dirs


def _mutate(rng, data, pool):
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(7)
        if op == 0 and b:                                      # flip a bit
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:                                    # set a byte to an interesting value
            b[rng.randrange(len(b))] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 2:                                          # insert random bytes
            i = rng.randrange(len(b) + 1)
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 3 and b:                                    # delete a run
            i = rng.randrange(len(b))
            del b[i:i + rng.randint(1, 16)]
        elif op == 4 and pool:                                 # splice with another input
            other = rng.choice(pool)
            i, j = rng.randrange(len(b) + 1), rng.randrange(len(other) + 1)
            b[i:] = other[j:j + rng.randint(0, 64)] + b[i:]
        elif op == 5 and len(b) >= 8:                          # overwrite 8 bytes with an edge integer
            i = rng.randrange(len(b) - 7)
            b[i:i + 8] = rng.choice((0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, rng.randrange(2**64))).to_bytes(
                8, "little")
        elif op == 6 and b:                                    # truncate
            del b[rng.randrange(len(b)):]
    return bytes(b[:1 << 16])


def _fallback(test_one_input, argv):
    opts, dirs = _args(argv)
    budget = float(opts.get("max_total_time", 60))
    max_runs = int(opts.get("runs", -1))
    rng = random.Random(int(opts.get("seed", 0)))
    pool = []
    for d in dirs:
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            with open(os.path.join(d, name), "rb") as fh:
                pool.append(fh.read())
    pool = pool or [b""]
    print(f"fuzz (no atheris: random mutations, seed {opts.get('seed', 0)}): {len(pool)} corpus inputs, "
          f"max {budget:g} s", flush=True)
    t0 = time.monotonic()
    runs = 0
    queue = list(pool)                                         # every seed once, unmutated, first
    while time.monotonic() - t0 < budget and runs != max_runs:
        data = queue.pop(0) if queue else _mutate(rng, rng.choice(pool), pool)
        try:
            test_one_input(data)
        except BaseException:
            path = "crash-" + hashlib.sha1(data).hexdigest()
            with open(path, "wb") as fh:
                fh.write(data)
            print(f"==FINDING== after {runs} runs; input written to {path}", flush=True)
            raise
        runs += 1
        if runs % 64 == 0 and len(pool) < 4096:
            pool.append(data)                                  # keep some mutants to mutate further
    print(f"Done {runs} runs in {int(time.monotonic() - t0)} second(s)", flush=True)


def run(test_one_input, argv=None):
    argv = list(sys.argv if argv is None else argv)
    atheris = _atheris()
    if atheris is not None:
        atheris.Setup(argv, test_one_input)
        atheris.Fuzz()
        return
    _fallback(test_one_input, argv)
