"""TRL's own DistillationConfig on destila: written out in full it trains, in Python and as YAML, with TRL's meaning."""

import dataclasses
import warnings

import pytest
import yaml

from destila.cli.main import main as cli
from destila.cli.train import parse
from destila.training import DistillationArguments, DistillationTrainer
from destila.training.trl_distillation import DISTILLATION_CONFIG_DEFAULTS, DISTILLATION_MEANINGS
from destila.training.trl_keys import MAPPED, REFUSED, refusal

trl = pytest.importorskip("trl")

RUN = dict(use_cpu=True, max_steps=2, per_device_train_batch_size=2, save_strategy="no", logging_steps=1)


def distillation_config(out, **changes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers' gradient_checkpointing rename
        return trl.DistillationConfig(output_dir=str(out), **{**RUN, **changes})


def dump(tmp_path, config):
    path = tmp_path / "distillation.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()))
    return str(path)


def test_a_distillation_config_written_out_in_full_trains_from_a_cache(tiny_cache, fresh_student, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(fresh_student), "--cache", str(tiny_cache), "--config",
             dump(tmp_path, distillation_config(out))])
    assert exit_.value.code == 0, capsys.readouterr().err
    assert (out / "model.safetensors").exists()
    # TRL's DistillationConfig: β 1.0 is reverse KL, T 1, the divergence alone, learning rate 1e-6.
    printed = capsys.readouterr().out
    assert "objective: reverse_kl, T 1, soft 1 + hard 0; schedule: lr 1e-06, linear" in printed
    assert "As TRL's DistillationConfig defaults: divergence, temperature, hard_weight, learning_rate" in printed
    assert "TRL's DistillationTrainer samples every batch from the student" in printed


def test_a_distillation_config_in_python_trains(tiny_cache, fresh_student, tmp_path):
    trainer = DistillationTrainer(model=str(fresh_student), args=distillation_config(tmp_path, max_steps=1),
                                  cache=tiny_cache)
    args = trainer.args
    assert (args.divergence, args.temperature, args.hard_weight, args.learning_rate) == ("reverse_kl", 1.0, 0.0, 1e-6)
    assert trainer.train().global_step == 1


def test_the_defaults_are_trls_own():
    declared = {f.name: f.default for f in dataclasses.fields(trl.DistillationConfig)}
    assert (declared["beta"], declared["temperature"], declared["learning_rate"]) == (1.0, 1.0, 1e-6)
    assert DISTILLATION_CONFIG_DEFAULTS["divergence"] == "reverse_kl"  # TRL's generalised JSD at β 1
    assert {k: DISTILLATION_CONFIG_DEFAULTS[k] for k in ("temperature", "learning_rate", "lr_scheduler_type",
                                                           "warmup_steps")} == \
        {k: declared[k] for k in ("temperature", "learning_rate", "lr_scheduler_type", "warmup_steps")}


def test_every_distillation_config_key_is_mapped_accepted_or_refused():
    from transformers import TrainingArguments

    trainer = {f.name for f in dataclasses.fields(TrainingArguments)}
    own = {f.name for f in dataclasses.fields(DistillationArguments)}
    for f in dataclasses.fields(trl.DistillationConfig):
        if f.name in trainer or f.name in ("beta", "temperature"):  # the divergence, the loss's temperature
            continue
        table = DISTILLATION_MEANINGS if f.name in DISTILLATION_MEANINGS else REFUSED
        assert f.name in MAPPED or f.name in table, f.name
        assert f.name not in own or f.name in DISTILLATION_MEANINGS, f.name  # one meaning per word
        if f.name in table:  # TRL's default leaves the key without effect: a dump is not refused for it
            assert refusal(f.name, f.default, table) is None, f.name


def test_every_refusal_of_a_distillation_dump_comes_in_one_line(tiny_cache, tmp_path, capsys):
    config = distillation_config(tmp_path / "out", top_k=20, top_p=0.9, use_vllm=True, max_completion_length=64,
                                 shuffle_dataset=False)
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "s", "--cache", str(tiny_cache), "--config", dump(tmp_path, config)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    for part in ("top_k 20 (in TRL's DistillationConfig the top-k of the student's on-policy samples",
                 "top_p 0.9 (in TRL's DistillationConfig", "use_vllm True (vLLM for on-policy samples", "max_completion_length 64 (",
                 "shuffle_dataset False (in TRL's DistillationConfig"):
        assert part in err, part


@pytest.mark.parametrize("door", ["python", "yaml"])
def test_a_distillation_configs_temperature_and_beta_are_the_losss(door, tmp_path):
    config = distillation_config(tmp_path / "out", temperature=2.0, beta=0.3)
    if door == "python":
        from destila.training.trl_args import as_distillation_arguments

        args = as_distillation_arguments(config)
    else:
        _, args = parse(["s", "--cache", "c", "--config", dump(tmp_path, config)])
    assert (args.divergence, args.beta, args.temperature, args.hard_weight) == ("jsd", 0.3, 2.0, 0.0)
