"""DistillationTrainer extends the Trainer through its public methods and callbacks only."""

from __future__ import annotations

import inspect

from transformers import Trainer

from destila.training.trainer import DistillationTrainer


def overridden(cls) -> list[str]:
    """The Trainer methods ``cls`` defines again."""
    return sorted(name for name, value in vars(cls).items()
                  if callable(value) and name != "__init__" and hasattr(Trainer, name))


def test_no_private_trainer_method_is_overridden():
    private = [name for name in overridden(DistillationTrainer) if name.startswith("_")]
    assert private == [], f"DistillationTrainer overrides the Trainer's private {private}; use a public hook"


def test_the_overrides_are_the_documented_ones():
    documented = inspect.getsource(DistillationTrainer).split('"""')[1]  # the class docstring names each
    missing = [name for name in overridden(DistillationTrainer) if f"``{name}``" not in documented]
    assert missing == [], f"overrides not named in DistillationTrainer's docstring: {missing}"
