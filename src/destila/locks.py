"""One writer per output: an advisory ``flock`` on a lock file, refused at once when another process holds it."""

from __future__ import annotations

import os
from pathlib import Path


def exclusive_lock(path: Path, busy: str, *, remove_on_release: bool = False):
    """Hold ``path`` (created if missing) until the returned handle is closed.

    Raises ``ValueError(busy)`` at once when another process holds it; the
    kernel drops the lock when its holder exits, even on SIGKILL, so a crash
    never leaves a stale lock behind. Without POSIX ``fcntl`` no lock is taken.

    ``remove_on_release``: closing the handle deletes the lock file (while it
    is still held), so an output that is a single file leaves no ``.lock``
    beside it. Safe because a taker checks, once it holds the lock, that the
    file it locked is still the one at ``path``, and starts over if not.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: concurrent writers are the user's problem
        return open(path, "a+")
    while True:
        handle = open(path, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ValueError(busy) from None
        if _same_file(handle, path):
            break
        handle.close()  # its holder deleted it on release: lock the file now at ``path``
    return _RemovingLock(handle, path) if remove_on_release else handle


def output_lock(output: Path, command: str):
    """The lock a writing command holds on its output ``output`` (a file) for its whole run.

    The lock file is ``.NAME.lock`` beside ``output`` and is deleted when the
    command ends; a second writer of the same output fails at once with one
    line naming it.
    """
    output = Path(output)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        return exclusive_lock(
            output.with_name(f".{output.name}.lock"),
            f"output: another `destila {command}` is writing to {output}; wait for it to finish, stop it, "
            "or choose another -o",
            remove_on_release=True,
        )
    except OSError as err:  # name the output the user gave, not the lock file
        raise OSError(err.errno, err.strerror, str(output)) from err


def _same_file(handle, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(handle.fileno())
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


class _RemovingLock:
    """An open, locked lock file whose ``close`` deletes it first."""

    def __init__(self, handle, path: Path):
        self.handle, self.path = handle, Path(path)

    def fileno(self) -> int:
        return self.handle.fileno()

    def close(self) -> None:
        if self.handle.closed:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:  # a read-only folder: the empty lock file stays, harmless
            pass
        self.handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
