"""Where documents come from: the bundled ``pydoc`` and ``stdlib`` corpora, local files and folders, or a datasets hub name.

:func:`load_records` turns a :class:`~destila.data.spec.DataSpec` into a
``datasets.Dataset`` (memory-mapped Arrow, nothing held as Python objects)
or, with ``streaming``, a ``datasets.IterableDataset`` read as it is
consumed. Rows keep only the fields the spec reads, in a deterministic order
(files of a folder in sorted path order), so "document i" means the same
document to every process and every run.

Naive equivalent for a jsonl file::

    rows = [json.loads(line) for line in open(path)]
    documents = [row[spec.text_field] for row in rows]
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from destila.data.spec import DataSpec
from destila.hub_ids import looks_like_hub_name as _looks_like_hub_name
from destila.data.stdlib import STDLIB, stdlib_records
from destila.io.user_files import first_bad_json_line, is_damage
from destila.models.hub import hub_offline_reason

PYDOC = "pydoc"
"""The data name that stands for Python's documentation topics (``pydoc_data.topics``)."""

# Row-based formats and the `datasets` builder that reads each.
BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text"}


def pydoc_texts() -> list[str]:
    """Python's documentation topics, sorted by topic name (about 465k characters)."""
    # pydoc_data.topics is large (about 0.75 MB of text): only when the topics are read
    from pydoc_data.topics import topics

    return [topics[name] for name in sorted(topics)]


@contextlib.contextmanager
def quiet_datasets():
    """datasets prints a progress bar per file it converts; the caller's own bar is the one that matters."""
    # datasets is heavy: only when data is read
    import datasets

    was_enabled = datasets.is_progress_bar_enabled()
    verbosity = datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    # Its log lines about a file it failed to parse duplicate the one error line destila prints.
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        if was_enabled:
            datasets.enable_progress_bars()


def load_records(spec):
    """The rows of ``spec.source`` holding ``spec.columns``: a ``Dataset``, or an ``IterableDataset`` when streaming.

    Raises ``FileNotFoundError`` for a missing path, ``ValueError`` for an
    unknown format, a missing field (naming the fields found), a split that
    is not there, or a hub name without network.
    """
    with quiet_datasets():
        dataset = _load(spec)
    if spec.streaming and not _is_iterable(dataset):
        dataset = dataset.to_iterable_dataset()
    return _keep_columns(dataset, spec)


def _load(spec):
    # datasets is heavy: only when data is read
    import datasets

    source = spec.source
    if source == PYDOC:
        return datasets.Dataset.from_dict({spec.text_field: pydoc_texts()})
    if source == STDLIB:
        return stdlib_records(spec.text_field, spec.split)
    path = Path(source).expanduser()
    if path.is_file():
        return _load_files([path], spec)
    if path.is_dir():
        return _load_folder(path, spec)
    if _looks_like_hub_name(source):
        return _load_hub(spec)
    raise FileNotFoundError(
        f"data: no such file or folder: {source}; expected {PYDOC!r}, {STDLIB!r}, a .txt/.jsonl/.parquet/.csv file, "
        "a folder of them, or a datasets hub name such as 'owner/name'"
    )


def _builder(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in BUILDERS:
        raise ValueError(
            f"data: unknown format {suffix or '(no suffix)'} for {path}; expected one of {', '.join(BUILDERS)}"
        )
    return BUILDERS[suffix]


def _load_files(files: list[Path], spec):
    """One dataset over ``files`` in the order given; consecutive files of one format are read in one call."""
    # datasets is heavy: only when data is read
    import datasets

    groups: list[tuple[str, list[str]]] = []
    for file in files:
        builder = _builder(file)
        if groups and groups[-1][0] == builder:
            groups[-1][1].append(str(file))
        else:
            groups.append((builder, [str(file)]))
    parts = []
    for builder, paths in groups:
        options = {"sample_by": "document"} if builder == "text" else {}  # a .txt file is one document
        try:
            part = datasets.load_dataset(builder, data_files=paths, split="train", streaming=spec.streaming, **options)
        except Exception as err:  # datasets wraps a file it cannot decode without naming it
            raise unreadable(builder, paths, err) from err
        if builder == "text" and spec.text_field != "text":
            part = part.rename_column("text", spec.text_field)
        parts.append(part)
    if len(parts) == 1:
        return parts[0]
    return datasets.concatenate_datasets([_keep_columns(part, spec) for part in parts])


def unreadable(builder: str, paths: list[str], err: Exception) -> Exception:
    """The error to raise when ``datasets`` could not read ``paths``: one naming the file (and line) at fault."""
    blank = next((path for path in paths if _is_blank(Path(path))), None)
    if blank is not None:  # datasets' json builder ends in a bare StopIteration on an empty file
        return ValueError(f"data: {blank} is empty; expected at least one record in it")
    if builder == "text":
        bad = _not_utf8(paths)
        if bad is not None:
            return ValueError(f"data: not UTF-8 text at {bad}; expected a UTF-8 .txt file; convert it or leave it out")
    if builder == "json":
        for path in paths:
            where = first_bad_json_line(Path(path)) if path.lower().endswith(".jsonl") else _json_fault(Path(path))
            if where is not None:
                return ValueError(f"data: {path}, {where}; expected one JSON object per line; fix or remove it")
    if not is_damage(err):
        return err
    return ValueError(f"data: datasets could not read {paths[0] if len(paths) == 1 else ', '.join(paths)} "
                      f"({_innermost(err)}); expected a valid .{builder} file; fix or replace it")


def _innermost(err: BaseException) -> str:
    """The first line of the deepest error in ``err``'s chain: datasets wraps the parser's own words
    (``Error tokenizing data. C error: EOF inside string starting at row 19``) in a general one."""
    while (err.__cause__ or err.__context__) is not None:
        err = err.__cause__ or err.__context__
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _is_blank(path: Path) -> bool:
    """True for a file holding nothing but whitespace (read only when small: an error path)."""
    try:
        size = path.stat().st_size
        return size == 0 or (size < 1 << 20 and not path.read_bytes().strip())
    except OSError:
        return False


def _json_fault(path: Path) -> str | None:
    """A ``.json`` file is one JSON document or JSON lines: what is wrong when it is neither, or None."""
    try:
        json.loads(path.read_text(encoding="utf-8"))
        return None
    except (ValueError, UnicodeDecodeError):
        return first_bad_json_line(path)


def _not_utf8(paths: list[str]) -> str | None:
    """The first of ``paths`` that is not UTF-8 text, or None."""
    for path in paths:
        try:
            Path(path).read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            return path
    return None


def _load_folder(path: Path, spec):
    # datasets is heavy: only when data is read
    import datasets

    if is_saved_dataset(path):
        return load_saved_dataset(path, spec.split)
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in BUILDERS)
    if files:
        return _load_files(files, spec)
    # Anything else datasets can infer from local files (arrow, csv in data/
    # subfolders with a README split config, ...).
    try:
        loaded = datasets.load_dataset(str(path), spec.subset, streaming=spec.streaming)
    except Exception as err:  # datasets raises a zoo of types; name what we looked for instead
        raise ValueError(
            f"data: the folder {path} has no {'/'.join(BUILDERS)} files and datasets.load_dataset could not "
            f"read it ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        ) from err
    return _pick_split(loaded, spec.split, path)


def is_saved_dataset(path) -> bool:
    """A folder ``Dataset.save_to_disk`` (``state.json``) or ``DatasetDict.save_to_disk`` (``dataset_dict.json``)
    wrote."""
    path = Path(path).expanduser()
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def load_saved_dataset(path, split: str = "train"):
    """The ``datasets.Dataset`` a :func:`is_saved_dataset` folder holds (of a ``DatasetDict``, ``split``, or its
    only split). Naive equivalent: ``datasets.load_from_disk(path)[split]``."""
    # datasets is heavy: only when data is read
    import datasets

    return _pick_split(datasets.load_from_disk(str(Path(path).expanduser())), split, Path(path))


def _load_hub(spec):
    # datasets is heavy: only when data is read
    import datasets

    reason = hub_offline_reason()
    if reason is not None:
        raise ValueError(
            f"data: {spec.source!r} is not a local file or folder, and the datasets hub is out of reach "
            f"({reason}); download it elsewhere and pass the local folder (Dataset.save_to_disk or its files)"
        )
    try:
        return datasets.load_dataset(spec.source, spec.subset, split=spec.split, streaming=spec.streaming)
    except (ValueError, FileNotFoundError) as err:
        raise ValueError(f"data: datasets could not load {spec.source!r} (split {spec.split!r}, subset "
                         f"{spec.subset!r}): {str(err).splitlines()[0] if str(err) else type(err).__name__}") from err


def _pick_split(loaded, split: str, path: Path):
    # datasets is heavy: only when data is read
    from datasets import DatasetDict, IterableDatasetDict

    if not isinstance(loaded, (DatasetDict, IterableDatasetDict)):
        return loaded
    if split in loaded:
        return loaded[split]
    if len(loaded) == 1:
        return next(iter(loaded.values()))
    raise ValueError(f"data: {path} has splits {sorted(loaded)}, not {split!r}; pass --split with one of them")


def _is_iterable(dataset) -> bool:
    # datasets is heavy: only when data is read
    import datasets

    return isinstance(dataset, datasets.IterableDataset)


def column_names(dataset) -> list[str] | None:
    """The dataset's fields; for a stream whose schema is not declared, those of its first row."""
    names = dataset.column_names
    if names is None and _is_iterable(dataset):
        first = next(iter(dataset), None)
        names = [] if first is None else list(first)
    return names


def _keep_columns(dataset, spec):
    names = column_names(dataset) or []
    missing = [c for c in spec.columns if c not in names]
    if missing:
        flag = {"text": "--text-field", "messages": "--messages-field"}.get(spec.format, "--prompt-field/--completion-field")
        raise ValueError(
            f"data: {spec.source} has no field {missing[0]!r}; fields found: {', '.join(names) or '(none)'}; "
            f"pass {flag} with one of them"
        )
    extra = [c for c in names if c not in spec.columns]
    return dataset.remove_columns(extra) if extra else dataset


def load_texts(source, text_field: str = "text", split: str = "train") -> list[str]:
    """The non-empty plain-text documents of ``source`` as a list (small data: tests, demos, examples).

    Everything that trains or builds a cache goes through the token store
    instead, which never holds the corpus in memory.
    """
    spec = DataSpec(str(source), text_field=text_field, split=split)
    column = load_records(spec)[text_field]
    texts = [t for t in column if isinstance(t, str) and t]
    if not texts:
        raise ValueError(f"data: {source} holds no text ({len(column)} records, each missing, empty or not text); "
                         "expected at least one")
    return texts


def in_memory_records(data):
    """``data`` given in Python as rows: a ``datasets.Dataset`` as is, a list of dicts (text, messages,
    prompt/completion rows) as a Dataset; None for anything else (a source name, a list of texts).

    Naive equivalent: ``datasets.Dataset.from_list(data) if isinstance(data[0], dict) else None``.
    """
    # datasets is heavy: only when data is read
    import datasets

    if isinstance(data, datasets.Dataset):
        return data
    if isinstance(data, datasets.IterableDataset):
        raise ValueError("data: a streamed datasets.IterableDataset cannot be packed for a teacher pass (its length "
                         "is unknown); pass the Dataset itself, or save it to disk and pass the folder")
    if isinstance(data, (list, tuple)) and data and all(isinstance(row, dict) for row in data):
        return datasets.Dataset.from_list(list(data))
    return None
