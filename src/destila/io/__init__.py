"""The file-system promises every writer in destila keeps, in one place (bottom layer: imports nothing of destila).

- :func:`write_atomic`: a reader sees the old file or the new one, never a
  mix; after it returns the new one survives a power cut (tmp file, fsync,
  rename, fsync of the folder). :func:`write_report_file`: the same for a file a
  user reads (a report, results), an OS failure named by that file.
- :func:`publish_folder`: the same for a whole folder written under a
  staging name (a converted model, a token store, a tokenizer copy).
- :func:`exclusive_lock` / :func:`try_lock`: one writer per folder, through
  an advisory ``flock`` the kernel drops when its holder dies (no stale locks);
  :func:`output_lock`: the lock every writing command holds on its output.
- :func:`create_temporary` / :func:`create_staging_dir` / :func:`open_lock_file`
  (:mod:`destila.io.temporaries`): every temporary name is random and created
  exclusively, never through a symbolic link another user planted;
  :func:`remove_staging_leftovers` deletes what killed writers left.
- :func:`~destila.io.json_lines.append_json_line` and the rest of
  :mod:`destila.io.json_lines`, :func:`~destila.io.markdown.markdown_table`,
  :func:`~destila.io.progress.progress_bar`: the JSON-lines files, markdown
  tables and progress bars of every module.
- :func:`outside_link` (:mod:`destila.io.contained`): whether a file a
  shared folder names leads outside it through a symbolic link.
- :func:`names_user_path` (:mod:`destila.io.os_errors`): the one place an OS
  failure (full disk, read-only file system, missing permission), whichever
  library hit it, becomes the one line a user reads, naming the path the
  user gave, never a temporary or lock file.
"""

from __future__ import annotations

import os
from pathlib import Path

from destila.io.os_errors import (  # noqa: F401  (the package's public names)
    advice,
    as_os_error,
    describe_os_error,
    filesystem_state,
    is_plain_strerror,
    names_user_path,
    os_error_number,
    reported_os_error,
)

from destila.io.contained import outside_link  # noqa: F401  (the package's public names)
from destila.io.temporaries import (  # noqa: F401  (the package's public names)
    TMP_MARK,
    create_staging_dir,
    create_temporary,
    open_lock_file,
    remove_staging_leftovers,
    temporary_name,
)

try:
    import fcntl
except ImportError:  # not POSIX: no lock is taken; concurrent writers are the user's problem
    fcntl = None


def is_temporary(name: str) -> bool:
    return TMP_MARK in name


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename inside ``folder`` durable (POSIX: the directory entry lives in the folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, payload: bytes | str) -> None:
    """Write ``payload`` (text is UTF-8 encoded) to ``path`` so that readers see the old file or the new one.

    The bytes go to a temporary file in the same folder (a random name,
    created exclusively: :func:`create_temporary`), are fsync'd, then renamed
    over ``path``. On failure (full disk, permissions) the temporary file is
    removed and the old ``path`` is untouched.

    Naive equivalent: ``Path(path).write_bytes(payload)`` (which a kill can leave half-written).
    """
    path = Path(path)
    if isinstance(payload, str):
        payload = payload.encode()
    descriptor, tmp = create_temporary(path)
    try:
        with open(descriptor, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def write_report_file(path: str | os.PathLike, text: str) -> None:
    """:func:`write_atomic` for a file the user asked for or reads (a report, ``--json`` results): a full disk
    or a read-only folder is one line naming ``path``, never the temporary beside it."""
    with names_user_path(path):
        write_atomic(path, text)


def publish_folder(staging: str | os.PathLike, target: str | os.PathLike) -> None:
    """Rename the finished folder ``staging`` to ``target`` (absent, or an empty folder), durably.

    Every file under ``staging`` is fsync'd first, so the renamed folder
    never holds a file shorter than its writer wrote. The caller decides
    what happens to an existing ``target`` (remove it first, or keep the one
    another process published: ``OSError`` then, ``staging`` untouched).
    """
    staging, target = Path(staging), Path(target)
    for root, _, files in os.walk(staging):
        for name in files:
            with open(Path(root) / name, "rb") as handle:
                os.fsync(handle.fileno())
        fsync_dir(root)
    os.replace(staging, target)
    fsync_dir(target.parent)


def try_lock(handle, *, blocking: bool) -> bool:
    """Take the exclusive ``flock`` of the open file ``handle``: True once held, False when another
    process holds it (``blocking=False``) or the platform has no ``fcntl`` (not POSIX: no lock)."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def exclusive_lock(path: str | os.PathLike, busy: str, *, remove_on_release: bool = False, blocking: bool = False):
    """Hold ``path`` (created if missing, never through a symbolic link) until the returned handle is closed.

    Raises ``ValueError(busy)`` at once when another process holds it (with
    ``blocking``: waits for it instead); the
    kernel drops the lock when its holder exits, even on SIGKILL, so a crash
    never leaves a stale lock behind. Without POSIX ``fcntl`` no lock is taken.

    ``remove_on_release``: closing the handle deletes the lock file (while it
    is still held), so an output that is a single file leaves no ``.lock``
    beside it. Safe because a taker checks, once it holds the lock, that the
    file it locked is still the one at ``path``, and starts over if not.
    """
    if fcntl is None:
        return open_lock_file(path)
    while True:
        handle = open_lock_file(path)
        if not try_lock(handle, blocking=blocking):
            handle.close()
            raise ValueError(busy)
        if _same_file(handle, path):
            break
        handle.close()  # its holder deleted it on release: lock the file now at ``path``
    return _RemovingLock(handle, path) if remove_on_release else handle


def output_lock(output: str | os.PathLike, command: str):
    """The lock a writing command holds on its output ``output`` (a file or folder) for its whole run.

    The lock file is ``.NAME.lock`` beside ``output`` and is deleted when the
    command ends; a second writer of the same output fails at once with one
    line naming it. An OS failure names ``output``, not the lock file.
    """
    with names_user_path(output):  # the output the user gave, not the lock file
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        return exclusive_lock(
            Path(output).with_name(f".{Path(output).name}.lock"),
            f"output: another `destila {command}` is writing to {output}; wait for it to finish, stop it, "
            "or choose another -o",
            remove_on_release=True,
        )


def _same_file(handle, path: str | os.PathLike) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(handle.fileno())
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


class _RemovingLock:
    """An open, locked lock file whose ``close`` deletes it first."""

    def __init__(self, handle, path: str | os.PathLike):
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
