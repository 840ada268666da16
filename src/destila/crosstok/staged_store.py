"""The files of a derived store (aligned items, a vocabulary map): an index of their sizes and SHA-256, a staged
write under a lock, a check when opened, and a folder of their own.

A store named ``NAME`` in ``folder``::

    folder/NAME.json                 the index: the store's ``key`` (its identity: a hash of everything its
                                     content depends on) and ``shards``, each file's name, bytes and SHA-256
    folder/NAME-….safetensors        the files it lists, each carrying the key in its metadata

:func:`write_staged` writes a store: under the lock ``.NAME.lock`` it removes
what a killed writer left (``.NAME.tmp-*``), has the files and the index
written into a fresh staging folder, then moves the files, then the index,
into ``folder``; a reader never finds an index whose files are not there, and
a killed write leaves only a staging folder the next write removes.
:func:`check_file` is what a reader runs on each listed file when it opens
the store (a value changed in place after the write changes its SHA-256).
:func:`check_folder` refuses a folder that belongs to something else (a
cache, an export, a model: :mod:`~destila.crosstok.alignment_dir`), where
the store's files and its cleanup have no place.

Naive equivalent: ``write(folder)``, then trusting whatever is found there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from destila.crosstok.alignment_dir import alignment_dir_fault
from destila.io import exclusive_lock, fsync_dir, outside_link
from destila.io.temporaries import create_staging_dir, remove_staging_leftovers


def file_entry(name: str, payload: bytes) -> dict:
    """The index entry of a file written as ``payload``: its name, size and SHA-256."""
    return {"name": name, "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}


def check_file(file: Path, entry: dict) -> None:
    """Raise ``ValueError`` when ``file`` is not the size and SHA-256 its index ``entry`` records, or its name is
    not a plain file name of the store's folder (nothing elsewhere is hashed or read)."""
    # destila.cache's package imports torch and pyarrow: only when a stored file is checked
    from destila.cache.format import sha256_file

    name = entry["name"]
    if not isinstance(name, str) or Path(name).name != name or name.startswith(".") \
            or outside_link(file.parent, file) is not None:
        raise ValueError(f"shard {name!r:.80} is not a plain file of the store's folder (an edited index)")
    if not file.is_file():
        raise ValueError(f"shard {entry['name']} is missing")
    size = file.stat().st_size
    if size != entry["bytes"]:
        raise ValueError(f"shard {entry['name']} has {size} bytes, the index says {entry['bytes']}")
    if sha256_file(file) != entry["sha256"]:
        raise ValueError(f"shard {entry['name']} does not match its SHA-256 in the index: changed after it was "
                         "written")


def check_folder(folder: Path, what: str) -> None:
    """Refuse ``folder`` for the store ``what`` when it belongs to a cache, an export or a model."""
    fault = alignment_dir_fault(folder)
    if fault is not None:
        raise ValueError(f"{what}: {fault}; a derived store goes to a folder of its own (a run's alignment/ folder)")


def write_staged(folder: Path, name: str, write, *, busy: str) -> Path:
    """The store ``name`` written by ``write(staging)`` (its files and ``staging/NAME.json``) and moved into
    ``folder`` (see the module docstring); returns its index. ``busy``: the message when another process writes
    it (this one waits for it)."""
    folder = Path(folder)
    check_folder(folder, name)
    folder.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(folder / f".{name}.lock", busy, remove_on_release=True, blocking=True):
        remove_staging_leftovers(folder / name)  # a killed writer's; we hold the lock, so no live one's
        staging = create_staging_dir(folder / name)
        try:
            write(staging)
            return _publish(staging, folder, f"{name}.json")
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)


def _publish(staging: Path, folder: Path, index_name: str) -> Path:
    """Move the files the index lists, then the index, from ``staging`` into ``folder``."""
    for entry in json.loads((staging / index_name).read_text())["shards"]:
        os.replace(staging / entry["name"], folder / entry["name"])
    fsync_dir(folder)
    os.replace(staging / index_name, folder / index_name)
    fsync_dir(folder)
    staging.rmdir()
    return folder / index_name
