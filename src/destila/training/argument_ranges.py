"""The Trainer's numeric options checked once, before anything is loaded.

transformers' ``TrainingArguments`` takes ``--gradient_accumulation_steps 0``
(and fails later with ``ZeroDivisionError``), ``--max_steps 0`` or ``-5``
(and trains by epochs, or not at all, as a success), ``--save_steps 0``
(and never saves a checkpoint) or a negative ``--max_grad_norm`` (and never
clips). :func:`check_argument_ranges` refuses each in one line naming the
option; :func:`check_finite_arguments` refuses NaN and infinities before it.
Both run on ``DistillationArguments`` and, before transformers is imported,
on the namespace of ``destila train``'s light parser
(:mod:`destila.cli.train_light`): nothing here imports a heavy module.
"""

from __future__ import annotations

import dataclasses
import math

from destila.ranges import check_finite_at_least, check_int_at_least

# Options that count something: at least 1.
_COUNTS = ("gradient_accumulation_steps", "per_device_train_batch_size", "per_device_eval_batch_size")
# Options that are a size or a rate: at least 0.
_NOT_NEGATIVE = ("learning_rate", "max_grad_norm", "warmup_steps", "dataloader_num_workers")
# Intervals in steps (a fraction of the run below 1), used when their strategy is "steps": above 0.
_INTERVALS = (("save_steps", "save_strategy"), ("logging_steps", "logging_strategy"), ("eval_steps", "eval_strategy"))


def check_finite_arguments(args) -> None:
    """Refuse any float option of ``args`` (a dataclass, or an ``argparse.Namespace``) that is NaN or infinite,
    naming it."""
    names = [f.name for f in dataclasses.fields(args)] if dataclasses.is_dataclass(args) else list(vars(args))
    for name in names:
        value = getattr(args, name, None)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name}: expected a finite number, found {value}")


def _strategy(value) -> str:
    return str(getattr(value, "value", value))


def check_argument_ranges(args) -> None:
    """Raise one ``ValueError`` for the first option of ``args`` (a ``TrainingArguments``) out of its range."""
    for name in _COUNTS:
        if hasattr(args, name):
            check_int_at_least(name, getattr(args, name), 1)
    for name in _NOT_NEGATIVE:
        if getattr(args, name, None) is not None:
            check_finite_at_least(name, getattr(args, name), 0)
    if args.max_steps != -1:  # -1: not set, the run lasts num_train_epochs
        check_int_at_least("max_steps", args.max_steps, 1, "or leave it out to train for --num_train_epochs")
    else:
        check_finite_at_least("num_train_epochs", args.num_train_epochs, 0, strict=True,
                              hint="or give --max_steps")
    for name, strategy in _INTERVALS:
        value = getattr(args, name, None)
        if value is not None and _strategy(getattr(args, strategy, "no")) == "steps":
            check_finite_at_least(name, value, 0, strict=True,
                                  hint=f"steps between two, or a fraction of the run below 1; or set --{strategy} no")
    seed = args.seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed: expected an integer in [0, 2^32), found {seed!r}")
