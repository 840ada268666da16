"""``inspect_cache``: what a cache holds and what the teacher's distributions look like
(:mod:`destila.cache.distribution`); an export is inspected by :mod:`destila.cache.export_stats`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from destila.cache.checks.manifest import check_manifest
from destila.cache.checks.rows import target_value_fault
from destila.cache.checks.shards import CorruptShardError, open_checked_shard, order_fault
from destila.cache.encodings import encoding_of
from destila.cache.export_stats import inspect_export, is_export_folder
from destila.cache.summary_fields import manifest_fields
from destila.cache.format import read_manifest
from destila.cache.distribution import distribution_stats, trained_targets
from destila.cache.k_prime import format_table
from destila.cache.read_specs import InspectSpec
from destila.cache.kinds import kind_of
from destila.cache.rows import ShardRows, dense_item
from destila.cache.tokenizer_files import check_tokenizer_files
from destila.constants import IGNORE_INDEX


def inspect_cache(spec: InspectSpec | str | Path, max_sequences: int | None = None,
                  coverage: float | None = None) -> dict:
    """A JSON-ready summary of the cache ``spec`` names (works on an incomplete cache too), or of an export
    (:mod:`destila.cache.export_stats`).

    ``inspect_cache(InspectSpec(path, max_sequences=…, coverage=…))``, or the
    path and the same keywords. ``bytes_per_token`` is shard bytes over stored
    tokens; ``bytes_per_entry`` is shard bytes over stored target entries
    (trained positions × K for top-K, or the distinct ids actually stored for
    sampled targets), counted over every shard. Every shard read for the
    statistics is first checked against the manifest (size, SHA-256, tensor
    shapes): a damaged one raises ``ValueError`` naming it. Top-K caches also
    get ``stats.k_coverage`` (per K′ ≤ K, see :mod:`destila.cache.k_prime`)
    and ``stats.k_suggestion``, the smallest K′ whose mean covered mass
    reaches ``coverage``.
    """
    spec = InspectSpec.of(spec, max_sequences=max_sequences, coverage=coverage)
    path = Path(spec.cache).expanduser()
    if is_export_folder(path):  # `destila cache export`'s folder: the same summary, read from its rows
        return inspect_export(spec)
    m = read_manifest(path)
    check_manifest(path, m)
    check_tokenizer_files(path, m.tokenizer_files)
    summary = _contents(path, m)
    stats = distribution_stats(_shard_targets(path, m, spec), m, spec.coverage)
    if stats is not None:
        summary["stats"] = stats
    return summary


def _contents(path: Path, m) -> dict:
    """What the cache holds: counts, sizes, the teacher, tokenizer and data it was built from."""
    shard_bytes = sum(s.bytes for s in m.shards)
    stored_tokens = m.stored_sequences * m.seq_len
    entries = _stored_entries(path, m)
    trained_count = _trained_positions(path, m)
    summary = {
        "path": str(path),
        "complete": m.complete,
        "sequences": m.sequences,
        "stored_sequences": m.stored_sequences,
        "tokens": m.tokens,
        "seq_len": m.seq_len,
        "top_k": m.top_k,
        "targets": m.targets,
        "encoding": m.encoding,
        "vocab_size": m.vocab_size,
        "temperature": m.temperature,
        "logprob_dtype": m.logprob_dtype,
        "shards": len(m.shards),
        "shard_bytes": shard_bytes,
        "folder_bytes": sum(p.stat().st_size for p in path.rglob("*") if p.is_file()),
        "bytes_per_token": shard_bytes / stored_tokens if stored_tokens else None,
        "stored_entries": entries,
        "bytes_per_entry": shard_bytes / entries if entries else None,
        **manifest_fields(m, path),
        "trained_positions": trained_count,
        "trained_fraction": trained_count / stored_tokens if stored_tokens else None,
        "spans": m.spans,
    }
    hidden = (m.extras or {}).get("hidden")
    if m.extras:
        summary["extras"] = m.extras
    if hidden and stored_tokens:  # teacher_hidden is float16 [P, n, D], P = the trained positions
        summary["hidden_bytes_per_token"] = trained_count * len(hidden["layers"]) * hidden["dim"] * 2 / stored_tokens
    return summary


def _shard_targets(path: Path, m, spec: InspectSpec):
    """``(sequences, log-probs, tail)`` of the trained positions of each shard, up to ``spec.max_sequences``
    sequences (all when None)."""
    taken = 0
    for shard in m.shards:
        if spec.max_sequences is not None and taken >= spec.max_sequences:
            return
        rows = shard.rows if spec.max_sequences is None else min(shard.rows, spec.max_sequences - taken)
        yield (rows, *_trained_targets(path, m, shard, rows))
        taken += rows


def _trained_targets(path: Path, m, shard, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log-probs [P, K], tail log-mass [P])`` of the trained positions of ``shard``'s first ``rows`` rows,
    read from a shard checked first (no statistics from damaged data); padding of sampled targets is ``-inf``."""
    reader = open_checked_shard(path, m, shard)
    stored = [dense_item(reader.stored(r), m) for r in range(rows)]
    fault = order_fault(reader.handle, shard) or next(
        (f"row {r} holds {f}" for r, f in enumerate(target_value_fault(i, m.vocab_size) for i in stored) if f), None)
    if fault is not None:
        raise CorruptShardError(f"{path / shard.name}: {fault}; no statistics from damaged data: run "
                                f"`destila cache verify {path}` and rebuild the cache")
    return trained_targets(stored)


def _trained_positions(path: Path, m) -> int:
    """Positions with a target (the loss mask's count) over all stored shards."""
    total, encoding = 0, encoding_of(m.encoding)
    for shard in m.shards:
        with safe_open(str(path / shard.name), framework="pt") as handle:
            counted = encoding.trained_positions(handle)
            if counted is not None:
                total += counted
                continue
            reader = ShardRows(handle, m, shard)
            total += sum(int((reader.item(r)["labels"] != IGNORE_INDEX).sum()) for r in range(shard.rows))
    return total


def _stored_entries(path: Path, m) -> int:
    """Target entries stored in all shards: trained positions × K, or the distinct ids of sampled targets."""
    encoding = encoding_of(m.encoding)
    # size and schema of each shard; refuses a damaged one
    return sum(encoding.stored_entries(open_checked_shard(path, m, shard, checksum=False), m) for shard in m.shards)




def _targets_line(summary: dict) -> str:
    targets = summary["targets"]
    dtype = summary["logprob_dtype"] if encoding_of(summary["encoding"]).keeps_logprob_dtype else None
    return kind_of(targets["kind"]).describe(targets, summary["vocab_size"], dtype)


def _data_line(data: dict) -> str:
    spec = data.get("spec")
    if not spec:
        return f"field {data['text_field']!r}"
    field_names = {"messages_field": "messages", "prompt_field": "prompt", "completion_field": "completion"}
    named = [f"{label} {spec[key]!r}" for key, label in field_names.items() if spec.get(key)]
    named = named or [f"text {spec.get('text_field')!r}"]
    return f"{', '.join(named)}, loss on {spec.get('loss_on')}, packing {spec.get('packing')}"


def _size(count: int) -> str:
    """``count`` bytes in the largest unit that keeps it ≥ 1 ("812 B", "3.4 KiB", "1.2 GiB")."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count} B"


def format_summary(summary: dict) -> str:
    """The human-readable form printed by ``destila cache inspect``."""
    lines = [
        f"cache          {summary['path']}" + ("" if summary["complete"] else "  (INCOMPLETE)")
        + ("  (an export: Parquet files, read as training reads them)" if summary.get("export") else ""),
        f"sequences      {summary['stored_sequences']:,} of {summary['sequences']:,} × {summary['seq_len']} tokens "
        f"= {summary['tokens']:,} tokens in {summary['shards']} {'Parquet file(s)' if summary.get('export') else 'shards'}",
        f"targets        {_targets_line(summary)}, {summary['encoding']} encoding, "
        f"temperature {summary['temperature']}",
        f"disk           {_size(summary['shard_bytes'])} in {'files' if summary.get('export') else 'shards'}"
        + (f", {summary['bytes_per_token']:.1f} bytes/token" if summary["bytes_per_token"] else "")
        + (f", {summary['bytes_per_entry']:.2f} bytes/entry" if summary["bytes_per_entry"] else ""),
        *([f"hidden states  layers {summary['extras']['hidden']['layers']} at D = "
           f"{summary['extras']['hidden']['dim']} ({summary['extras']['hidden']['projection']}), "
           f"{summary['hidden_bytes_per_token']:.1f} of the bytes/token"] if summary.get("hidden_bytes_per_token") else []),
        *([f"mixture        {summary['extras']['mixture']['weights']} of the teacher and "
           f"{', '.join(summary['extras']['mixture']['teachers'])}"] if (summary.get("extras") or {}).get("mixture") else []),
        f"teacher        {summary['teacher']['name']} ({summary['teacher']['architecture']}, "
        f"{summary['teacher']['dtype']}, weights {summary['teacher']['weight_fingerprint']})",
        f"tokenizer      {summary['tokenizer']['class']} ({summary['tokenizer']['size']:,} tokens, "
        f"fingerprint {summary['tokenizer']['fingerprint']}) in {summary['tokenizer']['path']}",
        f"data           {summary['data']['source']} ({_data_line(summary['data'])}, "
        f"fingerprint {summary['data']['fingerprint']})",
        *(["byte spans     stored: a student with another tokenizer can be aligned to it"] if summary.get("spans")
          else []),
    ]
    if summary["trained_fraction"] is not None:
        lines.append(f"trained        {summary['trained_positions']:,} positions, {summary['trained_fraction']:.1%} "
                     "of the stored tokens (the rest: other turns, prompts, document ends, padding)")
    stats = summary.get("stats")
    if stats:
        lines.append(f"top-K mass     mean Σp = {stats['topk_mass_mean']:.4f} over {stats['positions']:,} positions")
        pct = stats["tail_logmass_percentiles"]
        if pct:
            lines.append("tail log-mass  " + "  ".join(f"{k} {v:.2f}" for k, v in pct.items()))
        lines.append(
            f"entropy        top-K {stats['entropy_topk_mean']:.3f} nats, with tail bucket "
            f"{stats['entropy_bucket_mean']:.3f} nats (mean per position)"
        )
        lines += format_table(stats.get("k_coverage") or [])
        if stats.get("k_suggestion"):
            lines.append(stats["k_suggestion"])
    return "\n".join(lines)
