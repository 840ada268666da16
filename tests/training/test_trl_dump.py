"""A TRL config written out in full (``to_dict()`` dumped to YAML, as TRL users keep them) on `destila train`."""

import pytest
import yaml

from destila.cli.main import main as cli
from destila.cli.train import parse


def dump(tmp_path, config, name="trl.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config.to_dict()))
    return str(path)


def small(out, **changes):
    """A TRL config's changes for a short CPU run (the rest at TRL's defaults)."""
    return dict(output_dir=str(out), use_cpu=True, max_steps=2, per_device_train_batch_size=2, save_strategy="no",
                logging_steps=1, **changes)


def gkd_config(out, **changes):
    from trl.experimental.gkd import GKDConfig

    return GKDConfig(**small(out, **changes))


def sft_config(out, **changes):
    from trl import SFTConfig

    return SFTConfig(**small(out, **changes))


@pytest.mark.parametrize("make", [gkd_config, sft_config], ids=["GKDConfig", "SFTConfig"])
def test_a_trl_config_written_out_in_full_trains_from_a_cache(make, tiny_cache, fresh_student, tmp_path, capsys):
    out = tmp_path / "out"
    config = dump(tmp_path, make(out))
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(fresh_student), "--cache", str(tiny_cache), "--config", config])
    assert exit_.value.code == 0, capsys.readouterr().err
    assert (out / "model.safetensors").exists()
    printed = capsys.readouterr().out
    assert "objective: jsd β 0.5, T 1, soft 1 + hard 0" in printed and "Off-policy" in printed


def test_the_masked_tokens_of_a_dump_are_read_as_not_set(tiny_cache, tmp_path):
    config = dump(tmp_path, sft_config(tmp_path / "out"))
    text = open(config).read()
    assert "<EOS_TOKEN>" in text and "<PAD_TOKEN>" in text and "<HUB_TOKEN>" in text
    _, args = parse(["s", "--cache", str(tiny_cache), "--config", config])
    assert args.hub_token is None and args.remove_unused_columns is False


def test_every_refusal_of_a_dump_comes_in_one_line(tiny_cache, tmp_path, capsys):
    config = dump(tmp_path, gkd_config(tmp_path / "out", lmbda=0.7, seq_kd=True, temperature=0.5, max_length=64,
                                       use_liger_kernel=False))
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "s", "--cache", str(tiny_cache), "--config", config])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    for part in ("lmbda 0.7 (on-policy", "seq_kd True (sequence-level", "temperature 0.5 (in TRL's GKD"):
        assert part in err, part
    assert "disable_dropout" not in err and "EOS_TOKEN" not in err and "remove_unused_columns" not in err


def test_the_objective_line_of_a_gkd_dump_says_it_runs_off_policy(tiny_cache, tmp_path):
    _, args = parse(["s", "--cache", str(tiny_cache), "--config", dump(tmp_path, gkd_config(tmp_path / "out"))])
    assert (args.divergence, args.beta, args.temperature, args.hard_weight) == ("jsd", 0.5, 1.0, 0.0)


def refusal(tmp_path, capsys, config_text: str) -> str:
    """``destila train`` with a config file holding ``config_text``: it must exit 2; its stderr, stripped."""
    path = tmp_path / "cfg.yaml"
    path.write_text(config_text)
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "s", "--cache", "c", "-o", str(tmp_path / "o"), "--config", str(path)])
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip()


def test_gkds_defaults_outside_a_full_dump_are_still_refused(tmp_path, capsys):
    err = refusal(tmp_path, capsys, "lmbda: 0.5\ndisable_dropout: true\n")
    assert "lmbda 0.5" in err and "disable_dropout True" in err


@pytest.mark.parametrize("text", ["dataset_num_proc: null\n", "completion_only_loss: null\n", "packing: false\n",
                                  "max_length: 1024\n", "remove_unused_columns: true\n",
                                  "eos_token: <EOS_TOKEN>\npad_token: <PAD_TOKEN>\n"])
def test_a_trl_default_beside_a_cache_is_accepted(text, tiny_cache, tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("model_name_or_path: s\n" + text)
    namespace, args = parse(["--cache", str(tiny_cache), "-o", str(tmp_path / "o"), "--config", str(path)])
    assert namespace.seq_len is None or namespace.seq_len != 1024
    assert args.remove_unused_columns is False


def test_a_gkd_config_at_its_defaults_is_accepted_in_python_as_its_dump_is(tiny_cache, fresh_student, tmp_path):
    from destila.training import DistillationTrainer

    config = gkd_config(tmp_path / "out")  # lmbda 0.5, temperature 0.9, disable_dropout True: TRL's own defaults
    trainer = DistillationTrainer(model=str(fresh_student), args=config, cache=tiny_cache)
    _, from_yaml = parse([str(fresh_student), "--cache", str(tiny_cache), "--config", dump(tmp_path, config)])
    names = ("divergence", "beta", "temperature", "soft_weight", "hard_weight", "learning_rate", "lr_scheduler_type")
    assert {n: getattr(trainer.args, n) for n in names} == {n: getattr(from_yaml, n) for n in names}
    assert (trainer.args.divergence, trainer.args.beta, trainer.args.temperature) == ("jsd", 0.5, 1.0)


def test_a_gkd_config_with_a_temperature_of_its_own_is_refused_in_python_as_in_its_dump(tiny_cache, fresh_student,
                                                                                          tmp_path, capsys):
    from destila.training import DistillationTrainer

    config = gkd_config(tmp_path / "out", temperature=0.5)
    with pytest.raises(ValueError, match=r"temperature 0\.5 \(in TRL's GKD the temperature of the student's"):
        DistillationTrainer(model=str(fresh_student), args=config, cache=tiny_cache)
    with pytest.raises(SystemExit):
        cli(["train", "s", "--cache", str(tiny_cache), "--config", dump(tmp_path, config)])
    assert "temperature 0.5 (in TRL's GKD the temperature of the student's" in capsys.readouterr().err


def test_the_defaults_read_as_unchosen_are_trls_own():
    import dataclasses

    from trl import SFTConfig
    from trl.experimental.gkd import GKDConfig

    from destila.training.trl_keys import GKD_DUMP_DEFAULTS, TRL_DATA_DEFAULTS

    sft = {f.name: f.default for f in dataclasses.fields(SFTConfig)}
    gkd = {f.name: f.default for f in dataclasses.fields(GKDConfig)}
    assert {k: sft[k] for k in TRL_DATA_DEFAULTS} == TRL_DATA_DEFAULTS
    assert {k: gkd[k] for k in GKD_DUMP_DEFAULTS} == GKD_DUMP_DEFAULTS
