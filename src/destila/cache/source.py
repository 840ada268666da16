"""What the teacher pass iterates over: packed sequences with position ids and a loss mask.

A *packed source* has ``len(source)`` sequences of one length ``L``;
``source[i]`` is ``{"input_ids": LongTensor[L], "position_ids": LongTensor[L],
"loss_mask": BoolTensor[L]}`` (``loss_mask[t]``: the target at t, the token
t+1, is trained) and ``source.fingerprint`` changes whenever any of them does.

:func:`load_source` is the writer's one entry point for data. Today it packs
plain text with :func:`destila.data.pack_documents` and wraps the ``[S, L]``
tensor in :class:`PackedTokens`: position ids ``0 … L−1`` and every position
trained except the last, which has no next token in the row.
"""

from __future__ import annotations

from pathlib import Path


class PackedTokens:
    """A packed source over an ``[S, L]`` token tensor (see the module docstring)."""

    def __init__(self, packed):
        import torch

        self.packed = packed
        self.seq_len = packed.shape[1]
        self._positions = torch.arange(self.seq_len)
        self._mask = torch.ones(self.seq_len, dtype=torch.bool)
        self._mask[-1] = False

    def __len__(self) -> int:
        return self.packed.shape[0]

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.packed[index], "position_ids": self._positions.clone(), "loss_mask": self._mask.clone()}

    @property
    def fingerprint(self) -> str:
        from destila.data import ids_fingerprint

        return ids_fingerprint(self.packed)

    @property
    def tokens(self) -> int:
        return self.packed.numel()


def load_source(data, tokenizer, seq_len: int, max_tokens: int | None, text_field: str):
    """``(source, description, data_fingerprint)`` for the writer: the packed source of ``data``, a
    human-readable name of where it came from, and a hash of the documents."""
    from destila.data import data_fingerprint, load_texts, pack_documents

    if isinstance(data, (str, Path)):
        texts, description = load_texts(data, text_field), str(data)
    else:
        texts, description = [t for t in data if t], f"<{len(data)} documents given in Python>"
    return PackedTokens(pack_documents(texts, tokenizer, seq_len, max_tokens)), description, data_fingerprint(texts)
