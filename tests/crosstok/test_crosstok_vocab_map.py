"""The vocabulary map of a pair: equal bytes after each tokenizer's spelling, roles for special tokens, stored once."""

from __future__ import annotations

import numpy as np

from destila.crosstok.vocab_map import build_vocab_map, load_or_build, map_file_name


def test_identical_tokenizers_map_every_id_to_itself(tiny_chat_tokenizer):
    vocab = build_vocab_map(tiny_chat_tokenizer, tiny_chat_tokenizer)
    assert np.array_equal(vocab.teacher_to_student, np.arange(len(tiny_chat_tokenizer)))
    assert vocab.summary()["mapped_share"] == 1.0


def test_a_byte_level_teacher_and_a_space_mark_student(tiny_chat_tokenizer, space_mark_tokenizer):
    vocab = build_vocab_map(tiny_chat_tokenizer, space_mark_tokenizer)
    teacher, student = tiny_chat_tokenizer, space_mark_tokenizer
    t_pieces = teacher.convert_ids_to_tokens(list(range(len(teacher))))
    s_vocab = student.get_vocab()
    # "Ġthe" (byte-level) and "▁the" (SentencePiece) are the same bytes " the".
    for word in ("the", "of", "and"):
        t, s = t_pieces.index("Ġ" + word) if "Ġ" + word in t_pieces else None, s_vocab.get("▁" + word)
        if t is not None and s is not None:
            assert vocab.teacher_to_student[t] == s
    # A single-byte teacher token maps to the student's ordinary token for that byte, not its <0xNN> fallback.
    space = t_pieces.index("Ġ")
    assert student.convert_ids_to_tokens(int(vocab.teacher_to_student[space])) == "▁"
    newline = t_pieces.index("Ċ")
    assert student.convert_ids_to_tokens(int(vocab.teacher_to_student[newline])) in ("\n", "<0x0A>")
    # Roles: EOS to EOS; the chat markers by their text.
    assert vocab.teacher_to_student[teacher.eos_token_id] == student.eos_token_id
    for marker in ("<|im_start|>", "<|im_end|>"):
        assert vocab.teacher_to_student[teacher.convert_tokens_to_ids(marker)] == student.convert_tokens_to_ids(marker)
    # Every mapped pair is the same bytes; every unmapped teacher token has no student token of its bytes.
    student_bytes = {b: i for i, b in enumerate(vocab.student.table)}
    for t, s in enumerate(vocab.teacher_to_student.tolist()):
        if t in (teacher.eos_token_id,):
            continue
        if s >= 0:
            assert vocab.teacher.table[t] == vocab.student.table[s]
        else:
            assert vocab.teacher.table[t] not in student_bytes


def test_the_map_is_stored_once_under_both_fingerprints(tiny_chat_tokenizer, space_mark_tokenizer, tmp_path):
    first = load_or_build(tiny_chat_tokenizer, space_mark_tokenizer, tmp_path)
    name = map_file_name(first.teacher_fingerprint, first.student_fingerprint)
    assert first.path == tmp_path / name and first.path.is_file()
    written = first.path.stat().st_mtime_ns
    again = load_or_build(tiny_chat_tokenizer, space_mark_tokenizer, tmp_path)
    assert again.path.stat().st_mtime_ns == written and np.array_equal(again.teacher_to_student,
                                                                       first.teacher_to_student)
    first.path.write_bytes(b"damaged")  # a damaged file is rebuilt
    rebuilt = load_or_build(tiny_chat_tokenizer, space_mark_tokenizer, tmp_path)
    assert np.array_equal(rebuilt.teacher_to_student, first.teacher_to_student) and rebuilt.path.stat().st_size > 7
    other = load_or_build(space_mark_tokenizer, tiny_chat_tokenizer, tmp_path)  # the reverse pair: another file
    assert other.path != first.path
