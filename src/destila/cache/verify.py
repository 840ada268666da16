"""``verify_cache``: read every shard and check it against the manifest and against itself.

Checks, per shard: the file exists with the recorded size and SHA-256; it
parses as safetensors with the tensors, dtypes and shapes the manifest
implies (:func:`~destila.cache.format.shard_schema`); its ``sequence_index``
equals the manifest's; every row decodes (each compact block is a zstd frame
of exactly the bytes its loss mask implies). Per row: ids lie in
``[0, vocab)``, input ids too; each position's ids are distinct (compact:
stored strictly ascending, as the format promises); top-K log-probs are
finite and ≤ 0 (plain: also sorted descending as stored); the tail log-mass
is finite (``-inf`` only when K = V) and ≤ 0; each position's mass
``logsumexp(topk_logprobs, tail_logmass)`` is 0 within what the encoding
allows; sampled counts sum to S. Across shards: every sequence is stored
exactly once and ``complete`` agrees (:mod:`~destila.cache.coverage`). The
tokenizer files match the digests recorded at build time
(:mod:`~destila.cache.tokenizer_files`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from destila.cache.format import (
    MANIFEST,
    TOKENIZER_DIR,
    is_shard_file,
    is_temporary,
    read_manifest,
    shard_file_fault,
)
from destila.cache.cheap_checks import manifest_faults
from destila.cache.coverage import coverage_faults
from destila.cache.tokenizer_files import tokenizer_faults

# |log Σp| a position may show from rounding its K log-probs to the storage
# dtype: about entropy × 2^-mantissa_bits (entropy ≤ ~10 nats), with margin.
# Compact top-K and sampled targets are normalised exactly when decoded.
MASS_TOLERANCE = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 1e-1, "exact": 1e-4}
_SLACK = 1e-3  # log-probs are ≤ 0 up to float rounding of "top logit − logsumexp"


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

    @property
    def ok(self) -> bool:
        return self.complete and not self.faults


def verify_cache(path: str | Path) -> VerifyReport:
    """Check every shard of the cache at ``path``; never raises for a damaged shard, reports it."""
    path = Path(path).expanduser()
    manifest = read_manifest(path)
    report = VerifyReport(path, manifest.complete, manifest.sequences, manifest.stored_sequences)
    if not manifest.complete:
        report.faults.append(
            f"{MANIFEST}: incomplete, {manifest.stored_sequences} of {manifest.sequences} sequences stored; "
            "run the same `destila cache build` command again to finish it"
        )
    report.faults.extend(tokenizer_faults(path, manifest.tokenizer_files))
    if not manifest.tokenizer_files:
        report.warnings.append(f"{TOKENIZER_DIR}/: no digests in the manifest (built by an older destila); not checked")
    report.faults.extend(f"{MANIFEST}: {fault}" for fault in manifest_faults(manifest))
    report.faults.extend(coverage_faults(manifest))
    for shard in manifest.shards:
        faults = _check_shard(path, manifest, shard, report)
        report.faults.extend(f"{shard.name}: {fault}" for fault in faults)
        report.shards_checked += 1
    named = {s.name for s in manifest.shards}
    for item in sorted(path.iterdir()):
        if (is_shard_file(item.name) and item.name not in named) or is_temporary(item.name):
            report.warnings.append(f"{item.name}: not named in the manifest (left by an interrupted build; ignored)")
    return report


def mass_tolerance(manifest) -> float:
    plain_topk = manifest.encoding == "plain" and manifest.target_kind == "topk"
    return MASS_TOLERANCE[manifest.logprob_dtype if plain_topk else "exact"]


def _check_shard(path: Path, manifest, shard, report: VerifyReport) -> list[str]:
    import numpy as np
    from safetensors import safe_open

    from destila.cache.codec import BlockError
    from destila.cache.rows import ShardFormatError, ShardRows

    fault = shard_file_fault(path, shard)
    if fault is not None:
        return [fault]
    try:
        handle = safe_open(str(path / shard.name), framework="pt")
        rows = ShardRows(handle, manifest, shard)
    except ShardFormatError as err:
        return [str(err)]
    except Exception as err:  # safetensors' own error type; the checksum matched, so the writer was wrong
        return [f"not a readable safetensors file ({err})"]
    if not np.array_equal(handle.get_tensor("sequence_index").numpy(), shard.indices()):
        return ["sequence_index differs from the manifest"]
    for row in range(shard.rows):
        try:
            stored = rows.stored(row)
        except (BlockError, ShardFormatError) as err:
            return [f"row {row} does not decode: {err}"]
        faults = _check_row(stored, manifest, report)
        if faults:
            return [f"row {row}: {fault}" for fault in faults]
    return []


def _check_row(stored: dict, manifest, report: VerifyReport) -> list[str]:
    import numpy as np
    import torch

    vocab, faults = manifest.vocab_size, []
    ids, inputs = stored["ids"], stored["input_ids"]
    hidden = stored.get("hidden")
    if hidden is not None and not torch.isfinite(hidden).all():
        faults.append(f"{int((~torch.isfinite(hidden)).sum())} non-finite stored teacher hidden-state values")
    if inputs.min() < 0 or inputs.max() >= vocab:
        faults.append(f"input_ids outside [0, {vocab})")
    if "counts" in stored:
        counts = stored["counts"]
        real = counts > 0
        if (ids[real] < 0).any() or (ids[real] >= vocab).any():
            faults.append(f"sample ids outside [0, {vocab})")
        if (counts < 0).any() or (counts.sum(axis=1) != manifest.targets["samples"]).any():
            faults.append(f"sample counts do not sum to S = {manifest.targets['samples']} at every position")
        if _repeats(np.where(real, ids, -1 - np.arange(ids.shape[1])[None, :])):
            faults.append("a position repeats a sampled id")
        return faults
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        faults.append(f"topk_ids outside [0, {vocab})")
    if manifest.encoding == "compact":
        if ids.shape[1] > 1 and (np.diff(ids, axis=1) <= 0).any():
            faults.append("top-K ids not strictly ascending as the compact encoding stores them")
    elif _repeats(ids):
        faults.append("a position repeats a top-K id")
    lp = stored["logprobs"]
    lp = (lp if isinstance(lp, torch.Tensor) else torch.from_numpy(lp)).float()
    tail = torch.from_numpy(np.asarray(stored["tail"]))
    if not torch.isfinite(lp).all():
        faults.append(f"{int((~torch.isfinite(lp)).sum())} non-finite top-K log-probs")
    elif lp.numel() and lp.max() > _SLACK:
        faults.append(f"top-K log-probs above 0 (max {lp.max().item():.3g})")
    elif manifest.encoding == "plain" and (lp[:, 1:] > lp[:, :-1]).any():
        faults.append("top-K log-probs not sorted in descending order")
    bad_tail = ~torch.isfinite(tail)
    if manifest.top_k == vocab:  # nothing is left out: the tail's log-mass is log 0
        bad_tail &= ~torch.isneginf(tail)
    if bad_tail.any():
        faults.append(f"{int(bad_tail.sum())} non-finite tail log-masses")
    elif tail.numel() and tail.max() > _SLACK:
        faults.append(f"tail log-mass above 0 (max {tail.max().item():.3g})")
    if not faults and lp.numel():
        mass = torch.logsumexp(torch.cat([lp, tail[:, None]], dim=-1), dim=-1).abs().max().item()
        report.max_mass_error = max(report.max_mass_error, mass)
        tolerance = mass_tolerance(manifest)
        if mass > tolerance:
            faults.append(f"stored probabilities do not sum to 1: |log Σp| up to {mass:.3g} (> {tolerance})")
    return faults


def _repeats(ids) -> bool:
    import numpy as np

    ordered = np.sort(ids, axis=1)
    return bool((ordered[:, 1:] == ordered[:, :-1]).any())
