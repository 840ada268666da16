"""`--resume` continues the run's recorded objective; a flag that would change it is refused."""

import pytest

from destila.cli.main import main as cli
from destila.cli.train import parse
from train_helpers import read_log

COMMON = ["--use_cpu", "--per_device_train_batch_size", "4", "--logging_steps", "1", "--save_steps", "2",
          "--lr_scheduler_type", "constant", "--seed", "3"]
OBJECTIVE = ["--divergence", "jsd", "--beta", "0.3", "--hard_weight", "0.5", "--top_k", "8"]


def train(student, cache, out, *extra):
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(student), "--cache", str(cache), "-o", str(out), *COMMON, *extra])
    return exit_.value.code


def test_resume_alone_keeps_the_recorded_loss(tiny_cache, fresh_student, tmp_path, capsys):
    out, straight = tmp_path / "run", tmp_path / "straight"
    assert train(fresh_student, tiny_cache, out, "--max_steps", "2", *OBJECTIVE) == 0
    _, resumed_args = parse([str(fresh_student), "-o", str(out), "--resume", "--max_steps", "4"])
    assert (resumed_args.divergence, resumed_args.beta, resumed_args.hard_weight, resumed_args.top_k) == \
        ("jsd", 0.3, 0.5, 8)
    assert train(fresh_student, tiny_cache, out, "--max_steps", "4", "--resume") == 0
    assert train(fresh_student, tiny_cache, straight, "--max_steps", "4", *OBJECTIVE) == 0
    resumed, expected = read_log(out / "log.jsonl"), read_log(straight / "log.jsonl")
    for step in (3, 4):  # the steps after the resume: the same objective as an uninterrupted run
        assert resumed[step]["loss"] == pytest.approx(expected[step]["loss"], rel=1e-4)
    capsys.readouterr()
    # The cache is recorded too: --resume without --cache still finds it.
    assert parse([str(fresh_student), "-o", str(out), "--resume"])[0].cache == str(tiny_cache.resolve())


def test_a_differing_flag_with_resume_is_refused_naming_both(tiny_cache, fresh_student, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(fresh_student, tiny_cache, out, "--max_steps", "2", *OBJECTIVE) == 0
    capsys.readouterr()
    assert train(fresh_student, tiny_cache, out, "--max_steps", "4", "--resume", "--divergence", "forward_kl") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "divergence 'jsd' (recorded) vs 'forward_kl' (given)" in err
