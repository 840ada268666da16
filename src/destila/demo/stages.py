"""Staged, resumable runs: the machinery shared by ``destila demo`` and the recipes.

A run is a sequence of named stages over one output folder. Each stage
records its result in ``OUT/stages.json`` when it finishes (the file is
replaced atomically, so a stage is recorded whole or not at all); running
again skips recorded stages, and the interrupted one resumes by itself
because its own steps are resumable (the cache build, training from the last
complete checkpoint). A run that records its settings (:meth:`StageLog.hold_one_run`: the demo and
the recipes) refuses to resume with other ones: a skipped stage would silently keep the old.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from destila.io import write_atomic

RECORD = "recipe.json"
"""``OUT/recipe.json``: the settings of the run a folder holds."""
BATCH_SIZES = ("generate_batch_size", "cache_batch_size")
"""Settings that size a call's batches, not what it writes: free to differ when a run resumes."""


class StageLog:
    """``OUT/stages.json``: which stages finished, with what result and in how many seconds."""

    def __init__(self, out: str | Path, console=None):
        # rich: only when a staged run prints its log
        from rich.console import Console

        self.out = Path(out)
        self.path = self.out / "stages.json"
        self.console = console or Console()

    def state(self) -> dict:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def hold_one_run(self, settings: dict, what: str, may_differ: tuple[str, ...] = (), out_flag: str = "-o") -> None:
        """The folder holds one run. Until a stage finishes, ``settings`` (re)write ``OUT/recipe.json``: a run
        refused or failed before then may be rerun corrected (a stage cut off part-way refuses other settings
        itself, through its own record: a cache's manifest, ``generate``'s sidecar). Once one has finished, a rerun
        whose settings differ is refused, naming each difference, before anything is written, and so is a folder
        with finished stages and no record (an earlier destila wrote it). ``may_differ``: settings that change how
        a call runs, not what it writes (the batch sizes of a teacher or generation call, which a resume after
        running out of memory lowers; the demo's time budget, which a resume after its refusal raises). ``out_flag``:
        the command's output-folder flag, named in the refusals."""
        settings = json.loads(json.dumps(settings))  # compared as read back: tuples become lists
        record = self.out / RECORD
        if self.state():
            if not record.exists():
                raise ValueError(f"out: {self.out} holds {what} whose settings were not recorded (an earlier "
                                 f"destila wrote it); choose another {out_flag}")
            old = json.loads(record.read_text())
            differences = [f"{k}: {old.get(k)!r} before, {v!r} now" for k, v in settings.items()
                           if old.get(k) != v and k not in may_differ]
            if differences:
                raise ValueError(f"out: {self.out} holds {what} with other settings ({'; '.join(differences)}); "
                                 f"run the same command to resume it, or choose another {out_flag}")
            return
        self.out.mkdir(parents=True, exist_ok=True)
        write_atomic(record, json.dumps(settings, indent=2))

    def run(self, name: str, title: str, work) -> dict:
        """``work()`` unless stage ``name`` finished before; its result (a dict) gains ``seconds``."""
        state = self.state()
        if name in state:
            self.console.print(f"[green]✓[/green] {title}: done before ({state[name]['seconds']:.0f} s), skipped")
            return state[name]
        self.console.rule(f"[bold]{title}")
        start = time.monotonic()
        info = work() or {}
        info["seconds"] = time.monotonic() - start
        state = self.state()
        state[name] = info
        self.out.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(state, indent=2))
        self.console.print(f"[green]✓[/green] {title}: {info['seconds']:.0f} s")
        return info


def train_from_cache(student: str, out: str | Path, cache: str | Path, *, max_steps: int, batch_size: int,
                     learning_rate: float, budget: float | None = None, seed: int = 0, callbacks: tuple = (),
                     eval_cache: str | Path | None = None, eval_sequences: int | None = None, **options) -> dict:
    """Offline distillation of ``student`` from ``cache`` into ``out``, resuming from its last complete
    checkpoint; stops after ``budget`` seconds when given (or as ``callbacks`` decide, e.g. a
    :class:`destila.demo.budget.StepBudget`). ``eval_cache``: held-out sequences scored every
    ``eval_steps`` (pass ``eval_strategy="steps"``). ``options``: any other
    :class:`DistillationArguments` field (loss weights, ``warmup_steps``, ``freeze_embeddings``, …).
    Returns ``{"path", "steps", "train_seconds"}``."""
    # heavy: transformers' Trainer; the recipes import this module and `destila --help` imports them
    from destila.training import DistillationArguments, TrainSpec, train_student
    from destila.training.callbacks import StopAfterSeconds

    out = Path(out)
    fields = dict(lr_scheduler_type="constant_with_warmup", warmup_steps=5, logging_steps=1, save_steps=20,
                  save_total_limit=1, report_to="none", dataloader_num_workers=0)
    args = DistillationArguments(
        output_dir=str(out), max_steps=max_steps, per_device_train_batch_size=batch_size,
        learning_rate=learning_rate, seed=seed, **{**fields, **options},
    )
    callbacks = (*callbacks, StopAfterSeconds(budget)) if budget else tuple(callbacks)
    resume = True if out.exists() else None  # the newest complete checkpoint of this stage's own run
    result = train_student(TrainSpec(student, out, args, cache=cache, resume=resume, eval_cache=eval_cache,
                                     eval_sequences=eval_sequences), callbacks=callbacks)
    return {"path": str(out), "steps": result["steps"], "train_seconds": result["train"].get("train_runtime")}
