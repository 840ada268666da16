"""``verify_cache``: read every shard and check it against the manifest and against itself.

Checks, per shard: the file exists with the recorded size and SHA-256; it
parses as safetensors with the tensors, dtypes and shapes the manifest
implies (:func:`~destila.cache.encodings.shard_schema`); its ``sequence_index``
equals the manifest's; every row decodes (each compact block is a zstd frame
of exactly the bytes its loss mask implies). Per row: ids lie in
``[0, vocab)``, input ids too; each position's ids are distinct (compact:
stored strictly ascending, as the format promises); top-K log-probs are
finite and ≤ 0 (plain: also sorted descending as stored); the tail log-mass
is finite (``-inf`` only when K = V) and ≤ 0; each position's mass
``logsumexp(topk_logprobs, tail_logmass)`` is 0 within what the encoding
allows; sampled counts sum to S; byte spans (a cache built with ``--spans``)
are spans, follow each other within a document and are as wide as their
tokens' bytes (:mod:`~destila.cache.spans`). Across shards: every sequence is stored
exactly once and ``complete`` agrees (:mod:`~destila.cache.checks.manifest`,
whose cheap checks every reader runs too). The
tokenizer files match the digests recorded at build time
(:mod:`~destila.cache.tokenizer_files`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors import safe_open

from destila.cache.checks.derived import IdsFingerprint, cache_tokenizer_faults, layout_fault
from destila.cache.checks.identity import shard_identity_fault
from destila.cache.checks.manifest import manifest_faults, sequence_coverage_faults
from destila.cache.checks.rows import VerifyReport, row_faults
from destila.cache.dataset_rows import RECORD
from destila.cache.encodings.compact_blocks import BlockError
from destila.cache.format import (
    MANIFEST,
    TOKENIZER_DIR,
    ShardFormatError,
    is_shard_file,
    read_manifest,
    shard_file_fault,
)
from destila.cache.read_specs import VerifySpec
from destila.cache.rows import ShardRows
from destila.cache.spans import span_faults, token_width_check
from destila.cache.tokenizer_files import tokenizer_faults
from destila.io import is_temporary


def verify_cache(spec: VerifySpec | str | Path) -> VerifyReport:
    """Check every shard of the cache ``spec`` names (a :class:`VerifySpec` or the folder); never raises for a
    damaged shard, reports it.

    An export (``destila cache export``) is checked by :func:`~destila.cache.checks.export.verify_export`."""
    path = Path(VerifySpec.of(spec).cache).expanduser()
    if (path / RECORD).is_file() and not (path / MANIFEST).is_file():
        from destila.cache.checks.export import verify_export  # pyarrow: only for an export

        return verify_export(path)
    from destila.data.sources import is_saved_dataset  # light: a path test

    if not (path / MANIFEST).is_file() and is_saved_dataset(path):
        raise ValueError(f"{path}: a dataset `save_to_disk` wrote, which records no manifest or checksums to check "
                         "its rows against; `cache verify` takes a cache folder (`destila cache build`) or an export "
                         "(`destila cache export CACHE OUT`): verify the cache it came from, or export that cache")
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
    report.faults.extend(_derived_faults(path, manifest, report))
    report.faults.extend(sequence_coverage_faults(manifest))
    widths = _span_widths(path, manifest, report) if manifest.spans else None
    ids = IdsFingerprint(manifest)
    for shard in manifest.shards:
        faults = _check_shard(path, manifest, shard, report, ids, widths)
        report.faults.extend(f"{shard.name}: {fault}" for fault in faults)
        report.shards_checked += 1
    fault, unchecked = ids.result()
    if fault is not None:
        report.faults.append(f"{MANIFEST}: {fault}")
    elif unchecked is not None and not report.faults:
        report.warnings.append(f"{MANIFEST}: ids_fingerprint not checked: {unchecked}")
    named = {s.name for s in manifest.shards}
    for item in sorted(path.iterdir()):
        if (is_shard_file(item.name) and item.name not in named) or is_temporary(item.name):
            report.warnings.append(f"{item.name}: not named in the manifest (left by an interrupted build; ignored)")
    return report


def _span_widths(path: Path, manifest, report: VerifyReport):
    """The byte-span width check of the cache's tokenizer copy (:func:`~destila.cache.spans.token_width_check`),
    or None with a warning when the copy does not load (its own fault is reported by the tokenizer check)."""
    from transformers import AutoTokenizer  # heavy: only for a cache with byte spans

    try:
        return token_width_check(AutoTokenizer.from_pretrained(path / TOKENIZER_DIR))
    except (OSError, ValueError) as err:
        report.warnings.append(f"{TOKENIZER_DIR}/: not loadable ({str(err).splitlines()[0] if str(err) else err}); "
                               "byte span widths not checked against the tokens")
        return None


def _derived_faults(path: Path, manifest, report: VerifyReport) -> list[str]:
    """The manifest fields the cache's own files determine (:mod:`~destila.cache.checks.derived`)."""
    faults = [] if tokenizer_faults(path, manifest.tokenizer_files) else cache_tokenizer_faults(path, manifest)
    layout = layout_fault(manifest)
    if layout is not None:
        faults.append(layout)
    if manifest.identity is None:
        report.warnings.append(f"{MANIFEST}: records no cache identity (built by an older destila): a shard copied "
                               "in from another cache of the same shape cannot be told apart; rebuild to add it")
    return [f"{MANIFEST}: {fault}" if not fault.startswith(TOKENIZER_DIR) else fault for fault in faults]


def _check_shard(path: Path, manifest, shard, report: VerifyReport, ids: IdsFingerprint, widths=None) -> list[str]:
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
    identity = shard_identity_fault(handle.metadata(), manifest)
    if identity is not None:
        return [identity]
    indices = shard.indices()
    if not np.array_equal(handle.get_tensor("sequence_index").numpy(), indices):
        return ["sequence_index differs from the manifest"]
    for row in range(shard.rows):
        try:
            stored = rows.stored(row)
        except (BlockError, ShardFormatError) as err:
            return [f"row {row} does not decode: {err}"]
        faults = row_faults(stored, manifest, report)
        if manifest.spans and not faults:
            faults = span_faults(stored, widths)
        if faults:
            return [f"row {row}: {fault}" for fault in faults]
        ids.add(int(indices[row]), stored)
    return []
