"""Wall-clock budgets for staged runs: how many steps fit, re-sized while training runs.

The demo promises to finish in ``--minutes M``. Nothing about its speed is
known in advance (the CPU may be shared), so every stage is sized from
throughput measured in this run:

- :func:`split_seconds`: the training time left, shared between trainings;
- :func:`measure_step_seconds`: what one optimizer step of a student costs on
  this machine now, timed on a real batch before any time is committed;
- :func:`scaled_reserve`: the evaluation's reserve, scaled by the teacher's measured speed;
- :func:`plan_training`: the cache size and steps per student that fit, or
  how many minutes the minimum would need;
- :class:`StepBudget`: a ``transformers`` callback that measures the seconds
  per step as training goes, keeps the step target at what still fits before
  the stage's deadline (never more than the cap), stops there, and shows a
  progress bar whose total is that target.

Naive equivalent: ``StopAfterSeconds`` (stop when the time is up) with a
progress bar counting toward ``max_steps``: the same stop, but the bar and the
report cannot say in advance how many steps there will be.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time

from transformers import TrainerCallback

from destila.io.progress import progress_bar
from destila.models import load_causal_lm


def steps_that_fit(seconds: float, seconds_per_step: float, cap: int) -> int:
    """``min(cap, ⌊seconds / seconds_per_step⌋)``, at least 1 (a stage always makes one step)."""
    if seconds_per_step <= 0:
        raise ValueError(f"seconds_per_step: expected a positive number, found {seconds_per_step}")
    if cap < 1:
        raise ValueError(f"cap: expected a positive integer, found {cap}")
    return max(1, min(cap, math.floor(max(seconds, 0.0) / seconds_per_step)))


def split_seconds(seconds_left: float, reserve: float, trainings: int) -> float:
    """Seconds for each of ``trainings`` equal trainings once ``reserve`` (evaluation, report) is set aside."""
    if trainings < 1:
        raise ValueError(f"trainings: expected a positive integer, found {trainings}")
    return max(0.0, seconds_left - reserve) / trainings


def measure_step_seconds(model_path: str, input_ids, *, freeze_embeddings: bool, learning_rate: float,
                         steps: int = 3, bf16: bool = False, clock=time.monotonic) -> float:
    """Seconds of one training step (forward, backward, AdamW) of ``model_path`` on ``input_ids [B, T]``.

    The median of ``steps − 1`` timed steps after a first one that pays the one-time costs. The loss is
    the next-token cross-entropy, which costs what the fused KD loss does (both need the full head).
    ``bf16``: under bfloat16 autocast, as the Trainer's ``bf16=True`` runs it (weights and optimizer
    in float32). Nothing is saved; the model is dropped afterwards.
    """
    # heavy: torch
    import torch

    model = load_causal_lm(model_path).train()
    if freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
    seconds = []
    for _ in range(max(2, steps)):
        start = clock()
        autocast = torch.autocast(input_ids.device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with autocast:
            loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds.append(clock() - start)
    return statistics.median(seconds[1:])


def scaled_reserve(seconds: float, teacher_tokens_per_second: float, measured_at: float,
                   floor: float = 0.5) -> float:
    """``seconds`` (a stage's time, measured where the teacher ran at ``measured_at`` tokens/s) scaled to
    this run's teacher speed: ``seconds · measured_at / v``, never below ``floor · seconds``. The
    evaluation is forward passes and generation, so it speeds up and slows down with the teacher."""
    if teacher_tokens_per_second <= 0:
        raise ValueError(f"teacher_tokens_per_second: expected a positive number, found {teacher_tokens_per_second}")
    return seconds * max(floor, measured_at / teacher_tokens_per_second)


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX). Without it bfloat16 autocast
    emulates the arithmetic and runs slower than float32, so timing it would only cost the plan time."""
    # heavy: torch
    import torch

    return bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())  # private, but no public one


def plan_training(seconds: float, *, teacher_tokens_per_second: float, step_seconds: float, step_tokens: int,
                  trainings: int, epochs: float, max_tokens: int, min_steps: int, max_steps: int) -> dict:
    """How to spend ``seconds`` on a teacher pass of ``T`` tokens then ``trainings`` trainings of ``S`` steps.

    Each student should see the cache about ``epochs`` times (``S · step_tokens = epochs · T``), so
    ``seconds = T / v + trainings · S · step_seconds`` gives ``S``; ``T`` is capped at ``max_tokens``
    (the steps then grow, up to ``max_steps``). Returns ``{"tokens", "steps", "fits", "seconds_needed"}``:
    ``fits`` is ``steps ≥ min(min_steps, max_steps)``; ``seconds_needed`` is what ``min_steps`` steps would take.
    """
    if teacher_tokens_per_second <= 0 or step_seconds <= 0:
        raise ValueError("plan_training: expected positive measured speeds, found "
                         f"{teacher_tokens_per_second} tokens/s and {step_seconds} s/step")
    per_step = step_tokens / (epochs * teacher_tokens_per_second) + trainings * step_seconds
    steps = math.floor(max(seconds, 0.0) / per_step)
    tokens = min(max_tokens, math.ceil(steps * step_tokens / epochs / step_tokens) * step_tokens)
    tokens = max(tokens, step_tokens)
    if tokens == max_tokens:  # the cache is capped: the time it leaves goes to more passes over it
        steps = math.floor(max(0.0, seconds - tokens / teacher_tokens_per_second) / (trainings * step_seconds))
    steps = min(steps, max_steps)
    min_steps = min(min_steps, max_steps)  # a cap below the minimum is the caller's choice, not a shortfall
    minimum_tokens = min(max_tokens, math.ceil(min_steps / epochs) * step_tokens)
    needed = minimum_tokens / teacher_tokens_per_second + trainings * min_steps * step_seconds
    return {"tokens": tokens, "steps": steps, "fits": steps >= min_steps, "seconds_needed": needed}


class StepBudget(TrainerCallback):
    """Stops training at the last step that ends before ``deadline`` (a ``clock()`` value), at most ``cap`` steps.

    Seconds per step are measured from the end of the first step seen by this
    run (which pays one-time costs: threads, allocator, first-call paths; a
    resumed run also restarts its clock there), so evaluation and logging
    between steps are counted. Until two steps are measured the target is
    ``guess`` (or ``cap``). ``history`` keeps every re-sizing as
    ``(step, target)``; ``target`` is the final one.

    Closing a training (final evaluation, saving the model) costs time after
    the last step; it is taken to cost what opening it did (loading the
    model, building the Trainer, up to the end of the first step, measured
    from this callback's creation), and the steps end that much before
    ``deadline``.
    """

    shows_progress = True  # train_student then drops the Trainer's own bar, which counts toward max_steps

    def __init__(self, deadline: float, cap: int, guess: int | None = None, *, description: str = "training",
                 clock=time.monotonic, progress: bool = True):
        if cap < 1:
            raise ValueError(f"cap: expected a positive integer, found {cap}")
        self.deadline, self.cap, self.clock, self.progress = deadline, cap, clock, progress
        self.description = description
        self.target = max(1, min(cap, guess or cap))
        self.history: list[tuple[int, int]] = []
        self.bar = None
        self._first = None  # (step, clock) at the end of the first step seen
        self._created = clock()
        self.closing_seconds = 0.0

    def seconds_per_step(self, step: int) -> float | None:
        """Measured seconds per step so far (``None`` before two steps)."""
        if self._first is None or step <= self._first[0]:
            return None
        return (self.clock() - self._first[1]) / (step - self._first[0])

    def _resize(self, step: int) -> None:
        per_step = self.seconds_per_step(step)
        if per_step is None:
            return
        last_step_ends = self.deadline - self.closing_seconds
        target = max(step, min(self.cap, step + math.floor(max(0.0, last_step_ends - self.clock()) / per_step)))
        if target != self.target:
            self.target = target
            self.history.append((step, target))
            if self.bar is not None:
                self.bar.total = target
                self.bar.refresh()

    def on_train_begin(self, args, state, control, **kwargs):
        self.history.append((state.global_step, self.target))
        if self.progress and state.is_local_process_zero:
            self.bar = progress_bar(self.target, initial=state.global_step, desc=self.description, unit="step")

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if self._first is None:
            self._first = (step, self.clock())
            self.closing_seconds = self._first[1] - self._created
        self._resize(step)
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            per_step = self.seconds_per_step(step)
            if per_step is not None:
                self.bar.set_postfix_str(f"{per_step:.1f} s/step")
        if step >= self.target:
            control.should_training_stop = True
            control.should_save = True

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
