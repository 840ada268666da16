"""A student on another tokenizer: the tokenizer trained reproducibly, a cut whose embedding rows are transplanted
(copied where the bytes match, built from their pieces elsewhere), a fresh model sized to it; the command line."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import pydoc_texts
from transformers import AutoModelForCausalLM, AutoTokenizer

from destila.cli.main import main
from destila.crosstok import TokenizerSpec, train_tokenizer
from destila.crosstok.transplant import transplant_plan
from destila.data.spans import Speller
from destila.student import StudentInitSpec, init_student


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


@pytest.mark.parametrize("style", ["byte_level", "space_mark"])
def test_the_same_text_trains_the_same_tokenizer(style, tmp_path, tiny_chat_tokenizer):
    texts = pydoc_texts(8)
    for name in ("a", "b"):
        train_tokenizer(TokenizerSpec("pydoc", str(tmp_path / name), vocab_size=400, style=style), texts=texts,
                        teacher_tokenizer=tiny_chat_tokenizer)
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    loaded = AutoTokenizer.from_pretrained(tmp_path / "a")
    assert len(loaded) == 400 and loaded.eos_token == tiny_chat_tokenizer.eos_token
    assert loaded.chat_template == tiny_chat_tokenizer.chat_template
    with pytest.raises(FileExistsError, match="not an empty folder"):
        train_tokenizer(TokenizerSpec("pydoc", str(tmp_path / "a"), vocab_size=400), texts=texts)


def test_holdout_leaves_every_nth_document_out():
    from destila.crosstok import training_texts

    every = pydoc_texts()
    kept = training_texts(TokenizerSpec("pydoc", "unused", holdout_every=5))
    assert kept == [t for i, t in enumerate(every) if i % 5 != 4]


def test_a_cut_student_keeps_the_teachers_rows_of_shared_tokens(tiny_chat_llama_dir, space_mark_tokenizer, tmp_path,
                                                                   tiny_chat_tokenizer):
    student_dir = tmp_path / "tok"
    space_mark_tokenizer.save_pretrained(student_dir)
    summary = init_student(StudentInitSpec(str(tiny_chat_llama_dir), tmp_path / "s", layers=2, tokenizer=str(student_dir)))
    vocabulary = summary["vocabulary"]
    assert vocabulary["vocab_size"] == len(space_mark_tokenizer)
    assert vocabulary["copied"] + vocabulary["composed"] + vocabulary["mean"] == len(space_mark_tokenizer)
    assert vocabulary["copied"] > 100 and vocabulary["composed"] > 100
    teacher = AutoModelForCausalLM.from_pretrained(tiny_chat_llama_dir)
    student = AutoModelForCausalLM.from_pretrained(tmp_path / "s")
    assert AutoTokenizer.from_pretrained(tmp_path / "s").get_vocab() == space_mark_tokenizer.get_vocab()
    assert student.config.vocab_size == len(space_mark_tokenizer)
    assert student.config.eos_token_id == space_mark_tokenizer.eos_token_id
    old, new = teacher.get_input_embeddings().weight, student.get_input_embeddings().weight
    sources, counts = transplant_plan(tiny_chat_tokenizer, space_mark_tokenizer)
    assert counts == {k: vocabulary[k] for k in counts}
    t_table, s_table = Speller(tiny_chat_tokenizer).table, Speller(space_mark_tokenizer).table
    for s, ids in enumerate(sources):
        expected = old[ids].mean(0) if ids else old.mean(0)
        torch.testing.assert_close(new[s], expected, rtol=1e-5, atol=1e-6)
        if len(ids) > 1:  # a token built from its pieces: they spell its bytes
            assert b"".join(t_table[i] for i in ids) == s_table[s]
    assert student.get_output_embeddings().weight.data_ptr() == new.data_ptr()  # still tied
    # The layers kept are the teacher's, unchanged.
    for name, weight in student.model.layers[0].state_dict().items():
        torch.testing.assert_close(weight, teacher.model.layers[0].state_dict()[name])
    record = json.loads((tmp_path / "s" / "destila_student.json").read_text())
    assert record["vocabulary"]["copied"] == vocabulary["copied"]


def test_the_teachers_own_tokenizer_changes_nothing(tiny_chat_llama_dir, tiny_chat_tokenizer, tmp_path):
    init_student(StudentInitSpec(str(tiny_chat_llama_dir), tmp_path / "s", layers=4, tokenizer=str(tiny_chat_llama_dir)))
    teacher = AutoModelForCausalLM.from_pretrained(tiny_chat_llama_dir)
    student = AutoModelForCausalLM.from_pretrained(tmp_path / "s")
    for name, weight in teacher.state_dict().items():
        torch.testing.assert_close(student.state_dict()[name], weight)


def test_a_fresh_student_is_sized_to_the_tokenizer(tiny_chat_llama_dir, byte_level_student_tokenizer, tmp_path):
    byte_level_student_tokenizer.save_pretrained(tmp_path / "tok")
    summary = init_student(StudentInitSpec(str(tiny_chat_llama_dir), tmp_path / "s", config={"num_hidden_layers": 1},
                                           tokenizer=str(tmp_path / "tok")))
    student = AutoModelForCausalLM.from_pretrained(tmp_path / "s")
    assert summary["method"] == "fresh" and student.config.vocab_size == len(byte_level_student_tokenizer)
    assert student.get_input_embeddings().weight.shape[0] == len(byte_level_student_tokenizer)
    with pytest.raises(ValueError, match="leave vocab_size out"):
        init_student(StudentInitSpec(str(tiny_chat_llama_dir), tmp_path / "s2", config={"vocab_size": 77},
                                     tokenizer=str(tmp_path / "tok")))


def test_a_folder_without_a_tokenizer_is_refused_by_the_spec(tmp_path):
    # Refused when the spec is made, before any teacher is loaded (this one does not exist).
    with pytest.raises(FileNotFoundError, match="holds no tokenizer.json"):
        StudentInitSpec(str(tmp_path / "no-teacher"), tmp_path / "s", layers=2, tokenizer=str(tmp_path))
    assert not (tmp_path / "s").exists()


def test_the_command_line(tiny_chat_llama_dir, tmp_path, capsys):
    code, out, err = run_cli(["student", "tokenizer", "pydoc", "-o", str(tmp_path / "tok"), "--vocab-size", "400",
                              "--teacher", str(tiny_chat_llama_dir), "--holdout-every", "5"], capsys)
    assert code == 0, err
    assert "400 tokens (byte_level) trained on pydoc" in out
    code, out, err = run_cli(["student", "init", str(tiny_chat_llama_dir), "-o", str(tmp_path / "s"), "--layers", "2",
                              "--tokenizer", str(tmp_path / "tok")], capsys)
    assert code == 0, err
    assert "vocabulary: 400 tokens of" in out and "rows copied from the teacher" in out
    code, _, err = run_cli(["student", "tokenizer", "pydoc", "-o", str(tmp_path / "tok2"), "--vocab-size", "100"],
                           capsys)
    assert code == 2 and "vocab_size: expected an integer ≥ 300" in err and len(err.strip().splitlines()) == 1
