"""`TargetSpec`: what the teacher provides at each position, declared once.

The cache writer stores targets of this spec (and records it in the
manifest); online distillation computes targets of the same spec on the fly.
So ``temperature`` here is the *teacher's* temperature: the one its
log-probabilities were tempered with. Training must temper the student with
the same value (see :func:`check_training_temperature`), otherwise the loss
compares ``p_T`` with ``q_T'`` and distils another objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DEFAULT_HEAD_CHUNK_ROWS = 1024
TARGET_KINDS = ("topk", "sampled")
"""The names ``kind`` takes (the choices of ``--targets``); each kind itself, its fields included, lives in
:mod:`destila.cache.kinds`."""


@dataclass(frozen=True)
class TargetSpec:
    """The teacher's side of the loss at temperature T, computed ``head_chunk_rows`` rows at a time.

    ``kind="topk"``: the K most likely tokens with their log-probs and the
    exact log-mass of the rest. ``kind="sampled"``: ``samples`` tokens drawn
    from the teacher's distribution, stored as distinct ids with counts and
    read as the empirical distribution ``count / samples`` with an empty
    rest (an unbiased estimate of the full distribution; see docs/loss.md).
    Draws are seeded per position from ``seed``, the sequence index and the
    position, so they do not depend on batching, resumes or process count.
    """

    kind: str = field(default="topk", metadata={
        "help": "What the teacher provides per position: 'topk' (top-K log-probs + exact rest mass) or "
                "'sampled' (S draws from its distribution, stored as distinct ids with counts).",
        "choices": TARGET_KINDS, "aliases": ["--targets"]})
    top_k: int = field(default=100, metadata={
        "help": "Teacher tokens kept per position, for --targets topk (the rest is one bucket of exact mass)."})
    temperature: float = field(default=1.0, metadata={
        "help": "Teacher softmax temperature T; training must use the same T for the student."})
    samples: int = field(default=64, metadata={
        "help": "Draws per position S for --targets sampled (refused with topk)."})
    seed: int = field(default=0, metadata={
        "help": "Seed of the draws for --targets sampled (refused with topk)."})
    head_chunk_rows: int = field(default=DEFAULT_HEAD_CHUNK_ROWS, metadata={
        "help": "Rows of the teacher's output head computed at once: its [rows, vocab] float32 "
                "logits are the teacher pass's largest buffer. Changes stored values only by float rounding (the tail "
                "log-mass by a few millionths), which still changes the shard checksums."})

    def __post_init__(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise ValueError(f"targets: expected one of {', '.join(TARGET_KINDS)}, found {self.kind!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed: expected an integer in [0, 2^63), found {self.seed!r}")
        if isinstance(self.samples, int) and not isinstance(self.samples, bool) and self.samples > 65535:
            raise ValueError(f"samples: expected at most 65535 draws per position, found {self.samples}")
        for name in ("top_k", "samples", "head_chunk_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, found {value!r}")
        value = self.temperature
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"temperature: expected a finite number > 0, found {value!r}")
        object.__setattr__(self, "temperature", float(value))


def check_training_temperature(student_temperature: float, teacher_temperature: float, where: str) -> None:
    """Refuse to train a student at T' on targets tempered at T ≠ T'.

    Cached log-probs are ``log softmax(z_teacher / T)``; re-tempering them
    exactly would need the teacher's full logits, which the cache does not
    hold (the top-K of ``p_T`` is not the top-K of ``p_T'`` in general).
    """
    if not math.isclose(student_temperature, teacher_temperature, rel_tol=1e-9, abs_tol=0.0):
        raise ValueError(
            f"temperature: training asks for T = {student_temperature:g} but the targets in {where} were made "
            f"at T = {teacher_temperature:g}; train with --temperature {teacher_temperature:g}, or rebuild the "
            f"cache with `destila cache build ... --temperature {student_temperature:g}`"
        )
