"""Alignment by byte offsets against a naive reference (walk both tokenizations byte by byte) on real text:
multi-byte UTF-8, whitespace runs, chat templates; zero-width tokens (the EOS after a document)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import HARD_TEXTS, conversations, pydoc_texts

from destila.crosstok.align import align, end_keys, group_alignments
from destila.data.spans import Speller


def naive_groups(text: str, teacher, t_ids, student, s_ids) -> list[tuple[list[int], list[int]]]:
    """Decode both sides to the bytes the text holds, walk them, close a group when both have covered as many."""
    raw = text.encode()

    def held(tokenizer, ids):
        table = Speller(tokenizer).table
        pieces, at = [], 0
        for i in ids:
            piece = table[i]
            if not raw.startswith(piece, at):  # a ▁ the tokenizer wrote before a word: not in the text
                assert piece[:1] == b" " and raw.startswith(piece[1:], at)
                piece = piece[1:]
            pieces.append(piece)
            at += len(piece)
        return pieces

    t_pieces, s_pieces = held(teacher, t_ids), held(student, s_ids)
    groups, t, s, a, b, group_t, group_s = [], 0, 0, 0, 0, [], []
    while t < len(t_pieces) or s < len(s_pieces):
        if s == len(s_pieces) or (t < len(t_pieces) and a <= b):
            a += len(t_pieces[t]); group_t.append(t); t += 1  # noqa: E702
        else:
            b += len(s_pieces[s]); group_s.append(s); s += 1  # noqa: E702
        while t < len(t_pieces) and not t_pieces[t] and a == b:  # empty pieces end where they start
            group_t.append(t); t += 1  # noqa: E702
        while s < len(s_pieces) and not s_pieces[s] and a == b:
            group_s.append(s); s += 1  # noqa: E702
        if a == b and group_t and group_s:
            groups.append((group_t, group_s))
            group_t, group_s = [], []
    assert not group_t and not group_s and a == b == len(raw)
    return groups


def group_lists(groups) -> list[tuple[list[int], list[int]]]:
    """``align``'s groups in the naive walk's form: per group, its teacher token indices and its student ones."""
    return [(list(range(groups.t_first[g], groups.t_first[g] + groups.t_count[g])),
             list(range(groups.s_first[g], groups.s_first[g] + groups.s_count[g]))) for g in range(len(groups))]


def texts(tokenizer) -> list[str]:
    chats = [tokenizer.apply_chat_template(c["messages"], tokenize=False) for c in conversations()[:3]]
    return HARD_TEXTS + [t[:2000] for t in pydoc_texts(4)] + chats


@pytest.mark.parametrize("student_name", ["space_mark_tokenizer", "byte_level_student_tokenizer"])
def test_groups_equal_the_naive_walk(student_name, request, tiny_chat_tokenizer):
    teacher, student = tiny_chat_tokenizer, request.getfixturevalue(student_name)
    t_speller, s_speller = Speller(teacher), Speller(student)
    shapes_seen = set()
    for text in texts(teacher):
        t_ids = teacher(text, add_special_tokens=False)["input_ids"]
        s_ids = student(text, add_special_tokens=False)["input_ids"]
        t_start, t_end = t_speller.spans(text, t_ids)
        s_start, s_end = s_speller.spans(text, s_ids)
        groups = align(t_start, t_end, s_start, s_end)
        got = group_lists(groups)
        expected = naive_groups(text, teacher, t_ids, student, s_ids)
        if s_start[0] == s_end[0]:  # a leading zero-width ▁: the naive walk puts it in the first group too
            assert got[0][1][0] == 0
        assert got == expected
        assert groups.first_valid
        shapes_seen |= set(group_alignments(groups).tolist())
        raw = text.encode()
        for (t_group, s_group), shape in zip(got, group_alignments(groups)):
            # a group covers the same bytes on both sides; one-to-one groups are the same token bytes
            assert raw[t_start[t_group[0]] : t_end[t_group[-1]]] == raw[s_start[s_group[0]] : s_end[s_group[-1]]]
            if shape == 0:
                assert t_speller.table[t_ids[t_group[0]]].lstrip(b" ") == s_speller.table[s_ids[s_group[0]]].lstrip(b" ")
    assert {0, 1, 2} <= shapes_seen  # one-to-one, many-to-one and one-to-many all occur in this text


def test_zero_width_tokens_form_their_own_group():
    """An EOS at byte 5 on both sides: its own group, after the text token ending there, before one starting there."""
    t_start, t_end = np.array([0, 3, 5, 5]), np.array([3, 5, 5, 9])
    s_start, s_end = np.array([0, 5, 5]), np.array([5, 5, 9])
    groups = align(t_start, t_end, s_start, s_end)
    assert groups.t_count.tolist() == [2, 1, 1] and groups.s_count.tolist() == [1, 1, 1]
    assert end_keys(t_start, t_end).tolist() == [3 * 64, 5 * 64, 5 * 64 + 1, 9 * 64]
    # the student drops the EOS: the teacher's joins the next group
    groups = align(t_start, t_end, np.array([0, 5]), np.array([5, 9]))
    assert groups.t_count.tolist() == [2, 2] and groups.s_count.tolist() == [1, 1]


def test_different_starts_make_the_first_group_invalid():
    groups = align(np.array([0, 4]), np.array([4, 8]), np.array([1, 4]), np.array([4, 8]))
    assert not groups.first_valid and groups.t_count.tolist() == [1, 1]
