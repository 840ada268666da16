"""The on-disk format of a top-K cache: manifest, shard names, atomic writes.

A cache is a folder::

    CACHE/
      manifest.json                 the Manifest below; the only source of truth
      tokenizer/                    the teacher's tokenizer (AutoTokenizer.from_pretrained(CACHE/tokenizer))
      shard-0000000000.safetensors  one shard: consecutive rows of the sequences it lists
      ...
      progress-rank1.json           only during a multi-process build (merged at the end)

A shard is a safetensors file holding ``R`` consecutive rows (sequences) of
length ``L``. Position t of a row holds the teacher's distribution of the
token at t+1; only the ``P`` positions whose ``loss_mask`` is true (over the
shard, row-major) carry targets. Every shard holds ``sequence_index [R]``
int64, the global index of each row's sequence; the rest is decided by the
manifest's encoding (:mod:`destila.cache.encodings`: ``plain`` tensors or
``compact`` zstd blocks) and target kind (:mod:`destila.cache.kinds`:
``topk`` or ``sampled``); :func:`destila.cache.encodings.shard_schema` is the
one declaration of a shard's tensors.

Crash safety rests on three rules: a file is written under a temporary name,
flushed, fsync'd and renamed (:func:`destila.io.write_atomic`); the manifest is replaced
the same way after every shard; and a shard file that the manifest does not
name does not exist (the writer deletes such strays before resuming).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from destila.cache.kinds import target_content, target_width
from destila.io import outside_link, write_atomic
from destila.targets.spec import TargetSpec

FORMAT_VERSION = 2
MANIFEST = "manifest.json"
TOKENIZER_DIR = "tokenizer"
SHARD_PREFIX = "shard-"
SHARD_SUFFIX = ".safetensors"
PROGRESS_PREFIX = "progress-rank"
LOCK = ".lock"

LOGPROB_DTYPES = ("float16", "bfloat16", "float32")
# The only file names a manifest or progress file may give a shard: a plain name inside the cache folder
# (no folder part, no ``..``, not absolute), as :func:`shard_name` writes them.
SHARD_NAME_PATTERN = re.compile(r"shard-[0-9]{10,}\.safetensors")

# safetensors' dtype codes, so that shard headers can be checked without torch.
SAFETENSORS_DTYPES = {"int64": "I64", "int32": "I32", "bool": "BOOL", "uint8": "U8", "float16": "F16",
                      "bfloat16": "BF16", "float32": "F32"}

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
    "targets",
    "encoding",
    "compact",
    "seq_len",
    "logprob_dtype",
    "text_field",
    "max_tokens",
    "data_fingerprint",
    "ids_fingerprint",
    "sequences",
    "extras",
    "spans",
)


@dataclass
class ShardInfo:
    """One shard as the manifest records it.

    ``sequences`` lists the global sequence indices of the shard's rows, in
    row order, as ``[start, stop, step]`` ranges (``range(start, stop, step)``):
    one range for a shard of consecutive sequences.
    """

    name: str
    rows: int
    sequences: list[list[int]]
    sha256: str
    bytes: int

    def __post_init__(self):
        """Refuse an entry that names a file outside the cache folder, or whose fields have the wrong type."""
        check_shard_name(self.name)
        for name, kind in (("rows", int), ("bytes", int), ("sha256", str)):
            value = getattr(self, name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"shard {self.name}: {name} is {value!r}, expected {kind.__name__}")
        if (not isinstance(self.sequences, list)
                or any(not isinstance(r, list) or len(r) != 3 or any(type(v) is not int for v in r)
                       for r in self.sequences)):
            raise ValueError(f"shard {self.name}: sequences is {self.sequences!r:.80}, expected a list of "
                             "[start, stop, step] integer ranges")
        if any(step < 1 for _, _, step in self.sequences):
            raise ValueError(f"shard {self.name}: a sequence range has a step below 1")

    def indices(self):
        """The global sequence indices of the rows, ``int64 [rows]``."""
        # heavy: numpy, only for the indices array (the manifest itself is plain Python)
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
    targets: dict
    encoding: str
    compact: dict | None
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
    extras: dict | None = None  # several teachers, stored hidden states (destila.cache.extras)
    # The data spec the sequences were made with (its fields, loss_on, packing, split, subset, streaming);
    # informative: ids_fingerprint already covers every token, position and mask it decides.
    data: dict | None = None
    tokenizer_files: dict[str, str] = field(default_factory=dict)  # tokenizer/ file → sha256 (tokenizer_files.py)
    # Each position's byte span in its document, for a student with another tokenizer (destila.cache.spans).
    spans: bool = False
    # SHA-256 of the content fields, also in every shard's metadata (cache/checks/identity.py); None: an older cache.
    identity: str | None = None

    @property
    def stored_sequences(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def target_spec(self):
        """The :class:`~destila.targets.spec.TargetSpec` the targets were made with."""
        return TargetSpec(**self.targets)

    @property
    def target_kind(self) -> str:
        return self.targets["kind"]

    @property
    def top_k(self) -> int:
        """Entries per position a reader returns: K (top-K) or S (sampled: at most S distinct ids)."""
        return target_width(self.target_spec)

    @property
    def temperature(self) -> float:
        return float(self.targets["temperature"])

    def content(self) -> dict:
        """The content-defining fields (:data:`CONTENT_FIELDS`), the target spec's flattened as ``targets.NAME``."""
        values = {name: getattr(self, name) for name in CONTENT_FIELDS if name != "targets"}
        values.update({f"targets.{k}": v for k, v in target_content(self.target_spec).items()})
        return values

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_dict(cls, raw: dict, where: str = MANIFEST) -> Manifest:
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: holds a JSON {type(raw).__name__}, expected an object; the manifest is "
                             "damaged: rebuild the cache")
        version = raw.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(
                f"{where}: cache format version {version}, this destila reads version {FORMAT_VERSION}; "
                "rebuild the cache with this version or use the destila that wrote it"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(names - set(raw) - {"complete", "shards", "destila_version", "extras", "data",
                                              "tokenizer_files", "spans", "identity"})
        if missing:
            raise ValueError(f"{where}: manifest lacks the fields {', '.join(missing)}; the file is damaged")
        values = {k: v for k, v in raw.items() if k in names}
        wrong = _wrong_types(values)
        if wrong:
            raise ValueError(f"{where}: {wrong}; the manifest is damaged or was edited: rebuild the cache")
        values["shards"] = [shard_info(s, where) for s in raw.get("shards", [])]
        return cls(**values)


# The JSON type each manifest field must have (None allowed where the field's default is None).
_FIELD_TYPES = {"int": (int,), "str": (str,), "bool": (bool,), "dict": (dict,), "list[ShardInfo]": (list,),
                "dict[str, str]": (dict,)}


def _wrong_types(values: dict) -> str | None:
    """``"FIELD is VALUE, expected TYPE"`` for the first field of a raw manifest with the wrong JSON type."""
    for spec in dataclasses.fields(Manifest):
        if spec.name not in values:
            continue
        value, annotation = values[spec.name], str(spec.type)
        optional = annotation.endswith(" | None")
        kinds = _FIELD_TYPES.get(annotation.removesuffix(" | None"))
        if kinds is None or (optional and value is None):
            continue
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            expected = annotation.replace("list[ShardInfo]", "list").replace("dict[str, str]", "dict")
            return f"{spec.name} is {value!r:.60}, expected {expected}"
        if kinds == (int,) and value is not None and value < 0:  # every integer field counts something, or is an id
            return f"{spec.name} is {value}, expected an integer ≥ 0"
    tokenizer_files = values.get("tokenizer_files") or {}
    if any(not isinstance(v, str) for v in tokenizer_files.values()):
        return "tokenizer_files holds a digest that is not a string"
    return None


def check_shard_name(name) -> None:
    """Refuse a shard name that is not a plain ``shard-NNNNNNNNNN.safetensors`` file of the cache folder.

    A manifest (or a progress file) is data another person may have written:
    a name such as ``../outside/x.safetensors`` or ``/etc/passwd`` would make
    destila hash, read or adopt a file outside the cache.
    """
    if not isinstance(name, str) or not SHARD_NAME_PATTERN.fullmatch(name):
        raise ValueError(f"shard name {name!r:.80} is not a plain {SHARD_PREFIX}NNNNNNNNNN{SHARD_SUFFIX} file name "
                         "inside the cache folder; a cache never names a file elsewhere (the manifest is damaged, or "
                         "was written to read files outside the cache): do not use this cache")


def shard_info(entry, where: str) -> ShardInfo:
    """The :class:`ShardInfo` of one raw manifest (or progress file) entry; ``ValueError`` naming ``where``."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: a shard entry is a JSON {type(entry).__name__}, expected an object")
    known = {f.name for f in dataclasses.fields(ShardInfo)}
    missing, unknown = sorted(known - set(entry)), sorted(set(entry) - known)
    if missing or unknown:
        name = entry.get("name", "?")
        what = (f"lacks {', '.join(missing)}" if missing else "") + (" and " if missing and unknown else "") + (
            f"has unknown fields {', '.join(unknown)}" if unknown else "")
        raise ValueError(f"{where}: the entry of shard {name!r:.80} {what}; the manifest is damaged: rebuild the "
                         "cache")
    try:
        return ShardInfo(**entry)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


class ShardFormatError(ValueError):
    """A shard whose tensors do not have the names, dtypes or shapes its manifest implies."""


def row_index_schema(rows: int) -> dict[str, tuple[str, tuple]]:
    """The tensor every shard holds, whatever its encoding: the global sequence index of each row."""
    return {"sequence_index": ("int64", (rows,))}


def schema_faults(found: dict[str, tuple[str, list]], schema: dict[str, tuple[str, tuple]]) -> list[str]:
    """Where ``found`` (``{name: (safetensors dtype code, shape)}``, e.g. from a shard header) breaks ``schema``."""
    faults = []
    for name, (dtype, shape) in schema.items():
        if name not in found:
            faults.append(f"tensor {name} missing")
            continue
        code, got = found[name]
        fits = len(got) == len(shape) and all(want is None or want == g for want, g in zip(shape, got))
        if code != SAFETENSORS_DTYPES[dtype] or not fits:
            wanted = "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"
            faults.append(f"tensor {name} is {code} {list(got)}, expected {SAFETENSORS_DTYPES[dtype]} {wanted}")
    extra = sorted(set(found) - set(schema))
    if extra:
        faults.append(f"unexpected tensors {', '.join(extra)}")
    return faults


def shard_file_fault(folder: Path, shard: ShardInfo, *, checksum: bool = True) -> str | None:
    """What is wrong with ``shard``'s file, or None: missing, a size other than recorded, or (with
    ``checksum``) a SHA-256 other than recorded. The one size/hash check of writer, reader and verify."""
    path = Path(folder) / shard.name
    link = outside_link(folder, path)
    if link is not None:
        return (f"a symbolic link to {link}, outside the cache folder; a cache reads only its own files: copy "
                "the file into the folder (cp -L) if you trust it")
    size = path.stat().st_size if path.is_file() else None
    if size is None:
        return "file missing"
    if size != shard.bytes:
        return f"size {size} bytes, the manifest says {shard.bytes}"
    if checksum:
        digest = sha256_file(path)
        if digest != shard.sha256:
            return f"checksum mismatch (manifest sha256 {shard.sha256[:16]}…, file {digest[:16]}…): the file is damaged"
    return None


def read_manifest(folder: Path, name: str = MANIFEST) -> Manifest:
    """Load and validate ``folder/name``; ``FileNotFoundError`` when the folder holds no cache."""
    path = Path(folder) / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{folder}: no {name} found; expected a cache folder written by `destila cache build`"
        )
    link = outside_link(folder, path)
    if link is not None:
        raise ValueError(f"{path}: a symbolic link to {link}, outside the cache folder; a cache reads only its own "
                         "files: copy the manifest into the folder (cp -L) if you trust it")
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
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
