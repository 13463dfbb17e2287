"""What several commands share: model/context flags, sampling flags generated from SamplingParams, loading."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import os
from typing import Optional

from fastgguf.engine.params import SamplingParams

_SAMPLING_FIELDS = {f.name: f for f in dataclasses.fields(SamplingParams)}
_ARG_TYPES = {float: float, int: int, Optional[int]: int}


def _read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise argparse.ArgumentTypeError(f"cannot read {path!r}: {e}") from None


def _json_schema_arg(text):
    """--json-schema: a JSON file, or the JSON text itself. SamplingParams checks the schema."""
    if os.path.isfile(text):
        text = _read_text(text)
    try:
        return json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"neither a file nor JSON text ({e})") from None


# fields whose flag value needs more than a type conversion (SamplingParams validates the result)
_ARG_PARSERS = {"json_schema": _json_schema_arg, "grammar": _read_text, "speculative": str}


MODEL_HELP = ("GGUF file or catalogue name (fastgguf pull --list; default: the default model, downloaded if needed); "
              "a catalogue name means the catalogue's model even where a file of that name exists: write such a file "
              "as ./NAME")


def add_model_args(p) -> None:
    """Model/context flags shared by `run` and `chat`."""
    p.add_argument("-m", "--model", help=MODEL_HELP)
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: physical cores)")
    p.add_argument("--ctx", type=int, default=None, help="context size in tokens (default: sized to fit)")
    add_repack_arg(p)


def add_repack_arg(p) -> None:
    """--repack: fastgguf.Model(repack=True) (without it, FASTGGUF_REPACK decides)."""
    p.add_argument("--repack", action="store_true", default=None,
                   help="decode from a row-interleaved copy of the Q4_K matrices made at load (more memory, "
                        "faster decode where the GEMV's arithmetic is the wall; default: $FASTGGUF_REPACK, else off)")


def _bias_item(text):
    tid, sep, bias = text.partition("=")
    if not sep:
        raise ValueError(f"--logit-bias takes ID=BIAS, got {text!r}")
    return int(tid), (-math.inf if bias.strip().lower() in ("-inf", "-infinity") else float(bias))


def add_sampling_args(p, **defaults) -> None:
    """One flag per SamplingParams field (its metadata names the flags and help). `defaults` overrides a field's
    default for this command (e.g. chat's max_tokens)."""
    g = p.add_argument_group("sampling (fastgguf.SamplingParams)")
    for name, f in _SAMPLING_FIELDS.items():
        md = f.metadata
        default = defaults.get(name, f.default)
        shown = "random" if name == "seed" else default
        kw = dict(dest=name, default=default, metavar=md["metavar"],
                  help=md["help"] if shown in ((), None) else f"{md['help']} ({shown})")
        if name in ("stop", "logit_bias"):
            kw.update(action="append", default=None)
        else:
            kw["type"] = _ARG_PARSERS.get(name) or _ARG_TYPES[f.type]
        g.add_argument(*md["flags"], **kw)
    g.add_argument("--draft-model", default=None, metavar="FILE",
                   help="speculative decoding with this draft model (same vocabulary; a file or catalogue name)")


def sampling_params(args) -> SamplingParams:
    """The SamplingParams the flags say."""
    kw = {name: getattr(args, name) for name in _SAMPLING_FIELDS}
    kw["logit_bias"] = dict(_bias_item(x) for x in kw["logit_bias"] or ())
    if getattr(args, "draft_model", None):
        kw["speculative"] = load_draft_model(args.draft_model, args.threads)
    return SamplingParams(**kw)


def load_model(args, **options):
    """The public fastgguf.Model (create_* included) of -m, through the catalogue; options: more Model keywords
    (serve's prompt cache)."""
    import fastgguf
    from fastgguf import hub
    path = hub.resolve(args.model)
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if getattr(args, "repack", None):
        options.setdefault("repack", True)
    return fastgguf.Model(path, n_threads=args.threads, **options)


def load_draft_model(name, threads=None):
    """--draft-model: the engine Model of a file or catalogue name (it drafts tokens; no create_* needed)."""
    from fastgguf import hub
    from fastgguf.engine.model import Model
    return Model(hub.resolve(name), n_threads=threads)


def make_context(model, args):
    if args.ctx is None:
        return None
    if args.ctx < 1:
        raise ValueError(f"--ctx must be >= 1, got {args.ctx}")
    return model.context(n_ctx=args.ctx)


def written_line(path, plan) -> str:
    """What quantize and convert print when done: the file and its tensors by type (plan: name -> GGMLType)."""
    counts = collections.Counter(t.name for t in plan.values())
    summary = ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))
    return f"wrote {path}: {len(plan)} tensors ({summary})"


def speed_line(stream) -> str:
    u, t = stream.usage, stream.timings
    cached = f" ({u.cached_tokens} cached)" if u.cached_tokens else ""
    drafts = f" | drafts: {t.draft_accepted}/{t.draft_tokens} accepted" if t.draft_tokens else ""
    return (f"prompt: {u.prompt_tokens} tokens{cached}, {t.prompt_tokens_per_second:.1f} tok/s | "
            f"generation: {u.completion_tokens} tokens, {t.generation_tokens_per_second:.1f} tok/s | "
            f"finish: {stream.finish_reason}{drafts}")
