"""``destila cache inspect OUT`` on an export (``destila cache export``): the summary a cache folder gets.

The counts, the teacher, tokenizer and data come from the export's record
(``destila_cache.json``, the source cache's manifest); sizes are the Parquet
files'; the trained positions, stored entries and the distribution
statistics (:mod:`destila.cache.distribution`) are read from the rows, after
the files are checked against the record (sizes and SHA-256, as training
reads them). The keys are those of :func:`~destila.cache.stats.inspect_cache`
(``shards`` counts Parquet files, ``shard_bytes`` their bytes) plus
``export: True`` and ``files``.

Naive equivalent: ``inspect_cache`` of the cache the export was written from.
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import torch

from destila.cache.dataset import open_cache
from destila.cache.dataset_rows import RECORD, parse_record
from destila.cache.distribution import distribution_stats, trained_targets
from destila.cache.kinds import kind_of
from destila.cache.read_specs import InspectSpec
from destila.cache.summary_fields import manifest_fields
from destila.constants import IGNORE_INDEX

_CHUNK = 64  # sequences per statistics step: bounded memory whatever the export's size


def is_export_folder(path) -> bool:
    """A folder ``destila cache export`` wrote: its record, and no cache manifest beside it."""
    path = Path(path).expanduser()
    return (path / RECORD).is_file() and not (path / "manifest.json").is_file()


def inspect_export(spec: InspectSpec) -> dict:
    """The summary of the export ``spec.cache`` names (module docstring)."""
    path = Path(spec.cache).expanduser()
    reader = open_cache(path)  # checks every listed file's size and SHA-256 first
    m = reader.manifest
    files = [path / entry["name"] for entry in parse_record((path / RECORD).read_text(), str(path / RECORD))["files"]]
    items = (reader[i] for i in range(len(reader)))
    trained, entries = _counts(reader, m)
    stored_tokens = len(reader) * m.seq_len
    file_bytes = sum(file.stat().st_size for file in files)
    summary = {
        "path": str(path), "export": True, "complete": True, "sequences": m.sequences,
        "stored_sequences": len(reader), "tokens": m.tokens, "seq_len": m.seq_len, "top_k": m.top_k,
        "targets": m.targets, "encoding": m.encoding, "vocab_size": m.vocab_size,
        "temperature": m.temperature, "logprob_dtype": m.logprob_dtype,
        "shards": len(files), "files": [file.relative_to(path).as_posix() for file in files],
        "shard_bytes": file_bytes,
        "folder_bytes": sum(p.stat().st_size for p in path.rglob("*") if p.is_file()),
        "bytes_per_token": file_bytes / stored_tokens if stored_tokens else None,
        "stored_entries": entries, "bytes_per_entry": file_bytes / entries if entries else None,
        **manifest_fields(m, path),
        "trained_positions": trained,
        "trained_fraction": trained / stored_tokens if stored_tokens else None,
        "spans": m.spans,
    }
    if m.extras:
        summary["extras"] = m.extras
    limit = len(reader) if spec.max_sequences is None else min(spec.max_sequences, len(reader))
    stats = distribution_stats(_chunks(islice(items, limit)), m, spec.coverage)
    if stats is not None:
        summary["stats"] = stats
    return summary


def _counts(reader, m) -> tuple[int, int]:
    """``(trained positions, stored target entries)`` over every row: trained positions × K for top-K targets,
    the ids actually stored (finite log-probs) for sampled ones."""
    trained = entries = 0
    ranked = kind_of(m.target_kind).ranked
    for i in range(len(reader)):
        item = reader[i]
        mask = item["labels"] != IGNORE_INDEX
        positions = int(mask.sum())
        trained += positions
        entries += positions * m.top_k if ranked else int(torch.isfinite(item["topk_logprobs"][mask]).sum())
    return trained, entries


def _chunks(items):
    """``(sequences, log-probs, tail)`` of the trained positions of ``_CHUNK`` items at a time."""
    while chunk := list(islice(items, _CHUNK)):
        yield (len(chunk), *trained_targets(chunk))
