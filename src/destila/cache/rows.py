"""One shard's rows, decoded: stored fields (:meth:`ShardRows.stored`) and dense items (:meth:`ShardRows.item`).

The reader, ``verify`` and ``inspect`` all go through this class, so every
encoding and target kind is decoded in one place (through their codecs,
:mod:`destila.cache.encodings` and :mod:`destila.cache.kinds`). A dense item of a row of
length ``L`` with ``W`` entries per position (K, or S for sampled targets)::

    input_ids      [L]     int64
    position_ids   [L]     int64
    labels         [L]     int64, input_ids[t+1] where loss_mask[t], else IGNORE_INDEX (-100)
    topk_ids       [L, W]  int64, 0 at padding and untrained positions
    topk_logprobs  [L, W]  sorted descending; -inf at padding and untrained positions
                           (stored dtype for plain top-K, float32 otherwise)
    teacher_hidden [L, n, D] float16, only in caches built with --hidden-layers (zeros where untrained)
    span_start     [L]     int64, only in caches built with --spans: the byte span [span_start, span_end)
    span_end       [L]     of each input token in its document, -1 at padding (destila.cache.spans)
    tail_logmass   [L]     float32, log of the mass outside the entries: exact for top-K,
                           -inf for sampled (the draws are the whole distribution), 0 where
                           the position is untrained (it has no entries)

Sampled entries are read as ``log(count / S)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from destila.cache.encodings import encoding_of
from destila.cache.encodings.compact_blocks import BlockError
from destila.cache.format import Manifest, ShardFormatError, ShardInfo
from destila.cache.kinds import kind_of
from destila.constants import IGNORE_INDEX
from destila.data.collate import next_token_labels


class ShardRows:
    """The rows of ``shard`` through an open safetensors ``handle`` (``framework="pt"``)."""

    def __init__(self, handle, manifest: Manifest, shard: ShardInfo):
        self.handle, self.manifest, self.shard = handle, manifest, shard
        self.encoding = encoding_of(manifest.encoding)
        header = {name: (handle.get_slice(name).get_dtype(), handle.get_slice(name).get_shape())
                  for name in handle.keys()}
        self.offsets, faults = self.encoding.open(handle, header, manifest, shard)
        if faults:
            raise ShardFormatError("; ".join(faults))

    def stored(self, row: int) -> dict:
        """Row ``row`` as stored (numpy): ``input_ids``, ``position_ids`` ``[L]``, ``loss_mask [L]`` bool, and
        for its P trained positions ``ids [P, W]`` with ``logprobs [P, W]`` + ``tail [P]`` (top-K) or
        ``counts [P, W]`` (sampled). Compact blocks decode to ids ascending per position."""
        return self.encoding.stored(self.handle, self.manifest, self.offsets, row)

    def item(self, row: int) -> dict[str, torch.Tensor]:
        """Row ``row`` as a dense item (see the module docstring)."""
        return dense_item(self.stored(row), self.manifest)


def dense_item(stored: dict, manifest: Manifest) -> dict[str, torch.Tensor]:
    """Scatter a row's stored targets to its ``L`` positions (see the module docstring)."""
    mask = torch.from_numpy(np.asarray(stored["loss_mask"], dtype=bool))
    input_ids = torch.from_numpy(stored["input_ids"])
    length, width = mask.shape[0], manifest.top_k
    ids, logprobs, tail = kind_of(manifest.target_kind).dense_targets(stored, manifest)
    # Entries by decreasing log-prob (ties: increasing id), whatever order the encoding stores.
    order = torch.sort(-logprobs.float(), dim=1, stable=True).indices
    ids, logprobs = ids.gather(1, order), logprobs.gather(1, order)
    dense_ids = torch.zeros(length, width, dtype=torch.int64)
    dense_lp = torch.full((length, width), -math.inf, dtype=logprobs.dtype)
    dense_tail = torch.zeros(length, dtype=torch.float32)
    dense_ids[mask], dense_lp[mask], dense_tail[mask] = ids, logprobs, tail
    labels = next_token_labels(input_ids.long(), mask)
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
    for name in ("span_start", "span_end"):
        if name in stored:
            item[name] = torch.from_numpy(np.asarray(stored[name], dtype=np.int64))
    return item


__all__ = ["BlockError", "IGNORE_INDEX", "ShardFormatError", "ShardRows", "dense_item"]
