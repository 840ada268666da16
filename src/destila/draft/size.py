"""How large a draft pays: the cost per token of drafts cut from the teacher, measured on this machine.

Speculative decoding gains only when drafting ``k`` tokens and verifying them
in one teacher forward costs less than the tokens it yields. Before any
training this can be measured: one cached one-token forward of the teacher
and of each candidate draft (cut with ``n`` of its layers, with the narrow
head it will use). The recipe takes the deepest draft whose forward costs at
most ``cost_ratio`` of the teacher's (deeper drafts agree with the teacher
more often, so the deepest affordable one is the best guess). Naive
equivalent::

    costs = {n: time(cut(teacher, n).forward) / time(teacher.forward) for n in candidates}
    layers = max(n for n, ratio in costs.items() if ratio <= cost_ratio)
"""

from __future__ import annotations


def draft_costs(teacher, ids, candidates: list[int], ranking: list[int] | None, vocab: int | None) -> dict:
    """``{"teacher_ms", "drafts": [{"layers", "ms", "ratio"}]}`` for drafts cut with each of ``candidates`` layers
    (a head narrowed to ``ranking[:vocab]`` when both are given); ``ids [1, T]`` is the context they decode after."""
    from destila.draft.head import narrow_head
    from destila.draft.measure import forward_seconds
    from destila.student.cut import cut_student

    teacher_seconds = forward_seconds(teacher, ids)
    rows = []
    for layers in candidates:
        draft, _ = cut_student(teacher, layers=layers)
        if ranking is not None and vocab is not None:
            narrow_head(draft, ranking, vocab)
        seconds = forward_seconds(draft, ids)
        rows.append({"layers": layers, "ms": round(seconds * 1000, 3), "ratio": round(seconds / teacher_seconds, 4)})
        del draft
    return {"teacher_ms": round(teacher_seconds * 1000, 3), "drafts": rows}


def choose_layers(costs: dict, cost_ratio: float) -> int:
    """The deepest draft of ``costs`` whose forward costs at most ``cost_ratio`` of the teacher's (else the
    cheapest)."""
    affordable = [row["layers"] for row in costs["drafts"] if row["ratio"] <= cost_ratio]
    if affordable:
        return max(affordable)
    return min(costs["drafts"], key=lambda row: row["ms"])["layers"]
