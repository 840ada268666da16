"""One line for every failure the user can act on; a traceback only with ``--debug``.

``destila <cmd>: error: <what> at <path>; <what to do>``. Library code raises
``ValueError``/``FileNotFoundError``/``FileExistsError`` with a message that
already says what was expected and found (exit 2: the user's input). An
``OSError`` from the environment (full disk, read-only file system, missing
permission) is named by its errno together with the file it concerns (exit
1: the input was fine, the machine was not). Rust-backed libraries
(tokenizers, safetensors) report OS errors only in their message text
(``… (os error 28)``); those are recognised too. Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import os

from destila.io import describe_os_error, os_error_number  # noqa: F401  (re-exported for the CLI)

USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError)
EXIT_USER = 2
EXIT_ENVIRONMENT = 1


def debug_requested(argv: list[str]) -> tuple[bool, list[str]]:
    """``--debug`` anywhere on the command line (removed from it) or ``DESTILA_DEBUG=1``."""
    debug = "--debug" in argv or os.environ.get("DESTILA_DEBUG", "") not in ("", "0")
    return debug, [a for a in argv if a != "--debug"]
