"""Cross-tokenizer items computed once, stored beside the vocabulary map, and read back at a cache's speed.

    items = stored_items(CrossTokenizerCache("cache/", "student-tok/", map_folder="run/"))
    items[i]            # == the CrossTokenizerCache's item i, read from run/items-<key>-<n>.safetensors
    items.coverage      # the Coverage of every sequence, summed while the items were written

Aligning a sequence (the student's tokenization, the chain rule of
many-to-one rows, the targets moved through the map) costs several times a
cache read per item, and a training run reads every item once per epoch.
:func:`stored_items` does that work once for the whole cache and writes the
items into safetensors shards in the map's folder; :class:`StoredItems` reads
an item as slices of memory-mapped tensors.

Layout, per shard of up to :data:`SHARD_SEQUENCES` sequences (``T`` student
tokens, ``E`` target entries): ``offsets [n+1]`` and ``entry_offsets [n+1]``
(where each sequence starts), the per-token ``input_ids``, ``position_ids``,
``labels``, ``align_kind``, ``label_bytes`` and ``tail_logmass`` ``[T]``,
``entries [T]`` (a row's finite targets: always its first ones, since the
rows are descending with ``-inf`` last) and the flat ``entry_ids``,
``entry_logprobs`` ``[E]``; with ULD the same for ``uld_logprobs``
(``uld_entries``, ``uld_flat``). A row keeps only its entries, so a store is
smaller than ``K`` entries per token when much of the teacher's top-K does
not map. Naive equivalent of an item: ``dataset[i]`` of the
:class:`~destila.crosstok.dataset.CrossTokenizerCache`.

The store's name holds a key of everything an item depends on (the cache's
content and targets, both tokenizers, ULD, the dtype, this layout's
version): its identity, which every shard carries too. The index records
each shard's size and SHA-256, checked when the store is opened (once per
process that opens it), so a value changed in place after the write is
caught and the store written again. A store is written by one process at a
time (a lock beside it) into a hidden staging folder
(``.items-KEY.tmp-RANDOM``) whose shards, then index, are renamed into place:
a killed build leaves no index, and the next build removes its staging
folder before writing the store again; a folder that belongs to a cache, an
export or a model is refused (:mod:`~destila.crosstok.staged_store`, which
the vocabulary map's store shares).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from pathlib import Path

import numpy as np
import torch

from destila.crosstok.staged_store import check_file, file_entry, write_staged
from destila.io import write_atomic

STORE_VERSION = 2  # 2: the index records each shard's size and SHA-256
SHARD_SEQUENCES = 256
log = logging.getLogger("destila.crosstok")

_TOKEN_FIELDS = ("input_ids", "position_ids", "labels", "align_kind", "label_bytes")
_INDEX_DTYPE = {"input_ids": np.int32, "position_ids": np.int32, "labels": np.int32, "align_kind": np.int8,
                "label_bytes": np.int32}


def store_key(data) -> str:
    """16 hex digits naming the items of ``data`` (a :class:`~destila.crosstok.dataset.CrossTokenizerCache`)."""
    manifest = data.cache.manifest
    parts = {
        "version": STORE_VERSION,
        "shards": [shard.sha256 for shard in manifest.shards],
        "targets": manifest.targets if isinstance(manifest.targets, dict) else repr(manifest.targets),
        "teacher_tokenizer": data.vocab_map.teacher_fingerprint,
        "student_tokenizer": data.vocab_map.student_fingerprint,
        "uld": data.uld,
        "dtype": str(data.dtype),
        "sequences": len(data),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def index_path(folder: Path, key: str) -> Path:
    return Path(folder) / f"items-{key}.json"


def stored_items(data, folder: str | Path | None = None, *, progress=None) -> "StoredItems":
    """The items of ``data`` read from their store in ``folder`` (default: the vocabulary map's folder),
    written first when it holds none. ``progress(done, total)`` is called after each sequence written."""
    if folder is None:
        if data.vocab_map.path is None:
            raise ValueError("stored_items: the dataset has no map_folder; give a folder to store the items in")
        folder = data.vocab_map.path.parent
    folder, key = Path(folder), store_key(data)
    index = index_path(folder, key)
    if index.is_file():
        try:
            return StoredItems(index)
        except Exception as err:  # noqa: BLE001 - a damaged or edited store (safetensors' own error type too)
            log.warning("cross-tokenizer items at %s cannot be read (%s); writing them again", index, err)
    write_store(data, folder, key, progress=progress)
    return StoredItems(index)


def _ragged(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(counts [T], flat [Σ counts])`` of a ``[T, K]`` block whose finite entries lead each row."""
    finite = block > -np.inf
    counts = finite.sum(axis=1)
    if not (finite == (np.arange(block.shape[1]) < counts[:, None])).all():
        raise AssertionError("cross-tokenizer items: a row's targets are not leading (descending, -inf last)")
    return counts, block[finite]


def write_store(data, folder: Path, key: str, *, progress=None) -> Path:
    """Align every sequence of ``data`` and write the shards, then the index (see the module docstring)."""

    def write(staging: Path) -> None:
        threads = torch.get_num_threads()
        # Many small operations per sequence: one thread (as in a DataLoader worker) measured several times faster
        # than a thread pool contending for busy cores.
        torch.set_num_threads(1)
        try:
            _write_shards(data, staging, key, progress)
        finally:
            torch.set_num_threads(threads)

    busy = f"alignment: another run is writing the aligned items in {folder}"
    return write_staged(Path(folder), f"items-{key}", write, busy=busy)


def _write_shards(data, folder: Path, key: str, progress) -> Path:
    # safetensors' writer: only when the shards are written
    from safetensors.numpy import save

    # crosstok.coverage imports the cache reader (pyarrow): only when shards are written
    from destila.crosstok.coverage import summarise

    total, shards, stats, longest = len(data), [], {}, 0
    for first in range(0, total, SHARD_SEQUENCES):
        columns: dict[str, list] = {}
        lengths, entry_counts = [], []
        for index in range(first, min(first + SHARD_SEQUENCES, total)):
            aligned = data.align(index)
            for name, value in aligned.stats.items():
                stats[name] = stats.get(name, 0) + value
            item = {name: value.numpy() for name, value in aligned.item.items()}
            counts, flat = _ragged(item["topk_logprobs"])
            finite = item["topk_logprobs"] > -np.inf
            pieces = {name: item[name].astype(_INDEX_DTYPE[name]) for name in _TOKEN_FIELDS}
            pieces.update(tail_logmass=item["tail_logmass"], entries=counts.astype(np.int32),
                          entry_ids=item["topk_ids"][finite].astype(np.int32), entry_logprobs=flat)
            if not (item["topk_ids"][~finite] == 0).all():
                raise AssertionError("cross-tokenizer items: an empty target slot with an id other than 0")
            if data.uld:
                pieces["uld_entries"], pieces["uld_flat"] = (v.astype(np.int32) if i == 0 else v for i, v in
                                                             enumerate(_ragged(item["uld_logprobs"])))
            for name, value in pieces.items():
                columns.setdefault(name, []).append(value)
            lengths.append(len(item["input_ids"]))
            longest = max(longest, lengths[-1])
            entry_counts.append(len(flat))
            if progress is not None:
                progress(index + 1, total)
        tensors = {name: np.ascontiguousarray(np.concatenate(parts)) for name, parts in columns.items()}
        if data.uld:
            tensors["uld_offsets"] = np.concatenate([[0], np.cumsum([len(p) for p in columns["uld_flat"]])])
        tensors["offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        tensors["entry_offsets"] = np.concatenate([[0], np.cumsum(entry_counts)]).astype(np.int64)
        name = f"items-{key}-{len(shards):05d}.safetensors"
        payload = save(tensors, metadata={"key": key})
        write_atomic(folder / name, payload)
        shards.append({**file_entry(name, payload), "first": first, "sequences": len(lengths)})
    index = {"version": STORE_VERSION, "key": key, "sequences": total, "width": data.width, "uld": data.uld,
             "longest": longest, "dtype": str(data.dtype).removeprefix("torch."), "shards": shards, "stats": stats,
             "vocab": data.vocab_map.summary(), "coverage": summarise(stats, total, data.vocab_map.summary())}
    write_atomic(index_path(folder, key), json.dumps(index, indent=1))
    return index_path(folder, key)


class StoredItems(torch.utils.data.Dataset):
    """The items of a store written by :func:`write_store`, memory-mapped; ``coverage``: every sequence's."""

    def __init__(self, index: str | Path):
        # crosstok.coverage imports the cache reader (pyarrow): only when a store is read
        from destila.crosstok.coverage import Coverage

        self.index_path = Path(index)
        self.index = json.loads(self.index_path.read_text())
        if self.index.get("version") != STORE_VERSION:
            raise ValueError(f"store version {self.index.get('version')}, expected {STORE_VERSION}")
        self.width, self.uld = int(self.index["width"]), bool(self.index["uld"])
        self.longest = int(self.index["longest"])  # the most student tokens in one sequence
        self._dtype = getattr(torch, self.index["dtype"])
        self.coverage = Coverage.from_dict(self.index["coverage"])
        self._starts = [shard["first"] for shard in self.index["shards"]]
        self._handles: dict = {}
        self._offsets: dict = {}
        self._checked: set = set()  # shards whose size and SHA-256 were checked (kept by DataLoader workers)
        for number in range(len(self._starts)):  # every shard opens (a missing or damaged one is refused now)
            self._open(number)
        if sum(shard["sequences"] for shard in self.index["shards"]) != self.index["sequences"]:
            raise ValueError("the shards do not hold every sequence")

    def __len__(self) -> int:
        return int(self.index["sequences"])

    def __getstate__(self):  # DataLoader workers open their own memory maps
        return {**self.__dict__, "_handles": {}}

    def _open(self, number: int):
        if number not in self._handles:
            # safetensors: only when a shard is first opened
            from safetensors import safe_open

            shard = self.index["shards"][number]
            if number not in self._checked:
                check_file(self.index_path.parent / shard["name"], shard)
                self._checked.add(number)
            handle = safe_open(str(self.index_path.parent / shard["name"]), framework="pt")
            if handle.metadata().get("key") != self.index["key"]:
                raise ValueError(f"shard {shard['name']} belongs to another store")
            self._handles[number] = handle
            names = ["offsets", "entry_offsets"] + (["uld_offsets"] if self.uld else [])
            self._offsets[number] = {name: handle.get_tensor(name).tolist() for name in names}
        return self._handles[number], self._offsets[number]

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < len(self):
            raise IndexError(f"sequence {index} of {len(self)}")
        number = int(np.searchsorted(self._starts, index, side="right")) - 1
        handle, offsets = self._open(number)
        local = index - self._starts[number]
        a, b = offsets["offsets"][local], offsets["offsets"][local + 1]
        e0, e1 = offsets["entry_offsets"][local], offsets["entry_offsets"][local + 1]
        item = {name: handle.get_slice(name)[a:b].long() for name in _TOKEN_FIELDS}
        item["tail_logmass"] = handle.get_slice("tail_logmass")[a:b]
        entries = handle.get_slice("entries")[a:b]
        filled = torch.arange(self.width) < entries[:, None]
        ids = torch.zeros(b - a, self.width, dtype=torch.int64)
        ids[filled] = handle.get_slice("entry_ids")[e0:e1].long()
        logprobs = torch.full((b - a, self.width), -math.inf, dtype=self._dtype)
        logprobs[filled] = handle.get_slice("entry_logprobs")[e0:e1]
        item["topk_ids"], item["topk_logprobs"] = ids, logprobs
        if self.uld:
            u0, u1 = offsets["uld_offsets"][local], offsets["uld_offsets"][local + 1]
            uld = torch.full((b - a, self.width), -math.inf, dtype=self._dtype)
            uld[torch.arange(self.width) < handle.get_slice("uld_entries")[a:b][:, None]] = \
                handle.get_slice("uld_flat")[u0:u1]
            item["uld_logprobs"] = uld
        return item
