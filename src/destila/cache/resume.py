"""Making a cache folder ready to write into: lock, refuse a different build, recover after a crash.

A build may have been killed at any instant. What it leaves behind, and
what the next build does with it:

- a temporary file (``.shard-….tmp-RANDOM``, ``.manifest.json.tmp-RANDOM``):
  deleted;
- a shard renamed into place but not yet named in the manifest (killed
  between the rename and the manifest update): deleted, its sequences are
  computed again;
- progress files of a multi-process build (``progress-rankR.json``): their
  shards are merged into the manifest, then the files are deleted;
- a shard named in the manifest whose file is missing or has the wrong size
  (deleted by hand, say, after ``verify`` found it damaged): dropped from
  the manifest, its sequences are computed again.

Only rank 0 calls these functions, while it holds the folder's lock.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path

from destila.cache.format import (
    CONTENT_FIELDS,
    LOCK,
    MANIFEST,
    PROGRESS_PREFIX,
    TOKENIZER_DIR,
    Manifest,
    ShardInfo,
    is_shard_file,
    progress_name,
    read_manifest,
    shard_file_fault,
    shard_info,
    write_manifest,
)
from destila.cache.checks.identity import shard_file_identity_fault
from destila.io import exclusive_lock, is_temporary, names_user_path, open_lock_file, write_atomic

log = logging.getLogger("destila.cache")


def lock_folder(folder: Path):
    """Create ``folder`` if needed and take its exclusive lock; returns the open lock file.

    The lock is an advisory ``flock``: the kernel drops it when the process
    dies, even by SIGKILL, so a crashed build never leaves a stale lock. A
    folder that is not a cache is refused before anything is created in it.
    """
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"output: {folder} is a file; choose a new or empty folder for the cache")
    if folder.is_dir():
        existing_manifest(folder)  # raises for a foreign non-empty folder
    with names_user_path(folder, "cannot create or write the cache folder {root}: {reason}; choose a folder you can "
                         "write to"):
        folder.mkdir(parents=True, exist_ok=True)
        open_lock_file(folder / LOCK).close()
    return exclusive_lock(
        folder / LOCK,
        f"another `destila cache build` is writing to {folder} (its lock {folder / LOCK} is held); "
        "wait for it to finish or stop it first",
    )


def release_folder(folder: Path, lock) -> None:
    """Close the lock of :func:`lock_folder`; a folder a refused build left holding only the lock loses it too.

    The lock file is deleted while still held, so no other build can be
    holding it (:func:`destila.io.exclusive_lock` rechecks the file it locked).
    """
    try:
        if [p.name for p in folder.iterdir()] == [LOCK]:
            (folder / LOCK).unlink()
    except OSError:  # a read-only folder keeps its empty lock file: harmless, never stale
        pass
    lock.close()


def undo_empty_build(folder: Path, created: bool) -> None:
    """After a build of a new cache failed before any shard: remove what it made, so nothing blocks a rerun.

    A manifest without a shard, recording the arguments of a build that was
    refused (a teacher whose logits overflow, say), would make the next
    build with other arguments fail with "already holds a cache built with
    different arguments". Called by rank 0 holding the lock; does nothing
    once a shard, a shard file or a progress file exists. ``created``: the
    build created ``folder`` (then it goes too, once empty but for its lock).
    """
    try:
        manifest = read_manifest(folder)
    except (OSError, ValueError):
        return
    if manifest.shards or any(is_shard_file(p.name) or p.name.startswith(PROGRESS_PREFIX) for p in folder.iterdir()):
        return
    for path in folder.iterdir():
        if path.name == MANIFEST or path.name == TOKENIZER_DIR or is_temporary(path.name):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    if created and [p.name for p in folder.iterdir()] == [LOCK]:
        (folder / LOCK).unlink()  # held by us: no other build can hold it (exclusive_lock rechecks the file)
        folder.rmdir()


def existing_manifest(folder: Path) -> Manifest | None:
    """The manifest already in ``folder``, or None for an empty or new folder.

    A non-empty folder without a manifest is refused: it is not a cache, and
    the build would delete files it does not own when cleaning strays.
    """
    if (folder / MANIFEST).is_file():
        return read_manifest(folder)
    foreign = sorted(p.name for p in folder.iterdir() if p.name != LOCK and not is_temporary(p.name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (" …" if len(foreign) > 5 else "")
        raise FileExistsError(
            f"output: {folder} is not empty ({shown}) and holds no {MANIFEST}, so it is not a destila cache; "
            "choose a new or empty folder"
        )
    return None


def content_differences(old: dict, new: dict) -> list[str]:
    """``field: cache has A, this build has B`` for every content field (:meth:`Manifest.content`) that differs."""
    return [
        f"{name.removeprefix('targets.')}: cache has {old.get(name)!r}, this build has {new[name]!r}"
        for name in sorted(set(old) | set(new), key=_field_order)
        if name in new and old.get(name) != new[name]
    ]


def _field_order(name: str) -> tuple:
    base = "targets" if name.startswith("targets.") else name
    return (CONTENT_FIELDS.index(base) if base in CONTENT_FIELDS else len(CONTENT_FIELDS), name)


def refuse_different(old: Manifest, new: dict, folder: Path, context: dict[str, str]) -> None:
    """Raise ``ValueError`` naming each differing field when ``new`` would change the cache's content.

    ``context`` adds where the old and new inputs came from (teacher path,
    data source) so that a differing fingerprint can be traced to its cause.
    """
    diffs = content_differences(old.content(), new)
    if not diffs:
        return
    for key, value in context.items():
        if getattr(old, key, value) != value:
            diffs.append(f"({key}: cache was built from {getattr(old, key)!r}, this build uses {value!r})")
    raise ValueError(
        f"output: {folder} already holds a cache built with different arguments; "
        + "; ".join(diffs)
        + ". Rerun with the cache's arguments to resume it, or choose another output folder"
    )


def recover(folder: Path, manifest: Manifest) -> Manifest:
    """Fold what a killed build left behind into ``manifest``, delete the rest, write it; returns it."""
    shards = {s.name: s for s in manifest.shards}
    for progress in sorted(folder.glob(f"{PROGRESS_PREFIX}*.json")):
        try:
            if progress.is_symlink():  # never written by a build: it would read a file elsewhere
                raise ValueError("a symbolic link")
            entries = json.loads(progress.read_text())["shards"]
            if not isinstance(entries, list):
                raise ValueError("no list of shards")
        except (OSError, ValueError, KeyError, TypeError):
            # Progress files are replaced atomically, so a damaged one was
            # damaged after the fact; its shards become strays and are redone.
            log.warning("ignoring unreadable progress file %s", progress.name)
            continue
        for entry in entries:
            try:  # a name outside the folder, a missing field: never adopted
                info = shard_info(entry, progress.name)
            except ValueError as err:
                log.warning("ignoring an entry of %s: %s", progress.name, err)
                continue
            shards.setdefault(info.name, info)
    kept, seen = [], set()
    for name, info in sorted(shards.items()):
        # With its checksum: a shard whose bytes changed is recomputed, never reported "already complete".
        fault = shard_file_fault(folder, info, checksum=True) or shard_file_identity_fault(folder / name, manifest)
        if fault is not None:
            log.warning("shard %s: %s: its %d sequences will be computed again", name, fault, info.rows)
            continue
        indices = set(int(i) for i in info.indices())
        if indices & seen:  # cannot happen with this writer; never let a sequence be stored twice
            log.warning("shard %s repeats sequences stored elsewhere: dropped", name)
            continue
        seen |= indices
        kept.append(info)
    manifest.shards = kept
    manifest.complete = covers_all(manifest)
    write_manifest(folder, manifest)
    named = {s.name for s in kept}
    for path in folder.iterdir():
        if is_temporary(path.name) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif (is_shard_file(path.name) and path.name not in named) or is_temporary(path.name):
            path.unlink()  # a link: the link only, never what it points to
    for progress in folder.glob(f"{PROGRESS_PREFIX}*.json"):
        progress.unlink()
    return manifest


def covers_all(manifest: Manifest) -> bool:
    """True when the shards hold every sequence ``0 … sequences-1`` exactly once."""
    # heavy: numpy, only to count the stored sequences
    import numpy as np

    if manifest.stored_sequences != manifest.sequences:
        return False
    if not manifest.shards:
        return manifest.sequences == 0
    seen = np.concatenate([s.indices() for s in manifest.shards])
    return bool(np.array_equal(np.sort(seen), np.arange(manifest.sequences)))


def done_indices(manifest: Manifest) -> set[int]:
    done: set[int] = set()
    for shard in manifest.shards:
        done.update(int(i) for i in shard.indices())
    return done


def write_progress(folder: Path, rank: int, shards: list[ShardInfo]) -> None:
    payload = {"rank": rank, "pid": os.getpid(), "shards": [dataclasses.asdict(s) for s in shards]}
    write_atomic(folder / progress_name(rank), json.dumps(payload, indent=1).encode())
