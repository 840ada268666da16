"""``args=`` as TRL's trainers take it: a plain ``TrainingArguments``, or a TRL config such as ``GKDConfig``.

TRL's ``SFTTrainer`` turns a plain ``TrainingArguments`` into its own config
with the same values (``args.to_dict()``); :func:`as_distillation_arguments`
does the same into :class:`~destila.training.DistillationArguments`, so every
Trainer setting keeps the value given and the loss options keep destila's
defaults. A TRL config (``GKDConfig``, ``SFTConfig``: a ``TrainingArguments``
subclass with fields of its own) is read in TRL's terms: its ``beta`` is
GKD's (β chooses the divergence, as in TRL's generalised JSD), the loss runs
at T 1 as GKD's does (its ``temperature`` is the temperature of on-policy
samples, which neither TRL off-policy nor destila draws), its learning rate
and schedule are its own (2e-5, linear), and every
other field of its own that is not at TRL's default is mapped or refused as
in a YAML config (:mod:`destila.training.trl_keys`), ``lmbda`` included:
``GKDConfig``'s default 0.5 is on-policy, so it must be given as 0. What it
leaves out of the objective takes ``GKDConfig``'s defaults (no cross-entropy,
T 1), as the same config given as YAML does, and its data keys
(``max_length``, ``packing``, ...) are the data's (:func:`trl_data_options`).

``remove_unused_columns`` is always False: the batches carry the teacher's
targets, which the model's forward does not name.

Naive equivalent::

    DistillationArguments(**{**args.to_dict(), "remove_unused_columns": False})
"""

from __future__ import annotations

import dataclasses

from transformers import TrainingArguments

# GKD's own fields that say what is trained, read even at their defaults (the others only when changed).
_ALWAYS_READ = ("beta", "lmbda")
# GKD's sampling temperature: TRL's loss does not read it (see destila.training.trl_defaults).
_NOT_THE_LOSS = ("temperature",)


def as_distillation_arguments(args):
    """``args`` as :class:`~destila.training.DistillationArguments` (see the module docstring); one of those is
    returned as is."""
    from destila.training.arguments import DistillationArguments
    from destila.training.trl_defaults import gkd_defaults
    from destila.training.trl_keys import map_trl_keys

    if isinstance(args, DistillationArguments) or args is None:
        return args
    if not isinstance(args, TrainingArguments):
        raise TypeError(f"DistillationTrainer: args is a {type(args).__name__}; expected DistillationArguments, "
                        "transformers.TrainingArguments or a TRL config such as GKDConfig")
    names = {f.name for f in dataclasses.fields(DistillationArguments) if f.init}
    trainer_fields = {f.name for f in dataclasses.fields(TrainingArguments) if f.init}
    values = {**args.to_dict(), "hub_token": args.hub_token}  # to_dict hides the token, as TRL's conversion undoes
    base = {k: v for k, v in values.items() if k in trainer_fields and k in names}
    defaults = {f.name: f.default for f in dataclasses.fields(type(args))}
    own = {f.name: getattr(args, f.name) for f in dataclasses.fields(type(args))  # not to_dict's masked *_token
           if f.init and f.name not in trainer_fields and f.name not in _NOT_THE_LOSS}
    own = {k: v for k, v in own.items() if k in _ALWAYS_READ or v != defaults.get(k, dataclasses.MISSING)}
    options, problems = map_trl_keys(own, names)
    options = {o: v for o, v in options.items() if o in names}  # data options: the dataset's (trl_data_options)
    if problems:
        raise ValueError(f"args: this {type(args).__name__} asks for what destila does not do: {'; '.join(problems)}")
    # A TRL config means TRL's objective for what it leaves out (no cross-entropy, T 1), as its YAML does.
    trl_terms = gkd_defaults([*base, *options]) if _trl_fields(args) else {}
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
    from destila.training.arguments import DistillationArguments
    from destila.training.trl_keys import MAPPED

    if isinstance(args, DistillationArguments) or not isinstance(args, TrainingArguments):
        return {}
    names = {f.name for f in dataclasses.fields(DistillationArguments)}
    defaults = {f.name: f.default for f in dataclasses.fields(type(args))}
    return {MAPPED[key][0]: (key, MAPPED[key][1](value)) for key, value in _trl_fields(args).items()
            if key in MAPPED and MAPPED[key][0] not in names and value is not None and value != defaults.get(key)}
