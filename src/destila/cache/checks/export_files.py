"""The checks of an export's files that every reader runs on open, before a model loads; ``verify`` shares them.

An export (``destila cache export``) is a folder anyone may have edited,
uploaded, recompressed or added to. Before a reader hands its rows to
``datasets`` (:func:`check_export`):

- the record's identity still holds (:mod:`~.export_identity`);
- the dataset card carries the same record and points ``datasets`` at the
  export's own ``data/train-*.parquet`` files, not at a file elsewhere;
- ``data/`` holds the files the record lists and only those: each a plain
  ``data/NAME.parquet`` inside the export (no link out), with its recorded
  size and SHA-256;
- each file's footer has the row count the record gives it and the columns
  the record's kind implies (a renamed column, an empty file);
- the ``sequence_index`` column (a few bytes a row) counts 0, 1, 2, ... across
  the files in the record's order, to the manifest's number of sequences:
  rows reordered, removed or added are refused here;
- the ``position_ids`` and ``loss_mask`` columns (a few bytes a position) are
  documents as the cache writes them (:mod:`~.documents`: runs from 0, a
  loss mask that never crosses a run's end), and at least one position is
  trained, as in every cache (its reader refuses one without).

What needs the targets of every row (the mass summing to 1, ids within the
vocabulary) is checked as each row is read (:class:`~destila.cache.dataset.DatasetCache`)
and, for all rows at once, by ``destila cache verify``.

Naive equivalent: run ``destila cache verify`` before every read, which decodes every row.
"""

from __future__ import annotations

import json
from pathlib import Path

from destila.cache.checks.documents import document_fault
from destila.cache.checks.export_identity import record_identity_fault
from destila.cache.dataset_rows import DATA_DIR, RECORD, schema
from destila.cache.format import sha256_file
from destila.io import outside_link

README = "README.md"
DATA_FILES = f"{DATA_DIR}/train-*.parquet"  # what the card written by `destila cache export` names


def name_fault(path: Path, name, links_within: Path | None = None) -> str | None:
    """A listed name that is not a plain ``data/NAME.parquet`` of the export, or leads outside it through a link:
    nothing outside the export is read or hashed. ``links_within``: where links may lead instead (a hub
    snapshot's files link into its repo's ``blobs/``)."""
    parts = name.split("/") if isinstance(name, str) else []
    if len(parts) != 2 or parts[0] != DATA_DIR or not parts[1].endswith(".parquet") or parts[1].startswith("."):
        return (f"not a plain {DATA_DIR}/NAME.parquet file name inside the export; an export never names a file "
                "elsewhere: do not use it")
    link = outside_link(links_within or path, path / name)
    if link is not None:
        return f"a symbolic link to {link}, outside the export; copy the file in (cp -L) if you trust it"
    return None


def file_fault(file: Path, entry: dict) -> str | None:
    """What is wrong when ``file`` is missing or not the size and SHA-256 of its record ``entry``, else None."""
    if not file.is_file():
        return "file missing"
    size = file.stat().st_size
    if size != entry["bytes"]:
        return f"size {size} bytes, the record says {entry['bytes']}"
    digest = sha256_file(file)
    if digest != entry["sha256"]:
        return f"checksum mismatch (record sha256 {entry['sha256'][:16]}…, file {digest[:16]}…): the file is damaged"
    return None


def unlisted_faults(path: Path, listed) -> list[str]:
    """Files in ``data/`` the record does not list (a foreign file would be read as more rows)."""
    folder = path / DATA_DIR
    found = sorted(p.relative_to(path).as_posix() for p in folder.iterdir()) if folder.is_dir() else []
    return [f"{name}: not listed in {RECORD}; remove it" for name in found if name not in set(listed)]


def card_faults(path: Path, record: dict) -> list[str]:
    """The dataset card must carry the same record (what a loaded Dataset keeps) and name the export's own files."""
    from huggingface_hub import DatasetCard  # heavy: only for an export

    if not (path / README).is_file():
        return [f"{README}: missing; a loaded dataset would not know its record: export the cache again"]
    import yaml  # loaded by huggingface_hub's DatasetCard above: only its error type is needed

    try:
        data = DatasetCard.load(path / README).data.to_dict()
    except yaml.YAMLError as err:  # a card edited by hand: its front matter (after the first `---` line) broken
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 2}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        return [f"{README}: its YAML front matter does not parse{where} ({problem})"]
    try:
        carried = json.loads(data["dataset_info"]["description"])
    except Exception as err:  # a card edited by hand: keys or JSON broken
        return [f"{README}: its dataset_info.description is not the export record ({type(err).__name__})"]
    faults = [] if carried == record else [f"{README}: its record differs from {RECORD}"]
    files = _card_data_files(data)
    if files != [DATA_FILES]:
        faults.append(f"{README}: its configs name the data files {files}, expected [{DATA_FILES!r}] (the export's "
                      "own); a card pointing elsewhere would load other rows: export the cache again")
    return faults


def _card_data_files(data: dict) -> list:
    """Every path the card's ``configs`` give ``datasets`` to load."""
    paths = []
    for config in data.get("configs") or [None]:
        files = config.get("data_files") if isinstance(config, dict) else None
        for item in files if isinstance(files, list) else [files]:
            path = item.get("path") if isinstance(item, dict) else item
            paths.extend(path if isinstance(path, list) else [path])
    return paths


def footer_fault(file: Path, entry: dict, record: dict) -> str | None:
    """The file's Parquet footer: the record's row count for it and the columns of the record's kind."""
    # heavy: pyarrow's Parquet reader, only for an export's files
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(str(file)).metadata
        found = meta.schema.to_arrow_schema()
    except (pa.ArrowException, OSError) as err:
        return f"not a readable Parquet file ({err})"
    expected = schema(record["kind"], record.get("logprob_dtype") or "float32", bool(record.get("spans")))
    if found.names != expected.names or not found.remove_metadata().equals(expected):
        return (f"columns {', '.join(found.names) or '(none)'}, expected {', '.join(expected.names)} with the types "
                "the export writes")
    if meta.num_rows != entry["rows"]:
        return f"{meta.num_rows} rows, the record says {entry['rows']}"
    return None


def rows_fault(file: Path, first: int) -> tuple[str | None, int]:
    """``(fault, trained positions)`` of the file's small columns, read without the targets: ``sequence_index``
    is ``first, first + 1, ...``, and ``position_ids`` with ``loss_mask`` are documents as the cache writes them
    (:mod:`~.documents`)."""
    # heavy: pyarrow's Parquet reader, only for an export's files
    import numpy as np
    import pyarrow.parquet as pq

    table = pq.read_table(str(file), columns=["sequence_index", "position_ids", "loss_mask"])
    found = table.column("sequence_index").to_numpy()
    expected = np.arange(first, first + len(found))
    if not np.array_equal(found, expected):
        at = int(np.flatnonzero(found != expected)[0])
        return (f"row {at} holds sequence {int(found[at])} where {int(expected[at])} comes next: the rows were "
                "reordered, removed or added"), 0
    positions, mask = (table.column(name).combine_chunks() for name in ("position_ids", "loss_mask"))
    if not np.array_equal(positions.offsets.to_numpy(), mask.offsets.to_numpy()):
        return "position_ids and loss_mask differ in length in some row", 0
    mask_values = mask.flatten().to_numpy(zero_copy_only=False)
    fault = document_fault(positions.flatten().to_numpy(), mask_values, positions.offsets.to_numpy())
    if fault is not None:
        return f"row of sequence {first + fault[0]}: {fault[1]}", 0
    return None, int(mask_values.sum())


def export_faults(path: str | Path, record: dict, *, rows: bool = True, links_within: Path | None = None) -> list[str]:
    """Every fault of the checks above, in that order, each naming its file (``rows``: also the footers, the
    ``sequence_index`` order, the documents and the trained positions)."""
    path = Path(path)
    faults = []
    identity = record_identity_fault(record)
    if identity is not None:
        faults.append(f"{RECORD}: {identity}")
    faults.extend(card_faults(path, record))
    listed = [entry["name"] for entry in record["files"]]
    faults.extend(unlisted_faults(path, listed))
    first, trained = 0, 0
    for entry in record["files"]:
        name = entry["name"]
        fault = name_fault(path, name, links_within) or file_fault(path / name, entry)
        if fault is None and rows:
            fault = footer_fault(path / name, entry, record)
            if fault is None:
                fault, count = rows_fault(path / name, first)
                trained += count
        if fault is not None:
            faults.append(f"{name}: {fault}")
        first += int(entry["rows"])
    sequences = record["manifest"].get("sequences")
    if first != record["rows"] or first != sequences:
        faults.append(f"{RECORD}: its files hold {first} rows, the record says {record['rows']} and the manifest "
                      f"{sequences}")
    if rows and not faults and trained == 0:  # as a cache's reader refuses one: a loss of 0.0 teaches nothing
        faults.append(no_trained_position(first))
    return faults


def no_trained_position(rows: int) -> str:
    return (f"its {rows} rows hold no trained position (every loss mask is false), which no cache is written with; "
            "a loss of 0.0 at every step would teach nothing")


def check_export(path: str | Path, record: dict, *, links_within: Path | None = None) -> None:
    """Raise ``ValueError`` (one line: the first fault, and what to do) unless :func:`export_faults` finds none."""
    try:
        faults = export_faults(path, record, links_within=links_within)
    except (KeyError, TypeError, ValueError) as err:  # a record edited by hand: a field missing or of another type
        raise ValueError(f"export {path}: {RECORD} lacks or mistypes a field the export writes ({type(err).__name__}: "
                         f"{err}); export the cache again") from err
    if faults:
        more = f" (and {len(faults) - 1} more)" if len(faults) > 1 else ""
        raise ValueError(f"export {path}: {faults[0]}{more}; `destila cache verify {path}` lists every fault: "
                         "export the cache again, or restore the files")
