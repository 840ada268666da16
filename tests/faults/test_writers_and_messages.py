"""Writers of one output, messages that name the user's path, and what a failed command leaves behind.

- every writing command holds its output's lock: a second writer is refused
  at once and nothing it would have written appears;
- a read-only or full output, destila home or data cache is named as the
  user gave it (with the variable that moves the folder), never an internal
  temporary or lock file;
- ``-o`` naming an existing file is a usage error (exit 2) in every command;
- a training folder interrupted during its final save is refused as a model,
  with the way out;
- files written for the user are readable like any other file they create.
"""

import json
import os
import stat
import subprocess
import sys
import time

import pytest
from conftest import requires_real_teacher
from fault_helpers import (  # noqa: F401 (fixtures)
    ENV, build_command, destila, destila_in_process, error_line, snapshot, student, tmpfs, train_cache, train_command,
)

from destila.io import exclusive_lock, output_lock


def prompts_file(tmp_path, count: int = 3):
    path = tmp_path / "prompts.txt"
    path.write_text("".join(f"Tell me about the number {i}.\n" for i in range(count)))
    return path


def test_generate_is_refused_while_another_writes_the_same_output(tiny_llama_dir, tmp_path):
    out = tmp_path / "answers.jsonl"
    out.write_text('{"kept": "as it was"}\n')
    with output_lock(out, "generate"):  # what a running `destila generate -o answers.jsonl` holds
        result = destila("generate", tiny_llama_dir, prompts_file(tmp_path), "-o", out, "--max-new-tokens", "2")
    error_line(result, "generate", 2, f"another `destila generate` is writing to {out}", "choose another -o")
    assert out.read_text() == '{"kept": "as it was"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.jsonl", "prompts.txt"]  # no lock left


@pytest.mark.slow  # two real generate processes
def test_two_generate_processes_on_one_output_write_every_answer_once(tiny_llama_dir, tmp_path):
    out = tmp_path / "answers.jsonl"
    command = [sys.executable, "-m", "destila", "generate", str(tiny_llama_dir), str(prompts_file(tmp_path, 300)),
               "-o", str(out), "--max-new-tokens", "48", "--batch-size", "1", "--quiet"]
    first = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not out.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the first answers are being written: it holds the lock
    second = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    first.wait(timeout=600)
    assert first.returncode == 0, first.stderr.read()[-2000:]
    error_line(second, "generate", 2, f"another `destila generate` is writing to {out}")
    indices = [json.loads(line)["prompt_index"] for line in out.read_text().splitlines()]
    assert sorted(indices) == list(range(300))


def test_student_init_is_refused_while_another_command_writes_the_folder(tiny_llama_dir, tmp_path):
    out = tmp_path / "student"
    out.mkdir()
    lock = exclusive_lock(out / ".lock", "held by the test")  # what a running init (or build) holds
    try:
        result = destila("student", "init", tiny_llama_dir, "-o", out, "--layers", "2")
    finally:
        lock.close()
    error_line(result, "student", 2, f"another destila command is writing to {out}")
    assert sorted(p.name for p in out.iterdir()) == [".lock"]  # the holder's lock, nothing of the refused init


def test_student_files_are_readable_like_the_rest(tiny_llama_dir, tmp_path):
    out = tmp_path / "student"
    result = destila_in_process("student", "init", tiny_llama_dir, "-o", out, "--layers", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"] == 0o666 & ~_umask(), modes
    assert ".lock" not in modes


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_generate_onto_a_read_only_disk_names_the_output(tiny_llama_dir, tmpfs, tmp_path):
    point = tmpfs.mount("1m")
    tmpfs.read_only(point)
    out = point / "answers.jsonl"
    result = destila_in_process("generate", tiny_llama_dir, prompts_file(tmp_path), "-o", out, "--max-new-tokens", "2")
    line = error_line(result, "generate", 1, f"read-only file system at {out}")
    assert ".tmp" not in line and ".lock" not in line


def test_generate_onto_a_full_disk_names_the_output_and_leaves_no_temporary(tiny_llama_dir, tmpfs, tmp_path):
    point = tmpfs.mount("1m")
    out = point / "answers.jsonl"
    tmpfs.fill(point, leave=0)
    result = destila("generate", tiny_llama_dir, prompts_file(tmp_path), "-o", out, "--max-new-tokens", "2")
    line = error_line(result, "generate", 1, f"no space left on device at {out}")
    assert ".tmp" not in line and ".lock" not in line
    assert sorted(p.name for p in point.iterdir()) == ["filler"]


def test_a_read_only_destila_home_is_named_with_the_way_out(tmpfs, tmp_path):
    point = tmpfs.mount("1m", "home")
    tmpfs.read_only(point)
    home = point / "destila"
    result = destila("student", "init", "smollm2", "-o", tmp_path / "student", "--layers", "2",
                     env={**ENV, "DESTILA_HOME": str(home)})
    line = error_line(result, "student", 1, f"read-only file system at {point}",
                      "set DESTILA_HOME to another folder")
    assert ".lock" not in line and ".smollm2" not in line


def test_a_full_destila_home_is_named_not_the_output(tiny_llama_dir, tmpfs, tmp_path):
    home = tmpfs.mount("1m", "home", inodes=1)  # not one more file fits: not even the conversion's lock
    out = tmp_path / "cache"
    result = destila(*build_command("smollm2", "pydoc", out), env={**ENV, "DESTILA_HOME": str(home)})
    line = error_line(result, "cache", 1, f"no space left on device at {home}, destila's home folder (DESTILA_HOME)",
                      "set DESTILA_HOME to another folder")
    assert str(out) not in line and ".lock" not in line and ".smollm2" not in line
    assert not out.exists() or not any(out.iterdir())  # nothing left that blocks the next command


@pytest.mark.slow
@pytest.mark.real_model
@requires_real_teacher
def test_a_destila_home_that_fills_up_during_the_conversion_is_named_not_the_output(tmpfs, tmp_path):
    home = tmpfs.mount("64m", "home")  # room for the lock and part of the weights, not the 0.5 GB teacher
    out = tmp_path / "cache"
    result = destila(*build_command("smollm2", "pydoc", out), env={**ENV, "DESTILA_HOME": str(home)})
    line = error_line(result, "cache", 1, f"no space left on device at {home}, destila's home folder (DESTILA_HOME)",
                      "set DESTILA_HOME to another folder")
    assert str(out) not in line and ".smollm2" not in line
    assert not list(home.glob(".smollm2-135m-instruct-*"))  # the staging copy is gone
    assert not out.exists()


def test_a_full_data_cache_is_named_with_its_variable_and_leaves_nothing_behind(tiny_llama_dir, tmpfs, tmp_path):
    disk = tmpfs.mount("1m", "stores")
    stores = disk / "data"
    tmpfs.fill(disk, leave=0)
    out = tmp_path / "cache"
    failed = destila(*build_command(tiny_llama_dir, "pydoc", out), env={**ENV, "DESTILA_DATA_CACHE": str(stores)})
    line = error_line(failed, "cache", 1, f"no space left on device at {stores}, where destila keeps tokenised data "
                      "(DESTILA_DATA_CACHE", "set DESTILA_DATA_CACHE to another folder")
    assert str(out) not in line and ".tmp" not in line
    assert not any(stores.iterdir())  # the half-written store's staging copy is gone
    assert not out.exists() or not any(out.iterdir())  # no lock or manifest that a rerun would trip over


def test_an_output_that_is_an_existing_file_is_a_usage_error_everywhere(tiny_llama_dir, student, train_cache,
                                                                        tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("the user's file\n")
    cases = [
        ("cache", build_command(tiny_llama_dir, "pydoc", taken), f"output: {taken} is a file"),
        ("train", train_command(student, train_cache, taken, "--max_steps", "1"), f"the output {taken} is a file"),
        ("student", ["student", "init", tiny_llama_dir, "-o", taken, "--layers", "2"], f"{taken} is a file"),
    ]
    for command, args, needle in cases:
        error_line(destila_in_process(*args), command, 2, needle)
        assert taken.read_text() == "the user's file\n"


@pytest.mark.slow  # a short training run
def test_a_run_interrupted_during_its_final_save_is_refused_as_a_model(train_cache, student, tmp_path):
    out = tmp_path / "out"
    result = destila_in_process(*train_command(student, train_cache, out, "--max_steps", "2", "--save_steps", "1"))
    assert result.returncode == 0, result.stderr[-2000:]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir() if p.is_file()}
    assert modes["model.safetensors"] == modes["config.json"] == 0o666 & ~_umask(), modes
    assert stat.S_IMODE((out / "checkpoint-2" / "model.safetensors").stat().st_mode) == 0o666 & ~_umask()
    # What a kill during the final save leaves: the flag written before it, the weights, no tokenizer yet.
    (out / ".destila-save-incomplete").write_text("")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (out / name).unlink()
    before = snapshot(out)
    advice = f"model: {out} holds a training run that was interrupted before or during its final save"
    evaluated = destila_in_process("eval", out, "--cache", train_cache, "--max-tokens", "64", "--new-tokens", "2")
    error_line(evaluated, "eval", 2, advice, "--resume")
    trained = destila_in_process(*train_command(out, train_cache, tmp_path / "next", "--max_steps", "1"))
    error_line(trained, "train", 2, advice, "--resume")
    assert snapshot(out) == before
    resumed = destila_in_process(*train_command(student, train_cache, out, "--max_steps", "2", "--save_steps", "1",
                                                "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert not (out / ".destila-save-incomplete").exists() and (out / "tokenizer.json").is_file()


def test_a_line_generate_did_not_write_is_named_and_kept(tiny_llama_dir, tmp_path):
    prompts, out = prompts_file(tmp_path, 2), tmp_path / "answers.jsonl"
    command = ["generate", tiny_llama_dir, prompts, "-o", out, "--max-new-tokens", "2", "--quiet"]
    assert destila_in_process(*command).returncode == 0
    answers = out.read_bytes()
    for foreign, why in ((b'{"note": "my own line"}\n', "not an answer (no messages)"),
                         (answers.splitlines(keepends=True)[0], "prompt_index 0, sample 0 a second time")):
        out.write_bytes(answers + foreign)
        error_line(destila_in_process(*command), "generate", 2, f"output: {out}, line 3: {why}",
                   "remove the line, or choose another -o")
        assert out.read_bytes() == answers + foreign  # never cut away, never counted as answered
    out.write_bytes(answers + answers.splitlines(keepends=True)[0][:25])  # the half-written end a kill leaves
    assert destila_in_process(*command).returncode == 0 and out.read_bytes() == answers


def test_a_damaged_generate_sidecar_is_named(tiny_llama_dir, tmp_path):
    prompts, out = prompts_file(tmp_path, 2), tmp_path / "answers.jsonl"
    command = ["generate", tiny_llama_dir, prompts, "-o", out, "--max-new-tokens", "2", "--quiet"]
    assert destila_in_process(*command).returncode == 0
    sidecar = tmp_path / "answers.jsonl.generate.json"
    sidecar.write_text(sidecar.read_text()[:30])
    before = snapshot(tmp_path)
    error_line(destila_in_process(*command), "generate", 2,
               f"output: {sidecar}, the record of how {out} was generated, is damaged or not destila's",
               "move both files away to start again")
    assert snapshot(tmp_path) == before


@pytest.mark.slow  # eval measures each model in a fresh process
def test_eval_json_onto_a_full_disk_names_the_file(student, train_cache, tmpfs, tmp_path):
    point = tmpfs.mount("1m")
    results = point / "results.json"
    tmpfs.fill(point, leave=0)
    result = destila_in_process("eval", student, "--cache", train_cache, "--max-tokens", "64", "--new-tokens", "2",
                                "--json", results)
    line = error_line(result, "eval", 1, f"no space left on device at {results}")
    assert ".tmp" not in line
    assert sorted(p.name for p in point.iterdir()) == ["filler"]
