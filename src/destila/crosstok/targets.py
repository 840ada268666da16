"""Teacher targets moved onto student rows: the mapped ids, the unmapped mass in the rest bucket.

A student row i and a teacher row j that end at the same byte boundary both
predict what follows the same text. When the next group is **one-to-one**
(one teacher token, one student token, the same bytes), the teacher's top-K
moves to row i through the vocabulary map: mapped entries keep their
log-probs under their student ids (entries mapping to one student id are
summed), the others join the rest bucket::

    tail_i = log( exp(tail_j) + Σ_{k unmapped} exp(ℓ_jk) )

so the bucket loss of :func:`destila.distill_loss` compares the exact
coarse-grained distributions, with every divergence.

When the next group is **many-to-one** (the teacher needs k ≥ 2 tokens for
the student's one), the chain rule walks the teacher's realised tokens
``t_1 … t_k`` of the group: at step r (teacher row j+r, reached with
probability ``P_r = Π_{r'<r} p_{j+r'}(t_{r'+1})``), every entry v other than
the realised ``t_{r+1}`` is the event "the text continues with
``bytes(t_1 … t_r) + bytes(v)``", of probability ``P_r · p_{j+r}(v)``, mapped
to the student token of exactly those bytes when there is one; at the last
step every entry counts (the student's own token is among them, with the
whole chain's probability). The events are disjoint, so their masses add; the
rest bucket holds the tails ``P_r · exp(tail_{j+r})`` and every unmapped
entry. A realised token outside its row's top-K ends the walk (its mass is
already in that row's tail). At most K entries are kept per row (the
largest); the others join the rest.

Rows before a **one-to-many** or **many-to-many** group get no teacher
target: the teacher has no distribution at the student's inner boundaries.
"""

from __future__ import annotations

import math

import numpy as np

NEG_INF = -math.inf


def shared_ids(teacher_to_student: np.ndarray, student_size: int | None = None) -> np.ndarray:
    """``[V_student]`` bool: student ids that several teacher ids map to (their entries may need summing)."""
    mapped = teacher_to_student[teacher_to_student >= 0]
    size = max(int(mapped.max(initial=-1)) + 1, student_size or 0)
    return np.bincount(mapped, minlength=size) > 1


def one_to_one(ids: np.ndarray, logprobs: np.ndarray, tail: np.ndarray, teacher_to_student: np.ndarray,
               shared: np.ndarray | None = None, unmapped: bool = True):
    """Teacher rows ``ids, logprobs [n, K]``, ``tail [n]`` as student targets ``(ids [n, K], logprobs [n, K],
    tail [n], unmapped [n, K] or None)`` in float64.

    Mapped entries keep the teacher's order (descending, as a cache item holds them), the empty slots last
    (``-inf``, id 0); entries of one student id are summed (then the row is sorted again). ``unmapped``:
    the log-probs that joined the rest, descending, ``-inf`` padded (what the optional ULD term compares).
    ``shared``: :func:`shared_ids` of the map, when the caller has it.
    """
    logprobs, tail = np.asarray(logprobs, np.float64), np.asarray(tail, np.float64)
    real = logprobs > NEG_INF
    student = np.where(real, teacher_to_student[np.clip(ids, 0, len(teacher_to_student) - 1)], -1)
    mapped = student >= 0
    lost = real & ~mapped
    lost_lp = np.where(lost, logprobs, NEG_INF)
    top = np.maximum(tail, lost_lp.max(axis=1, initial=NEG_INF))
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        rest = top + np.log(np.exp(tail - top) + np.exp(lost_lp - top[:, None]).sum(axis=1))
    rows, cols = np.nonzero(mapped)
    slots = (np.cumsum(mapped, axis=1) - 1)[rows, cols]  # each mapped entry's rank among its row's
    out_ids, out_lp = np.zeros(student.shape, np.int64), np.full(student.shape, NEG_INF)
    out_ids[rows, slots], out_lp[rows, slots] = student[rows, cols], logprobs[rows, cols]
    shared = shared_ids(teacher_to_student) if shared is None else shared
    suspects = (mapped & shared[np.maximum(student, 0)]).sum(axis=1) >= 2
    for row in np.flatnonzero(suspects):  # several teacher ids, one student id: rare, summed row by row
        merged: dict[int, float] = {}
        for sid, lp in zip(student[row][mapped[row]].tolist(), logprobs[row][mapped[row]].tolist()):
            merged[sid] = merged.get(sid, 0.0) + math.exp(lp)
        ranked = sorted(merged.items(), key=lambda kv: -kv[1])
        out_ids[row], out_lp[row] = 0, NEG_INF
        out_ids[row, : len(ranked)] = [sid for sid, _ in ranked]
        out_lp[row, : len(ranked)] = [math.log(mass) for _, mass in ranked]
    return out_ids, out_lp, rest, (-np.sort(-lost_lp, axis=1) if unmapped else None)


def chain(rows_ids: np.ndarray, rows_logprobs: np.ndarray, rows_tail: np.ndarray, realised: list[int],
          realised_bytes: list[bytes], vocab_map, width: int):
    """One student row's targets over a many-to-one group, by the chain rule (see the module docstring).

    ``rows_*`` ``[k, K]``/``[k]``: the teacher rows j … j+k-1; ``realised``: the teacher's tokens
    t_1 … t_{k-1} the walk goes through (their bytes in ``realised_bytes``). Returns
    ``(ids [width], logprobs [width], tail, unmapped [width])`` as :func:`one_to_one` does for one row.
    Masses are added as probabilities in float64 (each is at most 1), then logged.
    """
    table, index = vocab_map.teacher.table, vocab_map.student_index
    ids_found, masses, unmapped = [], [], []
    rest, reach, reach_log, prefix = 0.0, 1.0, 0.0, b""
    steps = len(rows_tail)
    for r in range(steps):
        ids, logprobs = np.asarray(rows_ids[r], np.int64), np.asarray(rows_logprobs[r], np.float64)
        rest += reach * math.exp(float(rows_tail[r]))
        real = logprobs > NEG_INF
        found = None
        if r < steps - 1:  # the realised token continues the walk; it is no event of its own
            taken = real & (ids == realised[r])
            found = float(logprobs[taken][0]) if taken.any() else None
            real &= ~taken
        if r == 0:
            student = vocab_map.teacher_to_student[ids]
        else:
            student = np.asarray([index.get(prefix + table[t], -1) for t in ids.tolist()], np.int64)
        mass = reach * np.exp(logprobs)
        mapped, lost = real & (student >= 0), real & (student < 0)
        ids_found.append(student[mapped])
        masses.append(mass[mapped])
        rest += float(mass[lost].sum())
        unmapped.append(reach_log + logprobs[lost])
        if found is None:  # the end, or the realised token is in this row's tail (already counted in rest)
            break
        reach, reach_log, prefix = reach * math.exp(found), reach_log + found, prefix + realised_bytes[r]
    keys, inverse = np.unique(np.concatenate(ids_found), return_inverse=True)
    summed = np.bincount(inverse, weights=np.concatenate(masses), minlength=len(keys))
    order = np.argsort(-summed, kind="stable")
    kept = order[:width]
    rest += float(summed[order[width:]].sum())
    out_ids, out_lp = np.zeros(width, np.int64), np.full(width, NEG_INF)
    out_ids[: len(kept)] = keys[kept]
    with np.errstate(divide="ignore"):
        out_lp[: len(kept)] = np.log(summed[kept])
    left = -np.sort(-np.concatenate(unmapped))[:width]
    lost_lp = np.full(width, NEG_INF)
    lost_lp[: len(left)] = left
    return out_ids, out_lp, (math.log(rest) if rest > 0 else NEG_INF), lost_lp
