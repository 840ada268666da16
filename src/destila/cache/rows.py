"""One shard's rows, decoded: stored fields (:meth:`ShardRows.stored`) and dense items (:meth:`ShardRows.item`).

The reader, ``verify`` and ``inspect`` all go through this class, so every
encoding and target kind is decoded in one place. A dense item of a row of
length ``L`` with ``W`` entries per position (K, or S for sampled targets)::

    input_ids      [L]     int64
    position_ids   [L]     int64
    labels         [L]     int64, input_ids[t+1] where loss_mask[t], else IGNORE_INDEX (-100)
    topk_ids       [L, W]  int64, 0 at padding and untrained positions
    topk_logprobs  [L, W]  sorted descending; -inf at padding and untrained positions
                           (stored dtype for plain top-K, float32 otherwise)
    teacher_hidden [L, n, D] float16, only in caches built with --hidden-layers (zeros where untrained)
    tail_logmass   [L]     float32, log of the mass outside the entries: exact for top-K,
                           -inf for sampled (the draws are the whole distribution), 0 where
                           the position is untrained (it has no entries)

Sampled entries are read as ``log(count / S)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from destila.cache.codec import BlockError, decode_sampled_row, decode_topk_row
from destila.cache.format import Manifest, ShardInfo, schema_faults, shard_schema
from destila.constants import IGNORE_INDEX


class ShardFormatError(ValueError):
    """A shard whose tensors do not have the names, dtypes or shapes its manifest implies."""


class ShardRows:
    """The rows of ``shard`` through an open safetensors ``handle`` (``framework="pt"``)."""

    def __init__(self, handle, manifest: Manifest, shard: ShardInfo):
        self.handle, self.manifest, self.shard = handle, manifest, shard
        self.compact = manifest.encoding == "compact"
        header = {name: (handle.get_slice(name).get_dtype(), handle.get_slice(name).get_shape())
                  for name in handle.keys()}
        if self.compact:
            self.offsets = handle.get_tensor("block_offsets").numpy() if "block_offsets" in header else None
            blob = header.get("blocks", (None, [None]))[1][0]
            faults = schema_faults(header, shard_schema(manifest, shard.rows, blob_bytes=blob))
            if not faults and (self.offsets[0] != 0 or self.offsets[-1] != blob or np.any(np.diff(self.offsets) < 0)):
                faults.append(f"block_offsets do not cut the {blob} bytes of blocks into {shard.rows} blocks")
        else:
            mask = handle.get_tensor("loss_mask") if "loss_mask" in header else None
            positions = None if mask is None else int(mask.sum())
            faults = schema_faults(header, shard_schema(manifest, shard.rows, positions))
            if not faults:
                self.offsets = np.concatenate([[0], np.cumsum(mask.sum(dim=1).numpy())])
        if faults:
            raise ShardFormatError("; ".join(faults))

    def stored(self, row: int) -> dict:
        """Row ``row`` as stored (numpy): ``input_ids``, ``position_ids`` ``[L]``, ``loss_mask [L]`` bool, and
        for its P trained positions ``ids [P, W]`` with ``logprobs [P, W]`` + ``tail [P]`` (top-K) or
        ``counts [P, W]`` (sampled). Compact blocks decode to ids ascending per position."""
        m = self.manifest
        a, b = int(self.offsets[row]), int(self.offsets[row + 1])
        if self.compact:
            block = self.handle.get_slice("blocks")[a:b].numpy().tobytes()
            if m.target_kind == "topk":
                return decode_topk_row(block, m.seq_len, m.top_k, m.layout())
            return decode_sampled_row(block, m.seq_len, m.top_k, m.layout())
        get = self.handle.get_slice
        fields = {
            "input_ids": get("input_ids")[row].numpy().astype(np.int64),
            "position_ids": get("position_ids")[row].numpy().astype(np.int64),
            "loss_mask": get("loss_mask")[row].numpy(),
        }
        if m.target_kind == "topk":
            lp = get("topk_logprobs")[a:b]
            fields.update(ids=get("topk_ids")[a:b].numpy().astype(np.int64),
                          logprobs=lp if lp.dtype == torch.bfloat16 else lp.numpy(),
                          tail=get("tail_logmass")[a:b].numpy())
        else:
            fields.update(ids=get("sample_ids")[a:b].numpy().astype(np.int64),
                          counts=get("sample_counts")[a:b].numpy().astype(np.int64))
        if "teacher_hidden" in self.handle.keys():
            fields["hidden"] = get("teacher_hidden")[a:b]
        if int(fields["loss_mask"].sum()) != b - a:
            raise ShardFormatError(f"row {row}: loss_mask has {int(fields['loss_mask'].sum())} trained positions, "
                                   f"the shard stores {b - a}")
        return fields

    def item(self, row: int) -> dict[str, torch.Tensor]:
        """Row ``row`` as a dense item (see the module docstring)."""
        return dense_item(self.stored(row), self.manifest)


def dense_item(stored: dict, manifest: Manifest) -> dict[str, torch.Tensor]:
    """Scatter a row's stored targets to its ``L`` positions (see the module docstring)."""
    mask = torch.from_numpy(np.asarray(stored["loss_mask"], dtype=bool))
    input_ids = torch.from_numpy(stored["input_ids"])
    length, width = mask.shape[0], manifest.top_k
    ids = torch.from_numpy(stored["ids"])
    if "counts" in stored:
        counts = torch.from_numpy(stored["counts"])
        logprobs = torch.where(counts > 0, counts.double().div(manifest.targets["samples"]).log(),
                               -math.inf).float()
        tail = torch.full((ids.shape[0],), -math.inf)
    else:
        logprobs = stored["logprobs"]
        logprobs = logprobs if isinstance(logprobs, torch.Tensor) else torch.from_numpy(logprobs)
        tail = torch.from_numpy(np.asarray(stored["tail"], dtype=np.float32))
    # Entries by decreasing log-prob (ties: increasing id), whatever order the encoding stores.
    order = torch.sort(-logprobs.float(), dim=1, stable=True).indices
    ids, logprobs = ids.gather(1, order), logprobs.gather(1, order)
    dense_ids = torch.zeros(length, width, dtype=torch.int64)
    dense_lp = torch.full((length, width), -math.inf, dtype=logprobs.dtype)
    dense_tail = torch.zeros(length, dtype=torch.float32)
    dense_ids[mask], dense_lp[mask], dense_tail[mask] = ids, logprobs, tail
    labels = torch.full((length,), IGNORE_INDEX, dtype=torch.int64)
    labels[:-1] = torch.where(mask[:-1], input_ids[1:], IGNORE_INDEX)
    item = {
        "input_ids": input_ids,
        "position_ids": torch.from_numpy(stored["position_ids"]),
        "labels": labels,
        "topk_ids": dense_ids,
        "topk_logprobs": dense_lp,
        "tail_logmass": dense_tail,
    }
    if "hidden" in stored:  # [P, n, D] → [L, n, D], zeros where untrained (the hidden loss skips them too)
        hidden = torch.zeros(length, *stored["hidden"].shape[1:], dtype=stored["hidden"].dtype)
        hidden[mask] = stored["hidden"]
        item["teacher_hidden"] = hidden
    return item


__all__ = ["BlockError", "IGNORE_INDEX", "ShardFormatError", "ShardRows", "dense_item"]
