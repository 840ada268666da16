"""A cache held as a dataset: an export folder, a hub dataset, or a ``datasets.Dataset`` in Python.

:func:`open_cache` is where training and eval take their targets from::

    open_cache("cache/")                  # a cache folder (manifest.json): TopKCache
    open_cache("export/")                 # `destila cache export` output: DatasetCache
    open_cache("org/name")                # the same on the Hub: downloaded, then checked as a folder
    open_cache(dataset)                   # a datasets.Dataset (or IterableDataset) holding such rows,
                                          # or Axolotl's target_token_ids / target_logprobs / target_mask
    open_cache("saved/")                  # such a Dataset written by save_to_disk: read as the rows in memory

Every one reads like :class:`~destila.cache.TopKCache`: ``cache[i]`` is the
same dense item (``input_ids``, ``position_ids``, ``labels``, ``topk_ids``,
``topk_logprobs``, ``tail_logmass``), decoded by the same
:func:`~destila.cache.rows.dense_item`, and the same attributes (``manifest``,
``seq_len``, ``top_k``, ``vocab_size``, ``tokenizer_path``, ``kind``). A
streamed dataset (``IterableDataset``, or ``streaming=True``) gives a
``torch`` IterableDataset of those items, in the dataset's order (a trainer
reads its training stream through :meth:`StreamedCache.shuffled`).

A destila export carries its record (the cache's manifest, the fingerprint)
in the dataset card's description, which ``datasets`` keeps in
``dataset.info.description`` through ``map``, ``select`` and ``shuffle``;
rows without one are read by their columns, and what had to be assumed is
said in ``notes`` (and logged once). Naive equivalent of an item::

    row = dataset[i]; mask = row["loss_mask"]
    topk_ids[t] = row["topk_ids"][t] if mask[t] else [0] * K      # and so on for the log-probs and tail
"""

from __future__ import annotations

import copy
import hashlib
import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from destila.cache import axolotl_columns
from destila.cache.checks.export_files import check_export, no_trained_position
from destila.cache.checks.export_rows import ExportRowCheck
from destila.cache.checks.rows import target_value_fault
from destila.cache.dataset_rows import RECORD, RowFormatError, parse_record, stored_row
from destila.cache.format import FORMAT_VERSION, MANIFEST, Manifest
from destila.cache.kinds import KINDS, kind_of
from destila.cache.reader import TopKCache
from destila.cache.rows import dense_item
from destila.data.sources import is_saved_dataset, load_saved_dataset, quiet_datasets
from destila.models.hub import hub_offline_reason
from destila.targets.spec import TargetSpec

log = logging.getLogger("destila.cache")
_OWN_TARGETS = tuple(kind.row_columns[0] for kind in KINDS.values())  # each kind's id column
_SAMPLE_ROWS = 64  # rows read to describe Axolotl rows' rest mass
# Sequences a shuffled stream draws from (datasets' own default): a cache's rows are a few KiB to a few MiB each.
SHUFFLE_BUFFER = 1000


def is_cache_dataset(dataset) -> bool:
    """True when ``dataset`` (a ``datasets`` Dataset or IterableDataset) holds cache rows: an export's or Axolotl's."""
    columns = _columns(dataset)
    return axolotl_columns.is_axolotl(columns) or ("loss_mask" in columns and any(c in columns for c in _OWN_TARGETS))


def _columns(dataset) -> list[str]:
    names = getattr(dataset, "column_names", None)
    if names is None and hasattr(dataset, "features") and dataset.features is not None:
        names = list(dataset.features)
    return list(names or [])


class _Layout:
    """How a dataset's rows become stored rows: the manifest they imply, the decoder, and what was assumed."""

    def __init__(self, dataset, record: dict | None, where: str):
        columns = _columns(dataset)
        self.notes: list[str] = []
        self.vocab_known = True
        self.row_check = None  # rows with a record: each checked as verify checks it (ExportRowCheck)
        if record is not None:
            self.manifest = Manifest.from_dict(record["manifest"], where)
            self.manifest.complete = True
            kind, width, dtype = record["kind"], int(record["width"]), record.get("logprob_dtype") or "float32"
            self.rounding = record.get("logprob_rounding")
            self.decode = lambda table: stored_row(table, kind, width, dtype)  # noqa: E731
            self.row_check = ExportRowCheck(self.manifest, self.rounding)
        elif any(c in columns for c in _OWN_TARGETS) and "loss_mask" in columns:
            self._own_columns(dataset, columns, where)
        elif axolotl_columns.is_axolotl(columns):
            self._axolotl(dataset, where)
        else:
            raise ValueError(f"{where}: columns {', '.join(columns) or '(none)'}; expected a cache's rows "
                             "(`destila cache export`: input_ids, position_ids, loss_mask, topk_ids, topk_logprobs, "
                             "tail_logmass) or Axolotl's (input_ids, target_token_ids, target_logprobs, target_mask)")

    def _first(self, dataset, count: int = 1) -> list:
        rows = []
        for table in dataset.with_format("arrow") if hasattr(dataset, "with_format") else dataset:
            rows.append(table)
            if len(rows) >= count:
                break
        if not rows:
            raise ValueError("cache dataset: holds no rows")
        return rows

    def _synthetic(self, dataset, kind: str, width: int, seq_len: int, where: str, **targets) -> Manifest:
        """A manifest for rows without a record: what the columns say, the rest unknown (empty)."""
        spec = TargetSpec(kind=kind, **{kind_of(kind).fields[0]: width}, **targets)  # K or S: the kind's width
        count = len(dataset) if hasattr(dataset, "__len__") else 0
        fingerprint = str(getattr(dataset, "_fingerprint", "") or "")
        return Manifest(
            format_version=FORMAT_VERSION, teacher="(not recorded)", teacher_path="", teacher_gguf_file=None,
            teacher_architecture="", teacher_config_hash="", teacher_weight_fingerprint="", teacher_dtype="",
            tokenizer_fingerprint="", tokenizer_size=0, eos_token_id=0, vocab_size=0, targets=asdict(spec),
            encoding="plain", compact=None, seq_len=seq_len, logprob_dtype="float32", data_source=where,
            text_field="", max_tokens=None, data_fingerprint=fingerprint, ids_fingerprint=fingerprint,
            sequences=count, tokens=count * seq_len, complete=True)

    def _own_columns(self, dataset, columns, where: str) -> None:
        """Export columns without the record (pushed with ``Dataset.push_to_hub``, or built by hand)."""
        first = self._first(dataset)[0]
        # The kind whose id column the rows have (no record names it).
        kind = next(name for name, target in KINDS.items() if target.row_columns[0] in columns)
        names = kind_of(kind).row_columns
        ids = first.column(names[0]).combine_chunks().flatten()
        lengths = ids.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
        width = int(lengths.max()) if lengths.size and lengths.max() > 0 else 1
        dtype = "float32"
        if kind_of(kind).has_logprobs:  # the log-probs' column type is their dtype
            dtype = first.schema.field(names[1]).type.value_type.value_type.to_pandas_dtype().__name__
        self.rounding = dtype
        self.manifest = self._synthetic(dataset, kind, width, _seq_len(dataset, first), where)
        self.manifest.spans = "span_start" in columns  # an export's byte spans, read back by stored_row
        self.vocab_known = False
        self.decode = lambda table: stored_row(table, kind, width, dtype)  # noqa: E731
        self.notes.append(f"{where}: cache rows without destila's record (no dataset description): temperature taken "
                          "as 1.0, vocabulary and tokenizer as the student's")

    def _axolotl(self, dataset, where: str) -> None:
        rows = self._first(dataset, _SAMPLE_ROWS)
        _, lengths = axolotl_columns._nested(rows[0].column("target_token_ids"))
        width = int(lengths.max()) if lengths.size else 0
        if width < 1:
            raise ValueError(f"{where}: target_token_ids of the first row holds no entries; expected K per position")
        rests, seen = [], 0
        for table in rows:
            try:
                stored = axolotl_columns.stored_row(table, width)
            except RowFormatError as err:
                raise ValueError(f"{where}: {err}") from err
            rests.extend(np.exp(stored["tail"].astype(np.float64)).tolist())
            seen += 1
        self.rounding = "float32"
        self.manifest = self._synthetic(dataset, "topk", width, _seq_len(dataset, rows[0]), where)
        self.vocab_known = False
        self.decode = lambda table: axolotl_columns.stored_row(table, width)  # noqa: E731
        self.notes.append(f"{where}: " + axolotl_columns.rest_note(float(np.mean(rests)) if rests else 0.0, seen))


def _seq_len(dataset, first) -> int:
    """The longest row of a map-style dataset (read from the column's list lengths), else the first row's."""
    # pyarrow.compute loads on top of pyarrow: only for a map-style dataset's lengths
    import pyarrow.compute as pc

    table = getattr(dataset, "data", None)
    if table is not None and hasattr(table, "column") and "input_ids" in dataset.column_names:
        return int(pc.max(pc.list_value_length(table.column("input_ids"))).as_py() or 0)
    return len(first.column("input_ids").combine_chunks().flatten())


class _CacheRows:
    """What both readers share: the attributes of a TopKCache and the decoding of one row."""

    def _setup(self, dataset, record: dict | None, where: str, tokenizer_path, ordered: bool = False) -> None:
        self._layout = _Layout(dataset, record, where)
        self._ordered = ordered  # an export's own files: row i holds sequence i
        self.manifest, self.notes = self._layout.manifest, self._layout.notes
        self.path, self.tokenizer_path = where, Path(tokenizer_path) if tokenizer_path else None
        self.seq_len, self.top_k = self.manifest.seq_len, self.manifest.top_k
        self.vocab_size = self.manifest.vocab_size if self._layout.vocab_known else None
        self.hidden_layers = self.hidden_dim = None  # an export carries no teacher hidden states
        rounding = self._layout.rounding
        self.logprob_dtype = getattr(torch, rounding) if rounding and kind_of(self.manifest.target_kind).has_logprobs \
            else torch.float32
        for note in self.notes:
            log.warning(note)

    @property
    def kind(self):
        return kind_of(self.manifest.target_kind)

    def assume_vocab_size(self, vocab_size: int) -> None:
        """Rows that do not record their vocabulary take the student's (ids are then checked against it)."""
        if self.vocab_size is None:
            self.vocab_size = self.manifest.vocab_size = int(vocab_size)

    def _item(self, table, where: str, place: int | None = None) -> dict:
        try:
            stored = self._layout.decode(table)
        except RowFormatError as err:
            raise ValueError(f"{self.path}: {where}: {err}; the dataset is damaged or not a cache's rows") from err
        if self._layout.row_check is not None:
            fault = self._layout.row_check.fault(table, stored, place if self._ordered else None)
            if fault is not None:  # never a loss from a row verify would refuse
                raise ValueError(f"{self.path}: {where}: {fault}; the dataset is damaged: `destila cache verify` "
                                 "lists every fault; export the cache again")
        item = dense_item(stored, self.manifest)
        if item["topk_logprobs"].dtype != self.logprob_dtype:  # bfloat16 log-probs travel widened to float32
            item["topk_logprobs"] = item["topk_logprobs"].to(self.logprob_dtype)
        if self.vocab_size is not None:
            fault = target_value_fault(item, self.vocab_size)
            if fault is not None:
                raise ValueError(f"{self.path}: {where} holds {fault}; the dataset is damaged or not this "
                                 "vocabulary's")
        return item


class DatasetCache(_CacheRows, torch.utils.data.Dataset):
    """A map-style ``datasets.Dataset`` of cache rows, read as :class:`~destila.cache.TopKCache` items."""

    def __init__(self, dataset, *, record: dict | None = None, where: str | None = None, tokenizer_path=None,
                 ordered: bool = False):
        record = record if record is not None else parse_record(dataset.info.description, "dataset description")
        self.dataset = dataset.with_format("arrow")
        self._setup(dataset, record, where or f"<datasets.Dataset {len(dataset)} rows>", tokenizer_path, ordered)
        self.manifest.sequences = len(dataset)
        if record is not None and not ordered:  # rows with a record, given in Python (an export's files: on open)
            self._check_trained()

    def _check_trained(self) -> None:
        """Refuse rows none of which is trained (only the ``loss_mask`` column is read), as an export's files are."""
        # pyarrow.compute loads on top of pyarrow: only for the loss_mask check
        import pyarrow.compute as pc

        column = self.dataset[:]["loss_mask"] if len(self) else None
        if column is not None and not pc.any(pc.list_flatten(column)).as_py():
            raise ValueError(f"{self.path}: {no_trained_position(len(self))}; the dataset is damaged: export the "
                             "cache again")

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        index = int(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"sequence {index} out of range for {len(self)} rows")
        index %= len(self)
        return self._item(self.dataset[index], f"row {index}", index)


class StreamedCache(_CacheRows, torch.utils.data.IterableDataset):
    """A ``datasets.IterableDataset`` of cache rows, read as a stream of :class:`~destila.cache.TopKCache` items."""

    shuffle: tuple[int, int] | None = None  # (seed, buffer) once shuffled (:meth:`shuffled`)
    epoch = 0  # the epoch a shuffled stream's order follows (:meth:`set_epoch`)

    def __init__(self, dataset, *, record: dict | None = None, where: str | None = None, tokenizer_path=None,
                 ordered: bool = False):
        record = record if record is not None else parse_record(dataset.info.description, "dataset description")
        self.dataset = dataset
        self._setup(dataset, record, where or "<datasets.IterableDataset>", tokenizer_path, ordered)

    def __iter__(self):
        rows = self.dataset.with_format("arrow")
        rows.set_epoch(self.epoch)  # with_format starts a copy at epoch 0; a shuffled stream's order follows it
        for number, table in enumerate(rows):
            yield self._item(table, f"row {number}", number)

    def shuffled(self, seed: int, buffer_size: int = SHUFFLE_BUFFER) -> "StreamedCache":
        """This stream read in a shuffled order, as the Trainer's sampler reads a cache:
        ``datasets.IterableDataset.shuffle(seed, buffer_size)`` (the files' order shuffled, then each sequence
        drawn at random from a buffer of ``buffer_size``). Rows are then no longer checked to hold their own
        sequence index (row i is not sequence i); every other row check stays."""
        twin = copy.copy(self)
        twin.dataset = self.dataset.shuffle(seed=seed, buffer_size=buffer_size)
        twin._ordered, twin.shuffle = False, (seed, buffer_size)
        return twin

    def set_epoch(self, epoch: int) -> None:
        """Each epoch its own order (``datasets`` reseeds a shuffled stream with the epoch); the Trainer calls it
        through its data loader."""
        self.epoch = int(epoch)


def open_cache(source, *, streaming: bool = False, split: str = "train"):
    """The targets of ``source`` as a cache reader (see the module docstring); a reader is returned as is."""
    # datasets is heavy: only when a cache is opened
    import datasets

    if isinstance(source, datasets.IterableDataset):
        return StreamedCache(source)
    if isinstance(source, datasets.Dataset):
        return DatasetCache(source)
    if hasattr(source, "manifest") and (hasattr(source, "__getitem__") or hasattr(source, "__iter__")):
        return source  # TopKCache, DatasetCache, StreamedCache, a mix of caches
    path = Path(str(source)).expanduser()
    if path.is_dir():
        if (path / MANIFEST).is_file():
            if streaming:
                raise ValueError(f"{path}: a cache folder is read by random access, not streamed; export it "
                                 f"(`destila cache export {path} OUT`) to stream it")
            return TopKCache(path)
        if (path / RECORD).is_file():
            return _load_export(str(path), path, streaming, split)
        if is_saved_dataset(path):  # Dataset.save_to_disk of export rows or Axolotl's: read as the rows in memory
            rows = load_saved_dataset(path, split)
            if streaming:
                return StreamedCache(rows.to_iterable_dataset(), where=str(path))
            return DatasetCache(rows, where=str(path))
        raise FileNotFoundError(f"{path}: no {MANIFEST} and no {RECORD}; expected a cache folder written by "
                                "`destila cache build`, a dataset written by `destila cache export`, or a folder "
                                "`Dataset.save_to_disk` wrote of cache rows (or of Axolotl's KD columns)")
    from destila.hub_ids import missing_cache_problem  # the same test as data sources' and `destila train`'s

    if problem := missing_cache_problem(source):
        raise FileNotFoundError(problem)
    return _load_hub(str(source), streaming, split)


def _load_export(name: str, folder: Path, streaming: bool, split: str, links_within: Path | None = None):
    """An export folder read after its files are checked (:func:`~destila.cache.checks.export_files.check_export`):
    exactly the files its record lists, never what the card or ``data/`` says besides, through an Arrow cache of
    ``datasets`` keyed by the files' content (a file restored after a damaged one was read is never served stale).
    ``links_within``: a folder the export's files may link into (a hub snapshot's repo folder; default the
    export's own)."""
    # datasets is heavy: only for an export
    import datasets

    record = parse_record((folder / RECORD).read_text(), str(folder / RECORD))
    if record is None:
        raise ValueError(f"{folder / RECORD}: not an export record; expected the file `destila cache export` writes: "
                         "export the cache again")
    check_export(folder, record, links_within=links_within)
    files = [str((folder / entry["name"]).absolute()) for entry in record["files"]]
    with quiet_datasets():
        dataset = datasets.load_dataset("parquet", data_files={"train": files}, split=split, streaming=streaming,
                                        cache_dir=str(_arrow_cache(record)))
    reader = StreamedCache if streaming else DatasetCache
    return reader(dataset, record=record, where=name, tokenizer_path=folder / "tokenizer", ordered=True)


def _arrow_cache(record: dict) -> Path:
    """Where ``datasets`` keeps the Arrow copy of an export's files: a folder named by their SHA-256 (checked on
    open), since its own cache key is their paths and modification times."""
    # datasets is heavy: only for an export
    import datasets

    content = hashlib.sha256("".join(f"{e['name']}:{e['sha256']};" for e in record["files"]).encode()).hexdigest()
    return Path(datasets.config.HF_DATASETS_CACHE) / "destila-exports" / content[:32]


def _load_hub(repo: str, streaming: bool, split: str):
    """A hub dataset: an export (it holds the record) is downloaded whole into the hub cache and read from that
    snapshot as an export folder, through every check a local one gets (its files are links into the repo's
    ``blobs/``, which is where they may lead); rows without a record are read by their columns. Without the hub,
    a snapshot already in the hub cache is used."""
    # datasets is heavy: only for a hub dataset
    import datasets

    reason = hub_offline_reason()
    local = _hub_snapshot(repo, [RECORD, "tokenizer/*"], reason)
    if (local / RECORD).is_file():
        local = _hub_snapshot(repo, None, reason)  # the whole export: its files are checked as a folder's
        return _load_export(repo, local, streaming, split, links_within=local.parent.parent)
    if reason is not None:
        raise ValueError(f"cache: {repo!r} is not a local folder, and the Hub is out of reach ({reason}); download "
                         "the dataset elsewhere and pass its folder")
    with quiet_datasets():
        dataset = datasets.load_dataset(repo, split=split, streaming=streaming)
    reader = StreamedCache if streaming else DatasetCache
    tokenizer = local / "tokenizer" if (local / "tokenizer").is_dir() else None
    return reader(dataset, record=None, where=repo, tokenizer_path=tokenizer)


def _hub_snapshot(repo: str, patterns: list[str] | None, offline_reason: str | None) -> Path:
    """The hub cache's snapshot folder of the dataset ``repo`` (``patterns``: only those files; None: all),
    downloaded, or found in the cache when the hub is out of reach."""
    # huggingface_hub's download code: only for a hub dataset
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo, repo_type="dataset", allow_patterns=patterns,
                                      local_files_only=offline_reason is not None))
    except LocalEntryNotFoundError as err:
        raise ValueError(f"cache: {repo!r} is not a local folder, and the Hub is out of reach ({offline_reason or err})"
                         " with no copy of it in the hub cache; download the dataset elsewhere and pass its "
                         "folder") from err
    except HfHubHTTPError as err:
        raise FileNotFoundError(f"cache: {repo!r} could not be downloaded from the Hub ({type(err).__name__}); "
                                "check the dataset id and your access to it") from err
