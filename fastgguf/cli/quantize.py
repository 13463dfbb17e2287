"""``fastgguf quantize IN.gguf OUT.gguf --type TYPE [--pure] [--threads N] [--quiet]``.

Re-quantizes a model (see fastgguf.gguf.quantize for the policy). The llama.cpp recipes (q4_k_m, q4_k_s, q5_k_m,
q5_k_s, q6_k, q3_k_m, q2_k, q5_0, q5_1, iq4_nl, mxfp4_moe) choose each tensor's type as llama-quantize does and give
the same bytes; q4_0/q4_1/q8_0 keep fastgguf's policy (weights to the type, token embedding and output matrix to Q8_0
unless --pure, 1-D tensors to F32). Metadata copied, general.file_type set.
"""

from __future__ import annotations


def register(subparsers) -> None:
    from fastgguf.gguf.quantize import ALL_TYPES

    p = subparsers.add_parser(
        "quantize", help="re-quantize a GGUF model (k-quants as llama-quantize, q4_0/q4_1/q8_0)",
        description="Re-quantize a GGUF model. The llama.cpp recipes (q4_k_m, q4_k_s, q5_k_m, q5_k_s, q6_k, q3_k_m, "
                    "q2_k, q5_0, q5_1, iq4_nl, mxfp4_moe) choose each tensor's type as llama-quantize does (more "
                    "bits for attn_v/ffn_down by layer, Q6_K or Q8_0 output, fallbacks for rows the type's block "
                    "does not divide; mxfp4_moe: expert tensors MXFP4, the rest Q8_0) and write the same tensor "
                    "bytes as `llama-quantize --allow-requantize`. q4_0, q4_1 and q8_0 keep fastgguf's own policy "
                    "(token_embd/output Q8_0 unless --pure). A source that is already quantized is dequantized to "
                    "float32 first and quantized again (requantizing loses a little more precision than quantizing "
                    "from F16/F32); tensors already in their target type are copied unchanged.")
    p.add_argument("input", help="source GGUF file (F32/F16/BF16 or any quantized type fastgguf reads)")
    p.add_argument("output", help="GGUF file to write")
    p.add_argument("--type", required=True, type=str.lower, choices=ALL_TYPES,
                   help="recipe / target type of the weight matrices")
    p.add_argument("--pure", action="store_true",
                   help="quantize every 2-D weight to --type: no per-tensor mixture (recipes: the row-length "
                        "fallbacks still apply; q4_0/q4_1/q8_0: token_embd/output not kept at Q8_0)")
    p.add_argument("--threads", type=int, default=None, help="worker threads (default: all CPUs)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    import os

    from fastgguf.cli.common import written_line
    from fastgguf.gguf.quantize import quantize_file

    if os.path.abspath(args.input) == os.path.abspath(args.output):
        raise ValueError("output must differ from input")
    if args.threads is not None and args.threads < 1:
        raise ValueError("--threads must be >= 1")
    plan = quantize_file(args.input, args.output, args.type, pure=args.pure, n_threads=args.threads,
                         progress=not args.quiet)
    print(written_line(args.output, plan))
    return 0
