"""A refused command leaves nothing that blocks its rerun, and --overwrite removes only what destila's training wrote.

Each test runs the real command line (in process) and checks the one error line, what is on disk afterwards,
and that the same command, once the cause is fixed, succeeds.
"""

from __future__ import annotations

import json
import shutil

from fault_helpers import (  # noqa: F401 (fixtures)
    build_command, copy_of, destila_in_process, error_line, small_cache, snapshot, student, train_command,
)
from safetensors.torch import load_file, save_file

from destila.cache import read_manifest


def test_overwrite_refuses_a_model_folder_that_holds_no_run(tiny_llama_dir, small_cache, student, tmp_path):
    """A copy of the teacher with the user's notes: neither a plain -o nor --overwrite touches it."""
    teacher_copy = tmp_path / "teacher-copy"
    shutil.copytree(tiny_llama_dir, teacher_copy)
    (teacher_copy / "NOTES.txt").write_text("where this model came from\n")
    before = snapshot(teacher_copy)
    for extra in ((), ("--overwrite",), ("--resume",)):
        result = destila_in_process(*train_command(student, small_cache, teacher_copy, "--max_steps", "1", *extra))
        line = error_line(result, "train", 2, f"is not empty at {teacher_copy}", "is not a destila training run",
                          "no destila_run.json")
        assert "already holds a training run" not in line and "pass --resume" not in line
        assert snapshot(teacher_copy) == before


def test_the_student_folder_is_never_the_output(small_cache, student, tmp_path):
    """``train S -o S --overwrite`` on a folder that is a finished run (it has a run record): refused."""
    run = tmp_path / "run"
    shutil.copytree(student, run)
    (run / "destila_run.json").write_text(json.dumps({"run_id": "0" * 32}))
    before = snapshot(run)
    result = destila_in_process(*train_command(run, small_cache, run, "--max_steps", "1", "--overwrite"))
    error_line(result, "train", 2, f"the output folder {run} is the student ({run})", "choose another -o")
    assert snapshot(run) == before
    result = destila_in_process(*train_command(student, run / "cache", run, "--max_steps", "1"))
    assert result.returncode == 2  # a cache that is not there: refused as such, the folder untouched
    shutil.copytree(small_cache, run / "cache")
    before = snapshot(run)
    result = destila_in_process(*train_command(student, run / "cache", run, "--max_steps", "1", "--overwrite"))
    error_line(result, "train", 2, f"the output folder {run} holds the cache")
    assert snapshot(run) == before


def test_a_train_refused_at_its_first_step_leaves_nothing_then_the_same_command_runs(small_cache, student, tmp_path):
    """A shard whose bytes changed (same size) is found when training first reads it, after the output folder
    was claimed: the folder goes away again, and the command runs once the cache is intact."""
    cache = copy_of(small_cache, tmp_path)
    shard = cache / read_manifest(cache).shards[0].name
    intact = shard.read_bytes()
    damaged = bytearray(intact)
    damaged[-5] ^= 0x40
    shard.write_bytes(bytes(damaged))
    out = tmp_path / "out"
    command = train_command(student, cache, out, "--max_steps", "1")
    error_line(destila_in_process(*command), "train", 2, "checksum mismatch", str(shard))
    assert not out.exists()
    made = tmp_path / "made"  # a folder the user made: emptied again, kept
    made.mkdir()
    error_line(destila_in_process(*train_command(student, cache, made, "--max_steps", "1")), "train", 2,
               "checksum mismatch")
    assert made.is_dir() and not list(made.iterdir())
    shard.write_bytes(intact)
    again = destila_in_process(*command)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (out / "model.safetensors").is_file()


def overflowing_teacher(teacher, tmp_path):
    """The tiny teacher with a final norm of 3e38: every weight finite, the hidden states overflow float32."""
    copy = tmp_path / "overflowing-teacher"
    shutil.copytree(teacher, copy)
    weights = load_file(copy / "model.safetensors")
    weights["model.norm.weight"].fill_(3e38)
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def test_a_cache_build_refused_before_its_first_shard_leaves_no_cache(tiny_llama_dir, tmp_path):
    out = tmp_path / "cache"
    bad = overflowing_teacher(tiny_llama_dir, tmp_path)
    refused = destila_in_process(*build_command(bad, "pydoc", out))
    line = error_line(refused, "cache", 2, "non-finite logits", "although the teacher runs in float32")
    assert "--dtype float32" not in line  # no advice to do what it already does
    assert not out.exists()
    made = tmp_path / "made"
    made.mkdir()
    error_line(destila_in_process(*build_command(bad, "pydoc", made)), "cache", 2, "non-finite logits")
    assert not list(made.iterdir())
    built = destila_in_process(*build_command(tiny_llama_dir, "pydoc", out))  # another teacher: not blocked
    assert built.returncode == 0, built.stderr[-2000:]
    assert read_manifest(out).complete


def test_recipes_refuse_unusable_data_before_their_first_stage(tiny_llama_dir, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(bytes(range(0x80, 0x100)))
    for verb, data, needle in (("self", empty, f"data: {empty} is empty"),
                               ("progressive", binary, f"not UTF-8 text at {binary}")):
        out = tmp_path / f"out-{verb}"
        stages = ("--stages", "1") if verb == "progressive" else ()
        result = destila_in_process("recipe", verb, tiny_llama_dir, data, "-o", out, "--max-steps", "1", *stages)
        error_line(result, "recipe", 2, needle)
        assert not out.exists()  # no stages.json recording a stage of a run that never started
    error_line(destila_in_process(*build_command(tiny_llama_dir, empty, tmp_path / "cache")), "cache", 2,
               f"data: {empty} is empty")
    assert not (tmp_path / "cache").exists()


def test_demo_with_a_budget_of_nan_minutes_is_refused_before_any_stage(tmp_path):
    for minutes in ("nan", "inf", "0"):
        result = destila_in_process("demo", "--minutes", minutes, "--out", tmp_path / "demo")
        error_line(result, "demo", 2, f"minutes: expected a positive finite number, found {float(minutes)}")
        assert not (tmp_path / "demo").exists()
