"""Aligning two tokenizations of one text by byte offsets: groups close where both reach the same byte boundary.

Each side is a list of tokens with byte spans ``[start, end)`` that follow
each other (``start[j] = end[j-1]``). A token of width 0 (a special token
the text does not hold, such as the EOS after a document) sits *at* a byte
X: it ends after the text tokens ending at X and before those starting at X.
So every token gets an end key, ``end · 64`` for a text token and
``X · 64 + n`` for the n-th zero-width token at X, and the groups are cut at
the keys both sides have::

    common = sorted(set(teacher_keys) & set(student_keys))
    group(token) = the first g with key(token) ≤ common[g]

Tokens after the last common key are in no group (the two sides cover
different bytes there). The first group is valid only when both sides start
at the same byte. Naive equivalent, for text tokens (what the tests check
against; ``T``, ``S``: each side's token bytes)::

    t = s = a = b = 0                      # a, b: the bytes each side has covered
    while t < len(T) or s < len(S):
        if s == len(S) or (t < len(T) and a <= b): a += len(T[t]); t += 1
        else: b += len(S[s]); s += 1
        if a == b: close a group of the tokens taken since the last one closed
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_SLOTS = 64  # zero-width tokens one byte position may hold, one after the other


def end_keys(start, end) -> np.ndarray:
    """The end key of every token (see the module docstring), int64 ``[n]``."""
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    index = np.arange(len(end))
    zero = end == start
    last_text = np.maximum.accumulate(np.where(~zero, index, -1)) if len(end) else index
    slot = np.where(zero, index - last_text, 0)
    if len(slot) and slot.max() >= _SLOTS:
        raise ValueError(f"alignment: {int(slot.max())} zero-width tokens in a row at one byte; at most "
                         f"{_SLOTS - 1} are supported")
    return end * _SLOTS + slot


@dataclass
class Groups:
    """The groups of one aligned block: group g holds teacher tokens ``t_first[g] … t_first[g]+t_count[g]-1``
    and student tokens ``s_first[g] … s_first[g]+s_count[g]-1`` (indices into each side's list).

    ``first_valid``: whether group 0 starts at the same byte on both sides.
    """

    t_first: np.ndarray
    t_count: np.ndarray
    s_first: np.ndarray
    s_count: np.ndarray
    first_valid: bool

    def __len__(self) -> int:
        return len(self.t_first)


def align(t_start, t_end, s_start, s_end) -> Groups:
    """The groups of a teacher and a student tokenization of the same bytes (see the module docstring)."""
    t_keys, s_keys = end_keys(t_start, t_end), end_keys(s_start, s_end)
    common = np.intersect1d(t_keys, s_keys)
    t_group = np.searchsorted(common, t_keys, side="left")
    s_group = np.searchsorted(common, s_keys, side="left")
    count = len(common)
    t_count = np.bincount(t_group[t_group < count], minlength=count)
    s_count = np.bincount(s_group[s_group < count], minlength=count)
    t_first = np.concatenate([[0], np.cumsum(t_count)[:-1]]).astype(np.int64)
    s_first = np.concatenate([[0], np.cumsum(s_count)[:-1]]).astype(np.int64)
    same_start = bool(len(t_start) and len(s_start) and int(t_start[0]) == int(s_start[0]))
    return Groups(t_first, t_count.astype(np.int64), s_first, s_count.astype(np.int64), same_start)


# The alignment shape of each group, by its token counts (teacher, student).
ONE_TO_ONE, MANY_TO_ONE, ONE_TO_MANY, MANY_TO_MANY = "one_to_one", "many_to_one", "one_to_many", "many_to_many"


def group_alignments(groups: Groups) -> np.ndarray:
    """``[G]`` codes 0 one-to-one, 1 many-to-one (several teacher tokens, one student token), 2 one-to-many,
    3 many-to-many."""
    many_t, many_s = groups.t_count > 1, groups.s_count > 1
    return (many_t & ~many_s) * 1 + (~many_t & many_s) * 2 + (many_t & many_s) * 3
