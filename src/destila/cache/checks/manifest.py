"""The manifest's checks, from the manifest alone (no shard is read); every reader runs them.

- :func:`manifest_faults` / :func:`check_manifest`: the manifest agrees with
  itself (``tokens`` is ``sequences × seq_len``; ``vocab_size`` holds the
  tokenizer's ids and the target kind's entries; its content fields still
  give the identity it recorded, :mod:`~destila.cache.checks.identity`).
- :func:`sequence_coverage_faults`: the shards account for every sequence
  exactly once and the ``complete`` flag agrees (a sequence named by no
  shard, or by two, would only surface mid-training).

Naive equivalent: run ``destila cache verify`` before every read, which
would hash every shard and check every row each time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from destila.cache.checks.identity import manifest_identity_fault
from destila.cache.format import MANIFEST
from destila.cache.kinds import kind_of


def manifest_faults(manifest) -> list[str]:
    """One line per field of ``manifest`` that contradicts another; an empty list when consistent."""
    m, faults = manifest, []
    if m.tokens != m.sequences * m.seq_len:
        faults.append(f"tokens is {m.tokens}, but {m.sequences} sequences of {m.seq_len} tokens make "
                      f"{m.sequences * m.seq_len}")
    if m.vocab_size < m.tokenizer_size:
        faults.append(f"vocab_size is {m.vocab_size}, smaller than the tokenizer's {m.tokenizer_size} tokens")
    if not 0 <= m.eos_token_id < m.vocab_size:
        faults.append(f"eos_token_id {m.eos_token_id} is outside the vocabulary [0, {m.vocab_size})")
    identity = manifest_identity_fault(m)
    if identity is not None:
        faults.append(identity)
    try:
        targets = m.target_spec
    except (TypeError, ValueError) as err:
        faults.append(f"targets is not a target spec ({err})")
    else:
        fault = kind_of(targets.kind).vocab_fault(targets, m.vocab_size)
        if fault is not None:
            faults.append(fault)
    return faults


def check_manifest(path: Path, manifest) -> None:
    """Raise ``ValueError`` naming the manifest and its first inconsistency, with the way out."""
    faults = manifest_faults(manifest)
    if faults:
        raise ValueError(f"cache: {Path(path) / 'manifest.json'} contradicts itself ({faults[0]}); it was edited or "
                         "damaged: run the same `destila cache build` command into a new folder")


def sequence_coverage_faults(manifest) -> list[str]:
    """One line per way the shards fail to cover ``0 … sequences-1`` exactly once; ``[]`` when they do.

    Naive equivalent::

        counts = collections.Counter(i for s in manifest.shards for i in s.indices())
        missing = [i for i in range(manifest.sequences) if counts[i] == 0]
        repeated = [i for i, n in counts.items() if n > 1]
    """
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
