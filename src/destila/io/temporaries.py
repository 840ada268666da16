"""Temporary files, staging folders and lock files that another user of the folder cannot hijack.

A predictable temporary name (``.shard-0.safetensors.tmp-PID``) in a folder
others can write (a shared cache folder, ``/tmp``) lets one of them plant a
symbolic link under that name, and the writer then writes through it: a file
anywhere the writer may write is overwritten. So every temporary and staging
name destila creates carries 16 random hex digits, and is created with
``O_CREAT | O_EXCL | O_NOFOLLOW`` (a folder: ``mkdir``, which never follows a
link): if anything already has that name, the call fails instead of
following it. Lock files are opened with ``O_NOFOLLOW`` too.

Naive equivalent: ``tempfile.mkstemp(dir=folder)``, which also creates with
``O_EXCL`` but gives the file mode 0600 (the published file would then be
unreadable by the user's other accounts); here the mode is the one any file
the user creates gets (``0666 & ~umask``).
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from pathlib import Path

TMP_MARK = ".tmp-"  # in the name of every file or folder still being written; never a finished one
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # not on Windows, where links need privileges to create
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_ATTEMPTS = 100


def temporary_name(name: str) -> str:
    """``.NAME.tmp-<16 random hex digits>``: hidden, recognised as a temporary, never guessed."""
    return f".{name}{TMP_MARK}{secrets.token_hex(8)}"


def create_temporary(path: str | os.PathLike) -> tuple[int, Path]:
    """Create a new, empty temporary file beside ``path`` for writing; returns ``(descriptor, its path)``.

    The caller writes through the descriptor, then renames the file over
    ``path`` (or deletes it). Raises ``OSError`` as ``open`` would (a full
    disk, a read-only folder).
    """
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | getattr(os, "O_BINARY", 0)
    for _ in range(_ATTEMPTS):
        candidate = path.with_name(temporary_name(path.name))
        try:
            return os.open(candidate, flags, 0o666), candidate
        except FileExistsError:  # 64 random bits taken: someone planted it; draw again
            continue
    raise FileExistsError(f"could not create a temporary file beside {path}: every name tried exists")


def create_staging_dir(path: str | os.PathLike) -> Path:
    """Create a new, empty staging folder beside ``path`` (``.NAME.tmp-<random>``, mode ``0777 & ~umask``)."""
    path = Path(path)
    for _ in range(_ATTEMPTS):
        candidate = path.with_name(temporary_name(path.name))
        try:
            os.mkdir(candidate, 0o777)
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a staging folder beside {path}: every name tried exists")


def remove_staging_leftovers(path: str | os.PathLike) -> None:
    """Delete what killed writers of ``path`` left beside it: every ``.NAME.tmp-*`` folder, file or link.

    Call it only while holding the lock on ``path``'s writers (no live
    writer's staging folder is then among them). A symbolic link planted
    under a staging name is removed as a link: the folder it points to is
    never entered.

    Naive equivalent: ``for p in path.parent.glob(f".{path.name}.tmp-*"): shutil.rmtree(p)``.
    """
    path = Path(path)
    for leftover in path.parent.glob(f".{path.name}{TMP_MARK}*"):
        if leftover.is_symlink() or not leftover.is_dir():
            leftover.unlink()
        else:
            shutil.rmtree(leftover, ignore_errors=True)


def open_lock_file(path: str | os.PathLike):
    """Open (creating it if missing) the lock file ``path`` for ``flock``, never through a symbolic link.

    A link planted under the lock's name is refused (``FileExistsError``, a
    sentence naming the link and where it points) instead of creating or
    opening the file it points to; the kernel's own ``ELOOP`` would read as
    an unwritable folder.
    """
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | _NOFOLLOW | _CLOEXEC, 0o666)
    except OSError as err:
        if not os.path.islink(path):
            raise
        raise FileExistsError(errno.EEXIST, f"the lock file {path} is a symbolic link (to {os.readlink(path)}); "
                              "a lock is never taken through a link: remove the link and run again") from err
    return os.fdopen(descriptor, "a+")
