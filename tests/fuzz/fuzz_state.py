"""Fuzz target: Context.load_state (fastgguf.engine.state) on damaged files. The input is either a whole file
(starting with the state magic) or edits of a valid state of a tiny hybrid sliding-window model (its K/V rings and
a short-convolution state): a truncation, byte flips, a header field overwritten with an edge value. Loading may
only raise StateError, leaving the context as it was, or succeed, and then the next logits equal the valid state's
bit for bit. Nothing else may escape: no MemoryError, OverflowError, struct.error or crash.

    python tests/fuzz/fuzz_state.py -max_total_time=60 tests/fuzz/corpus/state
"""
import os
import re
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import _harness  # noqa: E402

with _harness.instrumented():
    _harness.import_fastgguf()
    from fastgguf.engine import state as fstate  # noqa: E402
    from fastgguf.engine.model import Model  # noqa: E402
    from fastgguf.errors import StateError  # noqa: E402
import models  # noqa: E402  (tests/models.py: the tiny files)

_DIR = tempfile.mkdtemp()
# lfm2 with a window: sliding-window attention rings (layers 0, 2) and a short-convolution layer's state (1)
_MODEL = Model(models.build(os.path.join(_DIR, "l.gguf"), arch="lfm2", n_layer=3, conv_layers=(1,), n_ctx=64,
                            meta={"attention.sliding_window": 5}))
_CTX = _MODEL.context(n_ctx=64)
_CTX.eval(np.arange(20) % 100)
_PATH = os.path.join(_DIR, "s")
_CTX.save_state(_PATH)
with open(_PATH, "rb") as f:
    _GOOD = f.read()
_WANT = _CTX.eval([7])
_TARGET = _MODEL.context(n_ctx=64)
EDGES = (0, 1, 2, 5, 19, 20, 21, 64, 65, 255, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1)


def _int_fields():
    """(offset, size) of each integer field of the state header."""
    out, at = [], 0
    for count, code in re.findall(r"(\d*)([sIQ])", fstate._HEAD.format):
        if code == "s":
            at += int(count)
            continue
        for _ in range(int(count or 1)):
            out.append((at, struct.calcsize("<" + code)))
            at += out[-1][1]
    return out


_OFFSETS = _int_fields()


def damaged(data):
    """The file the input stands for."""
    if data.startswith(fstate.MAGIC) or not data:
        return data
    b, op, rest = bytearray(_GOOD), data[0] % 3, data[1:]
    if op == 0:  # truncate
        return bytes(b[:int.from_bytes(rest[:4].ljust(4, b"\0"), "little") % (len(b) + 1)])
    if op == 1:  # flip bytes at offsets
        for i in range(0, len(rest) - 2, 3):
            at = int.from_bytes(rest[i:i + 2], "little") % len(b)
            b[at] ^= rest[i + 2] or 1
        return bytes(b)
    off, n = _OFFSETS[(rest[0] if rest else 0) % len(_OFFSETS)]
    v = EDGES[(rest[1] if len(rest) > 1 else 0) % len(EDGES)] % (1 << (8 * n))
    b[off:off + n] = v.to_bytes(n, "little")
    return bytes(b)


def test_one_input(data):
    with open(_PATH, "wb") as f:
        f.write(damaged(bytes(data)))
    _TARGET.reset()
    _TARGET.eval([1, 2, 3])
    try:
        _TARGET.load_state(_PATH)
    except StateError:
        assert _TARGET.tokens == [1, 2, 3], "a failed load changed the context"
        return
    got = _TARGET.eval([7])
    assert np.array_equal(got, _WANT), "a state that loaded gives other logits"


if __name__ == "__main__":
    _harness.run(test_one_input)
