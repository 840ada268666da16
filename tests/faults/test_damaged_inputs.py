"""Damaged or malformed user files: one line naming the file (and the line where known), never a traceback.

Every test runs the real command on a real damaged copy of a file and
asserts the exit code, the one error line and that nothing was created.
"""

import json
import shutil
import struct

import pytest
from conftest import requires_real_teacher
from fault_helpers import (  # noqa: F401 (fixtures)
    build_command, destila, destila_in_process, error_line, small_cache, student,
)


def damaged_copy(model, tmp_path, name: str, keep: int):
    """A copy of the model folder ``model`` whose file ``name`` is cut to its first ``keep`` bytes."""
    copy = tmp_path / "damaged"
    shutil.copytree(model, copy)
    data = (copy / name).read_bytes()
    (copy / name).write_bytes(data[:keep])
    return copy


def test_a_malformed_jsonl_line_is_named_with_its_line_number(tiny_llama_dir, tmp_path):
    data = tmp_path / "notes.jsonl"
    data.write_text('{"text": "a first document"}\n{"text": "cut off\n{"text": "a third one"}\n')
    result = destila_in_process(*build_command(tiny_llama_dir, data, tmp_path / "cache"))
    error_line(result, "cache", 2, f"data: {data}, line 2: not valid JSON", "fix or remove it")
    assert not (tmp_path / "cache").exists()


def test_a_jsonl_line_that_is_not_an_object_is_named(tiny_llama_dir, tmp_path):
    data = tmp_path / "notes.jsonl"
    data.write_text('{"text": "a first document"}\n["a", "list"]\n')
    result = destila_in_process(*build_command(tiny_llama_dir, data, tmp_path / "cache"))
    error_line(result, "cache", 2, f"{data}, line 2: expected a JSON object, found list")


@pytest.mark.parametrize("cut", ["header", "tensors"])
def test_a_truncated_safetensors_is_named_by_student_init(tiny_llama_dir, tmp_path, cut):
    size = (tiny_llama_dir / "model.safetensors").stat().st_size
    teacher = damaged_copy(tiny_llama_dir, tmp_path, "model.safetensors", 3000 if cut == "header" else size - 100)
    result = destila_in_process("student", "init", teacher, "-o", tmp_path / "student", "--layers", "2")
    error_line(result, "student", 2, f"model: {teacher / 'model.safetensors'} is damaged or truncated",
               "replace it with an intact copy")
    assert not (tmp_path / "student").exists()


def test_a_truncated_safetensors_is_named_by_cache_build_and_leaves_no_lock(tiny_llama_dir, tmp_path):
    teacher = damaged_copy(tiny_llama_dir, tmp_path, "model.safetensors", 3000)
    out = tmp_path / "cache"
    out.mkdir()  # the user made it, empty
    result = destila_in_process(*build_command(teacher, "pydoc", out))
    error_line(result, "cache", 2, f"{teacher / 'model.safetensors'} is damaged or truncated")
    assert list(out.iterdir()) == []  # no .lock left to make the folder "not empty" for the next command
    init = destila_in_process("student", "init", "--layers", "2", tiny_llama_dir, "-o", out)
    assert init.returncode == 0, init.stderr[-2000:]


def test_a_damaged_student_is_named_by_train_and_eval(student, small_cache, tmp_path):
    damaged = damaged_copy(student, tmp_path, "model.safetensors", 5000)
    trained = destila_in_process("train", damaged, "--cache", small_cache, "-o", tmp_path / "out", "--max_steps", "1",
                      "--use_cpu")
    error_line(trained, "train", 2, f"{damaged / 'model.safetensors'} is damaged or truncated")
    assert not (tmp_path / "out").exists()
    evaluated = destila_in_process("eval", damaged, "--cache", small_cache, "--max-tokens", "64")
    error_line(evaluated, "eval", 2, f"{damaged / 'model.safetensors'} is damaged or truncated")


def test_a_truncated_tokenizer_json_is_named_by_eval(student, small_cache, tmp_path):
    damaged = damaged_copy(student, tmp_path, "tokenizer.json", 500)
    result = destila_in_process("eval", damaged, "--cache", small_cache, "--max-tokens", "64")
    error_line(result, "eval", 2, f"tokenizer: {damaged / 'tokenizer.json'} is damaged or truncated")


def test_a_truncated_config_json_is_named(tiny_llama_dir, tmp_path):
    teacher = damaged_copy(tiny_llama_dir, tmp_path, "config.json", 50)
    result = destila_in_process("student", "init", teacher, "-o", tmp_path / "student", "--layers", "2")
    error_line(result, "student", 2, f"{teacher / 'config.json'} is damaged or truncated")


def test_a_gguf_cut_inside_its_header_is_named(tmp_path):
    gguf = tmp_path / "model.gguf"
    # The GGUF magic, version 3, 1 tensor and 5 metadata entries promised, then nothing.
    gguf.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 5))
    result = destila_in_process("student", "init", gguf, "-o", tmp_path / "student", "--layers", "2")
    error_line(result, "student", 2, f"model: {gguf} is damaged or truncated")
    assert not (tmp_path / "student").exists()


@pytest.mark.slow
@pytest.mark.real_model
@requires_real_teacher
def test_a_gguf_cut_inside_its_tensors_is_named(tmp_path):
    from destila.models import embedded_gguf_path

    gguf = tmp_path / "cut.gguf"
    with open(embedded_gguf_path(), "rb") as source:
        gguf.write_bytes(source.read(20_000_000))  # the header and the first tensors, not the rest
    result = destila("student", "init", gguf, "-o", tmp_path / "student", "--layers", "2")
    error_line(result, "student", 2, f"model: {gguf} is damaged or truncated")


def test_binary_and_malformed_prompt_files_are_named_by_generate(tiny_llama_dir, tmp_path):
    binary = tmp_path / "prompts.txt"
    binary.write_bytes(bytes(range(0x80, 0x100)))
    result = destila_in_process("generate", tiny_llama_dir, binary, "-o", tmp_path / "out.jsonl")
    error_line(result, "generate", 2, f"not UTF-8 text at {binary}")
    rows = tmp_path / "prompts.jsonl"
    rows.write_text(json.dumps({"prompt": "hello"}) + "\n{broken\n")
    result = destila_in_process("generate", tiny_llama_dir, rows, "-o", tmp_path / "out.jsonl")
    error_line(result, "generate", 2, f"{rows}, line 2: not valid JSON")
    assert not (tmp_path / "out.jsonl").exists()
