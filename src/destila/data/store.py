"""The token store: every document tokenised once, on disk, memory-mapped by every process.

A store is a folder::

    tokens.bin    int32 [N]      the documents' tokens, one after the other
    targets.bin   uint8 [N]      1 where the token is a trained prediction (see destila.data.render)
    offsets.bin   int64 [D + 1]  document d is tokens[offsets[d]:offsets[d + 1]]
    spans.bin     int32 [N, 2]   only in a store built with byte spans: each token's [start, end) in its
                                 document's UTF-8 bytes (destila.data.spans)
    store.json    counts, the spec and a content fingerprint (written last: a folder without it is not a store)

Tokenisation goes through ``datasets`` (``map`` with ``num_proc``, cached as
Arrow next to the source) when the whole corpus is wanted; with a token
budget (``max_tokens``) or a stream it reads documents in order and stops as
soon as the budget is met, so 64K tokens of a 1 GB corpus cost 64K tokens of
work. Either way the store is written batch by batch and nothing holds the
corpus as Python objects. Naive equivalent::

    docs = [encode(record) for record in records]
    tokens = np.concatenate([d.input_ids for d in docs]); offsets = np.cumsum([0] + [len(d) for d in docs])
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from destila.data.record_errors import RecordError, located
from destila.data.render import encoder, record_fault
from destila.data.sources import load_records, quiet_datasets
from destila.data.stdlib import STDLIB, stdlib_identity
from destila.io import create_staging_dir, names_user_path, publish_folder

STORE_VERSION = 2  # 2: under a token budget, a long text document is stored only as far as the budget reads it
_META = "store.json"
_BATCH = 512  # documents per tokenizer call: enough for the fast tokenizer's batching, little memory
_DEFAULT_ROOT = Path("~/.cache/destila/data")


def store_root() -> Path:
    """Where stores live: ``$DESTILA_DATA_CACHE`` or ``~/.cache/destila/data``."""
    return Path(os.environ.get("DESTILA_DATA_CACHE", str(_DEFAULT_ROOT))).expanduser()


@dataclass
class TokenStore:
    """A built store, memory-mapped: ``tokens``, ``targets`` and ``offsets`` are numpy memmaps."""

    path: Path
    tokens: np.ndarray
    targets: np.ndarray
    offsets: np.ndarray
    fingerprint: str
    empty: int = 0        # records left out: no text (missing, null, empty or not a string)
    trained: int = -1     # tokens whose prediction is trained; -1: a store written before it was counted
    spans: np.ndarray | None = None  # [N, 2] int32 byte spans, in a store built with them

    @classmethod
    def open(cls, path: str | Path) -> "TokenStore":
        path = Path(path)
        meta = json.loads((path / _META).read_text())
        if meta.get("version") != STORE_VERSION:
            raise ValueError(f"{path}: token store version {meta.get('version')}, expected {STORE_VERSION}; delete it")

        def mapped(name, dtype, count):
            # np.memmap refuses empty files; an empty store has no documents anyway.
            return np.memmap(path / name, dtype=dtype, mode="r", shape=(count,)) if count else np.zeros(0, dtype)

        spans = None
        if meta.get("spans"):
            spans = mapped("spans.bin", np.int32, 2 * meta["tokens"]).reshape(-1, 2)
        return cls(
            path, mapped("tokens.bin", np.int32, meta["tokens"]), mapped("targets.bin", np.uint8, meta["tokens"]),
            mapped("offsets.bin", np.int64, meta["documents"] + 1), meta["fingerprint"],
            meta.get("empty", 0), meta.get("trained", -1), spans,
        )

    @property
    def documents(self) -> int:
        return len(self.offsets) - 1


def source_identity(source: str, split: str = "train") -> list:
    """What identifies the source's content without reading it: local files' paths, sizes and mtimes."""
    if source == STDLIB:
        return stdlib_identity(split)
    path = Path(source).expanduser()
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
    else:
        return [source]  # pydoc (fixed with the Python version) or a hub name
    return [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def store_key(spec, tokenizer_fingerprint: str, spans: bool = False) -> str:
    described = {k: v for k, v in spec.describe().items() if k not in ("seq_len", "packing", "max_tokens")}
    identity = [STORE_VERSION, described, tokenizer_fingerprint, source_identity(spec.source, spec.split), sys.version_info[:2],
                _budget(spec)]
    if spans:  # a store with byte spans is another store; the keys of those without stay what they were
        identity.append("spans")
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _budget(spec) -> tuple[str, int] | None:
    """How far to read: ``("tokens", n)`` for packed rows, ``("documents", n)`` for one document per row."""
    if spec.max_sequences is None:
        return None
    if spec.packing == "none":
        return ("documents", spec.max_sequences)
    return ("tokens", spec.max_sequences * spec.seq_len)


def build_store(spec, tokenizer, folder: str | Path, *, records=None, spans: bool = False) -> TokenStore:
    """Tokenise ``spec``'s documents into a store at ``folder`` (reused when it is already there), with
    ``spec.num_proc`` processes over a whole corpus.

    ``records``: a ``datasets.Dataset``/``IterableDataset`` to read instead of ``spec.source``.
    ``spans``: also store each token's byte span in its document (:mod:`destila.data.spans`)."""
    folder = Path(folder)
    if (folder / _META).is_file():
        store = checked(TokenStore.open(folder), spec)
        if spans and store.spans is None:
            raise ValueError(f"data: the token store {folder} holds no byte spans; delete it or choose another "
                             "folder, so that it is built again with them")
        return store

    given = records is not None
    records = load_records(spec) if records is None else records
    try:
        return _build(spec, tokenizer, folder, records, spans)
    except (RecordError, UnicodeDecodeError) as err:  # a record or its bytes: name the file and line
        if given:
            raise
        raise located(spec, err, record_fault) from None


def _build(spec, tokenizer, folder: Path, records, spans: bool) -> TokenStore:
    budget = _budget(spec)
    encode = encoder(spec, tokenizer, spans=spans,
                     token_budget=budget[1] if budget and budget[0] == "tokens" else None)
    with quiet_datasets():
        if budget is None and not spec.streaming:
            # The whole corpus: datasets' map, in parallel, cached as Arrow beside the source. One process is
            # num_proc None: with num_proc=1 datasets would turn off the fast tokenizer's own threads.
            processes = spec.num_proc if spec.num_proc > 1 else None
            encoded = records.map(encode, batched=True, batch_size=_BATCH, num_proc=processes,
                                  remove_columns=records.column_names, desc="tokenising")
            batches = encoded.iter(batch_size=_BATCH)
        else:
            stream = records if spec.streaming else records.to_iterable_dataset()
            batches = stream.map(encode, batched=True, batch_size=_BATCH, remove_columns=list(spec.columns)).iter(_BATCH)
        staging = None
        try:
            with _naming_the_store_root(folder):  # the folder the user can change, not our staging copy
                folder.parent.mkdir(parents=True, exist_ok=True)
                staging = create_staging_dir(folder)
                _write(staging, batches, budget, spec)
                _publish(staging, folder)
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
    return checked(TokenStore.open(folder), spec)


STORE_FAILURE = ("{reason} at {root}, where destila keeps tokenised data (DESTILA_DATA_CACHE, by default "
                 "~/.cache/destila/data); free space there, or set DESTILA_DATA_CACHE to another folder, then run "
                 "the same command again")
"""An OS failure while writing a store (:func:`destila.io.names_user_path`)."""


def _naming_the_store_root(folder: Path):
    """:func:`names_user_path` for writing the store ``folder``: the stores' root and its variable when ``folder``
    is one of its stores, else ``folder`` itself (a folder the caller chose)."""
    if folder.parent == store_root():
        return names_user_path(folder.parent, STORE_FAILURE)
    return names_user_path(folder)


def checked(store: TokenStore, spec) -> TokenStore:
    """``store``, after refusing one with nothing to train and warning of records left out, with counts.

    Every run that reads the store says so, not only the one that built it.
    """
    what = _WHAT[spec.format]
    if store.trained == 0:
        hint = {"messages": "no conversation has an assistant turn (only assistant turns are trained)",
                "prompt_completion": "every completion is empty"}.get(spec.format, "every document is empty")
        raise ValueError(f"data: {spec.source} has no trained position in the {store.documents} {what} read: {hint}; "
                         "check the data and its --messages-field/--prompt-field/--completion-field")
    if store.empty:
        field = spec.text_field if spec.format == "text" else "/".join(spec.columns)
        logging.getLogger("destila.data").warning(
            "data: %d of the %d records read from %s were left out: their %r field is missing, null, empty or "
            "not a string",
            store.empty, store.empty + store.documents, spec.source, field)
    return store


def _publish(staging: Path, folder: Path) -> None:
    """Move a finished store into place; another process that finished the same store first wins.

    A finished store is never removed (some process may be reading it); a
    half-written one (no ``store.json``, its writer was killed) is replaced.
    """
    if (folder / _META).is_file():
        return
    shutil.rmtree(folder, ignore_errors=True)
    try:
        publish_folder(staging, folder)
    except OSError:
        if not (folder / _META).is_file():
            raise


def _write(staging: Path, batches, budget, spec) -> None:
    digest = hashlib.sha256()
    tokens = documents = empty = trained = 0
    has_spans = None  # known from the first batch: whether the encoder measured byte spans
    with open(staging / "tokens.bin", "wb") as tok_file, open(staging / "targets.bin", "wb") as tgt_file, \
            open(staging / "offsets.bin", "wb") as off_file, open(staging / "spans.bin", "wb") as span_file:
        off_file.write(np.zeros(1, np.int64).tobytes())
        for batch in batches:
            has_spans = "span_start" in batch
            starts = batch["span_start"] if has_spans else [None] * len(batch["input_ids"])
            ends = batch["span_end"] if has_spans else starts
            for ids, targets, start, end in zip(batch["input_ids"], batch["targets"], starts, ends):
                if not ids:
                    empty += 1
                    continue
                ids_array = np.asarray(ids, dtype=np.int32)
                tgt_array = np.asarray(targets, dtype=np.uint8)
                for array, file in ((ids_array, tok_file), (tgt_array, tgt_file)):
                    file.write(array.tobytes())
                    digest.update(array.tobytes())
                if has_spans:
                    if end and end[-1] >= 2**31:
                        raise ValueError(f"data: a document of {end[-1]} bytes is too long for byte spans (at most "
                                         "2 GiB); split it")
                    span_array = np.stack([np.asarray(start, np.int32), np.asarray(end, np.int32)], axis=1)
                    span_file.write(span_array.tobytes())
                    digest.update(span_array.tobytes())
                tokens += len(ids_array)
                trained += int(tgt_array.sum())
                documents += 1
                off_file.write(np.asarray([tokens], np.int64).tobytes())
                digest.update(np.asarray([tokens], np.int64).tobytes())
                if budget is not None and (tokens if budget[0] == "tokens" else documents) >= budget[1]:
                    break
            else:
                continue
            break  # the budget is met: read no further
    if documents == 0:
        raise ValueError(f"data: {spec.source} holds no {_WHAT[spec.format]} ({empty} records, each missing, empty or "
                         "not text); expected at least one (check the field names: --text-field and the others)")
    meta = {"version": STORE_VERSION, "tokens": tokens, "documents": documents, "fingerprint": digest.hexdigest()[:16],
            "empty": empty, "trained": trained, "spec": spec.describe()}
    if has_spans:
        meta["spans"] = True
    else:
        (staging / "spans.bin").unlink()
    (staging / _META).write_text(json.dumps(meta, indent=1, default=str))


_WHAT = {"text": "text", "messages": "conversations", "prompt_completion": "completions"}
