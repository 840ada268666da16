"""Turning a shard's computed rows into the tensors of its file (through its encoding), and writing it.

A computed row is a dict: ``sequence_index`` (int), ``input_ids``,
``position_ids`` ``[L]`` int64, ``loss_mask [L]`` bool, and for its ``P``
trained positions either ``ids [P, K]`` + ``logprobs [P, K]`` float32 (sorted
descending) + ``tail [P]`` float32 (top-K), or ``ids [P, S]`` + ``counts
[P, S]`` (sampled: distinct ids ascending, padding with count 0). All tensors
are CPU torch tensors. The result is checked against
:func:`~destila.cache.encodings.shard_schema` before it is written, so the
writer cannot produce a shard the reader would refuse.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from destila.cache.encodings import encoding_of, shard_schema
from destila.cache.format import (
    FORMAT_VERSION,
    SAFETENSORS_DTYPES,
    Manifest,
    ShardInfo,
    encode_ranges,
    schema_faults,
    shard_name,
)
from destila.cache.checks.identity import shard_metadata
from destila.io import write_atomic


def assemble_shard(manifest: Manifest, rows: list[dict]) -> dict[str, torch.Tensor]:
    """The named tensors of a shard holding ``rows`` (see the module docstring)."""
    tensors = {"sequence_index": torch.tensor([r["sequence_index"] for r in rows], dtype=torch.int64)}
    tensors.update(encoding_of(manifest.encoding).assemble(manifest, rows))
    blob = tensors["blocks"].numel() if "blocks" in tensors else None
    positions = sum(int(r["loss_mask"].sum()) for r in rows)
    found = {k: (SAFETENSORS_DTYPES[str(v.dtype).removeprefix("torch.")], list(v.shape)) for k, v in tensors.items()}
    faults = schema_faults(found, shard_schema(manifest, len(rows), positions, blob))
    if faults:  # a bug in this module, never a user's mistake
        raise AssertionError("shard tensors do not match the schema: " + "; ".join(faults))
    return tensors


def write_shard(output: Path, tensors: dict[str, torch.Tensor], sequences: list[int], durable,
                identity: str | None = None) -> ShardInfo:
    """Write ``tensors`` atomically as the shard of ``sequences``; ``durable(write)`` runs the write.

    ``identity``: the cache's (:mod:`destila.cache.checks.identity`), carried in the shard's metadata."""
    # safetensors' writer: only when a shard is written
    from safetensors.torch import save

    # One metadata key: safetensors orders several in a random (hash map) order,
    # and equal content must give byte-identical, checksum-identical shards.
    payload = save(tensors, metadata=shard_metadata(FORMAT_VERSION, identity))
    name = shard_name(sequences[0])
    durable(lambda: write_atomic(output / name, payload))
    return ShardInfo(name=name, rows=len(sequences), sequences=encode_ranges(sequences),
                     sha256=hashlib.sha256(payload).hexdigest(), bytes=len(payload))
