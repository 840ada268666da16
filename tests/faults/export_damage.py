"""Ways an export (`destila cache export`) gets damaged or edited, each applied to a real export folder on disk.

Each damage takes the export folder and the test's ``tmp_path`` (for files
placed outside it). "Re-signed" damages also rewrite the record's entries
of the files they changed (size, SHA-256, rows) and the dataset card, as
someone editing an export by hand with care would; ``identity=True`` even
recomputes the record's identity, so only the checks of the rows can catch
what was done.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from destila.cache.export import dataset_card
from destila.cache.format import sha256_file

FIRST = "data/train-00000-of-00002.parquet"
SECOND = "data/train-00001-of-00002.parquet"


def record_of(export: Path) -> dict:
    return json.loads((export / "destila_cache.json").read_text())


def export_identity(record: dict) -> str:
    """The identity an export records: the SHA-256 of its record without it, as documented."""
    payload = {key: value for key, value in record.items() if key != "identity"}
    text = json.dumps(["destila-export-identity/1", payload], sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def write_record(export: Path, record: dict, *, identity: bool) -> None:
    """Write ``record`` and a card carrying it; ``identity``: with the identity recomputed to fit."""
    if identity:
        record["identity"] = export_identity(record)
    (export / "destila_cache.json").write_text(json.dumps(record, indent=1))
    (export / "README.md").write_text(dataset_card(record))


def resign(export: Path, *, identity: bool) -> None:
    """Every file's entry made to fit the file on disk (size, SHA-256, rows), and the card with it."""
    record = record_of(export)
    for entry in record["files"]:
        file = export / entry["name"]
        entry.update(bytes=file.stat().st_size, sha256=sha256_file(file), rows=pq.ParquetFile(file).metadata.num_rows)
    write_record(export, record, identity=identity)


def rewrite_rows(export: Path, name: str, change) -> None:
    """The rows of the file ``name`` as Python dicts, changed by ``change(rows)`` (returns the new list)."""
    file = export / name
    table = pq.read_table(file)
    rows = change(table.to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), file, compression="zstd")


def each_file(export: Path, change) -> None:
    for name in (FIRST, SECOND):
        rewrite_rows(export, name, change)


def truncated(export, tmp_path):
    file = export / FIRST
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def rows_removed_entry_updated(export, tmp_path):
    rewrite_rows(export, FIRST, lambda rows: rows[:4])
    resign(export, identity=False)


def foreign_file_added(export, tmp_path):
    shutil.copy(export / SECOND, export / "data" / "train-00002-of-00002.parquet")


def reordered(export, tmp_path):
    rewrite_rows(export, FIRST, lambda rows: rows[::-1])


def reordered_resigned(export, tmp_path):
    rewrite_rows(export, FIRST, lambda rows: rows[::-1])
    resign(export, identity=True)


def _rest_of_everything(rows):
    for row in rows:  # the rest bucket given probability 1 beside the top-K: the mass sums to about 2
        row["tail_logmass"] = [0.0] * len(row["tail_logmass"])
    return rows


def mass_two_resigned(export, tmp_path):
    each_file(export, _rest_of_everything)
    resign(export, identity=True)


def _nothing_trained(rows):
    for row in rows:
        row["loss_mask"] = [False] * len(row["loss_mask"])
        row["topk_ids"] = [[] for _ in row["topk_ids"]]
        row["topk_logprobs"] = [[] for _ in row["topk_logprobs"]]
        row["tail_logmass"] = [0.0] * len(row["tail_logmass"])
    return rows


def no_position_trained_entry_updated(export, tmp_path):
    each_file(export, _nothing_trained)
    resign(export, identity=False)


def nothing_trained_resigned(export, tmp_path):
    each_file(export, _nothing_trained)
    resign(export, identity=True)


def _documents_split(rows):
    for row in rows:  # a plausible run restart halfway, where the loss mask still trains across it
        half = len(row["position_ids"]) // 2
        row["position_ids"] = list(range(half)) + list(range(len(row["position_ids"]) - half))
    return rows


def documents_split_resigned(export, tmp_path):
    each_file(export, _documents_split)
    resign(export, identity=True)


def _shifted_positions(rows):
    for row in rows:
        row["position_ids"] = [p + 3 for p in row["position_ids"]]
    return rows


def positions_no_bounds_resigned(export, tmp_path):
    each_file(export, _shifted_positions)
    resign(export, identity=True)


def card_points_outside(export, tmp_path):
    outside = tmp_path / "outside" / "rows.parquet"
    outside.parent.mkdir(exist_ok=True)
    shutil.copy(export / FIRST, outside)
    card = export / "README.md"
    card.write_text(card.read_text().replace("path: data/train-*.parquet", f"path: {outside}"))


def link_out(export, tmp_path):
    outside = tmp_path / "outside" / "rows.parquet"
    outside.parent.mkdir(exist_ok=True)
    shutil.move(export / FIRST, outside)
    (export / FIRST).symlink_to(outside)


def temperature_edited(export, tmp_path):
    record = record_of(export)
    record["manifest"]["targets"]["temperature"] = 2.0
    write_record(export, record, identity=False)


def column_renamed_resigned(export, tmp_path):
    for name in (FIRST, SECOND):
        table = pq.read_table(export / name)
        pq.write_table(table.rename_columns([c if c != "tail_logmass" else "tail" for c in table.column_names]),
                       export / name)
    resign(export, identity=True)


def empty_file(export, tmp_path):
    (export / FIRST).write_bytes(b"")


def broken_card(export, tmp_path):
    card = export / "README.md"
    card.write_text("---\nconfigs: [unclosed\n  - : :\n---\n" + card.read_text().split("---", 2)[2])


# (damage, what the one error line says)
DAMAGES = [
    (truncated, "size"),
    (rows_removed_entry_updated, "no longer give the identity"),
    (foreign_file_added, "not listed in destila_cache.json"),
    (reordered, "train-00000-of-00002.parquet: size"),
    (reordered_resigned, "reordered"),
    (mass_two_resigned, "do not sum to 1"),
    (no_position_trained_entry_updated, "no longer give the identity"),
    (nothing_trained_resigned, "hold no trained position"),
    (positions_no_bounds_resigned, "no document bounds"),
    (documents_split_resigned, "the loss mask crosses a document bound"),
    (card_points_outside, "configs name the data files"),
    (link_out, "a symbolic link to"),
    (temperature_edited, "no longer give the identity"),
    (column_renamed_resigned, "columns sequence_index"),
    (empty_file, "size 0 bytes"),
    (broken_card, "README.md"),
]


def trained_steps(out: Path) -> int:
    """Optimizer steps a run left traces of: logged training losses, checkpoints, a saved model."""
    log = out / "log.jsonl"
    logged = sum("loss" in json.loads(line) for line in log.read_text().splitlines() if line.strip()) \
        if log.is_file() else 0
    return logged + len(list(out.glob("checkpoint-*"))) + int((out / "model.safetensors").exists())

