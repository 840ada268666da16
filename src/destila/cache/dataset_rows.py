"""A cache as rows of a dataset: one row per sequence, in Arrow columns, and back to the reader's stored rows.

The row of a sequence of ``L`` tokens (``W`` entries per trained position: K
for top-K targets, S for sampled ones)::

    sequence_index  int64
    input_ids       list<int32> [L]       the tokens the teacher read
    position_ids    list<int32> [L]       restarting at 0 where a packed document starts: the document bounds
    loss_mask       list<bool>  [L]       true at t: the target at t, the token t+1, is trained
    top-K targets:
    topk_ids        list<list<int32>> [L][W]   the teacher's top-K ids for the token at t+1; [] where untrained
    topk_logprobs   list<list<float>> [L][W]   their log-probs over the full vocabulary, descending;
                                               float16 when the cache stored float16, else float32
    tail_logmass    list<float32> [L]         log of the mass outside the top-K (exact); 0 where untrained
    sampled targets:
    sample_ids      list<list<int32>> [L][S]   distinct drawn ids by decreasing count, then padding (count 0)
    sample_counts   list<list<int32>> [L][S]   their counts, summing to S; [] where untrained
    a cache built with --spans (destila.cache.spans), after the targets:
    span_start      list<int64> [L]           each input token's byte span [span_start, span_end) in its
    span_end        list<int64> [L]           document; -1 at padding

:func:`rows_table` turns the reader's stored rows (:meth:`destila.cache.rows.ShardRows.stored`)
into such a table and :func:`stored_row` turns a row back, so a dataset row
decodes through :func:`destila.cache.rows.dense_item` to the item the cache
itself gives, bit for bit. :class:`ContentDigest` is the fingerprint that
travels with an export: a SHA-256 of every row's values in their stored
dtypes, the same whatever the Parquet files' compression or row groups.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa

from destila.cache.kinds import KINDS, kind_of

ROW_FIELDS = ("sequence_index", "input_ids", "position_ids", "loss_mask")
SPAN_FIELDS = ("span_start", "span_end")
TARGET_FIELDS = {name: kind.row_columns for name, kind in KINDS.items()}  # each kind's own columns
# Storage dtypes of the log-probs in a dataset row: Arrow has float16 but no bfloat16 (widened, exactly).
ARROW_LOGPROB_DTYPES = {"float16": "float16", "bfloat16": "float32", "float32": "float32"}


class RowFormatError(ValueError):
    """A dataset row whose columns do not have the lengths its loss mask implies."""


def schema(kind: str, logprob_dtype: str = "float32", spans: bool = False) -> pa.Schema:
    """The Arrow schema of a cache's rows: the row fields, then the kind's, then the spans when the cache has
    them (see the module docstring)."""
    fields = [pa.field("sequence_index", pa.int64()), pa.field("input_ids", pa.list_(pa.int32())),
              pa.field("position_ids", pa.list_(pa.int32())), pa.field("loss_mask", pa.list_(pa.bool_()))]
    columns = kind_of(kind).row_columns  # an unknown kind is refused here
    if kind_of(kind).has_logprobs:  # ids, their log-probs, the rest mass
        fields += [pa.field(columns[0], pa.list_(pa.list_(pa.int32()))),
                   pa.field(columns[1], pa.list_(pa.list_(pa.from_numpy_dtype(np.dtype(logprob_dtype))))),
                   pa.field(columns[2], pa.list_(pa.float32()))]
    else:  # distinct ids and their counts
        fields += [pa.field(columns[0], pa.list_(pa.list_(pa.int32()))),
                   pa.field(columns[1], pa.list_(pa.list_(pa.int32())))]
    if spans:
        fields += [pa.field(name, pa.list_(pa.int64())) for name in SPAN_FIELDS]
    return pa.schema(fields)


def canonical(stored: dict, kind: str, logprob_dtype: str = "float32") -> dict:
    """A stored row (numpy, or torch for bfloat16 log-probs) with its entries in the order the reader's items
    have them (top-K: decreasing log-prob; sampled: decreasing count; ties keep the stored order) and its
    log-probs in ``logprob_dtype``. Reordering this way again changes nothing, so the dense item is the same."""
    row = {"input_ids": np.asarray(stored["input_ids"], dtype=np.int64),
           "position_ids": np.asarray(stored["position_ids"], dtype=np.int64),
           "loss_mask": np.asarray(stored["loss_mask"], dtype=bool)}
    ids = np.asarray(stored["ids"], dtype=np.int64)
    if kind_of(kind).has_logprobs:
        logprobs = stored["logprobs"]
        if not isinstance(logprobs, np.ndarray):  # a torch tensor (bfloat16): widened exactly
            logprobs = logprobs.float().numpy()
        order = np.argsort(-logprobs.astype(np.float32), axis=1, kind="stable")
        row.update(ids=np.take_along_axis(ids, order, 1),
                   logprobs=np.take_along_axis(logprobs, order, 1).astype(logprob_dtype),
                   tail=np.asarray(stored["tail"], dtype=np.float32))
    else:
        counts = np.asarray(stored["counts"], dtype=np.int64)
        order = np.argsort(-counts, axis=1, kind="stable")
        row.update(ids=np.take_along_axis(ids, order, 1), counts=np.take_along_axis(counts, order, 1))
    for name in SPAN_FIELDS:
        if name in stored:
            row[name] = np.asarray(stored[name], dtype=np.int64)
    return row


def _nested(flat: np.ndarray, lengths: np.ndarray, outer: np.ndarray, value_type) -> pa.Array:
    """``list<list<value_type>>`` from the flat values, the inner lists' lengths and the outer offsets."""
    inner_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    inner = pa.ListArray.from_arrays(pa.array(inner_offsets), pa.array(flat, type=value_type))
    return pa.ListArray.from_arrays(pa.array(outer.astype(np.int32)), inner)


def rows_table(rows: list[tuple[int, dict]], kind: str, logprob_dtype: str = "float32") -> pa.Table:
    """The Arrow table of ``rows``: ``(sequence index, canonical stored row)`` pairs (:func:`canonical`)."""
    lengths = np.array([len(row["input_ids"]) for _, row in rows], dtype=np.int64)
    outer = np.concatenate([[0], np.cumsum(lengths)])
    flat = lambda key, dtype: np.concatenate([row[key] for _, row in rows]).astype(dtype)  # noqa: E731
    mask = flat("loss_mask", bool)
    width = rows[0][1]["ids"].shape[1] if rows else 0
    per_position = np.where(mask, width, 0)
    columns = {
        "sequence_index": pa.array([index for index, _ in rows], type=pa.int64()),
        "input_ids": pa.ListArray.from_arrays(pa.array(outer.astype(np.int32)), pa.array(flat("input_ids", np.int32))),
        "position_ids": pa.ListArray.from_arrays(pa.array(outer.astype(np.int32)),
                                                 pa.array(flat("position_ids", np.int32))),
        "loss_mask": pa.ListArray.from_arrays(pa.array(outer.astype(np.int32)), pa.array(mask)),
    }
    ids = np.concatenate([row["ids"].reshape(-1) for _, row in rows]).astype(np.int32)
    names = kind_of(kind).row_columns
    if kind_of(kind).has_logprobs:
        logprobs = np.concatenate([row["logprobs"].reshape(-1) for _, row in rows]).astype(logprob_dtype)
        tail = np.zeros(len(mask), dtype=np.float32)
        tail[mask] = np.concatenate([row["tail"] for _, row in rows])
        columns.update({
            names[0]: _nested(ids, per_position, outer, pa.int32()),
            names[1]: _nested(logprobs, per_position, outer, pa.from_numpy_dtype(np.dtype(logprob_dtype))),
            names[2]: pa.ListArray.from_arrays(pa.array(outer.astype(np.int32)), pa.array(tail))})
    else:
        counts = np.concatenate([row["counts"].reshape(-1) for _, row in rows]).astype(np.int32)
        columns.update({names[0]: _nested(ids, per_position, outer, pa.int32()),
                        names[1]: _nested(counts, per_position, outer, pa.int32())})
    spans = bool(rows) and SPAN_FIELDS[0] in rows[0][1]
    for name in SPAN_FIELDS if spans else ():
        columns[name] = pa.ListArray.from_arrays(pa.array(outer.astype(np.int32)), pa.array(flat(name, np.int64)))
    return pa.table(columns, schema=schema(kind, logprob_dtype, spans))


def _values(column, dtype=None) -> np.ndarray:
    """The values of a one-row ``list<…>`` column (a ``ChunkedArray`` or ``Array``) as numpy."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    values = array.flatten().to_numpy(zero_copy_only=False)
    return np.array(values, dtype=dtype)  # a writable copy: torch refuses to wrap Arrow's read-only buffers


def _entries(column, mask: np.ndarray, width: int, name: str, dtype) -> np.ndarray:
    """``[P, width]`` entries of a one-row ``list<list<…>>`` column: ``width`` where ``mask``, none elsewhere."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    inner = array.flatten()
    if len(inner) != len(mask):
        raise RowFormatError(f"{name} has {len(inner)} positions, the row has {len(mask)}")
    lengths = inner.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    expected = np.where(mask, width, 0)
    if not np.array_equal(lengths, expected):
        bad = int(np.flatnonzero(lengths != expected)[0])
        raise RowFormatError(f"{name} holds {int(lengths[bad])} entries at position {bad}, expected "
                             f"{int(expected[bad])} ({'a trained' if mask[bad] else 'an untrained'} position)")
    return np.array(inner.flatten().to_numpy(zero_copy_only=False), dtype=dtype).reshape(-1, width)


def stored_row(table: pa.Table, kind: str, width: int, logprob_dtype: str = "float32") -> dict:
    """The stored row (:meth:`~destila.cache.rows.ShardRows.stored`) of a one-row table of :func:`schema`'s columns.

    Raises :class:`RowFormatError` when a column's lengths contradict the loss mask."""
    row = {name: _values(table.column(name), np.int64) for name in ("input_ids", "position_ids")}
    row["loss_mask"] = _values(table.column("loss_mask"), bool)
    length = len(row["input_ids"])
    if len(row["position_ids"]) != length or len(row["loss_mask"]) != length:
        raise RowFormatError(f"input_ids, position_ids and loss_mask have {length}, {len(row['position_ids'])} and "
                             f"{len(row['loss_mask'])} positions; they must be equal")
    mask = row["loss_mask"]
    names = kind_of(kind).row_columns
    row["ids"] = _entries(table.column(names[0]), mask, width, names[0], np.int64)
    if kind_of(kind).has_logprobs:
        row["logprobs"] = _entries(table.column(names[1]), mask, width, names[1], logprob_dtype)
        tail = _values(table.column(names[2]), np.float32)
        if len(tail) != length:
            raise RowFormatError(f"{names[2]} has {len(tail)} positions, the row has {length}")
        row["tail"] = tail[mask]
    else:
        row["counts"] = _entries(table.column(names[1]), mask, width, names[1], np.int64)
    for name in SPAN_FIELDS if SPAN_FIELDS[0] in table.column_names else ():
        row[name] = _values(table.column(name), np.int64)
        if len(row[name]) != length:
            raise RowFormatError(f"{name} has {len(row[name])} positions, the row has {length}")
    return row


class ContentDigest:
    """SHA-256 over rows in order: each row's index and values, in fixed dtypes (int32 ids, uint8 mask, the
    log-probs' storage dtype, float32 tail), so equal content gives an equal digest whatever the files."""

    def __init__(self):
        self._hash = hashlib.sha256()
        self.rows = 0

    def update(self, index: int, row: dict, kind: str, logprob_dtype: str = "float32") -> None:
        update = self._hash.update
        update(np.int64(index).tobytes())
        update(np.asarray(row["input_ids"], dtype="<i4").tobytes())
        update(np.asarray(row["position_ids"], dtype="<i4").tobytes())
        update(np.asarray(row["loss_mask"], dtype=np.uint8).tobytes())
        update(np.asarray(row["ids"], dtype="<i4").tobytes())
        if kind_of(kind).has_logprobs:
            update(np.asarray(row["logprobs"], dtype=np.dtype(logprob_dtype).newbyteorder("<")).tobytes())
            update(np.asarray(row["tail"], dtype="<f4").tobytes())
        else:
            update(np.asarray(row["counts"], dtype="<i4").tobytes())
        for name in SPAN_FIELDS:  # only rows of a cache with spans have them: other digests are unchanged
            if name in row:
                update(np.asarray(row[name], dtype="<i8").tobytes())
        self.rows += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


# -- the export record (destila_cache.json, and the dataset card's description) ------------------------------

RECORD = "destila_cache.json"
RECORD_FORMAT = "destila-cache-dataset"
RECORD_VERSION = 1
DATA_DIR = "data"


def parse_record(text: str | None, where: str) -> dict | None:
    """The export record in ``text`` (``destila_cache.json``, or a loaded Dataset's ``info.description``),
    or None when ``text`` is not one. Raises ``ValueError`` for a record of another version."""
    if not text or not text.lstrip().startswith("{"):
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        return None
    if record.get("version") != RECORD_VERSION:
        raise ValueError(f"{where}: an export of format version {record.get('version')}; this destila reads version "
                         f"{RECORD_VERSION}: export the cache again with this destila")
    return record
