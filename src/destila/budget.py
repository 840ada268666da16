"""Wall-clock budgets for staged runs: how many steps fit, re-sized while training runs.

The demo promises to finish in ``--minutes M``. Nothing about its speed is
known in advance (the CPU may be shared), so every stage is sized from
throughput measured in this run:

- :func:`tokens_that_fit`: how many tokens the teacher pass may cache, from
  the teacher's measured tokens/s;
- :func:`split_seconds`: the training time left, shared between trainings;
- :class:`StepBudget`: a ``transformers`` callback that measures the seconds
  per step as training goes, keeps the step target at what still fits before
  the stage's deadline (never more than the cap), stops there, and shows a
  progress bar whose total is that target.

Naive equivalent: ``StopAfterSeconds`` (stop when the time is up) with a
progress bar counting toward ``max_steps``: the same stop, but the bar and the
report cannot say in advance how many steps there will be.
"""

from __future__ import annotations

import math
import time

from transformers import TrainerCallback


def steps_that_fit(seconds: float, seconds_per_step: float, cap: int) -> int:
    """``min(cap, ⌊seconds / seconds_per_step⌋)``, at least 1 (a stage always makes one step)."""
    if seconds_per_step <= 0:
        raise ValueError(f"seconds_per_step: expected a positive number, found {seconds_per_step}")
    if cap < 1:
        raise ValueError(f"cap: expected a positive integer, found {cap}")
    return max(1, min(cap, math.floor(max(seconds, 0.0) / seconds_per_step)))


def tokens_that_fit(seconds: float, tokens_per_second: float, cap: int, multiple: int, floor: int) -> int:
    """Tokens a pass at ``tokens_per_second`` covers in ``seconds``, rounded down to ``multiple``,
    between ``floor`` and ``cap`` (both multiples of ``multiple``)."""
    if tokens_per_second <= 0:
        raise ValueError(f"tokens_per_second: expected a positive number, found {tokens_per_second}")
    fit = math.floor(max(seconds, 0.0) * tokens_per_second / multiple) * multiple
    return max(floor, min(cap, fit))


def split_seconds(seconds_left: float, reserve: float, trainings: int) -> float:
    """Seconds for each of ``trainings`` equal trainings once ``reserve`` (evaluation, report) is set aside."""
    if trainings < 1:
        raise ValueError(f"trainings: expected a positive integer, found {trainings}")
    return max(0.0, seconds_left - reserve) / trainings


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
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.target, initial=state.global_step, desc=self.description, unit="step")

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
