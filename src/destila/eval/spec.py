"""`EvalSpec`: what ``destila eval`` compares on held-out data, and how it measures; checked once.

The command's flags are generated from these fields (name, type, default,
choices, help; see :func:`destila.cli.fields.add_fields`), beside the
``--data`` options of :class:`~destila.data.spec.DataSpec` and the task
options of :class:`~destila.eval.harness.TaskEvalSpec`. The command fills one
spec, and Python callers pass the same object::

    results = evaluate_models(EvalSpec(["teacher/", "student/"], cache="heldout-cache/", max_tokens=8192))
    one = evaluate_model(EvalSpec(["student/"], data="pydoc", new_tokens=8))

``data`` may be a source name, a :class:`DataSpec` (or its fields as a dict)
or a list of documents; the spec keeps the DataSpec, with ``max_tokens``
applied. A field whose metadata says ``"flag": False`` is for Python callers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from destila.data.spec import DataSpec, as_data_spec
from destila.losses.options import DEFAULT_CHUNK_SIZE
from destila.models import check_source
from destila.ranges import check_fraction, check_int_at_least

SOURCES = ("cache", "data")
"""The held-out text comes from one of these (a mutually exclusive pair of flags)."""
DEFAULT_PROMPT = "The `with` statement in Python"
"""The generation sample's prompt when neither ``prompt`` nor ``prompts`` is given."""


@dataclass
class EvalSpec:
    """The models side by side, where their held-out text comes from, and the measurement's settings."""

    models: list[str] = field(metadata={
        "help": "model folders, .gguf files or 'smollm2'", "metavar": "MODEL", "nargs": "+"})
    cache: str | None = field(default=None, metadata={
        "help": "a top-K cache (or its export): its tokens, and the top-K bucket KL to its teacher"})
    data: DataSpec | str | list | dict | None = field(default=None, metadata={
        "help": "'pydoc', 'stdlib', a .txt/.jsonl/.parquet/.csv file, a folder, or a datasets hub name"})
    teacher: str | None = field(default=None, metadata={
        "help": "also compute the full-vocabulary KL and agreement with this teacher"})
    eval_fraction: float | None = field(default=None, metadata={
        "help": "with --cache: evaluate only the part `destila train --eval-fraction F` held out"})
    max_tokens: int | None = field(default=16384, metadata={"help": "evaluate at most this many tokens"})
    batch_size: int = field(default=4, metadata={"help": "rows per forward pass"})
    prompt: str | None = field(default=None, metadata={"help": "prompt for the generation-speed sample"})
    prompts: str | list | None = field(default=None, metadata={
        "help": "prompts for the generation samples: a .txt file (one per line) or a .jsonl file with `messages` "
                "(conversations) or `prompt`; chat models read them through their chat template",
        "metavar": "FILE"})
    new_tokens: int = field(default=32, metadata={"help": "tokens generated for the speed measurement"})
    device: str = field(default="cpu", metadata={"help": "where each model runs: cpu, cuda, cuda:1, ..."})
    json: str | None = field(default=None, metadata={"help": "write the results as JSON", "metavar": "PATH"})
    indices: list[int] | None = field(default=None, metadata={
        "flag": False, "help": "with a cache: score only these of its sequences (eval_fraction picks them itself)"})
    chunk_size: int = field(default=DEFAULT_CHUNK_SIZE, metadata={
        "flag": False, "help": "rows of the output head computed at once when scoring (memory, not results)"})

    def __post_init__(self) -> None:
        if isinstance(self.models, str):
            self.models = [self.models]
        self.models = [str(model) for model in self.models]
        if not self.models:
            raise ValueError("eval: expected at least one model, found none")
        for model in self.models:  # a path that is not there fails here, before any task data or worker process
            check_source(model)
        if self.cache is not None and self.data is not None:
            raise ValueError("eval: give either a cache or data (the held-out text), not both")
        self.cache = None if self.cache is None else str(self.cache)
        if self.data is not None:
            data = as_data_spec(self.data)
            self.data = data.replace(max_tokens=self.max_tokens or data.max_tokens)
        if self.eval_fraction is not None:
            check_fraction("eval_fraction", self.eval_fraction,
                           "the fraction `destila train --eval-fraction F` held out, or leave it out to score every "
                           "sequence")
        if self.eval_fraction is not None and self.data is not None:
            raise ValueError("--eval-fraction: only meaningful with --cache")
        if self.eval_fraction is not None and self.indices is not None:
            raise ValueError("eval: eval_fraction picks the held-out sequences itself; give it or indices, not both")
        if self.held_out and self.prompt is not None and self.prompts is not None:
            raise ValueError("eval: --prompt and --prompts: give one of them")
        for name in ("batch_size", "new_tokens", "chunk_size"):
            check_int_at_least(name, getattr(self, name), 1)
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens: expected a positive number of tokens, found {self.max_tokens}")

    @property
    def held_out(self) -> bool:
        """Held-out metrics are asked for: a cache or data to read them on."""
        return self.cache is not None or self.data is not None

    def ignored_without_held_out(self) -> list[str]:
        """The flags set that only held-out metrics read, when there is no cache or data: they would be ignored."""
        if self.held_out:
            return []
        return [flag for flag, given in (("--teacher", self.teacher), ("--eval-fraction", self.eval_fraction),
                                         ("--prompt", self.prompt), ("--prompts", self.prompts)) if given]
