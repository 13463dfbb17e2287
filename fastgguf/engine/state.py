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

The persistent prompt cache (fastgguf.engine.prompt_cache) uses the same files: model_key names a model's files,
read_ids reads only a file's token ids (to find the longest stored prefix of a prompt without reading its K/V),
load(ctx, path, n) restores only the first n positions of a stored state, snapshot / save_snapshot copy a state out
to write it later (in another thread), and durable=False skips the fsync (a cache file lost or damaged by a crash is
found by the checks below and recomputed).
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


def recurrent_kind(hp):
    """The kind of layer whose state this format (version 1) cannot hold, in a model of hparams hp, or None: the
    one owner of that fact (Context.save_state / load_state, the prompt cache)."""
    if hp.conv_layers:
        return "short-convolution"
    if hp.dn_layers:
        return "DeltaNet (recurrent)"
    if hp.ssm_layers:
        return "Mamba-2 (recurrent)"
    return None


def _expected(ctx):
    """The header fields that describe ctx's model and cache (without n_past, n_kv, crc32). StateError for a model
    with recurrent layers (recurrent_kind): their states are not in this format, so neither side runs."""
    hp = ctx.model.hparams
    kind = recurrent_kind(hp)
    if kind:
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


def snapshot(ctx):
    """(header bytes, ids, kv): ctx's state, copied out (the caller holds ctx's guard); written by write_snapshot,
    later or in another thread, whatever ctx does meanwhile."""
    head = _expected(ctx)   # first: a model whose recurrent states the format cannot hold is a StateError
    ids, kv = ctx.runner.save_kv()
    head.update(n_past=len(ids), n_kv=len(kv), crc32=zlib.crc32(kv, zlib.crc32(ids)))
    return _HEAD.pack(*(head[k] for k in _FIELDS)), ids, kv


def write_snapshot(f, snap):
    head, ids, kv = snap
    f.write(head)
    _write_body(f, ids, kv)


def write(ctx, f):
    """Write ctx's state to the binary file object f (the caller holds ctx's guard)."""
    write_snapshot(f, snapshot(ctx))


def model_key(ctx):
    """What a state file of ctx's model and cache shape is named by in a shared folder (the prompt cache): the
    first 16 hex digits of the model file's sha256, and "L" for a context using LongRoPE's long factors (its
    keys differ: such a state loads only into a context on the same side)."""
    return ctx.model.sha256()[:16] + ("L" if ctx.runner.long_rope else "")


def file_size(ctx, n):
    """The bytes of a state file of n positions of ctx's model."""
    return _HEAD.size + 4 * n + 2 * ctx.runner.kv_state_size(n)


def save(ctx, path, durable=True):
    """Write ctx's state to path atomically (a temporary file in its folder, flushed, then os.replace)."""
    save_snapshot(snapshot(ctx), path, durable)


def save_snapshot(snap, path, durable=True):
    """Write a snapshot(ctx) to path atomically, as save does. durable: fsync the file before the rename (without:
    a crash soon after may leave a damaged file, which loading refuses; the prompt cache's files need no more)."""
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".fgstate-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write_snapshot(f, snap)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _check_format(head):
    """StateError unless head (a dict of _FIELDS) is a header this fastgguf reads."""
    if head["magic"] != MAGIC:
        raise StateError("not a fastgguf state file (bad magic)")
    if head["version"] != VERSION or head["header_size"] != _HEAD.size:
        raise StateError(f"state format version {head['version']} (header {head['header_size']} bytes); this "
                         f"fastgguf reads version {VERSION} ({_HEAD.size} bytes)")


def _check_header(ctx, head, size, n_load=None):
    """StateError unless head (a dict of _FIELDS) fits ctx and a file of size bytes (n_load: only that many of its
    positions are to be loaded, so only they must fit ctx's n_ctx)."""
    _check_format(head)
    want = _expected(ctx)
    for k in _MODEL_FIELDS:
        if head[k] != want[k]:
            got, exp = ((head[k].hex(), want[k].hex()) if k == "sha256" else
                        (head[k].rstrip(b"\0").decode("latin-1"), want[k].rstrip(b"\0").decode("latin-1"))
                        if k == "dtype" else (head[k], want[k]))
            raise StateError(f"the state is for another model or cache: its {k} is {got}, this context's {exp}")
    n = head["n_past"]
    if (n if n_load is None else n_load) > ctx.n_ctx:
        raise StateError(f"the state holds {n} positions, more than this context's n_ctx={ctx.n_ctx}")
    if n_load is not None and not 0 <= n_load <= n:
        raise StateError(f"cannot load {n_load} positions of a state holding {n}")
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


def _read_head(f, size):
    raw = f.read(_HEAD.size)
    if len(raw) < _HEAD.size:
        raise StateError(f"the state file is {size} bytes, shorter than its header ({_HEAD.size})")
    return dict(zip(_FIELDS, _HEAD.unpack(raw)))


def read_ids(path):
    """(header, ids) of the state file at path, its K/V not read: the header as a dict of its fields (its format
    checked, not its model: compare header["sha256"]), the token ids an int32 array. StateError for a file that
    is not a state this fastgguf reads or is shorter than its header and ids say."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = _read_head(f, size)
        _check_format(head)
        if size < _HEAD.size + 4 * head["n_past"] + 2 * head["n_kv"]:
            raise StateError(f"the state file is {size} bytes, shorter than its header says (truncated)")
        ids = np.empty(head["n_past"], dtype=np.int32)
        _read_exact(f, ids)
    return head, ids


def read(ctx, f, size, n_load=None):
    """(ids, kv) of the state in the binary file object f of size bytes, checked against ctx (not changed); with
    n_load, of its first n_load positions only (prefix_kv)."""
    head = _read_head(f, size)
    _check_header(ctx, head, size, n_load)
    ids = np.empty(head["n_past"], dtype=np.int32)
    kv = np.empty(head["n_kv"], dtype=np.uint16)
    _read_exact(f, ids)
    _read_exact(f, kv)
    if zlib.crc32(kv, zlib.crc32(ids)) != head["crc32"]:
        raise StateError("the state file is damaged (CRC-32 of its body differs)")
    if len(ids) and (ids.min() < 0 or ids.max() >= ctx.model.n_vocab):
        raise StateError(f"the state holds a token id outside [0, {ctx.model.n_vocab})")
    if n_load is not None and n_load < len(ids):
        kv = prefix_kv(ctx.model.hparams, kv, len(ids), n_load)
        if kv is None:
            raise StateError(f"the state's sliding-window rings do not hold the positions before {n_load}")
        ids = ids[:n_load]
    return ids, kv


def prefix_loadable(hp, n, m):
    """Whether the first m of a state's n positions can be loaded (prefix_kv): always for m == n or a model
    without sliding-window layers; otherwise its rings (the last n_swa of n) must hold all of them."""
    return m == n or not hp.swa_layers or n <= hp.n_swa


def prefix_kv(hp, kv, n, m):
    """The K/V of the first m of the n positions of a state's K/V (the layout of fg_kv_state_size: per layer, K
    then V, n_head_kv groups of rows), or None where that cannot be (prefix_loadable)."""
    if not prefix_loadable(hp, n, m):
        return None
    swa = set(hp.swa_layers)
    parts, off = [], 0
    for il in range(hp.n_layer):
        if hp.kv_source(il) != il:   # no K/V of its own (gemma4's K/V-sharing layers)
            continue
        hd, g, _ = hp.layer_dims(il)
        rows_of = 2 * g
        first = n - hp.n_swa if il in swa and n > hp.n_swa else 0
        first_m = m - hp.n_swa if il in swa and m > hp.n_swa else 0
        size = rows_of * (n - first) * hd
        block = kv[off:off + size].reshape(rows_of, n - first, hd)
        parts.append(block[:, first_m - first:m - first, :].reshape(-1))
        off += size
    return np.concatenate(parts) if parts else kv[:0]


def load(ctx, path, n=None):
    """Read the state at path and put it into ctx (the caller holds ctx's guard); with n, only its first n
    positions (StateError where they cannot be: a sliding-window model's state holds only its last window)."""
    with open(path, "rb") as f:
        ids, kv = read(ctx, f, os.fstat(f.fileno()).st_size, n)
    ctx.runner.load_kv(ids, kv)
