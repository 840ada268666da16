"""DistillationTrainer called as TRL's GKDTrainer is: teacher_model as a path, args as TrainingArguments or GKDConfig."""

import pytest
from transformers import TrainingArguments

from destila.training import DistillationArguments, DistillationTrainer

from conftest import pydoc_texts

RUN = dict(max_steps=1, per_device_train_batch_size=2, save_strategy="no", report_to="none", use_cpu=True,
           dataloader_num_workers=0)


def test_teacher_model_as_a_path_trains_online(tiny_llama_dir, fresh_student, tmp_path):
    rows = [{"text": text} for text in pydoc_texts(2)]
    trainer = DistillationTrainer(model=str(fresh_student), args=DistillationArguments(output_dir=str(tmp_path), **RUN),
                                  train_dataset=rows, teacher_model=str(tiny_llama_dir))
    assert trainer.teacher.model.config.num_hidden_layers == 4  # the teacher's, loaded from its folder
    assert trainer.train().global_step == 1


def test_plain_training_arguments_keep_their_values(tiny_cache, fresh_student, tmp_path, capsys):
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-3, **RUN)
    trainer = DistillationTrainer(model=str(fresh_student), args=args, cache=tiny_cache)
    assert isinstance(trainer.args, DistillationArguments)
    # The Trainer's settings as given (HF's linear schedule, no warm-up); the loss at destila's defaults.
    assert (trainer.args.learning_rate, trainer.args.lr_scheduler_type.value, trainer.args.warmup_steps) == \
        (1e-3, "linear", 0)
    assert (trainer.args.divergence, trainer.args.temperature, trainer.args.remove_unused_columns) == \
        ("forward_kl", 1.0, False)
    assert trainer.train().global_step == 1
    assert "objective: forward_kl, T 1, soft 1 + hard 1; schedule: lr 0.001, linear" in capsys.readouterr().out


def gkd_config(out, **values):
    pytest.importorskip("trl")
    from trl.experimental.gkd import GKDConfig

    return GKDConfig(output_dir=str(out), bf16=False, gradient_checkpointing=False, **RUN, **values)


def test_a_gkd_config_trains_gkds_objective(tiny_cache, fresh_student, tmp_path):
    trainer = DistillationTrainer(model=str(fresh_student), args=gkd_config(tmp_path, lmbda=0.0), cache=tiny_cache)
    args = trainer.args
    # GKDConfig's β 0.5 is the JSD; its temperature 0.9 samples on-policy and its loss runs at T 1, as here.
    assert (args.divergence, args.beta, args.temperature, args.learning_rate) == ("jsd", 0.5, 1.0, 2e-5)
    assert trainer.train().global_step == 1


def test_a_gkd_config_asking_for_what_destila_lacks_is_refused_in_one_line(tiny_cache, fresh_student, tmp_path):
    with pytest.raises(ValueError) as error:
        DistillationTrainer(model=str(fresh_student), cache=tiny_cache,
                            args=gkd_config(tmp_path, lmbda=0.7, seq_kd=True, use_liger_kernel=False))
    message = str(error.value)
    assert "\n" not in message
    for part in ("lmbda 0.7 (on-policy distillation", "`destila recipe on-policy`", "seq_kd True (sequence-level"):
        assert part in message, part
    assert not (tmp_path / "runs").exists()


def test_args_of_another_kind_are_refused(tiny_cache, fresh_student):
    with pytest.raises(TypeError, match="args is a dict; expected DistillationArguments"):
        DistillationTrainer(model=str(fresh_student), args={"output_dir": "x"}, cache=tiny_cache)


def test_the_teacher_a_gkd_config_names_is_the_one_trained_against(tiny_llama_dir, fresh_student, tmp_path):
    rows = [{"text": text} for text in pydoc_texts(2)]
    args = gkd_config(tmp_path, lmbda=0.0, teacher_model_name_or_path=str(tiny_llama_dir))
    trainer = DistillationTrainer(model=str(fresh_student), args=args, train_dataset=rows)
    assert trainer.teacher.model.config.num_hidden_layers == 4  # the named teacher, loaded from its folder
    assert trainer.train().global_step == 1


@pytest.mark.parametrize("given, expected", [
    ("cache", "names an online teacher"),
    ("other teacher", "both name the teacher; give one"),
])
def test_a_named_teacher_beside_another_source_is_refused(tiny_llama_dir, tiny_cache, fresh_student, tmp_path, given,
                                                         expected):
    args = gkd_config(tmp_path, lmbda=0.0, teacher_model_name_or_path=str(tiny_llama_dir))
    source = {"cache": tiny_cache} if given == "cache" else {"teacher_model": str(fresh_student)}
    with pytest.raises(ValueError, match=expected):
        DistillationTrainer(model=str(fresh_student), args=args, **source)
