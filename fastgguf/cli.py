"""fastgguf command line: ``fastgguf <command> ...``.

Each command lives in its own module exposing ``register(subparsers)``, which adds a subparser and sets
``func=<callable(args) -> int | None>`` as its default. To add a command, append its module to
COMMAND_MODULES.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = [
    "fastgguf.cmd_info",
    "fastgguf.cmd_pull",
    "fastgguf.cmd_run",
    "fastgguf.cmd_chat",
    "fastgguf.cmd_tokenize",
    "fastgguf.cmd_quantize",
]


def build_parser() -> argparse.ArgumentParser:
    from fastgguf import __version__
    parser = argparse.ArgumentParser(prog="fastgguf", description="A fast CPU inference engine for GGUF models.")
    parser.add_argument("--version", action="version", version=f"fastgguf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    from fastgguf.gguf import GGUFError
    from fastgguf.hub import HubError
    try:
        rc = args.func(args)
    except (GGUFError, HubError, FileNotFoundError, IsADirectoryError, PermissionError) as e:
        print(f"fastgguf {args.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    return 0 if rc is None else int(rc)


if __name__ == "__main__":
    sys.exit(main())
