"""``fastgguf pull``: download the default model (if needed) and print its path."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("pull", help="download the default model and print its path")
    p.add_argument("--force", action="store_true", help="download again even if it is cached")
    p.set_defaults(func=run)


def run(args) -> int:
    from fastgguf import hub
    print(hub.pull(force=args.force))
    return 0
