"""`EvalSpec`: what ``destila eval`` compares on held-out data, and how it measures.

The command's flags are generated from these fields (name, type, default,
choices, help; see :func:`destila.cli.fields.add_fields`), beside the
``--data`` options of :class:`~destila.data.spec.DataSpec` and the task
options of :class:`~destila.eval.harness.TaskEvalSpec`. Naive equivalent of
what a spec asks for::

    evaluate_models(spec.models, cache=spec.cache, teacher=spec.teacher, max_tokens=spec.max_tokens,
                    batch_size=spec.batch_size, prompt=spec.prompt, prompts=spec.prompts,
                    new_tokens=spec.new_tokens, device=spec.device)
"""

from __future__ import annotations

from dataclasses import dataclass, field

SOURCES = ("cache", "data")
"""The held-out text comes from one of these (a mutually exclusive pair of flags)."""


@dataclass
class EvalSpec:
    """The models side by side, where their held-out text comes from, and the measurement's settings."""

    models: list[str] = field(metadata={
        "help": "model folders, .gguf files or 'smollm2'", "metavar": "MODEL", "nargs": "+"})
    cache: str | None = field(default=None, metadata={
        "help": "a top-K cache (or its export): its tokens, and the top-K bucket KL to its teacher"})
    data: str | None = field(default=None, metadata={
        "help": "'pydoc', a .txt/.jsonl/.parquet/.csv file, a folder, or a datasets hub name"})
    teacher: str | None = field(default=None, metadata={
        "help": "also compute the full-vocabulary KL and agreement with this teacher"})
    eval_fraction: float | None = field(default=None, metadata={
        "help": "with --cache: evaluate only the part `destila train --eval-fraction F` held out"})
    max_tokens: int = field(default=16384, metadata={"help": "evaluate at most this many tokens"})
    batch_size: int = field(default=4, metadata={"help": "rows per forward pass"})
    prompt: str | None = field(default=None, metadata={"help": "prompt for the generation-speed sample"})
    prompts: str | None = field(default=None, metadata={
        "help": "prompts for the generation samples: a .txt file (one per line) or a .jsonl file with `messages` "
                "(conversations) or `prompt`; chat models read them through their chat template",
        "metavar": "FILE"})
    new_tokens: int = field(default=32, metadata={"help": "tokens generated for the speed measurement"})
    device: str = field(default="cpu", metadata={"help": "where each model runs: cpu, cuda, cuda:1, ..."})
    json: str | None = field(default=None, metadata={"help": "write the results as JSON", "metavar": "PATH"})

    @property
    def held_out(self) -> bool:
        """Held-out metrics are asked for: a cache or data to read them on."""
        return self.cache is not None or self.data is not None
