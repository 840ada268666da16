"""A schedule for the distillation term's weight: constant, a ramp, or warmup-stable-decay.

``soft_weight`` (and ``hard_weight``) of :class:`~destila.losses.LossOptions`
are the weights of a constant loss. With a schedule, ``soft_weight`` is the
peak, reached after ``soft_weight_warmup`` and (``wsd``) left over the last
``soft_weight_decay`` towards ``soft_weight_end``; at step ``t`` of ``N``
(the optimizer steps done, ``0 … N−1``)::

    warm = W if W ≥ 1 else W · N            # the same rule for soft_weight_decay (D)
    ramp: α(t) = start + (peak − start) · min(1, t / warm)
    wsd:  α(t) = ramp(t) while t < N − D, then peak + (end − peak) · (t − (N − D)) / D

With ``hard_weight_complement`` the cross-entropy weight follows as
``1 − α(t)`` (the "Pre-training Distillation" form ``α·KD + (1 − α)·CE``;
the peak must then be ≤ 1), else it stays ``hard_weight``. The trainer asks
:meth:`SoftWeightSchedule.weights` for each step's pair; its training logs
show ``soft_weight`` (and ``hard_weight``) as they change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SCHEDULES = ("constant", "ramp", "wsd")
# The schedules that read each of the schedule's own fields: a value given for another schedule would be ignored.
READ_BY = {"soft_weight_start": ("ramp", "wsd"), "soft_weight_warmup": ("ramp", "wsd"),
           "soft_weight_decay": ("wsd",), "soft_weight_end": ("wsd",)}


def _steps(value: float, total: int) -> float:
    """``value`` steps when ≥ 1, else that fraction of ``total`` (transformers' rule for ``warmup_steps``)."""
    return value if value >= 1 else value * total


@dataclass
class SoftWeightSchedule:
    """How the distillation term's weight moves over training (``constant``: not at all)."""

    soft_weight_schedule: str = field(default="constant", metadata={
        "help": "constant (soft_weight throughout), ramp (from soft_weight_start to soft_weight over "
                "soft_weight_warmup) or wsd (ramp, hold, then move to soft_weight_end over the last "
                "soft_weight_decay)", "choices": list(SCHEDULES)})
    soft_weight_start: float = field(default=0.0, metadata={
        "help": "the distillation weight at step 0 (ramp, wsd)"})
    soft_weight_warmup: float = field(default=0.1, metadata={
        "help": "steps of the ramp to soft_weight (ramp, wsd); below 1, a fraction of max_steps"})
    soft_weight_decay: float = field(default=0.2, metadata={
        "help": "last steps over which the weight moves to soft_weight_end (wsd); below 1, a fraction of max_steps"})
    soft_weight_end: float = field(default=0.0, metadata={
        "help": "the distillation weight at the last step (wsd)"})
    hard_weight_complement: bool = field(default=False, metadata={
        "help": "weight the cross-entropy 1 − (the distillation weight) at every step instead of hard_weight "
                "(α·KD + (1 − α)·CE, with α ≤ 1)"})

    def __post_init__(self):
        if self.soft_weight_schedule not in SCHEDULES:
            raise ValueError(f"soft_weight_schedule: expected one of {', '.join(SCHEDULES)}, found "
                             f"{self.soft_weight_schedule!r}")
        for name in ("soft_weight_start", "soft_weight_warmup", "soft_weight_decay", "soft_weight_end"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: expected a finite number ≥ 0, found {value!r}")

    @property
    def active(self) -> bool:
        """Whether the weights differ from the constant ``soft_weight`` / ``hard_weight``."""
        return self.soft_weight_schedule != "constant" or self.hard_weight_complement

    def check(self, soft_weight: float, hard_weight: float, hard_weight_default: float | None = None) -> None:
        """Refuse a schedule whose loss would vanish or whose complement would be negative, a field the chosen
        schedule never reads set away from its default, and a ``hard_weight`` other than ``hard_weight_default``
        beside ``hard_weight_complement`` (which replaces it)."""
        unread = [name for name, schedules in READ_BY.items() if self.soft_weight_schedule not in schedules
                  and getattr(self, name) != self.__dataclass_fields__[name].default]
        if unread:
            readers = sorted({schedule for name in unread for schedule in READ_BY[name]})
            given = ", ".join(f"{name} {getattr(self, name):g}" for name in unread)
            raise ValueError(f"{given}: read only by the {' or '.join(readers)} schedule, and soft_weight_schedule "
                             f"is {self.soft_weight_schedule}; set --soft_weight_schedule, or drop them")
        if self.hard_weight_complement and hard_weight_default is not None and hard_weight != hard_weight_default:
            raise ValueError(f"hard_weight {hard_weight:g} and hard_weight_complement: the complement replaces it "
                             f"with 1 − (the distillation weight) at every step; give one of them")
        peaks = [soft_weight] + ([self.soft_weight_start] if self.soft_weight_schedule != "constant" else []) + \
                ([self.soft_weight_end] if self.soft_weight_schedule == "wsd" else [])
        if self.hard_weight_complement and max(peaks) > 1:
            raise ValueError(f"hard_weight_complement: the cross-entropy weight is 1 − α, so α must stay ≤ 1; found "
                             f"α up to {max(peaks):g}; lower --soft_weight (and --soft_weight_start/_end)")
        if not self.hard_weight_complement and hard_weight == 0 and min(peaks) == 0:
            raise ValueError("soft_weight_schedule: with --hard_weight 0 the loss is zero where the distillation "
                             "weight is 0; raise --soft_weight_start / --soft_weight_end, give --hard_weight, or pass "
                             "--hard_weight_complement")

    def soft(self, peak: float, step: int, max_steps: int) -> float:
        """The distillation weight at optimizer step ``step`` of ``max_steps``."""
        if self.soft_weight_schedule == "constant":
            return peak
        warm = _steps(self.soft_weight_warmup, max_steps)
        value = peak if warm <= 0 else self.soft_weight_start + (peak - self.soft_weight_start) * min(1.0, step / warm)
        if self.soft_weight_schedule == "wsd":
            decay = _steps(self.soft_weight_decay, max_steps)
            begin = max_steps - decay
            if decay > 0 and step >= begin:
                value = peak + (self.soft_weight_end - peak) * min(1.0, (step - begin) / decay)
        return value

    def shortfall(self, peak: float, max_steps: int) -> str | None:
        """One line when a run of ``max_steps`` steps never gives the distillation term its weight ``peak`` (a
        ramp longer than the run, or a decay that begins before the ramp ends); None when it does."""
        if self.soft_weight_schedule == "constant" or max_steps < 1:
            return None
        highest = max(self.soft(peak, step, max_steps) for step in range(max_steps))
        if highest >= peak or math.isclose(highest, peak, rel_tol=1e-9):
            return None
        return (f"train: warning: the distillation weight never reaches soft_weight {peak:g} in {max_steps} steps "
                f"(at most {highest:.3g}): the {self.soft_weight_schedule} schedule's soft_weight_warmup "
                f"{self.soft_weight_warmup:g} is too long for the run; shorten it or train longer")

    def weights(self, soft_weight: float, hard_weight: float, step: int, max_steps: int) -> dict:
        """``{"soft_weight", "hard_weight"}`` at ``step`` (``{}`` for a constant schedule: the options' own)."""
        if not self.active:
            return {}
        soft = self.soft(soft_weight, step, max(max_steps, 1))
        return {"soft_weight": soft, "hard_weight": 1.0 - soft if self.hard_weight_complement else hard_weight}
