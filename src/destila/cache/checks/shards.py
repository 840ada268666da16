"""One shard opened for reading, after the checks that cost a header and a checksum; every reader runs them.

- :func:`open_checked_shard`: one shard opened only after its size, SHA-256
  and schema are the ones the manifest recorded, and it carries the
  manifest's identity (:mod:`~destila.cache.checks.identity`).
- :func:`order_fault`: a shard's ``sequence_index`` tensor (a few bytes) is
  the manifest's list for it, so shards renamed into each other's place, or
  a manifest whose sequence ranges were swapped, are refused before training.

A failure is a :class:`CorruptShardError` (a ``ValueError``) naming the shard
and what to do.

Naive equivalent: run ``destila cache verify`` before every read, which
would hash every shard and check every row each time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors import safe_open

from destila.cache.checks.identity import shard_identity_fault
from destila.cache.format import ShardFormatError, shard_file_fault
from destila.cache.rows import ShardRows


class CorruptShardError(ValueError):
    """A shard's bytes differ from what the manifest recorded."""


def order_fault(handle, shard) -> str | None:
    """What is wrong when the shard file's ``sequence_index`` is not the manifest's list for it, else None."""
    stored = handle.get_tensor("sequence_index").numpy()
    if not np.array_equal(stored, shard.indices()):
        return "its sequence_index differs from the manifest's (shards renamed, or the manifest edited)"
    return None


def open_checked_shard(folder: Path, manifest, shard, *, checksum: bool = True):
    """The shard's :class:`~destila.cache.rows.ShardRows` after size, SHA-256 (unless not
    ``checksum``) and schema checks.

    Raises :class:`CorruptShardError` (a ``ValueError``)
    naming the shard and what to do.
    """
    file = Path(folder) / shard.name
    redo = (f"run `destila cache verify {folder}`, delete the damaged shard and run the same "
            "`destila cache build` command to recompute it")
    fault = shard_file_fault(folder, shard, checksum=checksum)
    if fault is not None:
        raise CorruptShardError(f"shard {fault} at {file}; {redo}")
    try:
        handle = safe_open(str(file), framework="pt")
    except Exception as err:  # safetensors' own error type
        raise CorruptShardError(f"not a readable safetensors file at {file} ({err}); {redo}") from err
    identity = shard_identity_fault(handle.metadata(), manifest)
    if identity is not None:
        raise CorruptShardError(f"shard {identity} at {file}; rebuild the cache")
    try:
        return ShardRows(handle, manifest, shard)
    except ShardFormatError as err:
        raise CorruptShardError(
            f"shard does not match the manifest at {file} ({err}); the manifest or the shard was edited: "
            "rebuild the cache"
        ) from err
