"""Every check of a cache short of reading all its rows, in one place; ``cache verify`` runs them all and more.

Cheap enough for every reader (``inspect``, ``train``, ``eval`` run them too):

- :func:`manifest_faults` / :func:`check_manifest`: the manifest agrees with
  itself (``tokens`` is ``sequences × seq_len``; ``vocab_size`` holds the
  tokenizer's ids and the target kind's entries); no file is read.
- :func:`sequence_coverage_faults`: the shards account for every sequence
  exactly once and the ``complete`` flag agrees, from the manifest alone (a
  sequence named by no shard, or by two, would only surface mid-training).
- :func:`order_fault`: a shard's ``sequence_index`` tensor (a few bytes) is
  the manifest's list for it, so shards renamed into each other's place, or
  a manifest whose sequence ranges were swapped, are refused before training.
- :func:`open_checked_shard`: one shard opened only after its size, SHA-256
  and schema are the ones the manifest recorded.
- :func:`target_value_fault`: the targets a reader just decoded are finite
  log-probabilities ≤ 0, ids within the vocabulary (what a damaged or edited
  cache breaks first), so neither statistics nor a loss are computed from them.

A failure is a :class:`CorruptShardError` (a ``ValueError``) naming the shard
and what to do. :func:`destila.cache.verify.verify_cache` adds what needs
every row: each row decoded and checked by its kind and encoding
(:func:`row_faults`, which an export's verification shares), into a
:class:`VerifyReport`.

Naive equivalent: run ``destila cache verify`` before every read, which
would hash every shard and check every row each time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from destila.cache.encodings import encoding_of
from destila.cache.format import MANIFEST, ShardFormatError, shard_file_fault
from destila.cache.identity import manifest_identity_fault, shard_identity_fault
from destila.cache.kinds import kind_of
from destila.cache.rows import ShardRows


class CorruptShardError(ValueError):
    """A shard's bytes differ from what the manifest recorded."""


_SLACK = 1e-3  # log-probs are ≤ 0 up to float rounding of "top logit − logsumexp"


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


def order_fault(handle, shard) -> str | None:
    """What is wrong when the shard file's ``sequence_index`` is not the manifest's list for it, else None."""
    stored = handle.get_tensor("sequence_index").numpy()
    if not np.array_equal(stored, shard.indices()):
        return "its sequence_index differs from the manifest's (shards renamed, or the manifest edited)"
    return None


def target_value_fault(item: dict, vocab_size: int) -> str | None:
    """What is wrong with a dense item's targets (``topk_ids``, ``topk_logprobs``, ``tail_logmass``), else None.

    Padding (-inf log-probs of sampled or short rows) is allowed; NaN, +inf,
    log-probs above 0 and ids outside ``[0, vocab_size)`` are not.
    """
    lp, ids, tail = item.get("topk_logprobs"), item.get("topk_ids"), item.get("tail_logmass")
    if lp is not None and lp.numel():
        lp = lp.float()
        if torch.isnan(lp).any() or torch.isposinf(lp).any():
            bad = int((torch.isnan(lp) | torch.isposinf(lp)).sum())
            return f"{bad} top-K log-probs are NaN or +inf"
        if lp.max() > _SLACK:
            return f"top-K log-probs above 0 (max {lp.max().item():.3g}), which no probability has"
    if tail is not None and tail.numel():
        tail = tail.float()
        if torch.isnan(tail).any() or torch.isposinf(tail).any() or tail.max() > _SLACK:
            return "tail log-masses that are NaN, +inf or above 0"
    if ids is not None and ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        return f"top-K ids outside the vocabulary [0, {vocab_size})"
    inputs = item.get("input_ids")
    if inputs is not None and inputs.numel() and (inputs.min() < 0 or inputs.max() >= vocab_size):
        return f"input ids outside the vocabulary [0, {vocab_size})"
    return None


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


def open_checked_shard(folder: Path, manifest, shard, *, checksum: bool = True):
    """The shard's :class:`~destila.cache.rows.ShardRows` after size, SHA-256 (unless not
    ``checksum``) and schema checks.

    Raises :class:`~destila.cache.reader.CorruptShardError` (a ``ValueError``)
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


@dataclass
class VerifyReport:
    """Result of :func:`verify_cache`; ``ok`` when complete and without faults."""

    path: Path
    complete: bool
    sequences: int
    stored_sequences: int
    shards_checked: int = 0
    faults: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    max_mass_error: float = 0.0
    unit: str = "shards"  # what shards_checked counts: shards, or an export's files

    @property
    def ok(self) -> bool:
        return self.complete and not self.faults


def row_faults(stored: dict, manifest, report: VerifyReport, encoding=None) -> list[str]:
    """What is wrong with one stored row (``encoding``: whose order and rounding rules apply; default the manifest's)."""
    vocab, faults = manifest.vocab_size, []
    inputs, hidden = stored["input_ids"], stored.get("hidden")
    if hidden is not None and not torch.isfinite(hidden).all():
        faults.append(f"{int((~torch.isfinite(hidden)).sum())} non-finite stored teacher hidden-state values")
    if inputs.min() < 0 or inputs.max() >= vocab:
        faults.append(f"input_ids outside [0, {vocab})")
    kind = kind_of(manifest.target_kind)
    return faults + kind.check_row(stored, manifest, encoding or encoding_of(manifest.encoding), report)
