"""How much of the teacher a student with another tokenizer can learn from: the coverage report of a pair on a cache.

Two figures matter most:

- ``mapped_mass``: the share of the teacher's top-K probability mass, over
  its trained positions, that falls on tokens the student also has (the
  vocabulary map). What is not mapped only reaches the student as part of
  the rest bucket.
- ``one_to_one``: the share of the teacher's trained positions whose next
  token is a one-to-one group (the same bytes as one student token), where
  the exact bucket loss applies directly.

The report also counts every labelled student row by the group its next
token is in (``student_alignments``: one-to-one and many-to-one rows get teacher
targets; one-to-many, many-to-many and unaligned rows only their
cross-entropy), and the bytes per token of each side. A ``mapped_mass``
below :data:`LOW_COVERAGE` is logged as a warning with the figure.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import numpy as np

from destila.crosstok.dataset import ALIGNMENTS

LOW_COVERAGE = 0.2
DEFAULT_SEQUENCES = 64
log = logging.getLogger("destila.crosstok")


@dataclass
class Coverage:
    """The coverage of a pair on ``sequences`` sequences of a cache (see the module docstring)."""

    sequences: int
    teacher_positions: int
    student_rows: int
    mapped_mass: float
    one_to_one: float
    teacher_alignments: dict
    student_alignments: dict
    distilled_rows: float
    bytes_per_teacher_token: float
    bytes_per_student_token: float
    vocab: dict

    def line(self) -> str:
        """The one-line summary a run prints."""
        return (f"cross-tokenizer coverage on {self.sequences} sequences: {self.mapped_mass:.1%} of the teacher's "
                f"top-K mass on mapped tokens, {self.one_to_one:.1%} of its positions one-to-one; "
                f"{self.distilled_rows:.1%} of the student's trained rows get teacher targets "
                f"({self.student_alignments['one_to_one']:.1%} one-to-one, {self.student_alignments['many_to_one']:.1%} "
                f"many-to-one by the chain rule), the rest cross-entropy only")

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, fields: dict) -> "Coverage":
        """The coverage :meth:`as_dict` wrote, also from a store written when the alignment shares were named
        ``teacher_kinds`` / ``student_kinds``."""
        renamed = {"teacher_kinds": "teacher_alignments", "student_kinds": "student_alignments"}
        return cls(**{renamed.get(key, key): value for key, value in fields.items()})


def coverage_report(dataset, max_sequences: int | None = DEFAULT_SEQUENCES, warn_below: float = LOW_COVERAGE) -> Coverage:
    """The :class:`Coverage` of ``dataset`` (a :class:`~destila.crosstok.dataset.CrossTokenizerCache`) on
    ``max_sequences`` sequences spread evenly over it (all of them with None)."""
    count = len(dataset)
    picked = range(count) if max_sequences is None or max_sequences >= count else \
        np.unique(np.linspace(0, count - 1, max_sequences).round().astype(int)).tolist()
    total: dict = {}
    for index in picked:
        for key, value in dataset.align(int(index)).stats.items():
            total[key] = total.get(key, 0) + value
    report = Coverage(**summarise(total, len(picked), dataset.vocab_map.summary()))
    warn_if_low(report, warn_below)
    return report


def warn_if_low(report: Coverage, warn_below: float = LOW_COVERAGE) -> None:
    """Log a warning with the figure when the mapped mass is below ``warn_below``."""
    if report.mapped_mass < warn_below:
        log.warning("cross-tokenizer: only %.1f%% of the teacher's top-K mass falls on tokens the student has (below "
                    "%.0f%%); the rest reaches the student only as one bucket, so distillation teaches little. A "
                    "student tokenizer closer to the teacher's (trained on similar text, or a larger vocabulary) "
                    "maps more", 100 * report.mapped_mass, 100 * warn_below)


def summarise(total: dict, sequences: int, vocab: dict) -> dict:
    """:class:`Coverage`'s fields from the summed alignment counts of ``sequences`` sequences
    (:meth:`CrossTokenizerCache.align`'s ``stats``)."""
    positions = max(total["teacher_positions"], 1)
    labelled = sum(total["student_" + shape] for shape in ALIGNMENTS[1:])
    student_alignments = {shape: total["student_" + shape] / max(labelled, 1) for shape in ALIGNMENTS[1:]}
    return dict(
        sequences=sequences, teacher_positions=total["teacher_positions"], student_rows=labelled,
        mapped_mass=total["mapped_mass"] / max(total["topk_mass"], 1e-30),
        one_to_one=total["teacher_one_to_one"] / positions,
        teacher_alignments={shape: total["teacher_" + shape] / positions for shape in ALIGNMENTS[1:]},
        student_alignments=student_alignments,
        distilled_rows=student_alignments["one_to_one"] + student_alignments["many_to_one"],
        bytes_per_teacher_token=total["text_bytes"] / max(total["teacher_tokens"], 1),
        bytes_per_student_token=total["text_bytes"] / max(total["student_rows"], 1),
        vocab=vocab,
    )
