"""What every recipe shares: its settings, the data split, caches, training, evaluation and the report.

A recipe is a list of stages (see :mod:`destila.demo.stages`): each model of the
chain is distilled from a cache of the model before it, and at the end every
model is evaluated on held-out documents against the first model's cache.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from destila.demo.settings import CachedStageSettings
from destila.demo.stages import BATCH_SIZES, StageLog, train_from_cache
from destila.models import resolve_source
from destila.ranges import check_int_at_least
from destila.student.spec import StudentInitSpec


@dataclass
class RecipeSettings(CachedStageSettings):
    """Sizes and training settings of every stage of a recipe: the demo's shared ones
    (:class:`~destila.demo.settings.CachedStageSettings`), the steps and the seed."""

    max_steps: int = field(default=100, metadata={"help": "optimizer steps of every stage"})
    seed: int = field(default=0, metadata={"help": "training seed (and the seed of a fresh student)"})

    def __post_init__(self):
        super().__post_init__()
        check_int_at_least("max_steps", self.max_steps, 1)


PROMPT = "To open a file for reading in Python,"


class Recipe:
    """The shared stages; subclasses define :meth:`chain` (the models to train, in order)."""

    title = "recipe"

    def __init__(self, data: str, out: str | Path, settings: RecipeSettings | None = None,
                 texts: list[str] | None = None, console=None):
        self.data, self.out = data, Path(out)
        self.settings = settings or RecipeSettings()
        self.texts = texts
        self.log = StageLog(self.out, console)
        self.console = self.log.console

    # -- building blocks ------------------------------------------------------------

    def hold_one_run(self) -> None:
        """Refuse a rerun whose settings differ from those in ``OUT/recipe.json`` (a skipped stage keeps the old)."""
        self.log.hold_one_run(self.describe(), f"a {self.title} run", may_differ=BATCH_SIZES)

    def documents(self) -> tuple[list[str], list[str]]:
        """The training and held-out documents (read once). Recipes ask for them before their first stage, so
        data that cannot be used is refused before anything is written to the output folder."""
        from destila.data import load_texts  # heavy: torch; RecipeSettings is read by `destila --help`

        if getattr(self, "_documents", None) is not None:
            return self._documents
        texts = self.texts if self.texts is not None else load_texts(self.data)
        every = self.settings.holdout_every
        train = [t for i, t in enumerate(texts) if i % every != every - 1]
        held = [t for i, t in enumerate(texts) if i % every == every - 1]
        if not held:
            raise ValueError(f"data: {len(texts)} documents leave none held out (every {every}th is); give more "
                             "documents or a smaller --holdout-every")
        self._documents = train, held
        return self._documents

    def resolve(self, model: str) -> dict:
        return {"path": resolve_source(model)[0]}

    def cache(self, model: str, folder: str, held_out: bool = False) -> dict:
        from destila.cache import build_cache, inspect_cache  # heavy: torch

        s = self.settings
        train, held = self.documents()
        path = self.out / folder
        build_cache(model, held if held_out else train, path, seq_len=s.seq_len, top_k=s.top_k,
                    max_tokens=s.eval_tokens if held_out else s.train_tokens, batch_size=s.cache_batch_size)
        summary = inspect_cache(path)
        return {"path": str(path), "tokens": summary["tokens"], "sequences": summary["sequences"],
                "top_k": summary["top_k"], "bytes_per_token": round(summary["bytes_per_token"], 1),
                "size_mb": round(summary["folder_bytes"] / 1e6, 1)}

    def init(self, model: str, folder: str, **how) -> dict:
        """The student ``how`` describes (fields of :class:`~destila.student.spec.StudentInitSpec`); a fresh one
        (``config=``) is seeded with the recipe's seed."""
        from destila.student import init_student  # heavy: torch

        path = self.out / folder
        if (path / "config.json").exists():  # written by a run killed before it could record the stage
            return {"path": str(path)}
        seed = {"seed": self.settings.seed} if "config" in how else {}
        summary = init_student(StudentInitSpec(model, path, **seed, **how))
        return {"path": str(path), "layers": summary["student_layers"], "parameters": summary["student_parameters"]}

    def train(self, student: str, cache: str, folder: str) -> dict:
        s = self.settings
        return train_from_cache(student, self.out / folder, cache, max_steps=s.max_steps, batch_size=s.batch_size,
                                learning_rate=s.learning_rate, seed=s.seed)

    def evaluate(self, models: list[str], names: list[str], held_out_cache: str) -> dict:
        from destila.eval import EvalSpec, evaluate_models, render_table  # heavy: torch

        s = self.settings
        results = evaluate_models(EvalSpec(models, cache=held_out_cache, max_tokens=s.eval_tokens, prompt=PROMPT,
                                           new_tokens=s.new_tokens, batch_size=4))
        self.console.print(render_table([{**r, "model": n} for r, n in zip(results, names)], title=self.title))
        return {"results": results, "names": names}

    def report(self, evaluation: dict, cache: dict, trained: dict[str, str]) -> None:
        from destila.demo.report import write_report  # heavy: transformers, matplotlib
        from destila.training.callbacks import read_training_log  # heavy: transformers

        state = self.log.state()
        command = " ".join(shlex.quote(a) for a in ["destila", *sys.argv[1:]]) if sys.argv[1:] else self.title
        write_report(
            self.out, settings=self.describe(), stages={k: {"seconds": v["seconds"]} for k, v in state.items()},
            cache=cache, results=evaluation["results"], names=evaluation["names"],
            runs={name: read_training_log(Path(path) / "log.jsonl") for name, path in trained.items()},
            command=command, title=f"destila {self.title} report",
        )
        self.console.print(f"report: {self.out / 'report.md'}")

    def describe(self) -> dict:
        return asdict(self.settings)
