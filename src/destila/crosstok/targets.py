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


def _logsumexp(values: np.ndarray, axis: int = -1) -> np.ndarray:
    top = np.max(values, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(top, axis) + np.log(np.sum(np.exp(values - top), axis=axis))


def one_to_one(ids: np.ndarray, logprobs: np.ndarray, tail: np.ndarray, teacher_to_student: np.ndarray):
    """Teacher rows ``ids, logprobs [n, K]``, ``tail [n]`` as student targets ``(ids [n, K], logprobs [n, K],
    tail [n], unmapped [n, K])`` in float64.

    Entries sorted by log-prob, descending; ``-inf`` (id 0) where empty.
    ``unmapped``: the log-probs that joined the rest, descending, ``-inf``
    padded (what the optional ULD term compares).
    """
    logprobs = np.asarray(logprobs, np.float64)
    real = logprobs > NEG_INF
    student = np.where(real, teacher_to_student[np.clip(ids, 0, len(teacher_to_student) - 1)], -1)
    mapped = real & (student >= 0)
    left_out = np.where(real & ~mapped, logprobs, NEG_INF)
    rest = _logsumexp(np.concatenate([np.asarray(tail, np.float64)[:, None], left_out], axis=1))
    out_lp = np.where(mapped, logprobs, NEG_INF)
    out_ids = np.where(mapped, student, 0)
    # Several teacher ids with the same student id (tokens of equal bytes): rare, summed row by row.
    stand_in = np.where(mapped, out_ids, -1 - np.arange(ids.shape[1]))
    ordered = np.sort(stand_in, axis=1)
    for row in np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1)):
        merged: dict[int, list[float]] = {}
        for sid, lp in zip(out_ids[row][mapped[row]], out_lp[row][mapped[row]]):
            merged.setdefault(int(sid), []).append(float(lp))
        out_ids[row], out_lp[row] = 0, NEG_INF
        for slot, (sid, lps) in enumerate(merged.items()):
            out_ids[row, slot], out_lp[row, slot] = sid, float(_logsumexp(np.asarray(lps)))
    order = np.argsort(-out_lp, axis=1, kind="stable")
    return (np.take_along_axis(out_ids, order, 1), np.take_along_axis(out_lp, order, 1), rest,
            -np.sort(-left_out, axis=1))


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
            student = np.fromiter((index.get(prefix + table[t], -1) for t in ids.tolist()), np.int64, len(ids))
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
