"""Model configs, weights and option files that cannot work: one line naming the file and field, nothing built.

A config is checked before any weight is built (``student init --config``,
a teacher's or a student's ``config.json``); weights whose shapes are not
the config's, a model folder without a tokenizer and a ``--config`` YAML
that does not parse are each named in one line.
"""

import json
import shutil

import pytest
import torch
from fault_helpers import destila_in_process, error_line, build_command, small_cache, student  # noqa: F401
from safetensors import safe_open
from safetensors.torch import load_file, save_file


def edited_copy(model, tmp_path, **config):
    """A copy of the model folder ``model`` whose config.json has ``config`` written over it."""
    copy = tmp_path / "model"
    shutil.copytree(model, copy)
    raw = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**raw, **config}))
    return copy


@pytest.mark.parametrize("overrides, needle", [
    (["num_hidden_layers=-1"], "num_hidden_layers is -1, expected an integer ≥ 1"),
    (["num_attention_heads=4", "num_key_value_heads=3"],
     "num_attention_heads 4 is not a multiple of num_key_value_heads 3"),
])
def test_student_init_refuses_an_impossible_config_before_building_it(tiny_llama_dir, tmp_path, overrides, needle):
    out = tmp_path / "student"
    result = destila_in_process("student", "init", tiny_llama_dir, "-o", out, "--config", *overrides)
    error_line(result, "student", 2, f"model: --config is not a usable configuration ({needle})")
    assert not out.exists()


@pytest.mark.parametrize("config, needle", [
    ({"num_hidden_layers": -1}, "num_hidden_layers is -1, expected an integer ≥ 1"),
    ({"vocab_size": 0}, "vocab_size is 0, expected an integer ≥ 1"),
    ({"num_attention_heads": 5, "num_key_value_heads": 5}, "hidden size (32) is not a multiple of the number of "
                                                           "attention heads (5)"),
])
def test_cache_build_refuses_a_teacher_whose_config_cannot_work(tiny_llama_dir, tmp_path, config, needle):
    teacher = edited_copy(tiny_llama_dir, tmp_path, **config)
    out = tmp_path / "cache"
    result = destila_in_process(*build_command(teacher, "pydoc", out))
    error_line(result, "cache", 2, f"model: {teacher / 'config.json'} is not a usable configuration", needle)
    assert not out.exists()


def test_train_refuses_a_student_whose_heads_do_not_divide_its_width(student, small_cache, tmp_path):
    broken = edited_copy(student, tmp_path, num_attention_heads=5, num_key_value_heads=5)
    result = destila_in_process("train", broken, "--cache", small_cache, "-o", tmp_path / "out", "--max_steps", "1",
                                "--use_cpu")
    error_line(result, "train", 2, f"{broken / 'config.json'} is not a usable configuration",
               "is not a multiple of the number of attention heads (5)")
    assert not (tmp_path / "out").exists()


def wrong_shape_copy(student, tmp_path):
    """A copy of ``student`` whose safetensors header gives one tensor a consistent but wrong shape; the needle."""
    copy = tmp_path / "student"
    shutil.copytree(student, copy)
    tensors = load_file(copy / "model.safetensors")
    with safe_open(str(copy / "model.safetensors"), framework="pt") as handle:
        metadata = handle.metadata()
    name = "model.layers.0.mlp.up_proj.weight"
    rows, columns = tensors[name].shape
    tensors[name] = torch.zeros(rows + 1, columns)  # a consistent header, the wrong shape
    save_file(tensors, copy / "model.safetensors", metadata=metadata)
    return copy, (f"{copy / 'model.safetensors'} holds {name} of shape [{rows + 1}, {columns}], but its "
                  f"config.json gives [{rows}, {columns}]")


def test_weights_of_another_shape_than_the_config_are_named_by_train(student, small_cache, tmp_path):
    copy, needle = wrong_shape_copy(student, tmp_path)
    trained = destila_in_process("train", copy, "--cache", small_cache, "-o", tmp_path / "out", "--max_steps", "1",
                                 "--use_cpu")
    error_line(trained, "train", 2, needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # eval loads each model in a fresh process; the loader is train's
def test_weights_of_another_shape_than_the_config_are_named_by_eval(student, small_cache, tmp_path):
    copy, needle = wrong_shape_copy(student, tmp_path)
    evaluated = destila_in_process("eval", copy, "--cache", small_cache, "--max-tokens", "64")
    error_line(evaluated, "eval", 2, needle)


def test_a_teacher_without_tokenizer_files_is_named_as_such(tiny_llama_dir, tmp_path):
    teacher = tmp_path / "teacher"
    teacher.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_llama_dir / name, teacher / name)
    result = destila_in_process(*build_command(teacher, "pydoc", tmp_path / "cache"))
    line = error_line(result, "cache", 2, f"tokenizer: {teacher} holds no tokenizer files",
                      "copy the model's tokenizer into it")
    assert "sentencepiece" not in line
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("text, needle", [
    ("learning_rate: 0.001\n\tmax_steps: 3\n", "line 2, column 1: not valid YAML (found character '\\t'"),
    ("learning_rate: !!python/object/apply:os.system ['touch PWNED']\n",
     "line 1, column 16: not valid YAML (could not determine a constructor"),
    ("learning_rate: 0.001\nmax_st", "line 2, column 7: not valid YAML (could not find expected ':')"),
])
def test_a_config_yaml_that_does_not_parse_is_named_with_its_line(student, small_cache, tmp_path, text, needle):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    result = destila_in_process("train", student, "--cache", small_cache, "-o", tmp_path / "out",
                                "--config", config, "--use_cpu")
    error_line(result, "train", 2, f"--config {config}, {needle}")
    assert not (tmp_path / "out").exists() and not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("text, needle", [
    ("task: mine\ndataset_path: json\nout", "line 3, column 4: not valid YAML (could not find expected ':')"),
    ("task: mine\ndataset_path: !!python/object/apply:os.system ['touch PWNED']\n",
     "line 2, column 15: not valid YAML (could not determine a constructor"),
    ("task: mine\n\tdataset_path: json\n", "line 2, column 1: not valid YAML (found character '\\t'"),
])
def test_a_task_yaml_that_does_not_parse_is_named_with_its_line(student, tmp_path, text, needle):
    task = tmp_path / "mine.yaml"
    task.write_text(text)
    result = destila_in_process("eval", student, "--tasks", task, "--limit", "2")
    error_line(result, "eval", 2, f"--tasks: {task}, {needle}")
    assert not (tmp_path / "PWNED").exists()


def test_a_task_yaml_with_the_harness_function_tag_is_read(tmp_path):
    from destila.eval.harness import check_task_yaml

    task = tmp_path / "mine.yaml"
    task.write_text("task: mine\nprocess_docs: !function utils.process_docs\n")
    check_task_yaml(task)  # the harness's own tag: not a parse error (the harness runs utils.py, as documented)
