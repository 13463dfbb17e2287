"""``fastgguf chat [-m MODEL] [--system TEXT]``: interactive chat with history on stdin/stdout.

One line per user turn; the reply streams back. ``/exit`` (or end of input) quits, ``/reset`` forgets the history.
The model's chat template renders the conversation; the context keeps the conversation's tokens between turns, so
only the new turn is evaluated each time.
"""

from __future__ import annotations

import sys

from fastgguf.cli.common import add_model_args, add_sampling_args, load_model, sampling_params, speed_line


def register(subparsers) -> None:
    p = subparsers.add_parser("chat", help="interactive chat with the model")
    add_model_args(p)
    add_sampling_args(p, max_tokens=512)
    p.add_argument("--system", default=None, help="system message")
    p.add_argument("--verbose", action="store_true", help="print speeds to stderr after each reply")
    p.set_defaults(func=run)


def fit_history(model, system, history, user, budget):
    """Drop the oldest exchanges until the rendered conversation is at most `budget` tokens (room is left for the
    reply). Returns (history, number of messages dropped)."""
    from fastgguf.engine.chat import chat_prompt_ids
    dropped = 0
    while history and len(chat_prompt_ids(model, system + history + [user])) > budget:
        history = history[2:]
        dropped += 2
    return history, dropped


def run(args) -> int:
    from fastgguf.engine.chat import chat
    params = sampling_params(args)
    model = load_model(args)
    n_ctx = args.ctx or min(model.n_ctx_train or 4096, 4096)
    if n_ctx < 1:
        raise ValueError(f"--ctx must be >= 1, got {n_ctx}")
    ctx = model.context(n_ctx=n_ctx)
    system = [{"role": "system", "content": args.system}] if args.system else []
    history = []
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("> ", end="", flush=True)
        try:
            line = sys.stdin.readline()
        except KeyboardInterrupt:
            print("", file=sys.stderr)
            break
        if not line:
            break
        text = line.rstrip("\r\n")
        if text.strip() == "/exit":
            break
        if text.strip() == "/reset":
            history = []
            continue
        if not text.strip():
            continue
        try:
            history, dropped = fit_history(model, system, history, {"role": "user", "content": text},
                                           ctx.n_ctx - min(params.max_tokens or ctx.n_ctx, ctx.n_ctx // 2))
            if dropped:
                print(f"(context full: forgot the {dropped} oldest messages)", file=sys.stderr)
            messages = system + history + [{"role": "user", "content": text}]
            stream = chat(model, messages, params, stream=True, context=ctx)
            for piece in stream:
                sys.stdout.write(piece)
                sys.stdout.flush()
        except KeyboardInterrupt:
            print("", file=sys.stderr)
            continue
        except (ValueError, TypeError) as e:
            print(f"\nfastgguf chat: error: {e}", file=sys.stderr)
            continue
        sys.stdout.write("\n")
        sys.stdout.flush()
        history += [{"role": "user", "content": text}, {"role": "assistant", "content": stream.text}]
        if args.verbose:
            print(speed_line(stream), file=sys.stderr)
    return 0
