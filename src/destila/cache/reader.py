"""Reading a top-K cache: memory-mapped, random access, a ``torch`` Dataset.

    cache = TopKCache("cache/")
    item = cache[i]              # sequence i of the packed data
    item["input_ids"]            # [L]    int64, the tokens the teacher saw
    item["position_ids"]         # [L]    int64, restarting at 0 at each document
    item["labels"]               # [L]    int64, next token where trained, else -100
    item["topk_ids"]             # [L, K] int64, teacher's top-K ids for the token at t+1
    item["topk_logprobs"]        # [L, K] sorted descending, -inf where untrained or padding
    item["tail_logmass"]         # [L]    float32, log of the mass outside the top-K
    loader = DataLoader(cache, batch_size=8, shuffle=True, num_workers=2, collate_fn=destila.data.collate)

Every encoding (plain, compact) and target kind (top-K, sampled) reads the
same way; :mod:`destila.cache.rows` decodes them.

Integrity: opening a cache checks the manifest, that every sequence is
stored exactly once and that every shard file has the recorded size
(no data read), and that the ``tokenizer/`` files match the digests
recorded at build time. With ``verify="first_touch"`` (the default) the first
access to a shard in a process reads the whole shard once and compares its
SHA-256 with the manifest, refusing a damaged shard with ``CorruptShardError``;
``verify="open"`` checks every shard up front, ``verify="none"`` never does.
Each DataLoader worker checks the shards it touches once: about 1 GB/s of
hashing, small next to the time a student spends on the same tokens.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from destila.cache.checks.identity import shard_identity_fault
from destila.cache.checks.manifest import check_manifest
from destila.cache.checks.rows import target_value_fault
from destila.cache.checks.shards import CorruptShardError, order_fault
from destila.cache.encodings import encoding_of
from destila.cache.encodings.compact_blocks import BlockError
from destila.cache.format import MANIFEST, TOKENIZER_DIR, ShardFormatError, read_manifest, shard_file_fault
from destila.cache.kinds import kind_of
from destila.cache.rows import ShardRows
from destila.cache.tokenizer_files import check_tokenizer_files

_VERIFY = ("first_touch", "open", "none")


class TopKCache(torch.utils.data.Dataset):
    """The cache at ``path`` as a map-style Dataset of ``len(cache) == manifest.sequences`` items.

    Attributes: ``manifest`` (:class:`~destila.cache.format.Manifest`),
    ``tokenizer_path`` (loadable with ``AutoTokenizer.from_pretrained``),
    ``seq_len``, ``top_k`` (entries per position: K, or S for sampled
    targets), ``vocab_size``, ``logprob_dtype`` (the torch dtype of
    ``topk_logprobs``: the stored one for plain top-K, else float32).
    Picklable: shard files are opened lazily, once per process.
    """

    def __init__(self, path: str | Path, *, verify: str = "first_touch"):
        if verify not in _VERIFY:
            raise ValueError(f"verify: expected one of {', '.join(_VERIFY)}, found {verify!r}")
        self.path = Path(path).expanduser()
        self.verify = verify
        self.manifest = read_manifest(self.path)
        m = self.manifest
        if not m.complete:
            raise ValueError(
                f"{self.path}: the cache is incomplete ({m.stored_sequences} of {m.sequences} sequences stored); "
                "run the same `destila cache build` command again to finish it"
            )
        if verify != "none":
            check_manifest(self.path, m)
            check_tokenizer_files(self.path, m.tokenizer_files)
        self.seq_len, self.top_k, self.vocab_size = m.seq_len, m.top_k, m.vocab_size
        hidden = (m.extras or {}).get("hidden") or {}
        # Teacher hidden states (``--hidden-layers``): which layers, at which stored width.
        self.hidden_layers, self.hidden_dim = hidden.get("layers"), hidden.get("dim")
        stored_dtype = encoding_of(m.encoding).stored_logprob_dtype(m)  # None: exact once decoded
        self.logprob_dtype = getattr(torch, stored_dtype) if stored_dtype else torch.float32
        self.tokenizer_path = self.path / TOKENIZER_DIR
        self._shard_of = np.full(m.sequences, -1, dtype=np.int32)
        self._row_of = np.zeros(m.sequences, dtype=np.int64)
        trained: list[int | None] = []  # per shard, from the order check below
        for number, shard in enumerate(m.shards):
            fault = shard_file_fault(self.path, shard, checksum=False)
            if fault is not None:
                raise CorruptShardError(
                    f"{self.path / shard.name}: {fault}; run `destila cache verify {self.path}`, delete the damaged "
                    "shard and run the same `destila cache build` command to recompute it"
                )
            if verify != "none":  # a few bytes per shard: shards out of order are refused before any step
                trained.append(self._check_order(shard))
            indices = shard.indices()
            if len(indices) != shard.rows or np.any(self._shard_of[indices] != -1):
                raise ValueError(f"{self.path / MANIFEST}: shard {shard.name} overlaps another shard; the manifest is damaged")
            self._shard_of[indices] = number
            self._row_of[indices] = np.arange(shard.rows)
        if np.any(self._shard_of < 0):
            raise ValueError(f"{self.path / MANIFEST}: some sequences are in no shard; the manifest is damaged")
        if trained and None not in trained and sum(trained) == 0:  # a loss of 0.0 at every step teaches nothing
            raise ValueError(f"{self.path}: the cache holds no trained position (no target in any of its "
                             f"{m.sequences} sequences); rebuild it from data with trained positions")
        self._reset()
        if verify == "open":
            for number in range(len(m.shards)):
                self._check(number)

    def _check_order(self, shard) -> int | None:
        """Refuse the shard when its rows are not the manifest's sequences; its trained positions (None: unknown)."""
        # safetensors: only when a shard's order is checked
        from safetensors import safe_open

        trained = None
        try:
            with safe_open(str(self.path / shard.name), framework="pt") as handle:
                fault = shard_identity_fault(handle.metadata(), self.manifest) or order_fault(handle, shard)
                trained = encoding_of(self.manifest.encoding).trained_positions(handle)
        except Exception as err:  # safetensors raises its own error type for a bad header
            fault = f"not a readable safetensors file ({err})"
        if fault is not None:
            raise CorruptShardError(f"{self.path / shard.name}: {fault}; run `destila cache verify {self.path}` "
                                    "and rebuild the cache")
        return trained

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._handles: dict[int, object] = {}
        self._verified: set[int] = set()

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_handles"] = {}  # open files do not travel to worker processes
        return state

    @property
    def kind(self):
        """The target kind object of this cache (:func:`destila.cache.kinds.kind_of` of its manifest's)."""
        return kind_of(self.manifest.target_kind)

    def __len__(self) -> int:
        return self.manifest.sequences

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        index = int(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"sequence {index} out of range for a cache of {len(self)} sequences")
        index %= len(self)
        number = int(self._shard_of[index])
        rows = self._open(number)
        try:
            item = rows.item(int(self._row_of[index]))
        except (BlockError, ShardFormatError) as err:
            raise CorruptShardError(f"{self.path / self.manifest.shards[number].name}: {err}") from err
        fault = target_value_fault(item, self.vocab_size) if self.verify != "none" else None
        if fault is not None:  # never a loss (or a NaN) from damaged targets
            raise CorruptShardError(
                f"{self.path / self.manifest.shards[number].name}: row {int(self._row_of[index])} (sequence {index}) "
                f"holds {fault}; run `destila cache verify {self.path}`, delete the damaged shard and run the same "
                "`destila cache build` command to recompute it")
        return item

    def stored(self, index: int) -> dict:
        """Sequence ``index`` as stored (:meth:`~destila.cache.rows.ShardRows.stored`): its row fields and
        the targets of its trained positions, undecoded into positions (what an export writes)."""
        number = int(self._shard_of[int(index)])
        try:
            return self._open(number).stored(int(self._row_of[int(index)]))
        except (BlockError, ShardFormatError) as err:
            raise CorruptShardError(f"{self.path / self.manifest.shards[number].name}: {err}") from err

    def _open(self, number: int):
        if self._pid != os.getpid():  # forked after opening: take fresh handles
            verified = self._verified
            self._reset()
            self._verified = verified
        handle = self._handles.get(number)
        if handle is None:
            # safetensors: only when a shard is first opened
            from safetensors import safe_open

            if self.verify != "none":
                self._check(number)
            shard = self.manifest.shards[number]
            try:
                handle = ShardRows(safe_open(str(self.path / shard.name), framework="pt"), self.manifest, shard)
            except ShardFormatError as err:
                raise CorruptShardError(f"{self.path / shard.name}: {err}") from err
            except Exception as err:  # safetensors raises its own error type for a bad header
                raise CorruptShardError(f"{self.path / shard.name}: not a readable safetensors file ({err})") from err
            self._handles[number] = handle
        return handle

    def _check(self, number: int) -> None:
        if number in self._verified:
            return
        shard = self.manifest.shards[number]
        fault = shard_file_fault(self.path, shard)
        if fault is not None:
            raise CorruptShardError(
                f"{self.path / shard.name}: {fault}; delete the shard and run the same `destila cache build` "
                "command to recompute its sequences"
            )
        self._verified.add(number)
