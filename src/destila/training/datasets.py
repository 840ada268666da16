"""What the trainer iterates over: cache sequences (offline) or packed token
sequences (online), split into train and held-out parts the same way, so an
online and an offline run over the same data hold out the same sequences.
Batches are made by the project's one collate, :func:`destila.data.collate`."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


def split_indices(count: int, eval_fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """``(train, held_out)`` sequence indices: a fixed-seed shuffle, the first ``eval_fraction`` held out.

    The seed is independent of the training seed: changing the training seed
    must not move sequences between the two parts.
    """
    if eval_fraction <= 0:
        return list(range(count)), []
    held = max(1, round(count * eval_fraction))
    if held >= count:
        raise ValueError(
            f"eval_fraction: {eval_fraction} of {count} sequences leaves nothing to train on; "
            "use a smaller fraction or more data"
        )
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(order[held:]), sorted(order[:held])


class Subset(Dataset):
    """Items ``source[indices[i]]`` of a cache or of a ``[S, L]`` token tensor, as dicts of tensors."""

    def __init__(self, source, indices: list[int]):
        self.source, self.indices = source, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict:
        item = self.source[self.indices[i]]
        return item if isinstance(item, dict) else {"input_ids": item}
