"""Turning a shard's computed rows into the tensors of its file, for each encoding, and writing it.

A computed row is a dict: ``sequence_index`` (int), ``input_ids``,
``position_ids`` ``[L]`` int64, ``loss_mask [L]`` bool, and for its ``P``
trained positions either ``ids [P, K]`` + ``logprobs [P, K]`` float32 (sorted
descending) + ``tail [P]`` float32 (top-K), or ``ids [P, S]`` + ``counts
[P, S]`` (sampled: distinct ids ascending, padding with count 0). All tensors
are CPU torch tensors. The result is checked against
:func:`~destila.cache.format.shard_schema` before it is written, so the
writer cannot produce a shard the reader would refuse.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from destila.cache.format import (
    FORMAT_VERSION,
    SAFETENSORS_DTYPES,
    Manifest,
    ShardInfo,
    encode_ranges,
    schema_faults,
    shard_name,
    shard_schema,
)
from destila.io import write_atomic


def assemble_shard(manifest: Manifest, rows: list[dict]) -> dict[str, torch.Tensor]:
    """The named tensors of a shard holding ``rows`` (see the module docstring)."""
    tensors = {"sequence_index": torch.tensor([r["sequence_index"] for r in rows], dtype=torch.int64)}
    if manifest.encoding == "compact":
        tensors.update(_compact(manifest, rows))
    else:
        tensors.update(_plain(manifest, rows))
    blob = tensors["blocks"].numel() if "blocks" in tensors else None
    positions = sum(int(r["loss_mask"].sum()) for r in rows)
    found = {k: (SAFETENSORS_DTYPES[str(v.dtype).removeprefix("torch.")], list(v.shape)) for k, v in tensors.items()}
    faults = schema_faults(found, shard_schema(manifest, len(rows), positions, blob))
    if faults:  # a bug in this module, never a user's mistake
        raise AssertionError("shard tensors do not match the schema: " + "; ".join(faults))
    return tensors


def _plain(manifest: Manifest, rows: list[dict]) -> dict[str, torch.Tensor]:
    stack = lambda key, dtype: torch.stack([r[key] for r in rows]).to(dtype)  # noqa: E731
    cat = lambda key, dtype: torch.cat([r[key] for r in rows]).to(dtype)  # noqa: E731
    tensors = {"input_ids": stack("input_ids", torch.int32), "position_ids": stack("position_ids", torch.int32),
               "loss_mask": stack("loss_mask", torch.bool)}
    if manifest.target_kind == "topk":
        tensors.update(topk_ids=cat("ids", torch.int32),
                       topk_logprobs=cat("logprobs", getattr(torch, manifest.logprob_dtype)),
                       tail_logmass=cat("tail", torch.float32))
    else:
        ids, counts = cat("ids", torch.int64), cat("counts", torch.int64)
        # by decreasing count, ties by increasing id (the ids arrive ascending); padding (count 0) last
        order = torch.sort(-counts, dim=1, stable=True).indices
        tensors.update(sample_ids=ids.gather(1, order).to(torch.int32),
                       sample_counts=counts.gather(1, order).to(torch.int32))
    if (manifest.extras or {}).get("hidden"):
        tensors["teacher_hidden"] = cat("hidden", torch.float16)
    return tensors


def _compact(manifest: Manifest, rows: list[dict]) -> dict[str, torch.Tensor]:
    from destila.cache.codec import encode_sampled_row, encode_topk_row

    layout, blocks = manifest.layout(), []
    for r in rows:
        fields = [r["input_ids"].numpy(), r["position_ids"].numpy(), r["loss_mask"].numpy()]
        if manifest.target_kind == "topk":
            blocks.append(encode_topk_row(*fields, r["ids"].numpy(), r["logprobs"].numpy(), r["tail"].numpy(), layout))
        else:
            blocks.append(encode_sampled_row(*fields, r["ids"].numpy(), r["counts"].numpy(), layout))
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blocks])]).astype(np.int64)
    blob = np.frombuffer(b"".join(blocks), dtype=np.uint8).copy()
    return {"block_offsets": torch.from_numpy(offsets), "blocks": torch.from_numpy(blob)}


def write_shard(output: Path, tensors: dict[str, torch.Tensor], sequences: list[int], durable) -> ShardInfo:
    """Write ``tensors`` atomically as the shard of ``sequences``; ``durable(write)`` runs the write."""
    from safetensors.torch import save

    # One metadata key: safetensors orders several in a random (hash map) order,
    # and equal content must give byte-identical, checksum-identical shards.
    payload = save(tensors, metadata={"format": f"destila-topk-cache/{FORMAT_VERSION}"})
    name = shard_name(sequences[0])
    durable(lambda: write_atomic(output / name, payload))
    return ShardInfo(name=name, rows=len(sequences), sequences=encode_ranges(sequences),
                     sha256=hashlib.sha256(payload).hexdigest(), bytes=len(payload))
