"""benchmarks/on_policy_vs_gkd.py end to end on a tiny chat teacher: each method trains, is scored, and is tabled."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "on_policy_vs_gkd.py"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about ten fresh processes
def test_every_method_trains_and_is_scored(tiny_chat_llama_dir, tmp_path):
    from destila.student import StudentInitSpec, init_student

    student = tmp_path / "student"
    init_student(StudentInitSpec(str(tiny_chat_llama_dir), student, config={"num_hidden_layers": 2}, seed=1))
    results = tmp_path / "results.jsonl"
    command = [sys.executable, str(SCRIPT), "--teacher", str(tiny_chat_llama_dir), "--student", str(student),
               "--prompts", "20", "--rounds", "2", "--steps-per-round", "2", "--max-new-tokens", "8", "--seq-len",
               "128", "--top-k", "16", "--seeds", "0", "--work", str(tmp_path / "work"), "--json", str(results)]
    # --seq-len 128: the tiny tokenizer spells each chat-templated prompt (a system turn included) in 79 to 94
    # tokens, and its 8-token answer must fit after it (a cut-off answer is refused).
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1700)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["method"] for r in rows] == ["offline", "on-policy", "trl-gkd"]
    assert all(r["kl_own_answers"] > 0 and r["kl_teacher_answers"] > 0 and r["peak_bytes"] > 0 for r in rows)
    assert rows[0]["steps"] == rows[2]["steps"] == 4  # equal student steps: rounds × steps per round
    table = done.stdout[done.stdout.index("| method |"):]
    assert table.strip().count("\n") == 1 + 4  # header, rule, the starting student and the three methods
    assert "| trl-gkd |" in table and "| start |" in table
