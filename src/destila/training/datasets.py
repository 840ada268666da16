"""What the trainer iterates over: cache sequences (offline) or packed token
sequences (online), split into train and held-out parts the same way, so an
online and an offline run over the same data hold out the same sequences.
Batches are made by the project's one collate, :func:`destila.data.collate`."""

from __future__ import annotations

from torch.utils.data import Dataset

from destila.data.split import split_indices  # noqa: F401  (re-exported: the split training holds out)


class Subset(Dataset):
    """Items ``source[indices[i]]`` of a cache or of a ``[S, L]`` token tensor, as dicts of tensors."""

    def __init__(self, source, indices: list[int]):
        self.source, self.indices = source, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict:
        item = self.source[self.indices[i]]
        return item if isinstance(item, dict) else {"input_ids": item}
