"""Best-fit decreasing packing: whole documents into rows of L tokens, never split (TRL's default packing).

Documents are taken longest first; each goes into the open row with the
least room that still holds it, else into a new row. A document longer
than L is truncated to L (it fills a row alone) and counted. Finding "the
least room that still holds it" is a query on a segment tree over the
rooms 0…L, so planning D documents costs O(D log L).

Naive equivalent::

    rows = []
    for doc in sorted(docs, key=len, reverse=True):
        fits = [r for r in rows if L - used(r) >= min(len(doc), L)]
        best = min(fits, key=lambda r: L - used(r)) if fits else rows.append([]) or rows[-1]
        best.append(doc)
"""

from __future__ import annotations

import numpy as np


class _Rooms:
    """Rows grouped by free room (0…L); ``best(n)`` is a row with the least room ≥ n, or None."""

    def __init__(self, seq_len: int):
        self.size = 1
        while self.size < seq_len + 1:
            self.size *= 2
        self.tree = [-1] * (2 * self.size)  # a leaf holds its room if some row has it, else -1; nodes hold max
        self.rows: list[list[int]] = [[] for _ in range(seq_len + 1)]

    def _set(self, room: int) -> None:
        node = self.size + room
        self.tree[node] = room if self.rows[room] else -1
        node //= 2
        while node:
            self.tree[node] = max(self.tree[2 * node], self.tree[2 * node + 1])
            node //= 2

    def add(self, row: int, room: int) -> None:
        self.rows[room].append(row)
        self._set(room)

    def take(self, need: int) -> tuple[int, int] | None:
        """``(row, room)`` with the smallest room ≥ ``need`` (removed from the tree), or None."""
        if self.tree[1] < need:
            return None
        node, low, high = 1, 0, self.size - 1
        while node < self.size:  # descend, preferring the left (smaller rooms) when it holds a room ≥ need
            middle = (low + high) // 2
            left = 2 * node
            if need <= middle and self.tree[left] >= need:
                node, high = left, middle
            else:
                node, low = left + 1, middle + 1
        room = node - self.size
        row = self.rows[room].pop()
        self._set(room)
        return row, room


def plan_bfd(lengths, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(row_offsets [R + 1], row_documents [D'])``: row r holds documents ``row_documents[row_offsets[r]:row_offsets[r+1]]``.

    ``lengths`` ``[D]`` are the documents' token counts; empty documents are
    left out. Each row's documents sum to at most ``seq_len`` once every
    document is cut to ``seq_len``.
    """
    lengths = np.minimum(np.asarray(lengths, dtype=np.int64), seq_len)
    order = np.argsort(-lengths, kind="stable")
    rooms = _Rooms(seq_len)
    rows: list[list[int]] = []
    for doc in order.tolist():
        size = int(lengths[doc])
        if size == 0:
            break  # sorted: the rest are empty too
        found = rooms.take(size)
        if found is None:
            rows.append([])
            row, room = len(rows) - 1, seq_len
        else:
            row, room = found
        rows[row].append(doc)
        rooms.add(row, room - size)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    documents = np.asarray([d for r in rows for d in r], dtype=np.int64)
    return offsets, documents
