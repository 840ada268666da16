"""`destila` entry point: one sub-command module per verb.

Each module in ``COMMANDS`` exposes ``register(subparsers)``, which adds its
parser and sets ``func`` to a callable taking the parsed namespace. A command
line imports only its own command's module (several import torch to declare
their flags); ``destila --help`` imports none, listing each command by its
line in :data:`SUMMARIES` (a test keeps them equal to the modules' own), and
``destila train``'s help and argument mistakes are answered before transformers is imported
(:mod:`destila.cli.train_light`).
Failures are reported by :mod:`destila.cli.errors`: one line, no traceback
unless ``--debug`` (anywhere on the command line) or ``DESTILA_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from importlib import import_module

from destila import __version__
from destila.cli.errors import EXIT_ENVIRONMENT, EXIT_USER, USER_ERRORS, debug_requested, describe_os_error
from destila.cli.errors import os_error_number
from destila.cli.memory import check_address_space, memory_failure
from destila.cli.parser import Parser
from destila.quiet import quiet_library_noise, request_quiet_bars

COMMANDS = ["cache", "student", "train", "eval", "bench", "demo", "generate", "recipe"]
# Commands whose module parses the rest of the command line itself: ``run(argv)``.
OWN_PARSERS = ("train",)
# Each command's line in `destila --help`, as its module registers it.
SUMMARIES = {
    "cache": "build, inspect, verify or export a teacher's top-K cache",
    "student": "create a student model",
    "train": "train a student from a cache (or online from a teacher)",
    "eval": "compare models on held-out data (perplexity, agreement and KL to the teacher, speed, size, memory) "
            "and on lm-evaluation-harness tasks",
    "bench": "measure memory and speed (the paper's tables)",
    "demo": "distil the embedded SmolLM2-135M on Python's docs, end to end, and write a report",
    "generate": "the teacher answers PROMPTS; writes conversations (JSON lines) for sequence-level distillation",
    "recipe": "progressive, self- or on-policy distillation, as resumable stages",
}


class UserError(Exception):
    """A problem with the user's input: printed as one line, exit code 2."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``destila`` parser with every command; with ``only``, that command's flags alone (the others are listed
    by their summary, their modules not imported; ``only=""``: none)."""
    parser = Parser(
        prog="destila",
        description="Knowledge distillation from a cached top-K teacher pass.",
    )
    parser.add_argument("--version", action="version", version=f"destila {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of a failure (also DESTILA_DEBUG=1); anywhere on the line")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        if only is None or name == only:
            import_module(f"destila.cli.{name}").register(subparsers)
        else:
            subparsers.add_parser(name, help=SUMMARIES[name], add_help=False)
    return parser


def _quiet_optional_engines() -> None:
    """Library noise off (see :mod:`destila.quiet`), and transformers' loading/writing bars off on the command line."""
    quiet_library_noise()
    request_quiet_bars()


def _no_code_from_the_hub() -> None:
    """transformers swaps layers (rotary embeddings, on CUDA) for kernels fetched from the Hub at run time;
    an offline machine then fails mid-training on the publisher check. destila runs what is installed:
    ``USE_HUB_KERNELS=YES`` in the environment turns the swap back on."""
    os.environ.setdefault("USE_HUB_KERNELS", "NO")


def main(argv: list[str] | None = None) -> None:
    _quiet_optional_engines()
    _no_code_from_the_hub()
    debug, argv = debug_requested(sys.argv[1:] if argv is None else list(argv))
    too_small = check_address_space()  # before torch: its libraries' start-up can hang under a tiny ulimit -v
    if too_small is not None:
        print(f"destila {argv[0] if argv else ''}: error: {too_small}".replace("destila : ", "destila: "),
              file=sys.stderr)
        sys.exit(EXIT_ENVIRONMENT)
    if argv and argv[0] in OWN_PARSERS:
        # This command parses its own flags (HfArgumentParser over a dataclass).
        command = argv[0]
        _call(command, lambda: _run_own_parser(command, argv[1:]), debug)
        return
    parser = build_parser(only=argv[0] if argv and argv[0] in COMMANDS else "")
    args = parser.parse_args(argv)
    _call(args.command, lambda: args.func(args), debug)


def _run_own_parser(command: str, argv: list[str]) -> int:
    """``--help`` and the mistakes answered by the light parser first (:mod:`destila.cli.train_light`: no
    transformers, no torch), then the command itself."""
    # light, but only `destila train` answers early: every other command skips loading its parser
    from destila.cli.train_light import answer_early

    answered = answer_early(argv) if command == "train" else None
    if answered is not None:
        return answered
    return import_module(f"destila.cli.{command}").run(argv)


def _call(command: str, run, debug: bool) -> None:
    try:
        code = run()
    except KeyboardInterrupt:
        print(f"destila {command}: interrupted", file=sys.stderr)
        sys.exit(130)
    except (MemoryError, ImportError) as err:
        _memory_line(command, err, debug)
    except (UserError, *USER_ERRORS, OSError) as err:
        if debug:
            raise
        if memory_failure(err) is not None and not isinstance(err, ValueError):
            _memory_line(command, err, debug)
        fail(command, err)
    except Exception as err:  # an OS failure reported as another type (Rust libraries): still the machine's
        if memory_failure(err) is not None:
            _memory_line(command, err, debug)
        if debug or os_error_number(err) is None:
            raise
        fail(command, err)
    sys.exit(code or 0)


def _memory_line(command: str, err: BaseException, debug: bool) -> None:
    """Out of memory (an import or an allocation under ulimit -v): one line, exit 1."""
    line = memory_failure(err)
    if debug or line is None:
        raise err
    _close_progress_bars()
    print(f"destila {command}: error: {line}", file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.flush()
    # At once: the libraries' exit hooks (torch's compile-time report) import modules, which needs memory too and
    # would print a traceback after the line. The command's own clean-up has run while the error rose to here.
    os._exit(EXIT_ENVIRONMENT)


def fail(command: str, err: BaseException) -> None:
    """Print ``destila <command>: error: …`` and exit: 2 for the user's input, 1 for the machine's state."""
    _close_progress_bars()
    number = os_error_number(err)
    if number is None or isinstance(err, (UserError, ValueError)) or (isinstance(err, OSError) and not err.errno):
        message, code = str(err), EXIT_USER  # a library message that already says what and where
    else:
        message = describe_os_error(err)
        # A path that is missing, of the wrong kind or already taken is the user's to change.
        code = EXIT_USER if number in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST) else EXIT_ENVIRONMENT
    print(f"destila {command}: error: {message}", file=sys.stderr)
    sys.exit(code)


def _close_progress_bars() -> None:
    """Close the progress bars an exception left open: tqdm leaves the cursor after a bar, and the error line
    must start a line of its own."""
    std = sys.modules.get("tqdm.std")
    for bar in list(getattr(getattr(std, "tqdm", None), "_instances", ())):
        try:
            bar.close()
        except Exception:  # a bar half torn down by the failure: the error matters more than the bar
            pass
