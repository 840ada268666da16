"""A row's documents as the cache writes them: position runs, and a loss mask that never crosses a document bound.

Every packing (:mod:`destila.data.packed`: ``documents``, ``bfd``, ``none``)
writes rows of length ``L`` whose

- ``position_ids`` are runs ``0, 1, 2, ...``: a run starts at 0 at the row's
  start and wherever a packed document (or the padding after the last one)
  starts, and otherwise counts up by 1;
- ``loss_mask`` is true at ``t`` only where the token ``t + 1`` is in the same
  document: ``t + 1 < L`` and ``position_ids[t + 1] == position_ids[t] + 1``
  (the position before a document start predicts nothing).

Position ids that break a run, or a run restarted inside what the mask still
trains as one document, are no document bounds this cache wrote; the
student's attention would be cut (or joined) where the teacher's was not.

:func:`document_fault` checks many rows at once from their flat values and
row offsets (a Parquet file's ``position_ids`` and ``loss_mask`` columns, a
few bytes a position); one row is the case ``offsets = [0, L]``.

Naive equivalent, per row::

    for t in range(L):
        assert positions[t] == 0 or positions[t] == positions[t - 1] + 1      # (t = 0: positions[0] == 0)
        assert not mask[t] or (t + 1 < L and positions[t + 1] == positions[t] + 1)
"""

from __future__ import annotations

import numpy as np


def document_fault(positions, mask, offsets) -> tuple[int, str] | None:
    """``(row, what is wrong)`` for the first row of ``positions`` and ``mask`` (flat ``[N]``, rows split at
    ``offsets [R + 1]``) that breaks the rules above, else None."""
    positions = np.asarray(positions, dtype=np.int64)
    mask = np.asarray(mask, dtype=bool)
    offsets = np.asarray(offsets, dtype=np.int64)
    if not positions.size:
        return None
    starts = np.zeros(positions.size, dtype=bool)
    starts[offsets[:-1][offsets[:-1] < positions.size]] = True
    ends = np.zeros(positions.size, dtype=bool)
    ends[offsets[1:][offsets[1:] > 0] - 1] = True
    previous = np.concatenate([[-1], positions[:-1]])
    previous[starts] = -1  # each row's first position starts a run
    broken = (positions != 0) & (positions != previous + 1)
    following = np.concatenate([positions[1:], [-1]])
    continues = ~ends & (following == positions + 1)
    crossing = mask & ~continues
    faults = []
    if broken.any():
        faults.append((int(np.flatnonzero(broken)[0]), "broken"))
    if crossing.any():
        faults.append((int(np.flatnonzero(crossing)[0]), "crossing"))
    if not faults:
        return None
    at, kind = min(faults)
    row = int(np.searchsorted(offsets, at, side="right")) - 1
    place = at - int(offsets[row])
    if kind == "broken":
        after = int(previous[at]) if previous[at] >= 0 else "the row start"
        return row, (f"position id {int(positions[at])} at {place} after {after}: positions count up from 0 within "
                     "each document, so these are no document bounds")
    after = "is past the row end" if ends[at] else f"starts another document (position id {int(following[at])})"
    return row, (f"position {place} is trained but the token after it {after}: the loss mask crosses a "
                 "document bound, so these are no document bounds the cache wrote")
