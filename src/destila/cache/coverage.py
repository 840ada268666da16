"""Does the manifest account for every sequence exactly once, and does its ``complete`` flag agree?

Training reads sequence ``i`` from the one shard whose ranges name it; a
sequence named by no shard, or by two, or a ``complete: true`` on a partial
cache would only surface mid-training (or never). ``coverage_faults`` finds
each of them from the manifest alone, without reading a shard.

Naive equivalent::

    counts = collections.Counter(i for s in manifest.shards for i in s.indices())
    missing = [i for i in range(manifest.sequences) if counts[i] == 0]
    repeated = [i for i, n in counts.items() if n > 1]
    outside = [i for i in counts if not 0 <= i < manifest.sequences]
"""

from __future__ import annotations

from destila.cache.format import MANIFEST


def coverage_faults(manifest) -> list[str]:
    """One line per way the shards fail to cover ``0 … sequences-1`` exactly once; ``[]`` when they do."""
    import numpy as np

    total = manifest.sequences
    counts = np.zeros(total, dtype=np.int64)
    faults = []
    for shard in manifest.shards:
        indices = shard.indices()
        if len(indices) != shard.rows:
            faults.append(f"{MANIFEST}: shard {shard.name} lists {len(indices)} sequences but has {shard.rows} rows")
        outside = indices[(indices < 0) | (indices >= total)]
        if len(outside):
            faults.append(f"{MANIFEST}: shard {shard.name} names sequences outside 0…{total - 1} (first: {outside[0]})")
        np.add.at(counts, indices[(indices >= 0) & (indices < total)], 1)
    repeated = np.flatnonzero(counts > 1)
    if len(repeated):
        faults.append(f"{MANIFEST}: {len(repeated)} sequences stored more than once (first: {repeated[0]})")
    missing = np.flatnonzero(counts == 0)
    if manifest.complete and len(missing):
        faults.append(
            f"{MANIFEST}: marked complete but {len(missing)} of {total} sequences are in no shard "
            f"(first: {missing[0]}); run the same `destila cache build` command again to recompute them"
        )
    elif not manifest.complete and not len(missing) and not faults:
        faults.append(
            f"{MANIFEST}: every sequence is stored but the cache is not marked complete; "
            "run the same `destila cache build` command again to finish it"
        )
    return faults
