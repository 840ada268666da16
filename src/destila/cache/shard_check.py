"""Open one shard only after checking it is the file the manifest recorded.

``cache inspect`` reads shards to compute statistics; a truncated shard, a
shard whose bytes changed, or a manifest whose ``top_k``/``seq_len`` was
edited must stop it with a message naming the shard, never yield numbers
computed from damaged data (or a safetensors/torch traceback).
"""

from __future__ import annotations

from pathlib import Path

from destila.cache.format import sha256_file


def open_checked_shard(folder: Path, manifest, shard):
    """A ``safe_open`` handle on ``folder/shard.name`` after size, SHA-256 and shape checks.

    Raises :class:`~destila.cache.reader.CorruptShardError` (a ``ValueError``)
    naming the shard and what to do.
    """
    from safetensors import safe_open

    from destila.cache.reader import CorruptShardError

    file = Path(folder) / shard.name
    redo = (f"run `destila cache verify {folder}`, delete the damaged shard and run the same "
            "`destila cache build` command to recompute it")
    size = file.stat().st_size if file.is_file() else None
    if size != shard.bytes:
        found = "missing" if size is None else f"{size} bytes, the manifest says {shard.bytes}"
        raise CorruptShardError(f"shard {found} at {file}; {redo}")
    digest = sha256_file(file)
    if digest != shard.sha256:
        raise CorruptShardError(
            f"shard checksum mismatch at {file} (manifest sha256 {shard.sha256[:16]}…, file {digest[:16]}…); {redo}"
        )
    try:
        handle = safe_open(str(file), framework="pt")
    except Exception as err:  # safetensors' own error type
        raise CorruptShardError(f"not a readable safetensors file at {file} ({err}); {redo}") from err
    expected = {
        "topk_ids": [shard.rows, manifest.seq_len, manifest.top_k],
        "topk_logprobs": [shard.rows, manifest.seq_len, manifest.top_k],
        "tail_logmass": [shard.rows, manifest.seq_len],
    }
    for name, shape in expected.items():
        found = handle.get_slice(name).get_shape() if name in handle.keys() else None
        if found != shape:
            raise CorruptShardError(
                f"tensor {name} has shape {found} but the manifest implies {shape} (rows, seq_len, top_k) at "
                f"{file}; the manifest or the shard was edited: rebuild the cache"
            )
    return handle
