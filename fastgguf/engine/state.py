"""A Context's state on disk: Context.save_state / load_state and pickling (fastgguf.engine.model).

The file is a fixed header, the token ids in the cache, then their K/V:

    header  _HEAD below (little-endian): magic, format version, header size, the model file's sha256, the cache's
            dtype ("f16"), the saving context's n_ctx, n_layer, n_head_kv, head_dim, n_swa, n_vocab, whether the
            keys use LongRoPE's long factors, n_past, the count of K/V values, and the CRC-32 of the body
    ids     n_past int32
    kv      the K/V of those positions, F16 bits (uint16), in the order of Runner.save_kv (csrc fg_kv_state_size):
            every position of a full-attention layer, the last n_swa of a sliding-window one (all a later query
            sees), so the file does not depend on n_ctx and holds n_past positions, not the whole cache.

A state loads into any Context of the same model (same sha256) whose n_ctx holds n_past, larger or smaller than
the saving one's; only a model with LongRoPE factors (phi3 128k) needs both n_ctx on the same side of its original
context, since that choice changes the keys. Loading checks every field against the model and every length
against the header and the file's size before reading or allocating anything, and the CRC-32 of the body before
the cache is touched: any mismatch or damage is a StateError naming it, and the Context is then as it was.
Writing goes to a temporary file in the same folder, then os.replace: a failed write leaves the old file intact.
"""
import os
import struct
import tempfile
import zlib

import numpy as np

from fastgguf.errors import StateError

MAGIC = b"FGSTATE\0"
VERSION = 1
DTYPE = b"f16"
_HEAD = struct.Struct("<8sII32s8sIIIIIIIIQI")
_FIELDS = ("magic", "version", "header_size", "sha256", "dtype", "n_ctx", "n_layer", "n_head_kv", "head_dim", "n_swa",
           "n_vocab", "long_rope", "n_past", "n_kv", "crc32")
# what must equal the loading context's: the cache's shape first (a clearer message than the sha256's)
_MODEL_FIELDS = ("dtype", "n_layer", "n_head_kv", "head_dim", "n_swa", "n_vocab", "long_rope", "sha256")


def _expected(ctx):
    """The header fields that describe ctx's model and cache (without n_past, n_kv, crc32). StateError for a model
    with short-convolution layers (lfm2) or Mamba-2 layers (granitehybrid): their rings and states are not in this
    format (version 1), so neither side runs."""
    hp = ctx.model.hparams
    if hp.conv_layers or hp.ssm_layers:
        kind = "short-convolution" if hp.conv_layers else "Mamba-2"
        raise StateError(f"saving or loading the state of a model with {kind} layers ({hp.arch}) is not "
                         f"supported: the format holds K/V rows only")
    return {"magic": MAGIC, "version": VERSION, "header_size": _HEAD.size, "sha256": ctx.model.sha256_bytes(),
            "dtype": DTYPE.ljust(8, b"\0"), "n_ctx": ctx.n_ctx, "n_layer": hp.n_layer, "n_head_kv": hp.n_head_kv,
            "head_dim": hp.head_dim, "n_swa": hp.n_swa if hp.swa_layers else 0, "n_vocab": hp.n_vocab,
            "long_rope": int(ctx.runner.long_rope)}


def _write_body(f, ids, kv):
    """Write the body (split out so a test can make a write fail midway)."""
    f.write(memoryview(ids).cast("B"))
    f.write(memoryview(kv).cast("B"))


def write(ctx, f):
    """Write ctx's state to the binary file object f (the caller holds ctx's guard)."""
    head = _expected(ctx)   # first: its StateError names what a state cannot hold
    ids, kv = ctx.runner.save_kv()
    head.update(n_past=len(ids), n_kv=len(kv), crc32=zlib.crc32(kv, zlib.crc32(ids)))
    f.write(_HEAD.pack(*(head[k] for k in _FIELDS)))
    _write_body(f, ids, kv)


def save(ctx, path):
    """Write ctx's state to path atomically (a temporary file in its folder, flushed, then os.replace)."""
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".fgstate-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(ctx, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _check_header(ctx, head, size):
    """StateError unless head (a dict of _FIELDS) fits ctx and a file of size bytes."""
    if head["magic"] != MAGIC:
        raise StateError("not a fastgguf state file (bad magic)")
    if head["version"] != VERSION or head["header_size"] != _HEAD.size:
        raise StateError(f"state format version {head['version']} (header {head['header_size']} bytes); this "
                         f"fastgguf reads version {VERSION} ({_HEAD.size} bytes)")
    want = _expected(ctx)
    for k in _MODEL_FIELDS:
        if head[k] != want[k]:
            got, exp = ((head[k].hex(), want[k].hex()) if k == "sha256" else
                        (head[k].rstrip(b"\0").decode("latin-1"), want[k].rstrip(b"\0").decode("latin-1"))
                        if k == "dtype" else (head[k], want[k]))
            raise StateError(f"the state is for another model or cache: its {k} is {got}, this context's {exp}")
    n = head["n_past"]
    if n > ctx.n_ctx:
        raise StateError(f"the state holds {n} positions, more than this context's n_ctx={ctx.n_ctx}")
    if head["n_kv"] != ctx.runner.kv_state_size(n):
        raise StateError(f"the state has {head['n_kv']} K/V values for {n} positions, expected "
                         f"{ctx.runner.kv_state_size(n)}")
    if size != _HEAD.size + 4 * n + 2 * head["n_kv"]:
        raise StateError(f"the state file is {size} bytes, its header says {_HEAD.size + 4 * n + 2 * head['n_kv']}"
                         f" (truncated or damaged)")


def _read_exact(f, arr):
    view = memoryview(arr).cast("B")
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise StateError("the state file ended early (truncated while being read?)")
        got += n


def read(ctx, f, size):
    """(ids, kv) of the state in the binary file object f of size bytes, checked against ctx (not changed)."""
    raw = f.read(_HEAD.size)
    if len(raw) < _HEAD.size:
        raise StateError(f"the state file is {size} bytes, shorter than its header ({_HEAD.size})")
    head = dict(zip(_FIELDS, _HEAD.unpack(raw)))
    _check_header(ctx, head, size)
    ids = np.empty(head["n_past"], dtype=np.int32)
    kv = np.empty(head["n_kv"], dtype=np.uint16)
    _read_exact(f, ids)
    _read_exact(f, kv)
    if zlib.crc32(kv, zlib.crc32(ids)) != head["crc32"]:
        raise StateError("the state file is damaged (CRC-32 of its body differs)")
    if len(ids) and (ids.min() < 0 or ids.max() >= ctx.model.n_vocab):
        raise StateError(f"the state holds a token id outside [0, {ctx.model.n_vocab})")
    return ids, kv


def load(ctx, path):
    """Read the state at path and put it into ctx (the caller holds ctx's guard)."""
    with open(path, "rb") as f:
        ids, kv = read(ctx, f, os.fstat(f.fileno()).st_size)
    ctx.runner.load_kv(ids, kv)
