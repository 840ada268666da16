"""`destila` entry point: one sub-command module per verb.

Each module in ``COMMANDS`` exposes ``register(subparsers)``, which adds its
parser and sets ``func`` to a callable taking the parsed namespace. Modules
import torch and friends inside their ``func`` so that ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

COMMANDS = ["cache", "student", "train", "eval", "bench", "demo", "generate", "recipe"]
# Commands whose module parses the rest of the command line itself: ``run(argv)``.
OWN_PARSERS = ("train",)


class UserError(Exception):
    """A problem with the user's input: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    from destila import __version__

    parser = argparse.ArgumentParser(
        prog="destila",
        description="Knowledge distillation from a cached top-K teacher pass.",
    )
    parser.add_argument("--version", action="version", version=f"destila {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        import_module(f"destila.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in OWN_PARSERS:
        # This command parses its own flags (HfArgumentParser over a dataclass).
        command = argv[0]
        module = import_module(f"destila.cli.{command}")
        _call(command, lambda: module.run(argv[1:]))
        return
    parser = build_parser()
    args = parser.parse_args(argv)
    _call(args.command, lambda: args.func(args))


def _call(command: str, run) -> None:
    try:
        code = run()
    except (UserError, ValueError, FileNotFoundError, FileExistsError) as err:
        # Library code raises ValueError/FileNotFoundError with a message that
        # says what was expected and found; a traceback would only bury it.
        print(f"destila {command}: error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"destila {command}: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code or 0)
