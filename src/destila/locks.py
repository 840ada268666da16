"""One writer per folder: an advisory ``flock`` on a lock file, refused at once when another process holds it."""

from __future__ import annotations

from pathlib import Path


def exclusive_lock(path: Path, busy: str):
    """Hold ``path`` (created if missing) until the returned handle is closed.

    Raises ``ValueError(busy)`` at once when another process holds it; the
    kernel drops the lock when its holder exits, even on SIGKILL, so a crash
    never leaves a stale lock behind. Without POSIX ``fcntl`` no lock is taken.
    """
    handle = open(path, "a+")
    try:
        import fcntl
    except ImportError:  # not POSIX: concurrent writers are the user's problem
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ValueError(busy) from None
    return handle
