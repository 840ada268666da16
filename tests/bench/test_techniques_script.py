"""benchmarks/techniques.py end to end on a tiny teacher: every row trains, evaluates, and lands in the table."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "techniques.py"


@pytest.mark.slow
@pytest.mark.timeout(3600)  # about 30 destila commands, each a fresh process
def test_every_technique_row_runs(tiny_llama_dir, tmp_path):
    out = tmp_path / "bench"
    command = [sys.executable, str(SCRIPT), "--out", str(out), "--teacher", str(tiny_llama_dir), "--layers", "2",
               "--assistant-layers", "3", "--seq-len", "32", "--train-tokens", "1024", "--eval-tokens", "256",
               "--top-k", "8", "--steps", "2", "--prompts", "4", "--new-tokens", "16", "--hidden-dim", "16"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["row"] for r in rows] == ["kd", "kd+hidden", "mixture", "generated+real", "progressive", "self"]
    assert all(len(r["runs"]) == 2 and all(run["kl_to_teacher"] > 0 for run in r["runs"]) for r in rows)
    # self-distillation's student has the KD student's steps behind it too; every row's commands were timed
    assert [r["steps"] for r in rows] == [2, 2, 2, 2, 2, 4] and all(r["wall_seconds"] > 0 for r in rows)
    table = (out / "results.md").read_text()
    assert table.count("\n") == 2 + 6 and "± " in table
    # Every command that made a figure is recorded beside it.
    commands = [json.loads(line)["command"] for line in (out / "commands.jsonl").read_text().splitlines()]
    assert any("--teacher-weights 0.7,0.3" in c for c in commands)
    assert any("--hidden_loss mse" in c for c in commands)
