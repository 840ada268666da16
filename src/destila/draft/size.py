"""How large a draft pays: the cost per token of drafts cut from the teacher, measured on this machine.

Speculative decoding gains only when drafting ``k`` tokens and verifying them
in one teacher forward costs less than the tokens it yields. Before any
training this can be measured: one cached one-token forward of the teacher
and of each candidate draft (cut with ``n`` of its layers, with the narrow
head it will use). The recipe takes the deepest draft whose forward costs at
most ``cost_ratio`` of the teacher's (deeper drafts agree with the teacher
more often, so the deepest affordable one is the best guess).

A decoding step costs a fixed part (embedding, output head, the call itself)
plus the same amount per layer, so the measured costs are fitted by
``a + b·n`` and the choice reads the fit: another program's load on the
machine, which can make one candidate's median twice another's, moves the
line far less than single points. The candidates are timed in turn, round
after round, so a load that comes and goes falls on all of them. Naive
equivalent::

    costs = {n: time(cut(teacher, n).forward) / time(teacher.forward) for n in candidates}
    layers = max(n for n, ratio in costs.items() if ratio <= cost_ratio)
"""

from __future__ import annotations

import statistics
import time

from destila.student.cut import cut_student

_ROUNDS = 5


def draft_costs(teacher, ids, candidates: list[int], ranking: list[int] | None, vocab: int | None) -> dict:
    """``{"teacher_ms", "fixed_ms", "per_layer_ms", "drafts": [{"layers", "ms", "fitted_ms", "ratio"}]}`` for drafts
    cut with each of ``candidates`` layers (a head narrowed to ``ranking[:vocab]`` when both are given); ``ids
    [1, T]`` is the context they decode after. ``ratio`` is the fitted cost over the teacher's."""
    # these import torch: only when the draft sizes are measured
    from destila.draft.head import narrow_head
    from destila.draft.measure import forward_seconds
    from destila.generation.small_matmul import small_matmul

    drafts = {}
    for layers in candidates:
        drafts[layers], _ = cut_student(teacher, layers=layers)
        if ranking is not None and vocab is not None:
            narrow_head(drafts[layers], ranking, vocab)
    models = {"teacher": teacher, **drafts}
    times = {name: [] for name in models}
    with small_matmul(*models.values()):  # the products the measurement will decode with
        for _ in range(_ROUNDS):
            for name, model in models.items():
                times[name].append(forward_seconds(model, ids, repeats=3))
    measured = {name: statistics.median(values) * 1000 for name, values in times.items()}
    fixed, per_layer = _line([(n, measured[n]) for n in candidates])
    teacher_ms = measured["teacher"]
    rows = [{"layers": n, "ms": round(measured[n], 3), "fitted_ms": round(fixed + per_layer * n, 3),
             "ratio": round((fixed + per_layer * n) / teacher_ms, 4)} for n in candidates]
    return {"teacher_ms": round(teacher_ms, 3), "fixed_ms": round(fixed, 3), "per_layer_ms": round(per_layer, 3),
            "drafts": rows}


def _line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``y = a + b·x``; one point: ``(y, 0)``."""
    if len(points) == 1:
        return points[0][1], 0.0
    slope, intercept = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    return intercept, slope


def choose_layers(costs: dict, cost_ratio: float) -> int:
    """The deepest draft of ``costs`` whose (fitted) forward costs at most ``cost_ratio`` of the teacher's (else
    the cheapest)."""
    affordable = [row["layers"] for row in costs["drafts"] if row["ratio"] <= cost_ratio]
    if affordable:
        return max(affordable)
    return min(costs["drafts"], key=lambda row: row["ratio"])["layers"]
