"""Open one shard only after checking it is the file the manifest recorded.

``cache inspect`` reads shards to compute statistics; a truncated shard, a
shard whose bytes changed, or a manifest whose ``top_k``/``seq_len`` was
edited must stop it with a message naming the shard, never yield numbers
computed from damaged data (or a safetensors/torch traceback).
"""

from __future__ import annotations

from pathlib import Path

from destila.cache.format import ShardFormatError, shard_file_fault
from destila.cache.identity import shard_identity_fault
from destila.cache.reader import CorruptShardError
from destila.cache.rows import ShardRows


def open_checked_shard(folder: Path, manifest, shard, *, checksum: bool = True):
    """The shard's :class:`~destila.cache.rows.ShardRows` after size, SHA-256 (unless not
    ``checksum``) and schema checks.

    Raises :class:`~destila.cache.reader.CorruptShardError` (a ``ValueError``)
    naming the shard and what to do.
    """
    from safetensors import safe_open

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
