"""`destila demo`: the whole pipeline on the embedded default, inside a wall-clock budget.

Stages: teacher (SmolLM2-135M converted once from the bundled GGUF) → top-K
cache of the held-out documents, then of as many training tokens as the
budget allows at the teacher's measured speed → student cut from the teacher
→ offline fused distillation → the same student trained with cross-entropy
only (the no-teacher baseline), for the same number of steps when there is
time → side-by-side evaluation and continuations → report.

Budget (``--minutes M``, the whole run): evaluation and the report get a
reserve (``eval_reserve_seconds``, scaled by the teacher's measured speed:
larger on a slower or loaded machine, smaller on a faster one); the teacher
pass gets the share of the rest that lets each student see its cache about
``epochs`` times; the plan times a training step in float32 and, where the
CPU has native bfloat16, under bfloat16 autocast, and the students train in
the faster; the trainings share what is left (the first a tenth less, so
that the later ones, capped at its steps, can match them), each stopped by
:class:`destila.demo.budget.StepBudget` at the last step that fits (measured
seconds per step, re-sized every step).

Every stage records itself in ``OUT/stages.json`` when it finishes; running
the demo again skips finished stages and resumes an interrupted one (the
cache build and training resume where they stopped). The settings are kept
in ``OUT/recipe.json``: a rerun with other ones is refused, except for
``MAY_DIFFER_ON_RESUME``.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from rich.console import Console
from transformers import AutoConfig

from destila.cache import BuildSpec, TopKCache, build_cache, inspect_cache, read_manifest
from destila.cache.kinds import kind_of
from destila.data import pydoc_texts
from destila.demo.budget import (StepBudget, measure_step_seconds, native_bf16, plan_training, scaled_reserve,
                                 split_seconds)
from destila.demo.report import write_demo_report
from destila.demo.samples import continuations
from destila.demo.settings import DEMO_PROMPTS, TRAININGS, DemoSettings
from destila.demo.stages import BATCH_SIZES, StageLog, train_from_cache
from destila.eval import EvalSpec, evaluate_models, render_table, task_scores
from destila.eval.harness import require_harness
from destila.models import EMBEDDED, INIT_INCOMPLETE, embedded_teacher_dir, load_tokenizer
from destila.student import check_layer_indices, init_student
from destila.student.calibration import from_texts
from destila.student.spec import StudentInitSpec
from destila.student.width import resolve_targets
from destila.targets.spec import TargetSpec

# The teacher's held-out pass (tokens/s, wall clock, loading included) in the clean-clone run whose
# evaluation stage took 169 s of the 210 s reserve; the reserve is scaled by this over the speed measured
# in the run: larger on a loaded or slower machine, smaller (at most halved) on a faster one.
RESERVE_TEACHER_TOKENS_PER_SECOND = 450.0


# Measured step time × this = a Trainer step's: data loading, logging and the held-out curve every
# few steps come on top of the bare forward/backward/update the plan times.
STEP_OVERHEAD = 1.15

# The first training takes this fraction of an equal share of the time. The later ones are capped at its
# steps, and theirs can run a few percent slower (a clean-clone run measured 4.5 s a step against 4.3 s
# for the first), so without this slack they would stop short of its steps and the comparison be unequal.
LEAD_SHARE = 0.9

# Settings a resumed demo may change: its time budget (a refused plan tells the user to rerun with more
# --minutes; a resumed run gets the minutes it is given), --force, and the teacher's batch size. Every other
# setting shapes what a stage wrote, so a rerun that changes one is refused instead of silently keeping the old.
MAY_DIFFER_ON_RESUME = ("minutes", "force", *BATCH_SIZES)

# The harness's batch size for the task: its questions are short, and bigger batches pay the per-batch
# overhead less often.
TASK_BATCH_SIZE = 16


class DemoWontFit(ValueError):
    """Fewer than ``min_steps`` training steps per student fit in the budget (raised before training)."""


def split_documents(texts: list[str], holdout_every: int) -> tuple[list[str], list[str]]:
    """``(train, held_out)``: every ``holdout_every``-th document is held out, the rest trains."""
    held = [t for i, t in enumerate(texts) if i % holdout_every == holdout_every - 1]
    train = [t for i, t in enumerate(texts) if i % holdout_every != holdout_every - 1]
    return train, held




def training_runs(seeds: int) -> list[tuple[str, int]]:
    """``(training, seed)`` in training order: for each seed, the distilled student then its baseline."""
    return [(training, seed) for seed in range(seeds) for training in TRAININGS]


def run_name(training: str, seed: int) -> str:
    return training if seed == 0 else f"{training}-seed{seed}"


class Demo:
    """The demo's stages over one output folder; see the module docstring."""

    def __init__(self, out: str | Path, settings: DemoSettings | None = None, texts: list[str] | None = None,
                 console=None, clock=time.monotonic):
        self.out = Path(out)
        self.settings = settings or DemoSettings()
        self.texts = texts
        self.console = console or Console()
        self.log = StageLog(self.out, self.console)
        self.clock = clock
        self.started = clock()

    # -- bookkeeping --------------------------------------------------------------

    def seconds_left(self) -> float:
        return self.settings.minutes * 60 - (self.clock() - self.started)

    def _state(self) -> dict:
        return self.log.state()

    def _stage(self, name: str, title: str, run) -> dict:
        """Run ``run()`` unless stage ``name`` finished before; record its result and duration."""
        return self.log.run(name, title, run)

    def _documents(self) -> tuple[list[str], list[str]]:
        return split_documents(self.texts or pydoc_texts(), self.settings.holdout_every)

    # -- stages ---------------------------------------------------------------------

    def teacher(self) -> dict:
        """The teacher's folder, and the student's layers and widths checked against it: a wrong --layers must
        not cost the teacher pass, and is refused before this stage is recorded (a rerun may correct it)."""
        s = self.settings
        path = str(embedded_teacher_dir()) if s.teacher == EMBEDDED else s.teacher
        self._check_layers(path)
        return {"path": path}

    def _check_layers(self, teacher: str) -> None:
        s = self.settings
        try:
            config = AutoConfig.from_pretrained(teacher)
        except (OSError, ValueError, AttributeError):
            return  # not a plain HF folder (hub id, GGUF): the student stage checks
        if s.student_layers is not None:
            check_layer_indices(s.student_layers, config.num_hidden_layers)
        if s.student_width:
            resolve_targets(config, **s.student_width)

    def describe_student(self) -> str:
        s = self.settings
        layers = "all the teacher's layers" if s.student_layers is None else f"teacher layers {s.student_layers}"
        width = ", ".join(f"{key} {value}" for key, value in s.student_width.items())
        return layers + (f", pruned by activation importance to {width}" if width else "")

    def heldout(self, teacher: str) -> dict:
        """The held-out cache (fixed size, never shrunk by the budget); its pass measures the teacher's speed."""
        s = self.settings
        _, held = self._documents()
        start = self.clock()
        report = build_cache(BuildSpec.from_options(teacher, held, self.out / "cache-heldout", max_tokens=s.eval_tokens,
                                       **self._cache_options()))
        seconds = self.clock() - start
        # Wall-clock speed (loading and tokenising included): what the plan must pay per token.
        speed = report.tokens / max(seconds, 1e-6)
        return {"held_out_tokens": report.tokens, "teacher_tokens_per_second": speed,
                "documents_held_out": len(held),
                "eval_reserve_seconds": scaled_reserve(s.eval_reserve_seconds, speed,
                                                       measured_at=RESERVE_TEACHER_TOKENS_PER_SECOND)}

    def _cache_options(self, training: bool = False) -> dict:
        """The held-out cache's top-K targets, or ``training``: the training cache's (``train_targets``)."""
        s = self.settings
        targets = TargetSpec(top_k=s.top_k)
        if training:  # the kind's width, K (top_k) or S (samples): the settings field of the same name
            width = kind_of(s.train_targets).fields[0]
            targets = TargetSpec(kind=s.train_targets, **{width: getattr(s, width)})
        return dict(seq_len=s.seq_len, targets=targets, batch_size=s.cache_batch_size)

    def plan(self, student: str, heldout: dict) -> dict:
        """Time one training step of the student here and now, then size the cache and the trainings.

        Refuses (:class:`DemoWontFit`) before the training cache is built when fewer than ``min_steps``
        steps per student fit, unless ``force``.
        """
        s = self.settings
        held = TopKCache(self.out / "cache-heldout")
        input_ids = torch.stack([held[i]["input_ids"] for i in range(min(s.batch_size, len(held)))])
        timed = {precision: measure_step_seconds(student, input_ids, freeze_embeddings=s.freeze_embeddings,
                                                 learning_rate=s.learning_rate, bf16=precision == "bfloat16")
                 for precision in self._precisions_to_time()}
        precision = min(timed, key=timed.get)
        step_seconds = timed[precision] * STEP_OVERHEAD
        reserve = heldout["eval_reserve_seconds"]
        plan = plan_training(self.seconds_left() - reserve,
                             teacher_tokens_per_second=heldout["teacher_tokens_per_second"],
                             step_seconds=step_seconds, step_tokens=s.batch_size * s.seq_len, trainings=2 * s.seeds,
                             epochs=s.epochs, max_tokens=s.train_tokens // s.seq_len * s.seq_len,
                             min_steps=s.min_steps, max_steps=s.max_steps)
        plan.update(step_seconds=step_seconds, eval_reserve_seconds=reserve, precision=precision,
                    timed_step_seconds=timed)
        if not plan["fits"]:
            elapsed = self.clock() - self.started
            minutes = math.ceil((elapsed + reserve + plan["seconds_needed"]) / 60)
            message = (f"only {plan['steps']} training steps per student fit in --minutes {s.minutes:g} on this machine "
                       f"now ({step_seconds:.1f} s/step measured, the teacher at "
                       f"{heldout['teacher_tokens_per_second']:.0f} tokens/s); the demo needs at least {s.min_steps}, "
                       f"about {minutes} minutes: rerun with --minutes {minutes}, on a quieter machine, or with --force")
            if not s.force:
                raise DemoWontFit(message)
            self.console.print(f"[yellow]--force: {message}")
            plan["steps"] = max(plan["steps"], 1)
        return plan

    def _precisions_to_time(self) -> tuple[str, ...]:
        """``auto``: float32, and bfloat16 too where the CPU has it natively (elsewhere it is slower)."""
        s = self.settings
        if s.precision != "auto":
            return (s.precision,)
        return ("float32", "bfloat16") if native_bf16() else ("float32",)

    def caches(self, teacher: str, plan: dict) -> dict:
        """The training cache, of the planned size (kept when resuming an interrupted build)."""
        train, _ = self._documents()
        planned = plan["tokens"]
        try:  # resuming: keep the size the interrupted build was planned with
            planned = read_manifest(self.out / "cache").max_tokens or planned
        except (FileNotFoundError, ValueError):
            pass
        report = build_cache(BuildSpec.from_options(teacher, train, self.out / "cache", max_tokens=planned,
                                       **self._cache_options(training=True)))
        summary = inspect_cache(self.out / "cache")
        return {
            "train_tokens": summary["tokens"], "planned_train_tokens": planned,
            "bytes_per_token": summary["bytes_per_token"], "cache_mb": summary["folder_bytes"] / 1e6,
            "teacher_pass_tokens_per_second": report.tokens_per_second, "documents_train": len(train),
        }

    def student(self, teacher: str) -> dict:
        s = self.settings
        path = self.out / "student-init"
        if (path / "config.json").exists() and not (path / INIT_INCOMPLETE).exists():
            return {"path": str(path)}
        train, _ = self._documents()
        # Calibration text from the training documents only: the held-out ones stay unseen.
        calibration = from_texts(train, load_tokenizer(teacher), s.calibration_tokens,
                                 source="the demo's training documents")
        summary = init_student(StudentInitSpec(teacher, path, layers=s.student_layers, calibration=calibration,
                                               **s.student_width))
        return {"path": str(path), "kept_layers": summary["kept_layers"],
                "student_parameters": summary["student_parameters"],
                "teacher_parameters": summary["teacher_parameters"],
                "start_perplexity": summary["start_perplexity"], "teacher_perplexity": summary["teacher_perplexity"]}

    def train(self, student: str, training: str, seed: int, cap: int, trainings_left: int, guess: int | None,
              reserve: float, share: float = 1.0, precision: str = "float32") -> dict:
        """One training, stopped by a :class:`StepBudget` at ``share`` × its equal share of the time left."""
        s = self.settings
        name = run_name(training, seed)
        seconds = share * split_seconds(self.seconds_left(), reserve, trainings_left)
        budget = StepBudget(self.clock() + seconds, cap=cap, guess=guess, description=name, clock=self.clock)
        _, loss = TRAININGS[training]
        result = train_from_cache(
            student, self.out / name, self.out / "cache", max_steps=cap, batch_size=s.batch_size,
            learning_rate=s.learning_rate, seed=seed, callbacks=(budget,), warmup_steps=s.warmup_steps,
            weight_decay=0.0, freeze_embeddings=s.freeze_embeddings, eval_strategy="steps", eval_steps=s.eval_every,
            per_device_eval_batch_size=4, eval_cache=self.out / "cache-heldout",
            eval_sequences=s.eval_curve_sequences, bf16=precision == "bfloat16", **loss,
        )
        return {**result, "training": training, "seed": seed, "cap": cap, "planned_seconds": seconds,
                "precision": precision, "step_targets": budget.history,
                "tokens": result["steps"] * s.batch_size * s.seq_len}

    def evaluate(self, models: list[str], names: list[str]) -> dict:
        s = self.settings
        results = evaluate_models(EvalSpec(models, cache=str(self.out / "cache-heldout"), max_tokens=s.eval_tokens,
                                           prompt=DEMO_PROMPTS[0], new_tokens=s.new_tokens, batch_size=4))
        self.console.print(render_table([{**r, "model": n} for r, n in zip(results, names)],
                                        title="held-out comparison"))
        for result, model in zip(results, models):
            result["continuations"] = continuations(model, list(DEMO_PROMPTS), s.new_tokens)
        if s.task_questions:
            for result, scores in zip(results, self._task_scores(models)):
                result["task"] = scores
        return {"results": results}

    def _task_scores(self, models: list[str]) -> list[dict | None]:
        """The first ``task_questions`` questions of the built-in ``task`` per model (its questions come
        from the held-out documents); ``None`` each when the ``eval`` extra is missing."""
        try:
            require_harness()
        except ValueError as missing:
            self.console.print(f"[yellow]task accuracy skipped: {missing}")
            return [None] * len(models)
        s = self.settings
        return task_scores(s.task, models, limit=s.task_questions, batch_size=TASK_BATCH_SIZE, log=self.console.print)

    # -- the whole run ------------------------------------------------------------------

    def run(self) -> dict:
        s = self.settings
        self.log.hold_one_run(asdict(s), "a demo run", may_differ=MAY_DIFFER_ON_RESUME, out_flag="--out")
        teacher = self._stage("teacher", "teacher (converted once, then reused)", self.teacher)["path"]
        heldout = self._stage("heldout", "teacher pass over the held-out documents (measures the teacher's speed)",
                              lambda: self.heldout(teacher))
        student = self._stage("student", f"student: {self.describe_student()}",
                              lambda: self.student(teacher))["path"]
        plan = self._stage("plan", "plan: one training step timed, the cache and the steps sized to fit",
                           lambda: self.plan(student, heldout))
        precision = plan.get("precision", "float32")  # a plan recorded before precisions were timed: float32
        self.console.print(f"plan: {plan['tokens']:,} training tokens, {plan['steps']} steps per student "
                           f"({plan['step_seconds']:.1f} s/step measured, {precision})")
        cache = {**heldout, **self._stage("cache", "teacher pass: the training documents' cache",
                                          lambda: self.caches(teacher, plan))}
        runs = training_runs(s.seeds)
        trained: dict[str, dict] = {}
        cap, reserve = s.max_steps, plan["eval_reserve_seconds"]
        for number, (training, seed) in enumerate(runs):
            name = run_name(training, seed)
            left = len(runs) - number
            share = LEAD_SHARE if number == 0 else 1.0
            seconds = share * split_seconds(self.seconds_left(), reserve, left)
            guess = max(1, min(cap, plan["steps"]))
            what, _ = TRAININGS[training]
            trained[name] = self._stage(
                name, f"train {name} ({what}): {seconds / 60:.1f} min, planned {guess} steps (at most {cap})",
                lambda training=training, seed=seed, cap=cap, left=left, guess=guess, share=share:
                    self.train(student, training, seed, cap, left, guess, reserve, share, precision),
            )
            # Every later student gets at most the steps of the first: same steps when there is time.
            cap = max(1, min(cap, trained[run_name("distilled", 0)]["steps"]))
        # A student that made no step is its initial cut, not a result: it is named, never scored.
        untrained = [name for name, info in trained.items() if info["steps"] < 1]
        for name in untrained:
            self.console.print(f"[red]{name}: no training step fitted in the budget; left out of the comparison")
        scored = {name: info for name, info in trained.items() if name not in untrained}
        names = ["teacher", *scored]
        models = [teacher, *(info["path"] for info in scored.values())]
        evaluation = self._stage("evaluate", "evaluation on held-out documents, continuations",
                                 lambda: self.evaluate(models, names))
        self.console.rule("[bold]report")
        state = self._state()
        write_demo_report(
            self.out, settings=asdict(s), stages={k: {"seconds": v["seconds"]} for k, v in state.items()},
            cache=cache, trained=scored, results=evaluation["results"], names=names, untrained=untrained, plan=plan,
            command=" ".join(shlex.quote(a) for a in ["destila", *sys.argv[1:]]) if sys.argv else "destila demo",
        )
        self.console.print(f"report: {self.out / 'report.md'} (plots: training_curves.png, metrics.png)")
        return state
