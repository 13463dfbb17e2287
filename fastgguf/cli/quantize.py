"""``fastgguf quantize IN.gguf OUT.gguf --type q4_0|q4_1|q8_0 [--pure] [--threads N] [--quiet]``.

Re-quantizes a model (see fastgguf.quantize for the policy): weights to the chosen type, the token embedding
and output matrix to Q8_0 unless --pure, 1-D tensors to F32; metadata copied, general.file_type set.
"""

from __future__ import annotations

import collections


def register(subparsers) -> None:
    p = subparsers.add_parser("quantize", help="re-quantize a GGUF model to q4_0, q4_1 or q8_0")
    p.add_argument("input", help="source GGUF file (F32/F16/BF16/Q4_0/Q4_1/Q8_0 tensors)")
    p.add_argument("output", help="GGUF file to write")
    p.add_argument("--type", required=True, type=str.lower, choices=["q4_0", "q4_1", "q8_0"],
                   help="target type of the weight matrices")
    p.add_argument("--pure", action="store_true",
                   help="quantize every 2-D weight to --type (default: token_embd/output stay Q8_0)")
    p.add_argument("--threads", type=int, default=None, help="worker threads (default: all CPUs)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    import os

    from fastgguf.gguf.quantize import quantize_file

    if os.path.abspath(args.input) == os.path.abspath(args.output):
        raise ValueError("output must differ from input")
    if args.threads is not None and args.threads < 1:
        raise ValueError("--threads must be >= 1")
    plan = quantize_file(args.input, args.output, args.type, pure=args.pure, n_threads=args.threads,
                         progress=not args.quiet)
    counts = collections.Counter(t.name for t in plan.values())
    summary = ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))
    print(f"wrote {args.output}: {len(plan)} tensors ({summary})")
    return 0
