"""``fastgguf info [FILE] [--json]``: describe a GGUF file (default: the default model, fetched if needed).

Prints the architecture, the hyperparameters (``<arch>.*`` keys), a tokenizer summary, whether there is a
chat template, and a table of tensors (name, type, shape, bytes) with totals.
"""

from __future__ import annotations

import json
import re
import sys

import numpy as np


def register(subparsers) -> None:
    p = subparsers.add_parser("info", help="describe a GGUF file (default: the default model)")
    p.add_argument("file", nargs="?", help="GGUF file or catalogue name (default: the default model, downloaded if "
                                           "needed)")
    p.add_argument("-m", "--model", dest="model", default=None, help="the same as FILE")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--no-tensors", action="store_true", help="leave out the per-tensor table")
    p.set_defaults(func=run)


def _plain(v):
    """A metadata value as JSON-friendly Python."""
    if isinstance(v, np.ndarray):
        return _plain(v.tolist())
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return v


_TOKENIZER_IDS = ("bos", "eos", "eot", "eom", "unknown", "padding", "sep", "cls", "mask")


def describe(f) -> dict:
    """Everything `info` shows, as a dict (f: an open GGUFFile)."""
    md = f.metadata
    arch = _plain(f.architecture)     # any GGUF value type can sit under any key: only a string names keys
    hyper = {k[len(arch) + 1:]: _plain(md[k]) for k in md
             if isinstance(arch, str) and arch and k.startswith(arch + ".")}
    tok = {}
    if "tokenizer.ggml.model" in md:
        tok["model"] = _plain(md["tokenizer.ggml.model"])
    if "tokenizer.ggml.pre" in md:
        tok["pre"] = _plain(md["tokenizer.ggml.pre"])
    for key, name in (("tokenizer.ggml.tokens", "n_tokens"), ("tokenizer.ggml.merges", "n_merges")):
        if key in md:
            raw = dict.__getitem__(md, key)   # an undecoded string array stays undecoded
            if isinstance(raw, (str, bytes, int, float)):
                tok[name] = f"not an array: {_plain(raw)!r}"
            else:
                tok[name] = md.array_len(key) if hasattr(md, "array_len") else len(raw)
    for name in _TOKENIZER_IDS:
        key = f"tokenizer.ggml.{name}_token_id"
        if key in md:
            tok[f"{name}_id"] = _plain(md[key])
    for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix"):
        if key in md:
            tok[key.rsplit(".", 1)[1]] = _plain(md[key])
    tmpl = md.get("tokenizer.chat_template")
    if tmpl is None:
        chat_template = {"present": False, "length": 0}
    elif isinstance(tmpl, str):
        chat_template = {"present": True, "length": len(tmpl)}
    else:
        chat_template = {"present": True, "length": None, "error": f"not a string: {_plain(tmpl)!r}"[:200]}
    tensors = []
    by_type = {}
    n_el = n_bytes = 0
    for t in f.tensors.values():
        tensors.append({"name": t.name, "type": t.type.name, "shape": list(t.shape), "nbytes": t.nbytes,
                        "offset": t.offset})
        s = by_type.setdefault(t.type.name, {"count": 0, "n_elements": 0, "nbytes": 0})
        s["count"] += 1
        s["n_elements"] += t.n_elements
        s["nbytes"] += t.nbytes
        n_el += t.n_elements
        n_bytes += t.nbytes
    general = {k: _plain(md[k]) for k in md if k.startswith("general.")}
    return {
        "path": f.path, "file_size": f.file_size, "gguf_version": f.version, "alignment": f.alignment,
        "data_offset": f.data_offset, "n_metadata": len(md), "architecture": arch,
        "name": _plain(md.get("general.name")), "general": general, "hyperparameters": hyper, "tokenizer": tok,
        "chat_template": chat_template,
        "tensors": tensors,
        "totals": {"n_tensors": len(tensors), "n_elements": n_el, "nbytes": n_bytes,
                   "bits_per_weight": round(8 * n_bytes / n_el, 3) if n_el else None, "by_type": by_type},
    }


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _t(v) -> str:
    """A value as text for the terminal: control characters (ESC, BEL, CR, bidi overrides, ...) escaped as \\x1b /
    \\u202e, undecodable bytes as \\xNN: file contents cannot drive the terminal."""
    s = v if isinstance(v, str) else str(v)
    s = s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", s)


def _print_text(d: dict, show_tensors: bool, out) -> None:
    w = out.write
    w(f"file          {_t(d['path'])}\n")
    w(f"size          {_fmt_bytes(d['file_size'])} ({d['file_size']} bytes), GGUF v{d['gguf_version']}, "
      f"alignment {d['alignment']}, data at {d['data_offset']}\n")
    w(f"architecture  {_t(d['architecture'])}\n")
    if d["name"] not in (None, "", []):
        w(f"name          {_t(d['name'])}\n")
    if d["hyperparameters"]:
        w("\nhyperparameters\n")
        for k, v in d["hyperparameters"].items():
            if isinstance(v, list) and len(v) > 8:
                v = f"[{', '.join(map(str, v[:8]))}, ...] ({len(v)} values)"
            w(f"  {_t(k):<40} {_t(v)}\n")
    t = d["tokenizer"]
    if t:
        w("\ntokenizer\n")
        for k, v in t.items():
            w(f"  {_t(k):<40} {_t(v)}\n")
    ct = d["chat_template"]
    if ct.get("error"):
        w(f"\nchat template invalid ({_t(ct['error'])})\n")
    else:
        w(f"\nchat template {'yes, ' + str(ct['length']) + ' characters' if ct['present'] else 'none'}\n")
    tot = d["totals"]
    if show_tensors:
        w(f"\n{'tensor':<40} {'type':<8} {'shape':<20} {'bytes':>12}\n")
        for x in d["tensors"]:
            shape = "x".join(map(str, x["shape"]))
            w(f"{_t(x['name']):<40} {x['type']:<8} {shape:<20} {x['nbytes']:>12}\n")
    w(f"\ntotal: {tot['n_tensors']} tensors, {tot['n_elements']:,} elements, {_fmt_bytes(tot['nbytes'])}"
      f" ({tot['bits_per_weight']} bits per weight)\n")
    for name, s in sorted(d["totals"]["by_type"].items(), key=lambda kv: -kv[1]["nbytes"]):
        w(f"  {name:<8} {s['count']:>5} tensors {s['n_elements']:>14,} elements {_fmt_bytes(s['nbytes']):>12}\n")
    mem = d.get("memory")
    if mem:
        if mem["experts"]:
            w(f"experts: {_fmt_bytes(mem['experts'])} of the weights\n")
        w(f"read per decoded token: {_fmt_bytes(mem['per_token'])} ({100 * mem['active_fraction']:.1f}% of the "
          f"weights, mapped zero-copy)\n")


def memory(f):
    """Model.memory()'s byte counts of a file fastgguf can run (all but packed: a loaded Model's repack=True
    copies), else None (info describes any GGUF file)."""
    from fastgguf import arch
    from fastgguf.errors import GGUFError
    try:
        return arch.base.weight_bytes(f, arch.get(f).hparams())
    except (GGUFError, KeyError, ValueError):
        return None


def run(args) -> int:
    from fastgguf import hub
    from fastgguf.gguf import GGUFFile
    if args.file and args.model:
        raise ValueError("give the model as FILE or as -m, not both")
    path = hub.resolve(args.file or args.model)
    with GGUFFile(path) as f:
        d = describe(f)
        d["memory"] = memory(f)
    if args.json:
        json.dump(d, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        _print_text(d, not args.no_tensors, sys.stdout)
    return 0
