"""Text sources, tokenisation and packing.

Everything that reads training text goes through two functions:

- :func:`load_texts` turns a user's data argument into a list of documents:
  ``pydoc`` (Python's own documentation topics, always present), a ``.txt``
  file (one document per file), a ``.jsonl``/``.json``/``.parquet``/``.csv``
  file (one document per row, from ``text_field``), a folder of such files,
  a folder written by ``Dataset.save_to_disk``, or any other folder that
  ``datasets.load_dataset`` can read from local files.
- :func:`pack_documents` tokenises the documents with the teacher's tokenizer
  and packs them into fixed-length sequences, each document followed by the
  EOS token. Packing is deterministic, so "sequence i" means the same tokens
  to the cache writer, the trainer and the evaluator.

Naive equivalent of the pair::

    ids = []
    for text in texts:
        ids += tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    ids = ids[: (min(len(ids), max_tokens or len(ids)) // seq_len) * seq_len]
    packed = torch.tensor(ids).view(-1, seq_len)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PYDOC = "pydoc"
"""The data name that stands for Python's documentation topics (``pydoc_data.topics``)."""

# Row-based formats and the `datasets` builder that reads each.
_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
_SUFFIXES = (".txt", *_BUILDERS)

# Documents are tokenised this many at a time: large enough for the fast
# tokenizer's batching to pay off, small enough to stop early at max_tokens.
_TOKENIZE_BATCH = 256


def pydoc_texts() -> list[str]:
    """Python's documentation topics, sorted by topic name (about 465k characters)."""
    from pydoc_data.topics import topics

    return [topics[name] for name in sorted(topics)]


def load_texts(source: str | Path, text_field: str = "text", split: str = "train") -> list[str]:
    """The documents of ``source`` as a list of strings, in a deterministic order.

    Files in a folder are read in sorted path order. Empty documents are
    dropped. Raises ``FileNotFoundError`` for a missing path and
    ``ValueError`` for an unknown format, a missing ``text_field`` (naming
    the fields found) or data without any text.
    """
    if str(source) == PYDOC:
        return _non_empty(pydoc_texts(), PYDOC)
    path = Path(source).expanduser()
    if path.is_file():
        texts = _load_file(path, text_field)
    elif path.is_dir():
        texts = _load_folder(path, text_field, split)
    else:
        raise FileNotFoundError(
            f"data: no such file or folder: {source}; expected {PYDOC!r}, a .txt/.jsonl/.parquet/.csv file, "
            "or a folder of them"
        )
    return _non_empty(texts, str(source))


def _non_empty(texts: list, source: str) -> list[str]:
    kept = [t for t in texts if isinstance(t, str) and t]
    if not kept:
        raise ValueError(f"data: {source} holds no text ({len(texts)} documents, all empty); expected at least one")
    return kept


def _load_file(path: Path, text_field: str) -> list[str]:
    suffix = path.suffix.lower()
    if suffix == ".txt":
        try:
            return [path.read_text(encoding="utf-8")]
        except UnicodeDecodeError as err:
            raise ValueError(
                f"data: not UTF-8 text at {path} (byte {err.start}: {err.reason}); "
                "expected a UTF-8 .txt file; convert it or leave it out"
            ) from None
    if suffix not in _BUILDERS:
        raise ValueError(
            f"data: unknown format {suffix or '(no suffix)'} for {path}; expected one of {', '.join(_SUFFIXES)}"
        )
    return _column(_load_with_builder(_BUILDERS[suffix], [path]), text_field, path)


def _load_folder(path: Path, text_field: str, split: str) -> list[str]:
    if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
        from datasets import load_from_disk

        return _column(_pick_split(load_from_disk(str(path)), split, path), text_field, path)
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in _SUFFIXES)
    if files:
        texts: list[str] = []
        for file in files:
            texts.extend(_load_file(file, text_field))
        return texts
    # Anything else datasets can infer from local files (arrow, csv in data/
    # subfolders with a README split config, ...).
    import datasets

    try:
        loaded = datasets.load_dataset(str(path))
    except Exception as err:  # datasets raises a zoo of types; name what we looked for instead
        raise ValueError(
            f"data: the folder {path} has no {'/'.join(_SUFFIXES)} files and datasets.load_dataset could not "
            f"read it ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        ) from err
    return _column(_pick_split(loaded, split, path), text_field, path)


def _load_with_builder(builder: str, files: list[Path]):
    import datasets

    # datasets prints a progress bar per file it converts; the caller's own bar is the one that matters.
    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        return datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train")
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def _pick_split(loaded, split: str, path: Path):
    from datasets import DatasetDict

    if not isinstance(loaded, DatasetDict):
        return loaded
    if split in loaded:
        return loaded[split]
    if len(loaded) == 1:
        return next(iter(loaded.values()))
    raise ValueError(f"data: {path} has splits {sorted(loaded)}, not {split!r}; pass one of them")


def _column(dataset, text_field: str, where: Path) -> list[str]:
    if text_field not in dataset.column_names:
        raise ValueError(
            f"data: {where} has no field {text_field!r}; fields found: {', '.join(dataset.column_names) or '(none)'}; "
            "pass --text-field with one of them"
        )
    return list(dataset[text_field])


def data_fingerprint(texts: list[str]) -> str:
    """Short hash of the documents and their order (length-prefixed, so boundaries count)."""
    digest = hashlib.sha256()
    for text in texts:
        raw = text.encode("utf-8")
        digest.update(len(raw).to_bytes(8, "little"))
        digest.update(raw)
    return digest.hexdigest()[:16]


def ids_fingerprint(packed) -> str:
    """Short hash of packed token ids ``[S, L]``: equal means the same sequences, token for token."""
    import numpy as np

    array = np.ascontiguousarray(packed.numpy() if hasattr(packed, "numpy") else packed, dtype=np.int64)
    digest = hashlib.sha256(str(array.shape).encode())
    digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def pack_documents(texts: list[str], tokenizer, seq_len: int, max_tokens: int | None = None):
    """Tokenise ``texts`` and pack them into ``LongTensor [S, seq_len]``.

    Each document's tokens (no special tokens added) are followed by the
    tokenizer's EOS token, the stream is cut into rows of ``seq_len`` and the
    incomplete last row is dropped. ``max_tokens`` caps ``S · seq_len``.
    Sequences span document boundaries, as in pre-training: the EOS token is
    the only separator.
    """
    import numpy as np
    import torch

    if seq_len < 2:
        raise ValueError(f"seq_len: expected at least 2 tokens (one input and one label), found {seq_len}")
    if max_tokens is not None and max_tokens < seq_len:
        raise ValueError(
            f"max_tokens: {max_tokens} is less than one sequence of {seq_len} tokens; raise --max-tokens "
            "or lower --seq-len"
        )
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError(
            f"tokenizer: {type(tokenizer).__name__} has no EOS token to separate documents; "
            "set tokenizer.eos_token before packing"
        )
    if not texts:
        raise ValueError("data: no documents to pack; expected at least one non-empty text")
    wanted = None if max_tokens is None else (max_tokens // seq_len) * seq_len
    pieces, total = [], 0
    for start in range(0, len(texts), _TOKENIZE_BATCH):
        # verbose=False: documents longer than the model's context are
        # expected here (packing splits them), so the length warning is noise.
        batch = tokenizer(texts[start : start + _TOKENIZE_BATCH], add_special_tokens=False, verbose=False)
        for ids in batch["input_ids"]:
            pieces.append(np.asarray(ids, dtype=np.int64))
            pieces.append(np.asarray([eos], dtype=np.int64))
            total += len(ids) + 1
        if wanted is not None and total >= wanted:
            break
    stream = np.concatenate(pieces)
    rows = len(stream) // seq_len if wanted is None else min(len(stream), wanted) // seq_len
    if rows == 0:
        raise ValueError(
            f"data: {len(stream)} tokens (EOS separators included) are fewer than one sequence of {seq_len}; "
            "lower --seq-len or give more text"
        )
    return torch.from_numpy(stream[: rows * seq_len].reshape(rows, seq_len).copy())
