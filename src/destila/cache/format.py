"""The on-disk format of a top-K cache: manifest, shard names, atomic writes.

A cache is a folder::

    CACHE/
      manifest.json                 the Manifest below; the only source of truth
      tokenizer/                    the teacher's tokenizer (AutoTokenizer.from_pretrained(CACHE/tokenizer))
      shard-0000000000.safetensors  one shard: consecutive rows of the sequences it lists
      ...
      progress-rank1.json           only during a multi-process build (merged at the end)

A shard is a safetensors file holding, for its ``R`` rows of length ``L``:

==================  ===========  ===========================================
``sequence_index``  ``[R]``      int64, the global index of each row's sequence
``input_ids``       ``[R, L]``   int32, the tokens fed to the teacher
``topk_ids``        ``[R, L, K]`` int32, the teacher's top-K ids at position t
``topk_logprobs``   ``[R, L, K]`` float16 / bfloat16 / float32, log p(id | ids[:t+1]),
                                 normalised over the full vocabulary, sorted descending
``tail_logmass``    ``[R, L]``   float32, log of the mass outside the top-K
                                 (``-inf`` when K = V)
==================  ===========  ===========================================

Position t holds the teacher's distribution of the token at t+1, so the label
at t is ``input_ids[t+1]`` and the last position has no label.

Crash safety rests on three rules: a file is written under a temporary name,
flushed, fsync'd and renamed (:func:`write_atomic`); the manifest is replaced
the same way after every shard; and a shard file that the manifest does not
name does not exist (the writer deletes such strays before resuming).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER_DIR = "tokenizer"
SHARD_PREFIX = "shard-"
SHARD_SUFFIX = ".safetensors"
PROGRESS_PREFIX = "progress-rank"
TMP_MARK = ".tmp-"
LOCK = ".lock"

LOGPROB_DTYPES = ("float16", "bfloat16", "float32")
TENSORS = ("sequence_index", "input_ids", "topk_ids", "topk_logprobs", "tail_logmass")

# The fields that define a cache's content. A build on an existing cache must
# agree on all of them; the others (paths, batch size, device, shard size)
# may change between runs without changing a single stored value.
CONTENT_FIELDS = (
    "format_version",
    "teacher_config_hash",
    "teacher_weight_fingerprint",
    "teacher_dtype",
    "tokenizer_fingerprint",
    "vocab_size",
    "top_k",
    "temperature",
    "seq_len",
    "logprob_dtype",
    "text_field",
    "max_tokens",
    "data_fingerprint",
    "ids_fingerprint",
    "sequences",
)


@dataclass
class ShardInfo:
    """One shard as the manifest records it.

    ``sequences`` lists the global sequence indices of the shard's rows, in
    row order, as ``[start, stop, step]`` ranges (``range(start, stop, step)``):
    one range for a shard of consecutive or rank-strided sequences.
    """

    name: str
    rows: int
    sequences: list[list[int]]
    sha256: str
    bytes: int

    def indices(self):
        """The global sequence indices of the rows, ``int64 [rows]``."""
        import numpy as np

        if not self.sequences:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(a, b, s, dtype=np.int64) for a, b, s in self.sequences])


@dataclass
class Manifest:
    """Everything a reader needs to know about a cache (``manifest.json``).

    ``teacher``/``teacher_path``/``data_source`` say where things came from;
    the fingerprints and :data:`CONTENT_FIELDS` say what the content is.
    ``vocab_size`` is the number of rows of the teacher's output head (a
    student must have the same); ``tokenizer_size`` is ``len(tokenizer)``,
    which may be smaller. ``complete`` is true once every sequence
    ``0 … sequences-1`` is stored in exactly one shard.
    """

    format_version: int
    teacher: str
    teacher_path: str
    teacher_gguf_file: str | None
    teacher_architecture: str
    teacher_config_hash: str
    teacher_weight_fingerprint: str
    teacher_dtype: str
    tokenizer_fingerprint: str
    tokenizer_size: int
    eos_token_id: int
    vocab_size: int
    top_k: int
    temperature: float
    seq_len: int
    logprob_dtype: str
    data_source: str
    text_field: str
    max_tokens: int | None
    data_fingerprint: str
    ids_fingerprint: str
    sequences: int
    tokens: int
    complete: bool = False
    shards: list[ShardInfo] = field(default_factory=list)
    destila_version: str = ""
    tokenizer_files: dict[str, str] = field(default_factory=dict)  # tokenizer/ file → sha256 (tokenizer_files.py)

    @property
    def stored_sequences(self) -> int:
        return sum(s.rows for s in self.shards)

    def content(self) -> dict:
        """The content-defining fields (:data:`CONTENT_FIELDS`) as a dict."""
        return {name: getattr(self, name) for name in CONTENT_FIELDS}

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_dict(cls, raw: dict, where: str = MANIFEST) -> Manifest:
        version = raw.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(
                f"{where}: cache format version {version}, this destila reads version {FORMAT_VERSION}; "
                "rebuild the cache with this version or use the destila that wrote it"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(names - set(raw) - {"complete", "shards", "destila_version", "tokenizer_files"})
        if missing:
            raise ValueError(f"{where}: manifest lacks the fields {', '.join(missing)}; the file is damaged")
        values = {k: v for k, v in raw.items() if k in names}
        values["shards"] = [ShardInfo(**s) for s in raw.get("shards", [])]
        return cls(**values)


def read_manifest(folder: Path, name: str = MANIFEST) -> Manifest:
    """Load and validate ``folder/name``; ``FileNotFoundError`` when the folder holds no cache."""
    path = Path(folder) / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{folder}: no {name} found; expected a cache folder written by `destila cache build`"
        )
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err}); the manifest is damaged") from err
    return Manifest.from_dict(raw, str(path))


def write_manifest(folder: Path, manifest: Manifest, name: str = MANIFEST) -> None:
    write_atomic(Path(folder) / name, manifest.to_json().encode())


def shard_name(first_sequence: int) -> str:
    """Shards are named by their first sequence, which no other shard holds, so names never collide."""
    return f"{SHARD_PREFIX}{first_sequence:010d}{SHARD_SUFFIX}"


def progress_name(rank: int) -> str:
    return f"{PROGRESS_PREFIX}{rank}.json"


def is_shard_file(name: str) -> bool:
    return name.startswith(SHARD_PREFIX) and name.endswith(SHARD_SUFFIX)


def is_temporary(name: str) -> bool:
    return TMP_MARK in name


def encode_ranges(indices) -> list[list[int]]:
    """``[i0, i1, …]`` as ``[[start, stop, step], …]`` runs of constant step (greedy).

    Naive equivalent: ``[[i, i + 1, 1] for i in indices]``.
    """
    values = [int(i) for i in indices]
    runs, pos = [], 0
    while pos < len(values):
        start = values[pos]
        if pos + 1 == len(values):
            runs.append([start, start + 1, 1])
            break
        step = values[pos + 1] - start
        if step <= 0:
            runs.append([start, start + 1, 1])
            pos += 1
            continue
        end = pos + 1
        while end + 1 < len(values) and values[end + 1] - values[end] == step:
            end += 1
        runs.append([start, values[end] + 1, step])
        pos = end + 1
    return runs


def sha256_file(path: Path, block: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (POSIX: the directory entry lives in the folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so that readers see the old file or the new one, never a mix.

    The bytes go to a temporary file in the same folder, are fsync'd, then
    renamed over ``path``. On failure (full disk, permissions) the temporary
    file is removed and the old ``path`` is untouched.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    fsync_dir(path.parent)
