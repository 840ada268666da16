"""`BuildSpec`: everything one `destila cache build` needs, declared once.

The command line's flags (``destila cache build --help``) are generated from
these fields and from :class:`~destila.targets.spec.TargetSpec`'s; Python
users pass the same object to :func:`~destila.cache.writer.build_cache`::

    build_cache(BuildSpec("smollm2", DataSpec("pydoc", seq_len=512), "cache/", encoding="compact",
                          targets=TargetSpec(top_k=100)))
    build_cache("smollm2", "pydoc", "cache/", seq_len=512, top_k=100)   # the same, flat
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from destila.cache.encodings import ENCODINGS, encoding_of
from destila.cache.extras import TeacherExtras
from destila.cache.format import LOGPROB_DTYPES
from destila.cache.kinds import check_target_fields, kind_of
from destila.data.spec import DataSpec, GivenRows, as_data
from destila.models.placement import PlacementSpec
from destila.ranges import check_int_at_least
from destila.targets.spec import TargetSpec

TEACHER_DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class BuildSpec(PlacementSpec):
    """One teacher pass over ``data``, stored in the cache folder ``output``.

    The teacher's placement (``device``, ``device_map``, ``max_memory``,
    ``offload_folder``) is :class:`~destila.models.placement.PlacementSpec`'s, keyword-only.

    Only :data:`~destila.cache.format.CONTENT_FIELDS`-relevant fields
    (teacher, data, sequence length, targets, encoding, dtypes) change what
    is stored; ``batch_size``, ``device`` (the device map, tensor parallelism), ``shard_size``
    and ``targets.head_chunk_rows`` may differ between a build and its resume.
    """

    teacher: str = field(metadata={
        "help": "HF model folder, hub id, .gguf file, or 'smollm2' (on the command line TEACHER may be repeated: "
                "TEACHER1 TEACHER2 … DATA caches the mixture of those teachers)", "metavar": "TEACHER", "nargs": "+"})
    data: DataSpec | GivenRows = field(metadata={
        "help": "'pydoc', 'stdlib', a .txt/.jsonl/.parquet/.csv file, a folder of them, or a folder datasets can load "
                "(from Python a DataSpec, a list of documents, a datasets.Dataset or a list of rows; the row layout, "
                "seq_len and max_tokens among it, is the DataSpec's)", "metavar": "DATA"})
    output: str | Path = field(metadata={
        "help": "cache folder (created, or resumed)", "metavar": "CACHE", "aliases": ["-o"]})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file name inside the TEACHER folder"})
    targets: TargetSpec = field(default_factory=TargetSpec, metadata={
        "help": "what the teacher provides per position (its own flags)"})
    encoding: str = field(default="plain", metadata={
        "help": "shard encoding: 'plain' (safetensors tensors any reader can load) or 'compact' (ids delta-coded, "
                "log-probs quantised, zstd: a third of the bytes at K = 100; see docs/cache.md)",
        "choices": tuple(ENCODINGS)})
    logprob_dtype: str = field(default="float16", metadata={
        "help": "storage dtype of the top-K log-probs in the plain encoding", "choices": LOGPROB_DTYPES})
    batch_size: int = field(default=8, metadata={"help": "sequences per teacher forward"})
    tensor_parallel: bool = field(default=False, metadata={
        "help": "under torchrun: shard the teacher across all the processes with transformers' tensor-parallel "
                "plan (tp_plan=\"auto\"), for a teacher larger than one GPU; every process runs every sequence "
                "and rank 0 writes the cache (see docs/scale.md)"})
    dtype: str = field(default="auto", metadata={
        "help": "teacher weights dtype ('auto': as stored)", "choices": TEACHER_DTYPES})
    shard_size: int = field(default=128, metadata={"help": "sequences per shard file"})
    progress: bool = field(default=True, metadata={
        "help": "progress bar while building (--no-progress or --quiet: one log line per shard instead)", "aliases": ["--quiet"]})
    spans: bool = field(default=False, metadata={
        "help": "also store each position's byte span in its document, so that a student with another tokenizer "
                "can be aligned to the teacher; a few bytes per position (docs/cross_tokenizer.md)"})
    extras: TeacherExtras = field(default_factory=TeacherExtras, metadata={
        "help": "several teachers mixed, and teacher hidden states stored (its own flags)"})

    def __post_init__(self) -> None:
        if not isinstance(self.targets, TargetSpec):
            raise ValueError(f"targets: expected a TargetSpec, found {type(self.targets).__name__}")
        check_target_fields(self.targets)  # --targets sampled --top-k 5: a field its kind would ignore
        for name, choices in (("encoding", ENCODINGS), ("logprob_dtype", LOGPROB_DTYPES), ("dtype", TEACHER_DTYPES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name}: expected one of {', '.join(choices)}, found {getattr(self, name)!r}")
        for name in ("batch_size", "shard_size"):
            check_int_at_least(name, getattr(self, name), 1)
        if self.logprob_dtype != "float16":  # the default: a chosen dtype that nothing stores is refused
            if not encoding_of(self.encoding).keeps_logprob_dtype:
                raise ValueError(f"logprob_dtype: --logprob-dtype {self.logprob_dtype} applies to the plain encoding; "
                                 f"--encoding {self.encoding} stores log-probs its own way and would ignore it: "
                                 "drop one")
            if not kind_of(self.targets.kind).has_logprobs:
                raise ValueError(f"logprob_dtype: --targets {self.targets.kind} stores counts, not log-probs, and "
                                 f"would ignore --logprob-dtype {self.logprob_dtype}: drop it")
        self.output = Path(self.output).expanduser()
        self.data = as_data(self.data)  # the row layout (seq_len, max_tokens, fields) is the data's, declared there
        if not isinstance(self.extras, TeacherExtras):
            raise ValueError(f"extras: expected a TeacherExtras, found {type(self.extras).__name__}")
        if self.extras.mixture and not kind_of(self.targets.kind).supports_mixture:
            raise ValueError("teacher_weights: a mixture of teachers is stored as top-K targets; drop --kind sampled")
        if self.extras.hidden_layers is not None and not kind_of(self.targets.kind).stores_hidden_states:
            raise ValueError("hidden_layers: teacher hidden states are stored beside top-K targets only; "
                             "drop --targets sampled or --hidden-layers")
        if self.tensor_parallel and (self.device_map or self.max_memory or self.offload_folder):
            raise ValueError("tensor_parallel: shards the teacher across torchrun's processes, --device-map spreads "
                             "it over one process's devices; pass one of them, not both")
        if self.tensor_parallel and self.extras.active:
            raise ValueError("tensor_parallel: runs one teacher without stored hidden states; drop --tensor-parallel "
                             "or the further teachers and --hidden-layers")
        if self.extras.hidden_layers is not None and not encoding_of(self.encoding).stores_hidden:
            raise ValueError("hidden_layers: teacher hidden states are stored in the plain encoding only; "
                             "drop --encoding compact")

    @classmethod
    def from_options(cls, teacher, data, output, **options) -> BuildSpec:
        """A spec from flat keyword options, the target spec's among them (``top_k=…``, ``temperature=…``).

        Naive equivalent: ``BuildSpec(teacher, DataSpec(data, seq_len=…), output, targets=TargetSpec(top_k=…))``.
        """
        data_names = {f.name for f in fields(DataSpec)} - {"source"}
        data = as_data(data, **{k: options.pop(k) for k in list(options) if k in data_names})
        target_names = {f.name for f in fields(TargetSpec)}
        target_options = {k: options.pop(k) for k in list(options) if k in target_names}
        extra_names = {f.name for f in fields(TeacherExtras)}
        extra_options = {k: options.pop(k) for k in list(options) if k in extra_names}
        if extra_options:
            options["extras"] = replace(options.get("extras") or TeacherExtras(), **extra_options)
        targets = options.pop("targets", None) or TargetSpec()
        if target_options:
            targets = replace(targets, **target_options)
        unknown = sorted(set(options) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"build_cache: unknown options {', '.join(unknown)}; expected fields of BuildSpec, "
                             "TargetSpec or TeacherExtras")
        return cls(teacher, data, output, targets=targets, **options)
