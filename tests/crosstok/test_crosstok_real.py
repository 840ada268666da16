"""The embedded teacher's tokenizer (SmolLM2, byte-level BPE, 49,152 tokens) against student tokenizers trained
on pydoc: it spells its text back, and the alignment equals the naive walk on pydoc text and rendered chats."""

from __future__ import annotations

import pytest
from conftest import HARD_TEXTS, conversations, pydoc_texts, requires_real_teacher
from test_crosstok_align import group_lists, naive_groups

from destila.crosstok import TokenizerSpec, build_vocab_map, train_tokenizer
from destila.crosstok.align import align
from destila.data.spans import Speller, check_spells_bytes

pytestmark = [pytest.mark.real_model, requires_real_teacher]


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from destila.models import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.mark.parametrize("style", ["byte_level", "space_mark"])
def test_smollm2_aligns_with_a_pydoc_student(style, smollm2_tokenizer, tmp_path):
    check_spells_bytes(smollm2_tokenizer, "teacher tokenizer")
    student = train_tokenizer(TokenizerSpec("pydoc", str(tmp_path / "tok"), vocab_size=1024, style=style),
                              texts=pydoc_texts(60), teacher_tokenizer=smollm2_tokenizer)
    vocab = build_vocab_map(smollm2_tokenizer, student)
    assert vocab.teacher_to_student[smollm2_tokenizer.eos_token_id] == student.eos_token_id
    t_speller, s_speller = Speller(smollm2_tokenizer), Speller(student)
    chats = [smollm2_tokenizer.apply_chat_template(c["messages"], tokenize=False) for c in conversations()[:2]]
    for text in HARD_TEXTS + [t[:3000] for t in pydoc_texts(80)[60:64]] + chats:
        t_ids = smollm2_tokenizer(text, add_special_tokens=False)["input_ids"]
        s_ids = student(text, add_special_tokens=False)["input_ids"]
        t_start, t_end = t_speller.spans(text, t_ids)
        s_start, s_end = s_speller.spans(text, s_ids)
        groups = align(t_start, t_end, s_start, s_end)
        got = group_lists(groups)
        assert got == naive_groups(text, smollm2_tokenizer, t_ids, student, s_ids)
