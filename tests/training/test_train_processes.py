"""Training in real processes: SIGKILL and resume, and two-process data parallelism with torchrun."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from train_helpers import read_log


def train_command(student, cache, out, *extra):
    return [
        sys.executable, "-m", "destila", "train", str(student), "--cache", str(cache), "-o", str(out),
        "--per_device_train_batch_size", "4", "--learning_rate", "3e-3", "--lr_scheduler_type", "constant",
        "--seed", "7", "--logging_steps", "1", *extra,
    ]


def environment():
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parents[2] / "src"), env.get("PYTHONPATH")]))
    return env


def complete_checkpoints(out: Path) -> list[int]:
    return sorted(int(p.parent.name.split("-")[1]) for p in out.glob("checkpoint-*/trainer_state.json"))


def test_sigkill_then_resume_continues_the_same_trajectory(tiny_cache, fresh_student, tmp_path):
    steps = ["--max_steps", "120", "--save_steps", "10"]
    reference = tmp_path / "reference"
    subprocess.run(train_command(fresh_student, tiny_cache, reference, *steps), check=True, env=environment(),
                   capture_output=True)
    crashed = tmp_path / "crashed"
    process = subprocess.Popen(train_command(fresh_student, tiny_cache, crashed, *steps), env=environment(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None and not complete_checkpoints(crashed)[-1:] >= [30]:
        time.sleep(0.02)
    assert process.poll() is None, "training finished before it could be killed; give it more steps"
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = max(read_log(crashed / "log.jsonl"))
    assert killed_at < 120 and not (crashed / "model.safetensors").exists()
    subprocess.run(train_command(fresh_student, tiny_cache, crashed, *steps, "--resume"), check=True,
                   env=environment(), capture_output=True)
    expected, resumed = read_log(reference / "log.jsonl"), read_log(crashed / "log.jsonl")
    assert sorted(resumed) == list(range(1, 121))
    for step in range(1, 121):
        assert resumed[step]["loss"] == pytest.approx(expected[step]["loss"], rel=1e-5), step
    final_expected = AutoModelForCausalLM.from_pretrained(reference).state_dict()
    final_resumed = AutoModelForCausalLM.from_pretrained(crashed).state_dict()
    for key, value in final_expected.items():
        torch.testing.assert_close(final_resumed[key], value, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_torchrun_two_processes_equal_one_process_with_the_same_global_batch(tiny_cache, fresh_student, tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    single = tmp_path / "single"
    subprocess.run(train_command(fresh_student, tiny_cache, single, "--max_steps", "5", "--save_steps", "100"),
                   check=True, env=environment(), capture_output=True)
    double = tmp_path / "double"
    command = train_command(fresh_student, tiny_cache, double, "--max_steps", "5", "--save_steps", "100")
    command[command.index("--per_device_train_batch_size") + 1] = "2"
    launched = subprocess.run(
        [torchrun, "--nproc-per-node", "2", "--master-port", "29533", *command[1:]],
        env=environment(), capture_output=True, text=True,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    one, two = read_log(single / "log.jsonl"), read_log(double / "log.jsonl")
    for step in range(1, 6):
        assert two[step]["loss"] == pytest.approx(one[step]["loss"], rel=1e-4), step
    weights_one = AutoModelForCausalLM.from_pretrained(single).state_dict()
    weights_two = AutoModelForCausalLM.from_pretrained(double).state_dict()
    for key, value in weights_one.items():
        torch.testing.assert_close(weights_two[key], value, rtol=1e-4, atol=1e-5)
