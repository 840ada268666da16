"""One objective whatever the door: a TRL config or a β in Python means what the same YAML or flag means."""

import pytest
import yaml

from destila.cli.main import main as cli
from destila.cli.train import parse
from destila.training import DistillationArguments, DistillationTrainer

from conftest import TRAIN_SEQ_LEN, pydoc_texts

RUN = dict(max_steps=1, per_device_train_batch_size=2, save_strategy="no", report_to="none", use_cpu=True)
OBJECTIVE = ("divergence", "beta", "temperature", "soft_weight", "hard_weight", "learning_rate")


def gkd_config(out, **values):
    pytest.importorskip("trl")
    from trl.experimental.gkd import GKDConfig

    return GKDConfig(output_dir=str(out), bf16=False, gradient_checkpointing=False, **RUN, **values)


def objective(args):
    return {name: getattr(args, name) for name in OBJECTIVE}


def test_a_gkd_config_in_python_trains_what_its_yaml_trains(tiny_cache, fresh_student, tmp_path):
    config = gkd_config(tmp_path / "py", lmbda=0.0)
    trainer = DistillationTrainer(model=str(fresh_student), args=config, cache=tiny_cache)
    path = tmp_path / "gkd.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()))
    _, from_yaml = parse([str(fresh_student), "--cache", str(tiny_cache), "--config", str(path)])
    assert objective(trainer.args) == objective(from_yaml)
    assert trainer.args.hard_weight == 0.0  # GKD's loss is the divergence alone


@pytest.mark.parametrize("beta, divergence", [(0.3, "jsd"), (0.0, "forward_kl"), (1.0, "reverse_kl")])
def test_beta_alone_means_the_same_in_python_and_on_the_command_line(beta, divergence, tmp_path):
    in_python = DistillationArguments(output_dir=str(tmp_path / "o"), beta=beta)
    _, on_the_line = parse(["s", "--cache", "c", "-o", str(tmp_path / "o"), "--beta", str(beta)])
    assert (in_python.divergence, in_python.beta) == (on_the_line.divergence, on_the_line.beta)
    assert in_python.divergence == divergence and (divergence != "jsd" or in_python.beta == beta)


def test_beta_beside_a_divergence_without_one_is_refused_in_python_as_on_the_command_line(tmp_path, capsys):
    with pytest.raises(ValueError) as error:
        DistillationArguments(output_dir=str(tmp_path / "o"), beta=0.3, divergence="forward_kl")
    assert str(error.value) == ("beta 0.3: only divergence jsd has a β, and divergence forward_kl is given; "
                                "drop one of them")
    with pytest.raises(SystemExit):
        cli(["train", "s", "--cache", "c", "-o", str(tmp_path / "o"), "--beta", "0.3", "--divergence", "forward_kl"])
    assert ("--beta 0.3: only --divergence jsd has a β, and --divergence forward_kl is given; drop one of them"
            in capsys.readouterr().err)


@pytest.mark.parametrize("beta, divergence", [(0.0, "forward_kl"), (1.0, "reverse_kl")])
def test_the_jsd_at_either_end_names_the_kl_it_is(beta, divergence, tmp_path):
    with pytest.raises(ValueError) as error:
        DistillationArguments(output_dir=str(tmp_path / "o"), beta=beta, divergence="jsd")
    message = str(error.value)
    assert f"β {beta:g} is TRL's {divergence}" in message and f"give divergence {divergence}" in message
    # The same objective said twice is one objective.
    same = DistillationArguments(output_dir=str(tmp_path / "o"), beta=beta, divergence=divergence)
    assert same.divergence == divergence


def test_a_python_objective_survives_a_copy(tmp_path):
    import dataclasses

    args = DistillationArguments(output_dir=str(tmp_path / "o"), beta=0.3)
    copy = dataclasses.replace(args, learning_rate=1e-3)
    assert (copy.divergence, copy.beta) == ("jsd", 0.3)
    assert dataclasses.replace(DistillationArguments(output_dir=str(tmp_path / "o")), seed=3).divergence == "forward_kl"


def test_a_gkd_config_max_length_equal_to_the_caches_trains(tiny_cache, fresh_student, tmp_path):
    trainer = DistillationTrainer(model=str(fresh_student), args=gkd_config(tmp_path, lmbda=0.0,
                                                                             max_length=TRAIN_SEQ_LEN), cache=tiny_cache)
    assert trainer.train().global_step == 1


def test_a_gkd_config_max_length_other_than_the_caches_is_refused_naming_both(tiny_cache, fresh_student, tmp_path):
    with pytest.raises(ValueError) as error:
        DistillationTrainer(model=str(fresh_student), args=gkd_config(tmp_path, lmbda=0.0, max_length=128),
                            cache=tiny_cache)
    assert "max_length 128 (the cache in train_dataset was built with seq_len 32)" in str(error.value)


def test_a_gkd_config_max_length_sets_the_rows_of_a_raw_dataset(tiny_llama_dir, fresh_student, tmp_path):
    rows = [{"text": text} for text in pydoc_texts(2)]
    trainer = DistillationTrainer(model=str(fresh_student), args=gkd_config(tmp_path, lmbda=0.0, max_length=16),
                                  train_dataset=rows, teacher_model=str(tiny_llama_dir))
    assert trainer.train_dataset.seq_len == 16
