"""Where an OS failure is turned into what the user reads: one place, for every command.

A full disk, a read-only file system or a missing permission reaches destila
in many shapes: a plain ``OSError`` naming a temporary file, a lock or a
staging folder the user never heard of; a write that names no file at all;
a Rust library's ``Exception`` ending in ``(os error 28)``; torch's
``RuntimeError`` from its checkpoint writer. :func:`names_user_path` wraps
the code that writes under a path the user chose (an output, ``DESTILA_HOME``,
``DESTILA_DATA_CACHE``) and re-raises any of them as one ``OSError`` that keeps
the errno and names that path::

    with names_user_path(out):
        write_everything(out)
    # OSError(28, "no space left on device at answers.jsonl; free space there and run the same command again")

Naive equivalent: ``except OSError as e: raise OSError(e.errno, e.strerror, out)``
in every writer, which misses the errors libraries disguise and renames the
user's own input files too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

DEFAULT_MESSAGE = "{reason} at {path}; {todo}"
"""The line a user reads: what happened, where (the path as the user gave it), what to do."""


@contextlib.contextmanager
def names_user_path(path: str | os.PathLike, message: str = DEFAULT_MESSAGE):
    """Run the body; an OS failure of anything destila writes under ``path`` leaves as ``OSError(errno, line)``.

    ``line`` is ``message`` with ``{reason}`` (``no space left on device``),
    ``{path}``, ``{root}`` (``path`` as given) and ``{todo}`` (the usual
    advice for that errno) filled in.
    ``{path}`` is the file the error names when that file is a real one
    inside ``path``, else ``path`` itself: a temporary, a lock or a staging
    folder (any name starting with ``.`` at or below ``path``'s level) is
    never shown. An error about a file outside ``path`` (say, the user's
    input) is re-raised unchanged, and so is one that already carries
    destila's own sentence (an inner ``names_user_path`` wrote it), so
    nested uses keep the innermost, most precise line. Anything that is not
    an OS failure passes through untouched.
    """
    try:
        yield
    except Exception as err:
        reported = reported_os_error(err, path, message)
        if reported is None:
            raise
        raise reported from err


def reported_os_error(err: BaseException, path: str | os.PathLike, message: str = DEFAULT_MESSAGE) -> OSError | None:
    """The ``OSError`` :func:`names_user_path` raises for ``err``; None when ``err`` must propagate as it is."""
    if isinstance(err, OSError) and err.errno and not err.filename and not is_plain_strerror(err):
        return None  # destila's own sentence, already naming its path
    found = as_os_error(err, path)
    if found is None:
        return None
    shown = _shown_path(found.filename, path)
    if shown is None:
        return None  # a file outside ``path``: the caller's error message names it
    reason, todo = advice(found.errno)
    return OSError(found.errno, message.format(reason=reason, path=shown, root=os.fspath(path), todo=todo))


def _shown_path(filename, path) -> str | None:
    """``filename`` when it is a real file inside ``path``; ``path`` for none, a temporary, ``path`` itself or a
    folder above it; None when ``filename`` lies elsewhere."""
    path = os.fspath(path)
    if not filename:
        return path
    filename = os.fsdecode(filename)
    full, root = Path(os.path.abspath(filename)), Path(os.path.abspath(path))
    if full in root.parents:
        return path  # a folder above ``path`` that had to be created
    try:
        below = full.relative_to(root.parent).parts  # from ``path``'s own name down (siblings included)
    except ValueError:
        return None
    if not below or any(part.startswith(".") for part in below):
        return path  # destila's lock, sidecar, temporary or staging folder: hidden names, never the user's
    if below[0] != root.name:
        return None  # a sibling of ``path``: the user's own file, named as it is
    return filename if len(below) > 1 else path


def advice(number: int | None) -> tuple[str, str]:
    """``(what happened, what to do)`` for ``errno`` ``number``."""
    if number in _ADVICE:
        return _ADVICE[number]
    return (os.strerror(number).lower() if number else "input/output error", "check the path")


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
_OS_ERROR_TEXT = re.compile(r"\(os error (\d+)\)")
_WRITE_FAILURE_MARKS = ("inline_container", "PytorchStreamWriter", "file write failed")


def describe_os_error(err: BaseException, path: str | os.PathLike | None = None) -> str:
    """``<what> at <path>; <what to do>`` for an OS-level failure.

    A library ``OSError(errno, message)`` without a file name carries its
    own full sentence (say, which shards are intact): that sentence is kept.
    """
    number = os_error_number(err)
    filename = getattr(err, "filename", None) or path
    what, todo = advice(number) if number else (str(err), "check the path")
    if isinstance(err, OSError) and not err.filename and not is_plain_strerror(err):
        return err.strerror  # already a full message from destila
    where = f" at {os.fsdecode(filename)}" if filename else ""
    return f"{what}{where}; {todo}"


def os_error_number(err: BaseException) -> int | None:
    """The errno of an ``OSError``, or the ``(os error N)`` a Rust library put in its message."""
    if isinstance(err, OSError) and err.errno:
        return err.errno
    match = _OS_ERROR_TEXT.search(str(err))
    return int(match.group(1)) if match else None


def as_os_error(err: BaseException, path: str | os.PathLike) -> OSError | None:
    """``err`` as an ``OSError`` about ``path`` when it is a file-system failure in disguise, else None.

    torch's checkpoint writer raises ``RuntimeError: [enforce fail at
    inline_container.cc] unexpected pos …`` when the disk fills up;
    tokenizers and safetensors (Rust) raise a bare ``Exception`` whose text
    ends in ``(os error 28)``. Neither names the file. An ``OSError`` that
    names its file, or carries destila's own message, is returned unchanged;
    a bare one (a write on a full disk names no file) gets ``path``. For
    torch's writer error the file system of ``path`` tells what happened
    (read-only, full, or otherwise ``EIO``).
    """
    if isinstance(err, OSError) and err.errno:
        if err.filename or not is_plain_strerror(err):
            return err  # names its file, or carries destila's own sentence
        return OSError(err.errno, err.strerror, os.fsdecode(path))
    number = os_error_number(err)
    if number is None and isinstance(err, RuntimeError) and any(m in str(err) for m in _WRITE_FAILURE_MARKS):
        number = filesystem_state(path)
    if number is None:
        return None
    return OSError(number, os.strerror(number), os.fsdecode(path))


def is_plain_strerror(err: OSError) -> bool:
    """True when ``err`` holds the C library's text for its errno, not a sentence written by destila."""
    return not err.strerror or err.strerror == os.strerror(err.errno)


def filesystem_state(path) -> int:
    """``EROFS`` / ``ENOSPC`` when the file system holding ``path`` is read-only / (nearly) full, else ``EIO``."""
    probe = os.fspath(path)
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        stats = os.statvfs(probe or ".")
    except OSError:
        return errno.EIO
    if stats.f_flag & os.ST_RDONLY:
        return errno.EROFS
    if stats.f_bavail * stats.f_frsize < 1 << 20:  # under 1 MiB left: the write that failed did not fit
        return errno.ENOSPC
    return errno.EIO
