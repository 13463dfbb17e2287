"""``fastgguf run [-m MODEL] "prompt"``: stream a completion to stdout; speeds to stderr at the end.

Sampling flags mirror llama.cpp's (--temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed, -n); --stop may be
repeated. The prompt may also come from stdin with "-" (or when none is given and stdin is not a terminal).
"""

from __future__ import annotations

import sys


def add_model_args(p) -> None:
    """Model/context flags shared by `run` and `chat`."""
    p.add_argument("-m", "--model", help="GGUF file (default: the default model, downloaded if needed)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: physical cores)")
    p.add_argument("--ctx", type=int, default=None, help="context size in tokens (default: sized to fit)")


def add_sampling_args(p, max_tokens=256) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("-n", "--max-tokens", type=int, default=max_tokens, help=f"tokens to generate ({max_tokens})")
    g.add_argument("--temp", type=float, default=0.8, help="temperature, 0 = greedy (0.8)")
    g.add_argument("--top-k", type=int, default=40, help="top-k, 0 = off (40)")
    g.add_argument("--top-p", type=float, default=0.95, help="top-p, 1 = off (0.95)")
    g.add_argument("--min-p", type=float, default=0.05, help="min-p, 0 = off (0.05)")
    g.add_argument("--repeat-penalty", type=float, default=1.0, help="repetition penalty, 1 = off (1.0)")
    g.add_argument("--repeat-last-n", type=int, default=64, help="tokens the repetition penalty looks at (64)")
    g.add_argument("--frequency-penalty", type=float, default=0.0, help="OpenAI frequency penalty (0)")
    g.add_argument("--presence-penalty", type=float, default=0.0, help="OpenAI presence penalty (0)")
    g.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    g.add_argument("--stop", action="append", default=None, metavar="TEXT", help="stop string (repeatable)")


def sampling_kwargs(args) -> dict:
    return dict(max_tokens=args.max_tokens, temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
                min_p=args.min_p, repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n,
                frequency_penalty=args.frequency_penalty, presence_penalty=args.presence_penalty, seed=args.seed,
                stop=args.stop)


def load_model(args):
    from fastgguf.model import Model
    path = args.model
    if path is None:
        from fastgguf import hub
        path = hub.default_model_path()
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    return Model(path, n_threads=args.threads)


def make_context(model, args):
    if args.ctx is None:
        return None
    if args.ctx < 1:
        raise ValueError(f"--ctx must be >= 1, got {args.ctx}")
    return model.context(n_ctx=args.ctx)


def speed_line(stream) -> str:
    u, t = stream.usage, stream.timings
    cached = f" ({u.cached_tokens} cached)" if u.cached_tokens else ""
    return (f"prompt: {u.prompt_tokens} tokens{cached}, {t.prompt_tokens_per_second:.1f} tok/s | "
            f"generation: {u.completion_tokens} tokens, {t.generation_tokens_per_second:.1f} tok/s | "
            f"finish: {stream.finish_reason}")


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
    try:
        model = load_model(args)
        from fastgguf.generate import generate
        stream = generate(model, prompt, stream=True, context=make_context(model, args),
                          add_special=not args.no_special, parse_special=args.parse_special, **sampling_kwargs(args))
        out = sys.stdout
        for piece in stream:
            out.write(piece)
            out.flush()
        out.write("\n")
        out.flush()
    except (ValueError, TypeError) as e:
        print(f"fastgguf run: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    if not args.quiet:
        print(speed_line(stream), file=sys.stderr)
    return 0
