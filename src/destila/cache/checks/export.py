"""``destila cache verify OUT`` on an export: every file, every row, and the fingerprint.

Checks: the record (``destila_cache.json``) parses and the dataset card
carries the same one; every Parquet file it lists is there with its size and
SHA-256 (a file that is not listed is a fault too); every row decodes with
the lengths its loss mask implies, its ``sequence_index`` is the next one,
and it passes the row checks of the cache's own ``verify`` (ids within the
vocabulary and distinct per position, log-probs finite, ≤ 0 and descending,
the tail finite, the mass summing to 1 within the stored dtype's rounding,
sampled counts summing to S, position ids and loss mask that are documents
as the cache writes them: :mod:`~.documents`); at least one position is
trained; the rows are the manifest's ``sequences``; the SHA-256 of their
values is the record's ``content_sha256``; the ``tokenizer/`` files match
the manifest's digests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from destila.cache.checks.export_files import (
    card_faults,
    file_fault,
    name_fault,
    no_trained_position,
    unlisted_faults,
)
from destila.cache.checks.export_identity import has_identity, record_identity_fault
from destila.cache.checks.rows import VerifyReport, row_faults
from destila.cache.dataset_rows import RECORD, ContentDigest, RowFormatError, parse_record, stored_row
from destila.cache.encodings.plain import PLAIN
from destila.cache.format import Manifest
from destila.cache.tokenizer_files import tokenizer_faults


class _ExportedRows:
    """What the row checks ask of an encoding, for an export's rows: entries descending, ids distinct, log-probs
    rounded as the source cache rounded them (``rounding``; None: exact)."""

    def __init__(self, rounding: str | None):
        self.rounding = rounding

    def stored_logprob_dtype(self, manifest) -> str | None:
        return self.rounding

    id_order_fault = staticmethod(PLAIN.id_order_fault)
    logprob_order_fault = staticmethod(PLAIN.logprob_order_fault)


def is_export(path) -> bool:
    return (Path(path) / RECORD).is_file()


def verify_export(path: str | Path) -> VerifyReport:
    """Check the export at ``path`` (see the module docstring); never raises for damage, reports it."""
    # pyarrow.parquet loads on top of pyarrow: only when an export is verified
    import pyarrow.parquet as pq

    path = Path(path).expanduser()
    record = parse_record((path / RECORD).read_text(), str(path / RECORD))
    if record is None:
        raise ValueError(f"{path / RECORD}: not an export record; expected the file `destila cache export` writes")
    manifest = Manifest.from_dict(record["manifest"], str(path / RECORD))
    report = VerifyReport(path, True, manifest.sequences, 0, unit="files")
    identity = record_identity_fault(record)
    if identity is not None:
        report.faults.append(f"{RECORD}: {identity}")
    elif not has_identity(record):
        report.warnings.append(f"{RECORD}: records no identity (exported by an older destila): an edited field of "
                               "the record cannot be told apart; export the cache again to add it")
    report.faults.extend(card_faults(path, record))
    report.faults.extend(tokenizer_faults(path, manifest.tokenizer_files))
    listed = {entry["name"]: entry for entry in record["files"]}
    report.faults.extend(unlisted_faults(path, listed))
    kind, width = record["kind"], int(record["width"])
    dtype, encoding = record.get("logprob_dtype") or "float32", _ExportedRows(record.get("logprob_rounding"))
    digest, expected, trained = ContentDigest(), 0, 0
    for name, entry in listed.items():
        file = path / name
        fault = name_fault(path, name) or file_fault(file, entry)
        report.shards_checked += 1
        if fault is not None:
            report.faults.append(f"{name}: {fault}")
            continue
        try:
            batches = pq.ParquetFile(str(file)).iter_batches(batch_size=32)
            for batch in batches:
                for row in range(batch.num_rows):
                    table = pa.Table.from_batches([batch.slice(row, 1)])
                    index = int(table.column("sequence_index")[0].as_py())
                    where = f"{name}: row of sequence {index}"
                    if index != expected:
                        raise RowFormatError(f"sequence_index {index} where {expected} comes next; the rows are "
                                             "out of order")
                    stored = stored_row(table, kind, width, dtype)
                    faults = row_faults(stored, manifest, report, encoding)
                    report.faults.extend(f"{where}: {fault}" for fault in faults)
                    digest.update(index, stored, kind, dtype)
                    expected += 1
                    trained += int(stored["loss_mask"].sum())
        except (RowFormatError, KeyError, pa.ArrowException, OSError) as err:
            report.faults.append(f"{name}: does not read as the export's rows ({err})")
    report.stored_sequences = expected
    if expected != manifest.sequences or expected != record["rows"]:
        report.faults.append(f"{expected} rows read, the record says {record['rows']} and the manifest "
                             f"{manifest.sequences}")
    elif trained == 0:
        report.faults.append(no_trained_position(expected))
    elif digest.hexdigest() != record["content_sha256"]:
        report.faults.append(f"content sha256 {digest.hexdigest()[:16]}…, the record says "
                             f"{record['content_sha256'][:16]}…: the rows were changed")
    return report
