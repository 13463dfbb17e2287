"""fastgguf command line: ``fastgguf <command> ...``.

Each command lives in its own module of this package exposing ``register(subparsers)``, which adds a subparser and
sets ``func=<callable(args) -> int | None>`` as its default. To add a command, append its module to
COMMAND_MODULES.
Commands raise; ``main`` turns exceptions into a message and an exit code through one table, EXIT_CODES (shown by
``fastgguf --help``). ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from fastgguf.errors import FastGGUFError

COMMAND_MODULES = [f"fastgguf.cli.{name}" for name in ("info", "pull", "run", "chat", "tokenize", "quantize", "convert",
                                                         "serve")]

# (exception class, exit code, meaning): the first matching row wins.
EXIT_CODES = (
    (KeyboardInterrupt, 130, "interrupted"),
    (FastGGUFError, 1, "the model file, its vocabulary or template, a download, a quantization, a conversion "
                       "or a saved state failed"),
    (OSError, 1, "a file could not be read or written"),
    (FloatingPointError, 1, "the model computed NaN (a broken model file)"),
    (ValueError, 2, "bad arguments"),
    (TypeError, 2, "bad arguments"),
)


def exit_code(exc: BaseException):
    """The exit code of an exception (None: not one the CLI reports; let it propagate)."""
    for cls, code, _ in EXIT_CODES:
        if isinstance(exc, cls):
            return code
    return None


def _epilog() -> str:
    rows = [("0", "success"), ("2", "usage error (bad command line)")]
    rows += [(str(code), f"{meaning} ({cls.__name__})") for cls, code, meaning in EXIT_CODES]
    return "exit codes:\n" + "\n".join(f"  {c:>3}  {m}" for c, m in rows)


def build_parser() -> argparse.ArgumentParser:
    from fastgguf import __version__
    parser = argparse.ArgumentParser(prog="fastgguf", description="A fast CPU inference engine for GGUF models.",
                                     epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fastgguf {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
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
    try:
        rc = args.func(args)
    except BrokenPipeError:
        return 0
    except BaseException as e:  # noqa: B902 - mapped through EXIT_CODES, re-raised when not ours
        code = exit_code(e)
        if code is None or args.debug:
            raise
        print(f"fastgguf {args.command}: error: {'interrupted' if code == 130 else e}", file=sys.stderr)
        return code
    return 0 if rc is None else int(rc)


if __name__ == "__main__":
    sys.exit(main())
