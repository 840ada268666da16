"""`benchmarks/main_job.py`: the main job timed (teacher pass, student from the cache, eval), on a random teacher
made by `benchmarks/gpu/random_teacher.py --config` as the GPU check makes one."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.gpu.random_teacher import main as random_teacher
from benchmarks.main_job import main as main_job


@pytest.fixture(scope="module")
def random_teacher_dir(tmp_path_factory, tiny_llama_dir):
    out = tmp_path_factory.mktemp("random-teacher") / "teacher"
    random_teacher([str(out), str(tiny_llama_dir), "--config", str(tiny_llama_dir)])
    return out


def test_the_random_teacher_copies_the_architecture_and_says_its_weights_are_random(random_teacher_dir,
                                                                                    tiny_llama_dir):
    made, original = (json.loads((d / "config.json").read_text()) for d in (random_teacher_dir, tiny_llama_dir))
    assert made["destila_random_weights"] is True
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "tie_word_embeddings"):
        assert made[key] == original[key]


def test_the_main_job_times_each_stage_beside_its_reference(random_teacher_dir, tmp_path, capsys):
    out = tmp_path / "main_job.json"
    assert main_job(["--teacher", str(random_teacher_dir), "--seq-len", "32", "--max-tokens", "1024",
                     "--batch-size", "4", "--student-layers", "1", "--steps", "4", "--train-batch-size", "2",
                     "--eval-tokens", "256", "--work", str(tmp_path / "work"), "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["teacher_weights"] == "random"
    teacher = record["teacher_pass"]
    assert teacher["tokens"] == 1024 and teacher["bare_seconds"] > 0 and teacher["pass_seconds"] > 0
    assert teacher["pass_over_bare"] == pytest.approx(teacher["pass_seconds"] / teacher["bare_seconds"])
    student = record["student"]
    assert len(student["kd_all_step_seconds"]) == len(student["ce_all_step_seconds"]) == 4
    assert student["kd_over_ce"] == pytest.approx(student["kd_step_seconds"] / student["ce_step_seconds"])
    assert all(math.isfinite(loss) for loss in student["kd_losses"])
    scored = record["eval"]
    assert scored["tokens"] > 0 and scored["perplexity"] > 1 and 0 <= scored["top1_agreement"] <= 1
    assert scored["kl_to_teacher"] >= 0 and scored["seconds"] > 0
    printed = capsys.readouterr().out
    assert "teacher pass (random weights)" in printed and "KD step" in printed and "eval:" in printed


def test_a_used_work_folder_is_refused_in_one_line(random_teacher_dir, tmp_path, capsys):
    (tmp_path / "cache").mkdir()
    with pytest.raises(SystemExit) as done:
        main_job(["--teacher", str(random_teacher_dir), "--work", str(tmp_path)])
    assert done.value.code == 2 and "already holds a run" in capsys.readouterr().err
