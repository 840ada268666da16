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
        # destila.models imports torch: only when the teacher is given by name
        from destila.models import load_causal_lm

        return load_causal_lm(str(teacher_model))
    return teacher_model


def teacher_of(arguments, teacher_model, cache):
    """The teacher a TRL config names (``teacher_model_name_or_path``, as ``trl gkd`` reads it) when the trainer was
    given none; the one given otherwise. Naming a teacher beside another teacher or a cache is refused, not ignored."""
    named = getattr(arguments, "teacher_model_name_or_path", None)
    if named is None:
        return teacher_model
    if cache is not None:
        raise ValueError(f"DistillationTrainer: args.teacher_model_name_or_path names an online teacher ({named}) and "
                         "cache= gives cached targets; give one source of targets (set teacher_model_name_or_path to "
                         "None to train from the cache)")
    if teacher_model is not None and str(teacher_model) != str(named):
        raise ValueError(f"DistillationTrainer: args.teacher_model_name_or_path ({named}) and teacher_model= both name "
                         "the teacher; give one (set teacher_model_name_or_path to None, or drop teacher_model=)")
    return named
