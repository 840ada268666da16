"""``args=`` as TRL's trainers take it: a plain ``TrainingArguments``, or a TRL config such as ``GKDConfig``.

TRL's ``SFTTrainer`` turns a plain ``TrainingArguments`` into its own config
with the same values (``args.to_dict()``); :func:`as_distillation_arguments`
does the same into :class:`~destila.training.DistillationArguments`, so every
Trainer setting keeps the value given and the loss options keep destila's
defaults. A TRL config (``GKDConfig``, ``SFTConfig``, ``trl.DistillationConfig``: a
``TrainingArguments`` subclass with fields of its own) is read exactly as its
``to_dict()`` written to YAML is read by ``destila train --config``
(:func:`~destila.training.trl_keys.map_trl_keys` on a config written out in
full): every field of its own is mapped, accepted at a value that leaves it
without effect, or refused, all refusals in one message. So ``GKDConfig()``
at its defaults trains as its YAML does: ``lmbda`` 0.5 and the sampling
``temperature`` 0.9 are what TRL wrote, the run stays off-policy at T 1 and
its first line says so; a ``temperature`` of its own is refused as in YAML.
Its ``beta`` is GKD's (β chooses the divergence, as in TRL's generalised
JSD), its learning rate and schedule its own (2e-5, linear). What it leaves
out of the objective takes its class's defaults (no cross-entropy, T 1;
:func:`~destila.training.trl_defaults.trl_defaults`), and its data keys
(``max_length``, ``packing``, ...) are the data's (:func:`trl_data_options`).

``remove_unused_columns`` is always False: the batches carry the teacher's
targets, which the model's forward does not name.

Naive equivalent::

    DistillationArguments(**{**args.to_dict(), "remove_unused_columns": False})
"""

from __future__ import annotations

import dataclasses

from transformers import TrainingArguments

from destila.training.arguments import DistillationArguments
from destila.training.trl_defaults import trl_defaults
from destila.training.trl_keys import MAPPED, map_trl_keys


def as_distillation_arguments(args):
    """``args`` as :class:`~destila.training.DistillationArguments` (see the module docstring); one of those is
    returned as is."""
    if isinstance(args, DistillationArguments) or args is None:
        return args
    if not isinstance(args, TrainingArguments):
        raise TypeError(f"DistillationTrainer: args is a {type(args).__name__}; expected DistillationArguments, "
                        "transformers.TrainingArguments or a TRL config such as GKDConfig")
    names = {f.name for f in dataclasses.fields(DistillationArguments) if f.init}
    trainer_fields = {f.name for f in dataclasses.fields(TrainingArguments) if f.init}
    values = {**args.to_dict(), "hub_token": args.hub_token}  # to_dict hides the token, as TRL's conversion undoes
    base = {k: v for k, v in values.items() if k in trainer_fields and k in names}
    own = _trl_fields(args)  # at their values, not to_dict's masked *_token
    options, problems = map_trl_keys(own, names, in_full=True)  # an object holds every field, as a full dump does
    options = {o: v for o, v in options.items() if o in names}  # data options: the dataset's (trl_data_options)
    if problems:
        raise ValueError(f"args: this {type(args).__name__} asks for what destila does not do: {'; '.join(problems)}")
    # A TRL config means its class's objective for what it leaves out (no cross-entropy, T 1), as its YAML does.
    trl_terms = trl_defaults([*base, *own]) if own else {}
    return DistillationArguments(**{**trl_terms, **base, **options, "remove_unused_columns": False})


def _trl_fields(args) -> dict:
    """``{name: value}`` of the fields of ``args``'s class that ``TrainingArguments`` lacks (a TRL config's own)."""
    trainer_fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(type(args))
            if f.init and f.name not in trainer_fields}


def trl_data_options(args) -> dict:
    """``{destila data option: (TRL key, value)}``: the data keys of a TRL config (``max_length`` as ``seq_len``,
    ``packing``, ...) that are not at TRL's default, for the trainer to tokenise raw datasets with, or to compare
    with a cache's settings."""
    if isinstance(args, DistillationArguments) or not isinstance(args, TrainingArguments):
        return {}
    names = {f.name for f in dataclasses.fields(DistillationArguments)}
    defaults = {f.name: f.default for f in dataclasses.fields(type(args))}
    return {MAPPED[key][0]: (key, MAPPED[key][1](value)) for key, value in _trl_fields(args).items()
            if key in MAPPED and key not in _MODEL_KEYS and MAPPED[key][0] not in names and value is not None
            and value != defaults.get(key)}


# The models a config names are the trainer's arguments (teacher_model=, model=), not data options.
_MODEL_KEYS = ("model_name_or_path", "teacher_model_name_or_path")
