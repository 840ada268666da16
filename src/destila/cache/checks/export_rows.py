"""The check of each export row as a reader decodes it: what ``verify`` checks of a row, before any loss sees it.

The files' checksums and the record's identity (:mod:`~.export_files`),
checked on open, already tie the rows to the export as written. This is the
second line, for rows that reached a reader some other way (a record and
files rewritten together, a ``datasets.Dataset`` carrying a record): every
row read is

- the sequence it should be (``sequence_index`` equals its place in the
  dataset: rows reordered or dropped would break the eval-fraction split);
- a row by :func:`~.rows.row_faults`, the checks of ``destila cache verify``
  (ids within the vocabulary and distinct, log-probs finite, ≤ 0 and
  descending, the mass ``logsumexp(top-K, tail)`` 0 within the stored
  dtype's rounding, sampled counts summing to S);
- a row of documents (:mod:`~.documents`, part of the row checks): position
  ids count 0, 1, 2, ... from the row's start and restart only at 0 (where a
  packed document starts), and the loss mask never trains across a restart.

Costs about what decoding the row costs; a fault is a ``ValueError`` naming the
row and what to do.
"""

from __future__ import annotations

from pathlib import Path

from destila.cache.checks.rows import VerifyReport, row_faults


class ExportRowCheck:
    """``fault(table, stored, index)``: what is wrong with one decoded row of an export with ``record``, else None."""

    def __init__(self, manifest, rounding: str | None):
        from destila.cache.checks.export import _ExportedRows  # the export's order and rounding rules

        self.manifest, self.encoding = manifest, _ExportedRows(rounding)
        self._report = VerifyReport(Path("."), True, 0, 0)  # row_faults keeps its largest mass error here

    def fault(self, table, stored: dict, index: int | None) -> str | None:
        found = int(table.column("sequence_index")[0].as_py())
        if index is not None and found != index:
            return (f"holds sequence {found} at place {index}: the rows were reordered, removed or added (the "
                    "held-out split would not be the cache's)")
        faults = row_faults(stored, self.manifest, self._report, self.encoding)
        return faults[0] if faults else None
