"""`destila train` output folders under faults: reruns, two writers, kills, full and read-only disks.

A run's folder is its own: it is refused to a second run unless --resume or
--overwrite says what to do, locked against a concurrent writer, and a
resumed run continues exactly (each step logged once, the same losses and
weights as a run that was never interrupted).
"""

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from fault_helpers import (  # noqa: F401 (fixtures)
    ENV, destila, destila_in_process, error_line, snapshot, student, tmpfs, train_cache, train_command,
)
from transformers import AutoModelForCausalLM


def log_steps(out) -> list[tuple[int, float]]:
    """``(step, loss)`` of every training record in ``log.jsonl``, in file order (duplicates kept)."""
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if "loss" in r]


def assert_same_run(got, want):
    """Each step logged once with the reference's loss, and the same final weights."""
    steps, expected = log_steps(got), dict(log_steps(want))
    assert [s for s, _ in steps] == sorted(expected), steps
    for step, loss in steps:
        assert loss == pytest.approx(expected[step], rel=1e-5), step
    a = AutoModelForCausalLM.from_pretrained(got).state_dict()
    b = AutoModelForCausalLM.from_pretrained(want).state_dict()
    for key, value in b.items():
        torch.testing.assert_close(a[key], value, rtol=1e-5, atol=1e-6)


def test_a_folder_holding_a_finished_run_is_refused_and_left_untouched(train_cache, student, tmp_path):
    out = tmp_path / "out"
    first = destila_in_process(*train_command(student, train_cache, out, "--max_steps", "3", "--save_steps", "2"))
    assert first.returncode == 0, first.stderr[-2000:]
    before = snapshot(out)
    again = destila_in_process(*train_command(student, train_cache, out, "--max_steps", "3", "--save_steps", "2"))
    error_line(again, "train", 2, f"already holds a training run at {out}", "steps 1–3 logged",
               "checkpoints checkpoint-2, checkpoint-3", "pass --resume to continue it, --overwrite")
    assert snapshot(out) == before


def test_a_second_writer_fails_at_once_with_a_clear_line(train_cache, student, tmp_path):
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, "-m", "destila", *train_command(
        student, train_cache, out, "--max_steps", "100000", "--save_steps", "100000")], env=ENV,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (out / "log.jsonl").exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.poll() is None, "the first run ended before the second started"
        second = destila(*train_command(student, train_cache, out, "--max_steps", "3", "--resume"))
        error_line(second, "train", 2, f"another `destila train` is writing to {out}", f"{out / '.lock'} is held")
        assert first.poll() is None  # the first writer goes on
    finally:
        first.kill()
        first.wait()
    steps = [s for s, _ in log_steps(out)]
    assert steps == list(range(1, len(steps) + 1))  # one writer's log, no interleaving


def test_train_onto_a_read_only_file_system_is_one_line(train_cache, student, tmpfs):
    disk = tmpfs.mount("1m")
    tmpfs.read_only(disk)
    result = destila_in_process(*train_command(student, train_cache, disk / "out", "--max_steps", "2"))
    error_line(result, "train", 1, f"read-only file system at {disk / 'out'}",
               "choose an output folder on a writable file system")


@pytest.mark.slow
def test_overwrite_replaces_the_old_run_entirely(train_cache, student, tmp_path):
    out, reference = tmp_path / "out", tmp_path / "reference"
    assert destila_in_process(*train_command(student, train_cache, out, "--max_steps", "4", "--save_steps", "2",
                                  "--seed", "3")).returncode == 0
    old_run = json.loads((out / "destila_run.json").read_text())["run_id"]
    args = ("--max_steps", "3", "--save_steps", "3")
    redone = destila_in_process(*train_command(student, train_cache, out, *args, "--overwrite"))
    assert redone.returncode == 0, redone.stderr[-2000:]
    assert destila_in_process(*train_command(student, train_cache, reference, *args)).returncode == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3"]  # none of the old run's
    assert json.loads((out / "destila_run.json").read_text())["run_id"] != old_run
    assert_same_run(out, reference)


@pytest.mark.slow
def test_resume_never_takes_a_checkpoint_of_another_run(train_cache, student, tmp_path):
    args = ("--max_steps", "8", "--save_steps", "4")
    other, out, reference = tmp_path / "other", tmp_path / "out", tmp_path / "reference"
    assert destila_in_process(*train_command(student, train_cache, other, *args, "--seed", "11")).returncode == 0
    assert destila_in_process(*train_command(student, train_cache, reference, *args)).returncode == 0
    # out: the reference run stopped after checkpoint-4, and another run's checkpoint-8 dropped beside it
    shutil.copytree(reference, out)
    shutil.rmtree(out / "checkpoint-8")
    for final in ("model.safetensors", "config.json", "generation_config.json"):
        (out / final).unlink(missing_ok=True)
    shutil.copytree(other / "checkpoint-8", out / "checkpoint-8")
    resumed = destila_in_process(*train_command(student, train_cache, out, *args, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_run(out, reference)  # continued from its own checkpoint-4, not the other run's 8


def train_killed_when(found, command: list[str], skip: tuple[str, ...] = ()):
    """Run ``destila`` ``command`` in a real process and SIGKILL it as soon as ``found()`` returns a path whose
    name is not in ``skip``; that path, or None if the run ended first."""
    process = subprocess.Popen([sys.executable, "-m", "destila", *command], env=ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    caught = None
    try:
        while process.poll() is None and caught is None:
            caught = found()
            if caught is not None and caught.name not in skip:
                process.send_signal(signal.SIGKILL)
            else:
                caught = None
                time.sleep(0.001)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    return caught


def checkpoint_being_written(out):
    """A ``checkpoint-N`` folder that exists but is not stamped complete yet (the Trainer is writing it)."""
    for checkpoint in out.glob("checkpoint-*"):
        if not (checkpoint / "destila_run.json").exists():
            return checkpoint
    return None


@pytest.mark.slow
def test_sigkill_during_checkpoint_writing_then_resume_is_loss_identical(train_cache, student, tmp_path):
    args = ("--max_steps", "60", "--save_steps", "5")
    reference, out = tmp_path / "reference", tmp_path / "out"
    assert destila(*train_command(student, train_cache, reference, *args)).returncode == 0
    # one complete checkpoint before the one caught being written
    caught = train_killed_when(lambda: checkpoint_being_written(out) if out.exists() else None,
                               train_command(student, train_cache, out, *args), skip=("checkpoint-5",))
    assert caught is not None, "the run finished without being caught writing a checkpoint"
    assert not (caught / "destila_run.json").exists() and not (out / "model.safetensors").exists()
    before = snapshot(out)
    plain = destila(*train_command(student, train_cache, out, *args))  # no --resume: refused, nothing touched
    error_line(plain, "train", 2, f"already holds a training run at {out}", "pass --resume")
    assert snapshot(out) == before
    resumed = destila(*train_command(student, train_cache, out, *args, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (caught / "destila_run.json").exists()  # the unfinished checkpoint was written again, completely
    assert_same_run(out, reference)


@pytest.mark.slow
def test_full_disk_while_training_is_one_line_then_resume_finishes_the_same_run(train_cache, student, tmpfs, tmp_path):
    args = ("--max_steps", "6", "--save_steps", "3")
    reference = tmp_path / "reference"
    assert destila(*train_command(student, train_cache, reference, *args)).returncode == 0
    model_bytes = (reference / "model.safetensors").stat().st_size
    disk = tmpfs.mount("3m")
    out = disk / "out"
    filler = tmpfs.fill(disk, leave=model_bytes + 64 * 1024)  # the weights fit, the optimizer state does not
    failed = destila(*train_command(student, train_cache, out, *args))
    error_line(failed, "train", 1, f"no space left on device at {out}", "run the same command with --resume")
    assert [s for s, _ in log_steps(out)] == [1, 2, 3]
    filler.unlink()
    resumed = destila(*train_command(student, train_cache, out, *args, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_run(out, reference)


def test_resuming_a_finished_run_trains_nothing_and_changes_nothing(train_cache, student, tmp_path):
    """The Trainer resumed at its last step would train one step more; destila says the run is finished."""
    out = tmp_path / "out"
    args = ("--max_steps", "2", "--save_steps", "1")
    assert destila_in_process(*train_command(student, train_cache, out, *args)).returncode == 0
    before = snapshot(out)
    resumed = destila_in_process(*train_command(student, train_cache, out, *args, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"the run in {out} finished at step 2" in resumed.stdout and "nothing changed" in resumed.stdout
    assert snapshot(out) == before
    longer = destila_in_process(*train_command(student, train_cache, out, "--max_steps", "3", "--save_steps", "1",
                                               "--resume"))
    assert longer.returncode == 0, longer.stderr[-2000:]
    assert [s for s, _ in log_steps(out)] == [1, 2, 3]  # a larger --max_steps trains on from there


def test_a_final_save_cut_short_is_completed_from_the_last_checkpoint_without_a_step(train_cache, student, tmp_path):
    """As a kill during the final save leaves it: the flag written, the weights half there."""
    args = ("--max_steps", "2", "--save_steps", "1")
    reference, out = tmp_path / "reference", tmp_path / "out"
    assert destila_in_process(*train_command(student, train_cache, reference, *args)).returncode == 0
    shutil.copytree(reference, out)
    (out / ".destila-save-incomplete").write_text("")
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    resumed = destila_in_process(*train_command(student, train_cache, out, *args, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "is the run's last step (2); saving the final model from it" in resumed.stdout
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert weights.read_bytes() == (reference / "model.safetensors").read_bytes()
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    assert not (out / ".destila-save-incomplete").exists()


@pytest.mark.slow
def test_sigkill_during_the_final_save_then_resume_gives_the_same_final_weights(train_cache, student, tmp_path):
    args = ("--max_steps", "6", "--save_steps", "2")
    reference, out = tmp_path / "reference", tmp_path / "out"
    assert destila(*train_command(student, train_cache, reference, *args)).returncode == 0
    flag = out / ".destila-save-incomplete"
    caught = train_killed_when(lambda: flag if flag.exists() else None, train_command(student, train_cache, out, *args))
    assert caught is not None, "the run finished before its final save was caught"
    assert (out / "checkpoint-6" / "destila_run.json").exists()
    resumed = destila(*train_command(student, train_cache, out, *args, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "saving the final model from it" in resumed.stdout
    assert (out / "model.safetensors").read_bytes() == (reference / "model.safetensors").read_bytes()
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 6
    assert [s for s, _ in log_steps(out)] == [1, 2, 3, 4, 5, 6]


def test_a_hub_token_given_on_the_command_line_reaches_no_file(train_cache, student, tmp_path):
    """`--hub_token` is needed in memory to push; the Trainer pickles its arguments into training_args.bin beside
    the model and in every checkpoint, which users upload: no file under the output folder holds the token."""
    token = "hf_destilaTestSecretToken1234567890"
    out = tmp_path / "out"
    done = destila_in_process(*train_command(student, train_cache, out, "--max_steps", "2", "--save_steps", "1",
                                             "--hub_token", token))
    assert done.returncode == 0, done.stderr[-2000:]
    written = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "training_args.bin" for p in written)  # the Trainer's pickle is among them
    assert [str(p) for p in written if token.encode() in p.read_bytes()] == []
    assert token not in done.stdout + done.stderr
    args = torch.load(out / "training_args.bin", weights_only=False)
    assert args.hub_token is None and args.max_steps == 2  # the rest of the arguments are kept
