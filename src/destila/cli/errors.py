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

import errno
import os

from destila.fs_errors import is_plain_strerror, os_error_number

USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError)
EXIT_USER = 2
EXIT_ENVIRONMENT = 1

# errno → (what happened, what to do)
_ADVICE = {
    errno.ENOSPC: ("no space left on device", "free space there and run the same command again"),
    errno.EDQUOT: ("disk quota exceeded", "free space there and run the same command again"),
    errno.EROFS: ("read-only file system", "choose an output folder on a writable file system"),
    errno.EACCES: ("permission denied", "choose a folder you can write to, or fix its permissions"),
    errno.EPERM: ("operation not permitted", "choose a folder you can write to, or fix its permissions"),
    errno.ENOENT: ("no such file or folder", "check the path"),
    errno.ENOTDIR: ("not a folder", "check the path"),
    errno.EISDIR: ("is a folder, expected a file", "check the path"),
    errno.EEXIST: ("already exists", "choose another output path"),
    errno.EIO: ("input/output error", "check the disk"),
    errno.EFBIG: ("file too large for this file system", "choose another file system or a smaller shard size"),
}


def debug_requested(argv: list[str]) -> tuple[bool, list[str]]:
    """``--debug`` anywhere on the command line (removed from it) or ``DESTILA_DEBUG=1``."""
    debug = "--debug" in argv or os.environ.get("DESTILA_DEBUG", "") not in ("", "0")
    return debug, [a for a in argv if a != "--debug"]


def describe_os_error(err: BaseException, path: str | os.PathLike | None = None) -> str:
    """``<what> at <path>; <what to do>`` for an OS-level failure.

    A library ``OSError(errno, message)`` without a file name carries its
    own full sentence (say, which shards are intact): that sentence is kept.
    """
    number = os_error_number(err)
    filename = getattr(err, "filename", None) or path
    what, todo = _ADVICE.get(number, (os.strerror(number) if number else str(err), "check the path"))
    if isinstance(err, OSError) and not err.filename and not is_plain_strerror(err):
        return err.strerror  # already a full message from destila
    where = f" at {os.fsdecode(filename)}" if filename else ""
    return f"{what}{where}; {todo}"
