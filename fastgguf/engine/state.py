"""A Context's state on disk: Context.save_state / load_state and pickling (fastgguf.engine.model).

The file (format version 2) is a fixed header, the token ids in the cache, their K/V, then the recurrent states:

    header  _HEAD below (little-endian, 108 bytes): magic, format version (2), header size, the model file's sha256,
            the dtypes ("f16,f32": K/V F16, states F32), the saving context's n_ctx, n_layer, n_head_kv, head_dim,
            n_swa, n_vocab, whether the keys use LongRoPE's long factors, n_past, the count of K/V values (n_kv),
            the count of recurrent-state values (n_rec), and the CRC-32 of the body (ids, K/V, states)
    ids     n_past int32
    kv      n_kv uint16 (F16 bits): the attention layers' K/V of those positions in the order of Runner.save_kv
            (csrc fg_kv_state_size): per attention layer (short-convolution, DeltaNet and Mamba-2 layers have none),
            K then V, n_head_kv groups of rows; every position of a full-attention layer, the last n_swa of a
            sliding-window one (all a later query sees), so the file does not depend on n_ctx and holds n_past
            positions, not the whole cache.
    rec     n_rec float32, as the cache stores them (never rounded): per layer in order (csrc fg_rec_state_size), a
            short-convolution layer's last min(n_past, n_conv - 1) inputs (n_embd each, oldest first), a DeltaNet or
            Mamba-2 layer's whole state after position n_past - 1 (its conv ring or inputs, then its matrices);
            nothing for an attention layer. Empty (n_rec 0) for a model without such layers.

Every model writes version 2 (one writer); version 1 files (an attention-only model's, written before: a 100-byte
header without n_rec, dtype "f16", the CRC-32 of ids and K/V) still load.

A state loads into any Context of the same model (same sha256) whose n_ctx holds n_past, larger or smaller than
the saving one's; only a model with LongRoPE factors (phi3 128k) needs both n_ctx on the same side of its original
context, since that choice changes the keys. Loading checks every field against the model and every length
against the header and the file's size (n_kv and n_rec must be the model's sizes for n_past) before reading or
allocating anything, and the CRC-32 of the body before the cache is touched: any mismatch or damage is a
StateError naming it, and the Context is then as it was. Writing goes to a temporary file in the same folder,
then os.replace: a failed write leaves the old file intact.

The persistent prompt cache (fastgguf.engine.prompt_cache) uses the same files: model_key names a model's files,
read_ids reads only a file's token ids (to find the longest stored prefix of a prompt without reading its K/V),
load(ctx, path, n) restores only the first n positions of a stored state (prefix_loadable: a model with recurrent
layers, recurrent_kind, only all of them: its states are those of the last position), snapshot / save_snapshot
copy a state out to write it later (in another thread), and durable=False skips the fsync (a cache file lost or
damaged by a crash is found by the checks below and recomputed).
"""
import os
import struct
import tempfile
import zlib

import numpy as np

from fastgguf.errors import StateError

MAGIC = b"FGSTATE\0"
VERSION = 2             # written; 1 is still read
_PREFIX = struct.Struct("<8sII")   # magic, version, header size: what says which header follows
_FORMATS = {  # version -> (header, its fields, the dtypes field)
    1: (struct.Struct("<8sII32s8sIIIIIIIIQI"),
        ("magic", "version", "header_size", "sha256", "dtype", "n_ctx", "n_layer", "n_head_kv", "head_dim", "n_swa",
         "n_vocab", "long_rope", "n_past", "n_kv", "crc32"), b"f16"),
    2: (struct.Struct("<8sII32s8sIIIIIIIIQQI"),
        ("magic", "version", "header_size", "sha256", "dtype", "n_ctx", "n_layer", "n_head_kv", "head_dim", "n_swa",
         "n_vocab", "long_rope", "n_past", "n_kv", "n_rec", "crc32"), b"f16,f32"),
}
_HEAD, _FIELDS, DTYPE = _FORMATS[VERSION]
# what must equal the loading context's: the cache's shape first (a clearer message than the sha256's)
_MODEL_FIELDS = ("dtype", "n_layer", "n_head_kv", "head_dim", "n_swa", "n_vocab", "long_rope", "sha256")


def recurrent_kind(hp):
    """The kind of layer whose saved state is that of the last position only, in a model of hparams hp, or None:
    the one owner of that fact. Such a state loads whole or not at all (prefix_loadable), so the prompt cache
    restores only whole checkpoints of such a model (fastgguf.engine.prompt_cache)."""
    if hp.conv_layers:
        return "short-convolution"
    if hp.dn_layers:
        return "DeltaNet (recurrent)"
    if hp.ssm_layers:
        return "Mamba-2 (recurrent)"
    return None


def _expected(ctx, version=VERSION):
    """The header fields of a version's file that describe ctx's model and cache (without n_past, the sizes and
    crc32)."""
    hp = ctx.model.hparams
    head, _, dtype = _FORMATS[version]
    return {"magic": MAGIC, "version": version, "header_size": head.size, "sha256": ctx.model.sha256_bytes(),
            "dtype": dtype.ljust(8, b"\0"), "n_ctx": ctx.n_ctx, "n_layer": hp.n_layer, "n_head_kv": hp.n_head_kv,
            "head_dim": hp.head_dim, "n_swa": hp.n_swa if hp.swa_layers else 0, "n_vocab": hp.n_vocab,
            "long_rope": int(ctx.runner.long_rope)}


def _body_size(head):
    """The bytes after a header of head's n_past and sizes (n_rec: 0 in a version 1 file)."""
    return 4 * head["n_past"] + 2 * head["n_kv"] + 4 * head.get("n_rec", 0)


def _crc(ids, kv, rec):
    return zlib.crc32(rec, zlib.crc32(kv, zlib.crc32(ids)))


def _write_body(f, ids, kv, rec):
    """Write the body (split out so a test can make a write fail midway)."""
    f.write(memoryview(ids).cast("B"))
    f.write(memoryview(kv).cast("B"))
    f.write(memoryview(rec).cast("B"))


def snapshot(ctx):
    """(header bytes, ids, kv, rec): ctx's state, copied out (the caller holds ctx's guard); written by
    write_snapshot, later or in another thread, whatever ctx does meanwhile."""
    head = _expected(ctx)
    ids, kv, rec = ctx.runner.save_kv()
    head.update(n_past=len(ids), n_kv=len(kv), n_rec=len(rec), crc32=_crc(ids, kv, rec))
    return _HEAD.pack(*(head[k] for k in _FIELDS)), ids, kv, rec


def write_snapshot(f, snap):
    f.write(snap[0])
    _write_body(f, *snap[1:])


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
    r = ctx.runner
    return _HEAD.size + _body_size({"n_past": n, "n_kv": r.kv_state_size(n), "n_rec": r.rec_state_size(n)})


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


def _format_of(magic, version, header_size):
    """The (header, fields, dtype) of a file starting with these, or StateError if this fastgguf does not read it."""
    if magic != MAGIC:
        raise StateError("not a fastgguf state file (bad magic)")
    fmt = _FORMATS.get(version)
    if fmt is None or header_size != fmt[0].size:
        raise StateError(f"state format version {version} (header {header_size} bytes); this fastgguf reads "
                         + ", ".join(f"version {v} ({h.size} bytes)" for v, (h, _, _) in _FORMATS.items()))
    return fmt


def _check_sizes(ctx, head, size):
    """StateError unless head's n_kv and n_rec are ctx's model's for its n_past (<= ctx's n_ctx, checked first) and
    the file is exactly as long as they say: arithmetic only, before anything is allocated."""
    n, r = head["n_past"], ctx.runner
    if n >= 1 << 31:  # past any cache (a partial load's n_past is not bounded by n_ctx)
        raise StateError(f"the state says it holds {n} positions (damaged)")
    for k, want in (("n_kv", r.kv_state_size(n)), ("n_rec", r.rec_state_size(n))):
        if head.get(k, 0) != want:
            what = "K/V values" if k == "n_kv" else "recurrent-state values"
            raise StateError(f"the state has {head.get(k, 0)} {what} for {n} positions, this model {want}")
    want = head["header_size"] + _body_size(head)
    if size != want:
        raise StateError(f"the state file is {size} bytes, its header says {want} (truncated or damaged)")


def _check_header(ctx, head, size, n_load=None):
    """StateError unless head (a dict of its version's fields) fits ctx and a file of size bytes (n_load: only that
    many of its positions are to be loaded, so only they must fit ctx's n_ctx)."""
    want = _expected(ctx, head["version"])
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
    if n_load is not None and not prefix_loadable(ctx.model.hparams, n, n_load):
        kind = recurrent_kind(ctx.model.hparams)
        why = (f"its {kind} layers' state is that of its last position" if kind else
               "its sliding-window rings do not hold the positions before it")
        raise StateError(f"cannot load the first {n_load} of the state's {n} positions: {why}")
    _check_sizes(ctx, head, size)


def _read_exact(f, arr):
    view = memoryview(arr).cast("B")
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise StateError("the state file ended early (truncated while being read?)")
        got += n


def _read_head(f, size):
    """The header of the file f of size bytes as a dict of its version's fields (its format checked, not its
    model)."""
    raw = f.read(_PREFIX.size)
    if len(raw) < _PREFIX.size:
        raise StateError(f"the state file is {size} bytes, shorter than a header")
    head_struct, fields, _ = _format_of(*_PREFIX.unpack(raw))
    raw += f.read(head_struct.size - _PREFIX.size)
    if len(raw) < head_struct.size:
        raise StateError(f"the state file is {size} bytes, shorter than its header ({head_struct.size})")
    return dict(zip(fields, head_struct.unpack(raw)))


def read_ids(path):
    """(header, ids) of the state file at path, its K/V not read: the header as a dict of its fields (its format
    checked, not its model: compare header["sha256"]), the token ids an int32 array. StateError for a file that
    is not a state this fastgguf reads or is shorter than its header and ids say."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = _read_head(f, size)
        if size < head["header_size"] + _body_size(head):
            raise StateError(f"the state file is {size} bytes, shorter than its header says (truncated)")
        ids = np.empty(head["n_past"], dtype=np.int32)
        _read_exact(f, ids)
    return head, ids


def read(ctx, f, size, n_load=None):
    """(ids, kv, rec) of the state in the binary file object f of size bytes, checked against ctx (not changed);
    with n_load, of its first n_load positions only (prefix_kv)."""
    head = _read_head(f, size)
    _check_header(ctx, head, size, n_load)
    ids = np.empty(head["n_past"], dtype=np.int32)
    kv = np.empty(head["n_kv"], dtype=np.uint16)
    rec = np.empty(head.get("n_rec", 0), dtype=np.float32)
    for arr in (ids, kv, rec):
        _read_exact(f, arr)
    if _crc(ids, kv, rec) != head["crc32"]:
        raise StateError("the state file is damaged (CRC-32 of its body differs)")
    if len(ids) and (ids.min() < 0 or ids.max() >= ctx.model.n_vocab):
        raise StateError(f"the state holds a token id outside [0, {ctx.model.n_vocab})")
    if n_load is not None and n_load < len(ids):
        kv = prefix_kv(ctx.model.hparams, kv, len(ids), n_load)
        ids = ids[:n_load]
    return ids, kv, rec


def prefix_loadable(hp, n, m):
    """Whether the first m of a state's n positions can be loaded (prefix_kv): always m == n; never m < n for a
    model with recurrent layers (recurrent_kind: their states are those of the last position); otherwise
    always without sliding-window layers, else their rings (the last n_swa of n) must hold all of them."""
    if m == n:
        return True
    return not recurrent_kind(hp) and (not hp.swa_layers or n <= hp.n_swa)


def _attention_layers(hp):
    """The layers with K/V rows of their own in a state (csrc attn_layer): all but the recurrent ones and those
    that attend over an earlier layer's K/V (gemma4's K/V-sharing layers)."""
    recurrent = set(hp.conv_layers) | set(hp.dn_layers) | set(hp.ssm_layers)
    return [il for il in range(hp.n_layer) if il not in recurrent and hp.kv_source(il) == il]


def prefix_kv(hp, kv, n, m):
    """The K/V of the first m of the n positions of a state's K/V (the layout of fg_kv_state_size: per attention
    layer, K then V, its groups of rows), or None where that cannot be (prefix_loadable)."""
    if not prefix_loadable(hp, n, m):
        return None
    swa = set(hp.swa_layers)
    parts, off = [], 0
    for il in _attention_layers(hp):
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
    positions (StateError where they cannot be: prefix_loadable)."""
    with open(path, "rb") as f:
        ids, kv, rec = read(ctx, f, os.fstat(f.fileno()).st_size, n)
    ctx.runner.load_kv(ids, kv, rec)
