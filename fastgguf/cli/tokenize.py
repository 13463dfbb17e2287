"""``fastgguf tokenize [TEXT] [-m FILE] [--ids] [--parse-special] [--no-add-special] [-f FILE]``: token ids of a text.

Like llama.cpp's llama-tokenize: one line per token, ``id -> 'piece'``, or just the id list with --ids.
The text comes from the argument, from -f FILE, or from standard input when neither is given.
"""

from __future__ import annotations

import sys

from fastgguf.cli.common import MODEL_HELP


def register(subparsers) -> None:
    p = subparsers.add_parser("tokenize", help="show the token ids of a text")
    p.add_argument("text", nargs="?", help="text to tokenize (default: -f FILE or standard input)")
    p.add_argument("-m", "--model", help=MODEL_HELP)
    p.add_argument("-f", "--file", help="read the text from this file")
    p.add_argument("--ids", action="store_true", help="print only the list of ids")
    p.add_argument("--parse-special", action="store_true", help="recognise control tokens such as <|im_start|>")
    p.add_argument("--no-add-special", action="store_true", help="do not add BOS/EOS")
    p.set_defaults(func=run)


def run(args) -> int:
    from fastgguf.tokenizer import Tokenizer
    if args.text is not None:
        text = args.text
    elif args.file:
        with open(args.file, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    else:
        text = sys.stdin.read()
    from fastgguf import hub
    path = hub.resolve(args.model)
    tok = Tokenizer(path)
    ids = tok.tokenize(text, add_special=not args.no_add_special, parse_special=args.parse_special)
    if args.ids:
        print(ids)
        return 0
    for i in ids:
        piece = tok.token_to_piece(i, special=True).decode("utf-8", "replace")
        print(f"{i:6d} -> {piece!r}")
    return 0
