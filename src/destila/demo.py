"""`destila demo`: the whole pipeline on the embedded default, in about ten minutes on 2 CPU cores.

Stages: teacher (SmolLM2-135M converted once from the bundled GGUF) → top-K
cache of the training documents (and of the held-out ones, for evaluation) →
student cut from the teacher → offline fused distillation → the same student
trained with cross-entropy only for the same number of steps (the no-teacher
baseline) → side-by-side evaluation → report.

Every stage records itself in ``OUT/stages.json`` when it finishes; running
the demo again skips finished stages and resumes an interrupted one (the
cache build and training resume where they stopped).
"""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from destila.models import EMBEDDED
from destila.stages import StageLog, train_from_cache

PROMPT = "To open a file for reading in Python,"


@dataclass
class DemoSettings:
    """What the demo runs; the defaults fit about 10 minutes on 2 CPU cores."""

    teacher: str = EMBEDDED
    holdout_every: int = 5  # every 5th document (sorted by name) is held out from training
    seq_len: int = 256
    # Sized by measurement (README § The demo): with batch 8 and 64K cached tokens
    # the teacher pass took 40% of the budget and training reached only 14 steps.
    train_tokens: int = 24576  # cached tokens for training (96 sequences; ~2 epochs in the budget)
    eval_tokens: int = 8192  # held-out tokens for evaluation
    top_k: int = 100
    student_layers: int = 6
    batch_size: int = 4  # more, smaller steps: early in training the number of updates matters most
    learning_rate: float = 5e-4
    max_steps: int = 400  # upper bound; the time budget usually stops training first
    minutes: float = 10.0  # wall-clock budget of the whole demo (installation excluded)
    eval_reserve_seconds: float = 150.0  # kept aside for evaluation and the report
    new_tokens: int = 32
    cache_batch_size: int = 8

    def __post_init__(self):
        for name in ("seq_len", "train_tokens", "eval_tokens", "top_k", "student_layers", "batch_size", "max_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected a positive integer, found {getattr(self, name)}")
        if self.minutes <= 0:
            raise ValueError(f"minutes: expected a positive number, found {self.minutes}")


def split_documents(texts: list[str], holdout_every: int) -> tuple[list[str], list[str]]:
    """``(train, held_out)``: every ``holdout_every``-th document is held out, the rest trains."""
    held = [t for i, t in enumerate(texts) if i % holdout_every == holdout_every - 1]
    train = [t for i, t in enumerate(texts) if i % holdout_every != holdout_every - 1]
    return train, held


class Demo:
    """The demo's stages over one output folder; see the module docstring."""

    def __init__(self, out: str | Path, settings: DemoSettings | None = None, texts: list[str] | None = None,
                 console=None):
        from rich.console import Console

        self.out = Path(out)
        self.settings = settings or DemoSettings()
        self.texts = texts
        self.console = console or Console()
        self.state_path = self.out / "stages.json"
        self.started = time.monotonic()

    # -- bookkeeping --------------------------------------------------------------

    def _state(self) -> dict:
        return StageLog(self.out, self.console).state()

    def _stage(self, name: str, title: str, run) -> dict:
        """Run ``run()`` unless stage ``name`` finished before; record its result and duration."""
        return StageLog(self.out, self.console).run(name, title, run)

    def _documents(self) -> tuple[list[str], list[str]]:
        from destila.data import pydoc_texts

        return split_documents(self.texts or pydoc_texts(), self.settings.holdout_every)

    # -- stages ---------------------------------------------------------------------

    def teacher(self) -> dict:
        from destila.models import embedded_teacher_dir

        s = self.settings
        path = str(embedded_teacher_dir()) if s.teacher == EMBEDDED else s.teacher
        return {"path": path}

    def caches(self, teacher: str) -> dict:
        from destila.cache import BuildSpec, build_cache, inspect_cache
        from destila.targets.spec import TargetSpec

        s = self.settings
        train, held = self._documents()
        common = dict(seq_len=s.seq_len, targets=TargetSpec(top_k=s.top_k), batch_size=s.cache_batch_size)
        report = build_cache(BuildSpec(teacher, train, self.out / "cache", max_tokens=s.train_tokens, **common))
        build_cache(BuildSpec(teacher, held, self.out / "cache-heldout", max_tokens=s.eval_tokens, **common))
        summary = inspect_cache(self.out / "cache")
        return {
            "train_tokens": summary["tokens"], "bytes_per_token": summary["bytes_per_token"],
            "cache_mb": summary["folder_bytes"] / 1e6, "teacher_tokens_per_second": report.tokens_per_second,
            "documents_train": len(train), "documents_held_out": len(held),
        }

    def student(self, teacher: str) -> dict:
        from destila.models import INIT_INCOMPLETE
        from destila.student import init_student

        path = self.out / "student-init"
        if (path / "config.json").exists() and not (path / INIT_INCOMPLETE).exists():
            return {"path": str(path)}
        summary = init_student(teacher, path, layers=self.settings.student_layers)
        return {"path": str(path), "kept_layers": summary["kept_layers"],
                "student_parameters": summary["student_parameters"],
                "teacher_parameters": summary["teacher_parameters"]}

    def _train(self, student: str, name: str, max_steps: int, budget: float | None, **loss) -> dict:
        s = self.settings
        return train_from_cache(student, self.out / name, self.out / "cache", max_steps=max_steps,
                                batch_size=s.batch_size, learning_rate=s.learning_rate, budget=budget, **loss)

    def evaluate(self, models: list[str]) -> dict:
        from destila.eval import evaluate_models, render_table

        s = self.settings
        results = evaluate_models(models, cache=str(self.out / "cache-heldout"), max_tokens=s.eval_tokens,
                                  prompt=PROMPT, new_tokens=s.new_tokens, batch_size=4)
        table_results = [{**r, "model": name} for r, name in zip(results, ("teacher", "distilled", "baseline"))]
        self.console.print(render_table(table_results, title="held-out comparison"))
        return {"results": results}

    # -- the whole run ------------------------------------------------------------------

    def run(self) -> dict:
        from destila.cache import inspect_cache
        from destila.report import write_report
        from destila.training.callbacks import read_training_log

        s = self.settings
        self.out.mkdir(parents=True, exist_ok=True)
        teacher = self._stage("teacher", "1/7 teacher (converted once, then reused)", self.teacher)["path"]
        self._stage("cache", "2/7 teacher pass: top-K cache of the training and held-out documents",
                    lambda: self.caches(teacher))
        student = self._stage("student", f"3/7 student: {s.student_layers} layers cut from the teacher",
                              lambda: self.student(teacher))["path"]
        left = s.minutes * 60 - (time.monotonic() - self.started) - s.eval_reserve_seconds
        budget = max(30.0, left / 2)  # the baseline gets the same steps, so about the same time
        distilled = self._stage(
            "distill", f"4/7 offline fused distillation (about {budget / 60:.1f} min)",
            lambda: self._train(student, "distilled", s.max_steps, budget, impl="fused"),
        )
        baseline = self._stage(
            "baseline", f"5/7 baseline: the same student, cross-entropy only, {distilled['steps']} steps",
            lambda: self._train(student, "baseline", distilled["steps"], None, soft_weight=0.0, hard_weight=1.0),
        )
        evaluation = self._stage("evaluate", "6/7 evaluation on held-out documents",
                                 lambda: self.evaluate([teacher, distilled["path"], baseline["path"]]))
        self.console.rule("[bold]7/7 report")
        state = self._state()
        cache = inspect_cache(self.out / "cache")
        write_report(
            self.out, settings=asdict(s), stages={k: {"seconds": v["seconds"]} for k, v in state.items()},
            cache={"sequences": cache["sequences"], "tokens": cache["tokens"], "top_k": cache["top_k"],
                   "bytes_per_token": round(cache["bytes_per_token"], 1),
                   "size_mb": round(cache["folder_bytes"] / 1e6, 1)},
            results=evaluation["results"], names=["teacher", "distilled", "baseline"],
            runs={"distilled (KL to teacher)": read_training_log(Path(distilled["path"]) / "log.jsonl"),
                  "baseline (cross-entropy only)": read_training_log(Path(baseline["path"]) / "log.jsonl")},
            command=" ".join(shlex.quote(a) for a in ["destila", *sys.argv[1:]]) if sys.argv else "destila demo",
        )
        self.console.print(f"report: {self.out / 'report.md'} (plots: training_curves.png, metrics.png)")
        return state
