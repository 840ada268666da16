"""The ``teacher_model`` a :class:`~destila.training.DistillationTrainer` takes, as TRL's ``GKDTrainer`` takes it.

A path, a hub id or a ``.gguf`` file is loaded with
:func:`destila.models.load_causal_lm` (TRL loads a string with
``AutoModelForCausalLM.from_pretrained``); a model, or an
:class:`~destila.targets.online.OnlineTeacher`, is used as given.

Naive equivalent::

    teacher = AutoModelForCausalLM.from_pretrained(teacher) if isinstance(teacher, str) else teacher
"""

from __future__ import annotations

import os


def loaded_teacher(teacher_model):
    """``teacher_model`` loaded when it names a model; anything else as given."""
    if isinstance(teacher_model, (str, os.PathLike)):
        from destila.models import load_causal_lm

        return load_causal_lm(str(teacher_model))
    return teacher_model
