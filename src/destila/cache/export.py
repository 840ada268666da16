"""`destila cache export CACHE OUT --format parquet`: the cache as a Hugging Face dataset.

The export is a folder ``datasets.load_dataset`` reads (and streams, and a
hub upload serves as is)::

    OUT/
      README.md                          dataset card: the files (``configs``) and, in ``dataset_info.description``,
                                         the export record below, so it travels with every loaded Dataset
      destila_cache.json                 the export record: the cache's manifest, the files' SHA-256, the fingerprint,
                                         and the identity, a SHA-256 of all of it (destila.cache.checks.export_identity)
      tokenizer/                         the teacher's tokenizer, as in the cache
      data/train-00000-of-00002.parquet  rows of 1,024 sequences, zstd, row groups of 32 rows
      data/train-00001-of-00002.parquet

One row per sequence, in sequence order, with the columns of
:mod:`destila.cache.dataset_rows` (the byte spans too, for a cache built with
``--spans``). Values are the cache's own: the stored
log-prob dtype where Arrow has it (float16, float32; bfloat16 is widened to
float32 exactly), the exact tail, the compact encoding's decoded
distributions. The record's ``content_sha256`` (:class:`~destila.cache.dataset_rows.ContentDigest`)
is computed from those values, so ``destila cache verify OUT`` checks the
rows whatever has happened to the files (recompressed by a hub upload) and
the per-file SHA-256 where the files are the exported ones. Local paths in the
manifest (the teacher's folder, the data file) are reduced to their names
(:mod:`destila.io.shareable`).

The folder is written under a temporary name beside ``OUT`` and renamed when
complete: a killed export leaves no ``OUT`` (the next one removes its leftovers).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from destila.cache.checks.export_identity import FIELD as IDENTITY, export_identity
from destila.cache.dataset_rows import (
    ARROW_LOGPROB_DTYPES,
    ContentDigest,
    DATA_DIR,
    RECORD,
    RECORD_FORMAT,
    RECORD_VERSION,
    canonical,
    rows_table,
    schema,
)
from destila.cache.encodings import encoding_of
from destila.cache.format import sha256_file
from destila.cache.kinds import kind_of
from destila.cache.reader import TopKCache
from destila.io import (
    create_staging_dir,
    names_user_path,
    output_lock,
    publish_folder,
    remove_staging_leftovers,
    write_atomic,
)
from destila.io.progress import progress_bar
from destila.io.shareable import shareable, shareable_name
from destila.ranges import check_int_at_least

FORMATS = ("parquet",)
ROW_GROUP_ROWS = 32  # rows per Parquet row group: what a streaming reader holds decoded at once


@dataclass
class ExportSpec:
    """What `destila cache export` is asked for."""

    cache: str = field(metadata={"help": "the cache folder", "metavar": "CACHE"})
    output: str = field(metadata={"help": "the dataset folder to write (must not exist, or be empty)",
                                  "metavar": "OUT"})
    format: str = field(default="parquet", metadata={
        "help": "file format of the rows: parquet (what datasets, pandas and the Hub read)", "choices": FORMATS})
    rows_per_file: int = field(default=1024, metadata={"help": "sequences per Parquet file"})
    progress: bool = field(default=True, metadata={"help": "progress bar (--no-progress: none)"})

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ValueError(f"format: expected one of {', '.join(FORMATS)}, found {self.format!r}")
        check_int_at_least("rows_per_file", self.rows_per_file, 1)


@dataclass
class ExportReport:
    path: Path
    rows: int
    files: int
    bytes: int
    content_sha256: str


def shareable_manifest(manifest) -> dict:
    """The manifest as an export records it: no shards (the export has its own files), local paths as names."""
    record = asdict(manifest)
    record["shards"] = []
    for name in ("teacher", "teacher_path", "data_source"):
        record[name] = shareable_name(record[name])
    record["data"] = shareable(record["data"]) if record.get("data") else record.get("data")
    if (record.get("extras") or {}).get("mixture"):
        record["extras"]["mixture"]["teachers"] = shareable(record["extras"]["mixture"]["teachers"])
    return record


def _output_folder(output) -> Path:
    """``output`` as the folder an export is published as: ``..`` spelt out (the staging folder and the lock sit
    beside it, named after it), and never the current folder (renamed into place, it would leave the shell in a
    deleted folder)."""
    out = Path(output).expanduser()
    if out.exists() and out.resolve() == Path.cwd().resolve():
        raise ValueError(f"export: OUT {output} is the current folder ({Path.cwd()}); an export is written beside "
                         "its folder and renamed into place, which the folder you are in cannot be; give a new "
                         f"folder, such as {os.path.join(output, 'export')}")
    return Path(os.path.abspath(out)) if out.name in ("", "..") else out


def export_cache(spec: ExportSpec) -> ExportReport:
    """Write the cache ``spec.cache`` as the dataset folder ``spec.output`` (see the module docstring)."""
    cache = TopKCache(spec.cache)
    manifest = cache.manifest
    if cache.hidden_layers:
        raise ValueError(f"export: the cache {spec.cache} also stores teacher hidden states (--hidden-layers), which "
                         "an export does not carry; export a cache built without them")
    kind = manifest.target_kind
    rounding = encoding_of(manifest.encoding).stored_logprob_dtype(manifest)  # None: exact once decoded
    logprob_dtype = ARROW_LOGPROB_DTYPES[rounding] if rounding else "float32"
    out = _output_folder(spec.output)
    rows, per_file = len(cache), spec.rows_per_file
    count = math.ceil(rows / per_file)
    with output_lock(out, "cache export"):
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise FileExistsError(f"export: {out} already exists and is not an empty folder; choose a new OUT, "
                                  "or delete it first")
        remove_staging_leftovers(out)  # a killed export's; we hold the lock
        staging = None
        try:
            with names_user_path(out):  # a full disk is reported on OUT, not on the staging folder
                out.parent.mkdir(parents=True, exist_ok=True)
                staging = create_staging_dir(out)  # a random name, created exclusively: never a planted link
                (staging / DATA_DIR).mkdir()
                digest, files = ContentDigest(), []
                with progress_bar(rows, unit="seq", desc="export", show=spec.progress) as bar:
                    for number in range(count):
                        name = f"{DATA_DIR}/train-{number:05d}-of-{count:05d}.parquet"
                        first, stop = number * per_file, min((number + 1) * per_file, rows)
                        _write_file(staging / name, cache, range(first, stop), kind, logprob_dtype, digest, bar,
                                    bool(manifest.spans))
                        files.append({"name": name, "rows": stop - first, "bytes": (staging / name).stat().st_size,
                                      "sha256": sha256_file(staging / name)})
                shutil.copytree(cache.tokenizer_path, staging / "tokenizer")
                record = {"format": RECORD_FORMAT, "version": RECORD_VERSION, "kind": kind, "width": cache.top_k,
                          "seq_len": manifest.seq_len, "rows": rows, "spans": bool(manifest.spans),
                          "logprob_dtype": logprob_dtype if kind_of(kind).has_logprobs else None,
                          "logprob_rounding": rounding, "content_sha256": digest.hexdigest(),
                          "files": files, "manifest": shareable_manifest(manifest)}
                record[IDENTITY] = export_identity(record)  # last: it covers every field above
                write_atomic(staging / RECORD, json.dumps(record, indent=1).encode())
                write_atomic(staging / "README.md", dataset_card(record).encode())
                if out.is_dir():
                    out.rmdir()  # empty (checked above): the staging folder takes its place
                publish_folder(staging, out)
        finally:
            if staging is not None and staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return ExportReport(out, rows, len(files), sum(f["bytes"] for f in files), record["content_sha256"])


def _write_file(path: Path, cache, indices: range, kind: str, logprob_dtype: str, digest, bar, spans: bool) -> None:
    # heavy: pyarrow's Parquet writer, only when an export is written
    import pyarrow.parquet as pq

    with pq.ParquetWriter(str(path), schema(kind, logprob_dtype, spans), compression="zstd") as writer:
        for start in range(indices.start, indices.stop, ROW_GROUP_ROWS):
            batch = []
            for index in range(start, min(start + ROW_GROUP_ROWS, indices.stop)):
                row = canonical(cache.stored(index), kind, logprob_dtype)
                digest.update(index, row, kind, logprob_dtype)
                batch.append((index, row))
            writer.write_table(rows_table(batch, kind, logprob_dtype), row_group_size=ROW_GROUP_ROWS)
            bar.update(len(batch))


def dataset_card(record: dict) -> str:
    """The export's README.md: YAML metadata ``datasets`` reads (files, and the record as the description), then
    what the rows hold and how to use them."""
    # huggingface_hub's card classes: only for an export's README
    from huggingface_hub import DatasetCardData

    m = record["manifest"]
    data = DatasetCardData(
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": f"{DATA_DIR}/train-*.parquet"}]}],
        dataset_info={"description": json.dumps(record, separators=(",", ":"))},
        tags=["destila", "knowledge-distillation", "teacher-logprobs"],
    )
    kind = kind_of(record["kind"])
    width = kind.width_letter
    targets = (f"top-{record['width']} log-probs ({record['logprob_dtype']}) and the exact log-mass of the rest"
               if kind.has_logprobs else f"S = {record['width']} draws (distinct ids and counts)")
    columns = ("`topk_ids` / `topk_logprobs` `[L][K]` (descending; `[]` where untrained), `tail_logmass` `[L]`"
               if kind.has_logprobs else "`sample_ids` / `sample_counts` `[L][S]` (`[]` where untrained)")
    if record.get("spans"):
        columns += "; `span_start` / `span_end` `[L]`: each input token's byte span in its document (-1 at padding)"
    return (
        f"---\n{data.to_yaml()}\n---\n\n"
        f"# Teacher targets of {m['teacher']}\n\n"
        f"A teacher pass stored by [destila](https://pypi.org/project/destila/) and exported with "
        f"`destila cache export`: {record['rows']:,} sequences of {record['seq_len']} tokens, and at every trained "
        f"position the teacher's {targets} for the next token (temperature {m['targets']['temperature']}, "
        f"vocabulary {m['vocab_size']:,}).\n\n"
        "One row per sequence: `sequence_index`; `input_ids`, `position_ids` (restarting at 0 where a packed "
        "document starts), `loss_mask` (true at t: the target at t, for the token t+1, is trained), all `[L]`; "
        f"{columns}, with {width} entries at each trained position.\n\n"
        "```python\n"
        "from datasets import load_dataset\n"
        "rows = load_dataset(\"PATH_OR_HUB_ID\", split=\"train\")                  # or streaming=True\n"
        "```\n\n"
        "Train a student from it as from the cache: `destila train STUDENT --cache PATH_OR_HUB_ID -o OUT`. "
        "`destila cache verify PATH` checks every row against the fingerprint in `destila_cache.json` "
        f"(`content_sha256` {record['content_sha256'][:16]}…). Teacher config hash "
        f"{m['teacher_config_hash']}, weights {m['teacher_weight_fingerprint']}, tokenizer "
        f"{m['tokenizer_fingerprint']} (its files in `tokenizer/`), data {m['data_fingerprint']} "
        f"({m['data_source']}).\n"
    )
