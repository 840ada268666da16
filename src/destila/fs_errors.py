"""Recognising disk failures that libraries report under other types.

torch's checkpoint writer raises ``RuntimeError: [enforce fail at
inline_container.cc] unexpected pos …`` when the disk fills up; tokenizers
and safetensors (Rust) raise a bare ``Exception``/``SafetensorError`` whose
text ends in ``(os error 28)``. Neither names the file. :func:`as_os_error`
turns such an error back into an ``OSError(errno, strerror, path)`` about
the path the caller was writing, so the command line can say "no space left
on device at PATH" instead of a traceback.
"""

from __future__ import annotations

import errno
import os
import re

_OS_ERROR_TEXT = re.compile(r"\(os error (\d+)\)")
_WRITE_FAILURE_MARKS = ("inline_container", "PytorchStreamWriter", "file write failed")


def os_error_number(err: BaseException) -> int | None:
    """The errno of an ``OSError``, or the ``(os error N)`` a Rust library put in its message."""
    if isinstance(err, OSError) and err.errno:
        return err.errno
    match = _OS_ERROR_TEXT.search(str(err))
    return int(match.group(1)) if match else None


def as_os_error(err: BaseException, path: str | os.PathLike) -> OSError | None:
    """``err`` as an ``OSError`` about ``path`` when it is a file-system failure in disguise, else None.

    An ``OSError`` that names its file, or carries destila's own message, is
    returned unchanged; a bare one (a write on a full disk names no file)
    gets ``path``. For torch's writer error the file system of ``path``
    tells what happened (read-only, full, or otherwise ``EIO``).
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
