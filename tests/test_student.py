import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from destila.cli.main import main as cli
from destila.student import StudentInitSpec, evenly_spaced_layers, init_student, parse_config_overrides


def test_evenly_spaced_layers_keep_first_and_last():
    assert evenly_spaced_layers(30, 6) == [0, 6, 12, 17, 23, 29]
    assert evenly_spaced_layers(4, 4) == [0, 1, 2, 3]
    assert evenly_spaced_layers(4, 1) == [3]
    with pytest.raises(ValueError, match="between 1 and the teacher's 4 layers, found 5"):
        evenly_spaced_layers(4, 5)


def test_cut_student_copies_the_kept_layers_and_stays_tied(tiny_model_dir, tmp_path):
    out = tmp_path / "student"
    summary = init_student(StudentInitSpec(str(tiny_model_dir), out, layers=2))
    assert summary["kept_layers"] == [0, 3]
    teacher = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    student = AutoModelForCausalLM.from_pretrained(out)
    AutoTokenizer.from_pretrained(out)  # the tokenizer travels with the student
    assert student.config.num_hidden_layers == 2
    t_state, s_state = teacher.state_dict(), student.state_dict()
    prefix = "model.layers" if teacher.config.model_type == "llama" else "transformer.h"
    for key, value in s_state.items():
        if key.startswith(f"{prefix}.1."):
            torch.testing.assert_close(value, t_state[key.replace(f"{prefix}.1.", f"{prefix}.3.")], rtol=0, atol=0)
        elif not key.startswith(f"{prefix}."):
            torch.testing.assert_close(value, t_state[key], rtol=0, atol=0)
    head, embed = student.get_output_embeddings().weight, student.get_input_embeddings().weight
    assert head.data_ptr() == embed.data_ptr()


def test_cutting_every_layer_reproduces_the_teacher(tiny_llama_dir, tmp_path):
    init_student(StudentInitSpec(str(tiny_llama_dir), tmp_path / "s", layers=4))
    teacher = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    student = AutoModelForCausalLM.from_pretrained(tmp_path / "s")
    ids = torch.randint(0, teacher.config.vocab_size, (2, 17))
    with torch.no_grad():
        torch.testing.assert_close(student(ids).logits, teacher(ids).logits)


def test_fresh_student_from_config_overrides(tiny_llama_dir, tmp_path):
    overrides = parse_config_overrides(["num_hidden_layers=1", '{"intermediate_size": 16}'])
    assert overrides == {"num_hidden_layers": 1, "intermediate_size": 16}
    init_student(StudentInitSpec(str(tiny_llama_dir), tmp_path / "s", config=overrides))
    student = AutoModelForCausalLM.from_pretrained(tmp_path / "s")
    assert student.config.num_hidden_layers == 1 and student.config.intermediate_size == 16
    with pytest.raises(ValueError, match="no field"):
        init_student(StudentInitSpec(str(tiny_llama_dir), tmp_path / "t", config={"no_such_field": 1}))
    with pytest.raises(ValueError, match="vocab_size must stay"):
        init_student(StudentInitSpec(str(tiny_llama_dir), tmp_path / "u", config={"vocab_size": 7}))


def test_unsupported_family_and_existing_folder_are_refused(tmp_path, tiny_tokenizer, tiny_llama_dir, capsys):
    from transformers import GPTNeoXConfig

    path = tmp_path / "neox"
    AutoModelForCausalLM.from_config(
        GPTNeoXConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=64)
    ).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    with pytest.raises(ValueError, match="'gpt_neox' is not supported for layer cutting"):
        init_student(StudentInitSpec(str(path), tmp_path / "s", layers=1))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("precious")
    with pytest.raises(SystemExit) as exit_info:
        cli(["student", "init", str(tiny_llama_dir), "-o", str(tmp_path / "full"), "--layers", "2"])
    assert exit_info.value.code == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert (tmp_path / "full" / "keep.txt").read_text() == "precious"
