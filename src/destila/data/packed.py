"""Fixed-length training sequences cut from the token store, with document bounds and loss masks.

``source[i]`` is sequence i (all of length ``L = seq_len``)::

    {"input_ids":    LongTensor [L],
     "position_ids": LongTensor [L],   # restart at 0 at each document start (and at the row start)
     "loss_mask":    BoolTensor [L]}   # True at t  <=>  the target at t (token t+1) is trained

A store built with byte spans adds ``span_start`` and ``span_end``
(``LongTensor [L]``): token t covers bytes ``[span_start[t], span_end[t])``
of its document's text (an empty span for a special token the text does
not hold, such as the EOS after a document), ``-1`` at padding.

- ``packing="documents"``: the documents are laid end to end and cut every
  L tokens (sequence i is tokens ``[i·L, (i+1)·L)`` of the store, whatever
  the number of processes). Position ids restart at each document, so
  transformers' packed-sequence masking makes each document attend only to
  itself; the position before a document start is not a target. A document
  cut by a row boundary continues in the next row from position 0.
- ``packing="bfd"``: whole documents placed into rows by best-fit
  decreasing (:mod:`destila.data.bfd`), never split; a document longer than
  L is truncated to L. Each row is its documents end to end, positions
  restarting at each, then padding.
- ``packing="none"``: one document per row, truncated to L or padded with
  the pad (else EOS) token; padding is never a target.

:meth:`PackedSource.dropped_positions` counts the trained positions a
packing leaves out, and why.

Naive equivalent of ``documents``::

    stream = concat(docs); row = stream[i*L:(i+1)*L]
    position_ids[t] = t - max(start of t's document, i*L)
    loss_mask[t] = targets[i*L + t + 1] and t + 1 < L and token t+1 is in t's document

Each item is read from the memory-mapped store, so a process touches only
the rows it computes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from destila.data.bfd import plan_bfd
from destila.data.store import TokenStore


class PackedSource(torch.utils.data.Dataset):
    """Sequences of ``store`` for ``spec`` (its ``seq_len``, ``packing`` and ``max_tokens``).

    ``trim=True`` (``packing="none"`` only) returns each document at its own
    length (at most L) and leaves the padding to the collate, per batch.
    """

    def __init__(self, store: TokenStore, spec, pad_token_id: int, trim: bool = False):
        self.store, self.spec, self.seq_len, self.pad_token_id = store, spec, spec.seq_len, int(pad_token_id)
        self.trim = trim and spec.packing == "none"
        if spec.packing == "documents":
            count = len(store.tokens) // self.seq_len  # the incomplete last row is dropped
        elif spec.packing == "bfd":
            self._row_offsets, self._row_documents = plan_bfd(np.diff(np.asarray(store.offsets)), self.seq_len)
            count = len(self._row_offsets) - 1
        else:
            count = store.documents
        if spec.max_sequences is not None:
            count = min(count, spec.max_sequences)
        if count == 0:
            raise ValueError(
                f"data: {len(store.tokens)} tokens in {store.documents} documents are fewer than one sequence of "
                f"{self.seq_len}; lower --seq-len or give more text"
            )
        self._count = count
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        index = int(index)
        if not -self._count <= index < self._count:
            raise IndexError(f"sequence {index} out of range for {self._count} sequences")
        index %= self._count
        if self.spec.packing == "documents":
            ids, positions, mask = self._packed_row(index)
        elif self.spec.packing == "bfd":
            ids, positions, mask = self._bfd_row(index)
        else:
            ids, positions, mask = self._document_row(index)
            if self.trim:
                used = min(int(self.store.offsets[index + 1] - self.store.offsets[index]), self.seq_len)
                ids, positions, mask = ids[:used], positions[:used], mask[:used]
        item = {
            "input_ids": torch.from_numpy(ids.astype(np.int64)),
            "position_ids": torch.from_numpy(positions.astype(np.int64)),
            "loss_mask": torch.from_numpy(mask),
        }
        if self.store.spans is not None:
            spans = torch.from_numpy(self._spans(index)[: len(ids)])
            item["span_start"], item["span_end"] = spans[:, 0].contiguous(), spans[:, 1].contiguous()
        return item

    def _spans(self, index: int) -> np.ndarray:
        """``[L, 2]`` int64 byte spans of sequence ``index``'s tokens, ``-1`` at padding (the row layout of
        ``__getitem__``)."""
        spans, length = self.store.spans, self.seq_len
        out = np.full((length, 2), -1, dtype=np.int64)
        if self.spec.packing == "documents":
            out[:] = spans[index * length : (index + 1) * length]
        elif self.spec.packing == "bfd":
            at = 0
            for document in self._row_documents[self._row_offsets[index] : self._row_offsets[index + 1]]:
                begin, end = int(self.store.offsets[document]), int(self.store.offsets[document + 1])
                used = min(end - begin, length)
                out[at : at + used] = spans[begin : begin + used]
                at += used
        else:
            begin, end = int(self.store.offsets[index]), int(self.store.offsets[index + 1])
            used = min(end - begin, length)
            out[:used] = spans[begin : begin + used]
        return out

    def _packed_row(self, index: int):
        length, offsets = self.seq_len, self.store.offsets
        start = index * length
        ids = np.asarray(self.store.tokens[start : start + length])
        targets = np.asarray(self.store.targets[start + 1 : start + length]).astype(bool)
        # Documents overlapping the row: the first starts at or before `start`.
        first = int(np.searchsorted(offsets, start, side="right")) - 1
        last = int(np.searchsorted(offsets, start + length, side="left"))
        starts = np.asarray(offsets[first : last + 1]) - start
        doc_start = np.maximum(starts[np.searchsorted(starts, np.arange(length), side="right") - 1], 0)
        positions = np.arange(length) - doc_start
        mask = np.zeros(length, dtype=bool)
        mask[:-1] = targets
        mask[:-1] &= positions[1:] != 0  # the next token opens another document: not a target
        return ids, positions, mask

    def _document_row(self, index: int):
        begin, end = int(self.store.offsets[index]), int(self.store.offsets[index + 1])
        used = min(end - begin, self.seq_len)
        ids = np.full(self.seq_len, self.pad_token_id, dtype=np.int64)
        ids[:used] = self.store.tokens[begin : begin + used]
        mask = np.zeros(self.seq_len, dtype=bool)
        mask[: used - 1] = np.asarray(self.store.targets[begin + 1 : begin + used]).astype(bool)
        # Padding forms its own block of positions: no real token attends to it, and it attends to nothing real.
        positions = np.arange(self.seq_len)
        positions[used:] -= used
        return ids, positions, mask

    def _bfd_row(self, index: int):
        ids = np.full(self.seq_len, self.pad_token_id, dtype=np.int64)
        positions = np.zeros(self.seq_len, dtype=np.int64)
        mask = np.zeros(self.seq_len, dtype=bool)
        at = 0
        for document in self._row_documents[self._row_offsets[index] : self._row_offsets[index + 1]]:
            begin, end = int(self.store.offsets[document]), int(self.store.offsets[document + 1])
            used = min(end - begin, self.seq_len)
            ids[at : at + used] = self.store.tokens[begin : begin + used]
            positions[at : at + used] = np.arange(used)
            mask[at : at + used - 1] = np.asarray(self.store.targets[begin + 1 : begin + used]).astype(bool)
            at += used
        positions[at:] = np.arange(self.seq_len - at)  # padding: its own block, as in _document_row
        return ids, positions, mask

    def dropped_positions(self) -> dict[str, int]:
        """Trained positions of the store that no row trains, by reason (reasons with none left out).

        - ``row_seams`` (documents): a document continuing past a row's end, whose next token is the
          first of the next row, with nothing before it to predict it from;
        - ``after_the_last_row``: the tokens past the last row (the incomplete last row of ``documents``,
          or the rest of the data when ``max_tokens`` caps the rows);
        - ``truncated``: the tokens of documents longer than ``seq_len`` beyond it (``bfd``, ``none``).
        """
        offsets = np.asarray(self.store.offsets)
        targets = np.asarray(self.store.targets).astype(bool)  # a copy
        targets[offsets[:-1][offsets[:-1] < len(targets)]] = False  # a document's first token: never a target
        dropped = {}
        if self.spec.packing == "documents":
            used = self._count * self.seq_len
            seams = np.arange(self.seq_len, used, self.seq_len)
            opens = np.isin(seams, offsets)  # a row that starts a document loses nothing
            dropped["row_seams"] = int(targets[seams[~opens]].sum())
            dropped["after_the_last_row"] = int(targets[used:].sum())
        else:
            if self.spec.packing == "bfd":
                documents = self._row_documents[: self._row_offsets[self._count]]
            else:
                documents = np.arange(self._count)
            trained = np.concatenate([[0], np.cumsum(targets)])  # trained[i] = targets before token i
            begins, ends = offsets[documents], offsets[documents + 1]
            cut = np.minimum(ends, begins + self.seq_len)
            dropped["truncated"] = int((trained[ends] - trained[cut]).sum())
            dropped["after_the_last_row"] = int(targets.sum() - (trained[ends] - trained[begins]).sum())
        return {reason: count for reason, count in dropped.items() if count}

    def rows(self, indices) -> dict[str, torch.Tensor]:
        """Items ``indices`` stacked: ``input_ids``, ``position_ids``, ``loss_mask`` ``[len(indices), L]``."""
        items = [self[i] for i in indices]
        return {key: torch.stack([item[key] for item in items]) for key in items[0]}

    @property
    def fingerprint(self) -> str:
        """Equal means the same sequences, token for token, masks and positions included."""
        if self._fingerprint is None:
            digest = hashlib.sha256(f"{self.spec.packing}/{self.seq_len}/{self._count}".encode())
            for start in range(0, self._count, 256):
                batch = self.rows(range(start, min(start + 256, self._count)))
                for key in ("input_ids", "position_ids", "loss_mask", "span_start", "span_end"):
                    if key in batch:  # byte spans only in a store built with them
                        digest.update(batch[key].numpy().tobytes())
            self._fingerprint = digest.hexdigest()[:16]
        return self._fingerprint

    @property
    def tokens(self) -> int:
        return self._count * self.seq_len

    @property
    def path(self) -> Path:
        return self.store.path
