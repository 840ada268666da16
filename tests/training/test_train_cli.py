"""`destila train` as users call it: Hugging Face flag names, --config files, refused temperatures."""

from __future__ import annotations

import json
import warnings

import pytest

from destila.cli.main import main as cli
from destila.cli.train import parse

CONFIG = """\
learning_rate: 2e-3
lr_scheduler_type: constant
max_steps: 3
temperature: 1.0
per_device_train_batch_size: 4
logging_steps: 1
save_strategy: "no"
use_cpu: true
"""


def test_config_file_values_and_command_line_overrides(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text(CONFIG)
    _, from_file = parse(["student", "--cache", "c", "-o", str(tmp_path / "a"), "--config", str(config)])
    assert (from_file.learning_rate, from_file.lr_scheduler_type.value, from_file.max_steps) == (2e-3, "constant", 3)
    _, overridden = parse(["student", "--cache", "c", "-o", str(tmp_path / "b"), "--config", str(config),
                           "--learning_rate", "1e-3"])
    assert overridden.learning_rate == 1e-3 and overridden.max_steps == 3
    as_json = tmp_path / "cfg.json"
    as_json.write_text(json.dumps({"learning-rate": 3e-3, "divergence": "jsd"}))
    _, from_json = parse(["student", "--cache", "c", "-o", str(tmp_path / "c"), "--config", str(as_json)])
    assert (from_json.learning_rate, from_json.divergence) == (3e-3, "jsd")


def test_unknown_config_key_is_one_clear_line(tmp_path, capsys):
    config = tmp_path / "cfg.yaml"
    config.write_text("learning_rat: 1e-3\n")
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "student", "--cache", "c", "-o", str(tmp_path / "o"), "--config", str(config)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown option 'learning_rat'" in err


def test_train_with_a_config_file_runs_what_the_file_says(tiny_cache, fresh_student, tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    with warnings.catch_warnings(record=True) as caught, pytest.raises(SystemExit) as exit_:
        warnings.simplefilter("always")
        cli(["train", str(fresh_student), "--cache", str(tiny_cache), "-o", str(out), "--config", str(config),
             "--learning_rate", "1e-3"])
    assert exit_.value.code == 0
    # Nothing the user did not ask for (e.g. a deprecated option passed on their behalf) warns.
    assert [str(w.message) for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))] == []
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert all(r["learning_rate"] == pytest.approx(1e-3) for r in steps)


def test_temperature_other_than_the_caches_is_refused(tiny_cache, fresh_student, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(fresh_student), "--cache", str(tiny_cache), "-o", str(tmp_path / "o"),
             "--temperature", "2", "--use_cpu"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "T = 2" in err and "T = 1" in err and err.startswith("destila train: error: temperature:")


def test_data_flags_with_a_cache_are_refused_not_ignored(tiny_cache, fresh_student, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(fresh_student), "--cache", str(tiny_cache), "-o", str(tmp_path / "o"),
             "--streaming", "--num-proc", "2", "--use_cpu"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"destila train: error: --cache {tiny_cache}: ")
    assert "--streaming True (the cache in" in err and "built with streaming False" in err
    assert "--num-proc 2 (the cache in" in err
    assert not (tmp_path / "o").exists()


def test_resume_from_checkpoint_is_resume_not_ignored(tmp_path, capsys):
    """The Trainer's own flag must not be accepted and then dropped."""
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "student", "--cache", "c", "-o", str(tmp_path / "o"), "--resume_from_checkpoint", "x/ckpt-1",
             "--resume", "y/ckpt-2"])
    assert exit_.value.code == 2
    assert "--resume_from_checkpoint x/ckpt-1 and --resume y/ckpt-2 disagree" in capsys.readouterr().err
