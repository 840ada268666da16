"""One declaration per option: the CLI, the trainer's arguments and distill_loss share every default and choice."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from destila.cli.train import build_parser
from destila.losses import LossOptions, distill_loss
from destila.targets import TargetSpec
from destila.training import DistillationArguments
from destila.training.arguments import DISTILLATION_DEFAULTS, ONLINE_TARGET_FIELDS, TRAIN_LOSS_DEFAULTS

LOSS_FIELDS = [f for f in dataclasses.fields(LossOptions) if f.name != "ignore_index"]
TARGET_FIELDS = [f for f in dataclasses.fields(TargetSpec) if f.name in ONLINE_TARGET_FIELDS]


def _actions():
    return {action.dest: action for action in build_parser()._actions}


def _field(cls, name):
    return next(f for f in dataclasses.fields(cls) if f.name == name)


@pytest.mark.parametrize("spec_field", LOSS_FIELDS + TARGET_FIELDS, ids=lambda f: f.name)
def test_every_option_has_one_default_and_one_set_of_choices(spec_field):
    name = spec_field.name
    trainer = _field(DistillationArguments, name)
    action = _actions()[name]
    # Training's own defaults differ on purpose, from one table; every other option has one default.
    expected = TRAIN_LOSS_DEFAULTS.get(name, spec_field.default)
    assert trainer.default == expected == action.default
    assert trainer.metadata.get("choices") == spec_field.metadata.get("choices")  # the same object, copied
    if "choices" in spec_field.metadata:
        assert list(action.choices) == list(spec_field.metadata["choices"])
    assert spec_field.metadata["help"] in (action.help or "")


@pytest.mark.parametrize("spec_field", [*dataclasses.fields(LossOptions)], ids=lambda f: f.name)
def test_distill_loss_keyword_defaults_are_the_options_defaults(spec_field):
    assert inspect.signature(distill_loss).parameters[spec_field.name].default == spec_field.default


def test_a_default_changed_in_one_place_only_is_caught(monkeypatch):
    """The pinning above compares independent readings: altering one of them breaks the equality."""
    monkeypatch.setattr(_field(DistillationArguments, "divergence"), "default", "tvd")
    with pytest.raises(AssertionError):
        test_every_option_has_one_default_and_one_set_of_choices(_field(LossOptions, "divergence"))


def test_trainer_defaults_suit_distillation_and_show_in_help():
    actions = _actions()
    for name, value in DISTILLATION_DEFAULTS.items():
        assert actions[name].default == value
    assert "(default: 0.0005)" in " ".join(build_parser().format_help().split())


def test_loss_validation_is_the_loss_options_own(tmp_path):
    with pytest.raises(ValueError, match=r"divergence: expected one of .*'forward_kl'.*found 'kl'"):
        DistillationArguments(output_dir=str(tmp_path), divergence="kl")
    with pytest.raises(ValueError, match="soft_weight/hard_weight: expected at least one > 0"):
        DistillationArguments(output_dir=str(tmp_path), soft_weight=0.0, hard_weight=0.0)
    with pytest.raises(ValueError, match="soft_weight/hard_weight"):
        LossOptions(soft_weight=0.0, hard_weight=0.0)


def test_the_training_seed_is_the_trainers(tmp_path):
    """TargetSpec's sampling seed must not shadow TrainingArguments.seed."""
    from transformers import TrainingArguments

    assert _field(DistillationArguments, "seed").default == _field(TrainingArguments, "seed").default


def test_online_target_spec_shares_the_students_temperature(tmp_path):
    args = DistillationArguments(output_dir=str(tmp_path), temperature=2.0, top_k=7, head_chunk_rows=64)
    assert args.target_spec() == TargetSpec(top_k=7, temperature=2.0, head_chunk_rows=64)
    assert args.loss_options().temperature == 2.0


def test_a_missing_reporter_package_is_named(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ValueError, match=r"report_to: tensorboard needs the package tensorboard.*destila\[tensorboard\]"):
        DistillationArguments(output_dir=str(tmp_path), report_to="tensorboard")


def _copies():
    from destila.training.hidden_distillation import HiddenLossOptions
    from destila.training.peft_student import LoraArguments

    return [*LOSS_FIELDS, *TARGET_FIELDS, *dataclasses.fields(HiddenLossOptions), *dataclasses.fields(LoraArguments)]


def test_the_arguments_hold_every_option_of_the_specs_they_copy_as_declared_there():
    """DistillationArguments is written out field by field: a field added to LossOptions, HiddenLossOptions,
    LoraArguments (or TargetSpec's online fields) and not here, or declared here with another type, default,
    help or choices, is caught."""
    import typing

    from destila.training.hidden_distillation import HiddenLossOptions
    from destila.training.peft_student import LoraArguments

    ours = {f.name: f for f in dataclasses.fields(DistillationArguments)}
    our_types = typing.get_type_hints(DistillationArguments)
    for cls in (LossOptions, TargetSpec, HiddenLossOptions, LoraArguments):
        types = typing.get_type_hints(cls)
        for spec_field in dataclasses.fields(cls):
            if spec_field not in _copies():
                continue
            mine = ours.get(spec_field.name)
            assert mine is not None, f"{cls.__name__}.{spec_field.name} is not a field of DistillationArguments"
            assert our_types[spec_field.name] == types[spec_field.name], spec_field.name
            assert mine.default == TRAIN_LOSS_DEFAULTS.get(spec_field.name, spec_field.default), spec_field.name
            assert mine.metadata.get("choices") == spec_field.metadata.get("choices"), spec_field.name
            assert mine.metadata["help"].endswith(spec_field.metadata["help"]), spec_field.name
    assert "ignore_index" not in ours  # the data path's business


def test_the_arguments_are_a_plain_dataclass_declared_in_its_module():
    """What "go to definition" needs: the class and its fields are written in training/arguments.py."""
    import ast

    from destila.training import arguments

    assert DistillationArguments.__module__ == arguments.__name__
    tree = ast.parse(inspect.getsource(arguments))
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "DistillationArguments"]
    declared = {node.target.id for node in cls.body if isinstance(node, ast.AnnAssign)}
    assert {f.name for f in _copies()} <= declared
    assert "make_dataclass" not in inspect.getsource(arguments)


def test_training_adds_the_cross_entropy_by_default_and_the_loss_function_does_not():
    assert DistillationArguments(output_dir="x").hard_weight == 1.0 == TRAIN_LOSS_DEFAULTS["hard_weight"]
    assert LossOptions().hard_weight == 0.0  # distill_loss may be called without labels
    assert "training's default 1 (the loss function's: 0)" in _actions()["hard_weight"].help
