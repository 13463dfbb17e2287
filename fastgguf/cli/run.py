"""``fastgguf run [-m MODEL] "prompt"``: stream a completion to stdout; speeds to stderr at the end.

Sampling flags are generated from SamplingParams and mirror llama.cpp's (--temp, --top-k, --top-p, --min-p,
--repeat-penalty, --seed, -n); --stop and --logit-bias may be repeated. The prompt may also come from stdin with "-" (or when none is given and stdin is not a terminal).
"""

from __future__ import annotations

import sys

from fastgguf.cli.common import add_model_args, add_sampling_args, load_model, make_context, sampling_params, speed_line


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="complete a prompt, streaming the text")
    p.add_argument("prompt", nargs="?", help='prompt text ("-": read stdin)')
    add_model_args(p)
    add_sampling_args(p)
    p.add_argument("--no-special", action="store_true", help="do not add BOS/special tokens to the prompt")
    p.add_argument("--parse-special", action="store_true", help="turn special-token text in the prompt into ids")
    p.add_argument("--quiet", action="store_true", help="do not print speeds to stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    prompt = args.prompt
    if prompt == "-" or (prompt is None and not sys.stdin.isatty()):
        prompt = sys.stdin.read()
    if prompt is None:
        print("fastgguf run: error: give a prompt (or '-' to read it from stdin)", file=sys.stderr)
        return 2
    model = load_model(args)
    from fastgguf.engine.generate import generate
    stream = generate(model, prompt, sampling_params(args), stream=True, context=make_context(model, args),
                      add_special=not args.no_special, parse_special=args.parse_special)
    out = sys.stdout
    for piece in stream:
        out.write(piece)
        out.flush()
    out.write("\n")
    out.flush()
    if not args.quiet:
        print(speed_line(stream), file=sys.stderr)
    return 0
