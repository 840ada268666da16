"""TRL's words on `destila train`: its flags, its defaults, and data keys beside a cache.

``destila train --model_name_or_path S --teacher_model_name_or_path T
--dataset_name D --use_peft`` is TRL's command line: each TRL key of
:mod:`destila.training.trl_keys` is a flag here too (the refused ones hidden
from ``--help``), mapped onto destila's option after parsing, with the same
one-line refusals as in a ``--config`` file.

A command line or config written in TRL's terms (any key only TRL has) gets
TRL's ``GKDConfig`` defaults for what it leaves out
(:mod:`destila.training.trl_defaults`); anything given wins.

Beside ``--cache`` the data options (``--seq-len``, ``max_length``,
``packing``, ``dataset_name``, ...) cannot change the rows: one that equals
the cache's setting is accepted, one that differs is refused naming both
values (:mod:`destila.cache.settings_match`).
"""

from __future__ import annotations

import argparse
import dataclasses

from destila.cli.fields import add_fields
from destila.cli.train_config import flag_names, yaml_scalar
from destila.data.spec import DataSpec
from destila.training.peft_student import LoraArguments
from destila.training.trl_distillation import is_distillation_config
from destila.training.trl_keys import MAPPED, PEFT_DEFAULTS, REFUSED, map_trl_keys, trl_temperature_problem

_DATA_OPTIONS = ("data", *(f.name for f in dataclasses.fields(DataSpec) if f.name != "source"))


def trl_flags_class(taken):
    """TRL's keys as the fields of a dataclass (so :func:`~destila.cli.fields.add_fields` declares their flags),
    less those in ``taken`` (destila's own options of the same name, such as ``packing``)."""
    peft = ", ".join(f"{k} {v}" for k, v in PEFT_DEFAULTS.items())
    helps = {key: f"TRL's name of {meaning}" for key, (_, _, meaning) in MAPPED.items()}
    helps["use_peft"] = (f"TRL's: LoRA adapters, with TRL's {peft} where not given, on every linear layer but "
                         "the head (TRL: peft's per-architecture default; see --lora_target_modules)")
    helps.update(dict.fromkeys(REFUSED, argparse.SUPPRESS))  # refused unless off: listed in docs/training.md
    extra = {"use_peft": {"nargs": "?", "const": True}}
    fields = [(key, object, dataclasses.field(default=None, metadata={
        "help": text, "type": yaml_scalar, "metavar": MAPPED[key][0].upper() if key in MAPPED else None,
        **extra.get(key, {})})) for key, text in helps.items() if key not in taken]
    return dataclasses.make_dataclass("TrlFlags", fields)


def add_trl_flags(parser: argparse.ArgumentParser) -> None:
    """TRL's keys as flags, except those that are destila's own options already (``--packing``, ...)."""
    group = parser.add_argument_group("TRL's names (mapped onto the options above, with TRL's defaults)")
    flags = trl_flags_class(set(vars(parser.parse_args([]))))
    add_fields(group, flags)
    parser.trl_flags = {f.name for f in dataclasses.fields(flags)}  # read back by apply_trl_flags


def distillation_terms(argv: list[str], config: dict) -> bool:
    """Whether the command line or the config is TRL's ``DistillationConfig`` (a key only it has): its
    ``temperature`` is the loss's."""
    return is_distillation_config([*flag_names(argv), *config])


def apply_trl_flags(namespace: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """Map the TRL flags given onto ``namespace``; ``{option: TRL flag}`` for those set. A TRL flag beside
    destila's own flag for the same option, with another value, is refused."""
    values = {}
    for dest in [d for d in vars(namespace) if d in parser.trl_flags]:
        value = vars(namespace).pop(dest)
        if value is not None:
            values[dest] = value
    known = {d for d in vars(namespace)}
    options, problems = map_trl_keys(values, known)
    unset = {f.name: f.default for f in dataclasses.fields(LoraArguments)}
    for option, value in options.items():
        current, default = getattr(namespace, option, None), parser.get_default(option)
        if option in PEFT_DEFAULTS and current != unset[option]:
            continue  # --use_peft's TRL defaults yield to a rank, alpha or dropout given
        if current not in (None, default, value):
            flag = next((k for k in values if MAPPED.get(k, (k,))[0] == option), option)
            problems.append(f"--{flag} {values.get(flag, value)!r} sets {option}, which is given as {current!r}")
        setattr(namespace, option, value)
    if problems:
        raise ValueError(f"{'; '.join(problems)}; docs/training.md lists what each TRL key means here")
    return {option: "--" + next((k for k in values if MAPPED.get(k, (k,))[0] == option), option) for option in options}


def check_trl_temperature(namespace: argparse.Namespace, spelt: dict, trl_terms: bool) -> None:
    """In TRL's terms a ``temperature`` given is GKD's sampling temperature: refused unless 1."""
    problem = trl_terms and "temperature" in spelt and trl_temperature_problem(namespace.temperature)
    if problem:
        raise ValueError(problem)


def check_against_cache(namespace: argparse.Namespace, spelt: dict, unchosen: dict | None = None) -> None:
    """Beside ``--cache``: the data options given (``spelt``: ``{option: the name the user wrote}``) must equal the
    cache's settings, and are then reset to their defaults (they say nothing new). ``unchosen`` (``{option: TRL
    key}``) names the config's TRL data keys at TRL's own default: they ask for nothing and are only reset."""
    data = {o: name for o, name in spelt.items() if o in _DATA_OPTIONS}
    if namespace.cache is None or not data:
        return
    given = {o: (name, getattr(namespace, o)) for o, name in data.items() if (unchosen or {}).get(o) != name}
    from destila.cache.dataset import open_cache  # heavy: torch
    from destila.cache.settings_match import settings_problems  # heavy: destila.cache (pyarrow)

    problems = settings_problems(given, open_cache(namespace.cache).manifest, str(namespace.cache)) if given else []
    if problems:
        raise ValueError(f"--cache {namespace.cache}: {'; '.join(problems)}. A cache already holds its rows: data "
                         "options beside it must equal its settings")
    defaults = {f.name: f.default for f in dataclasses.fields(DataSpec)}
    for option in data:  # back to the field's default, as if not given (the config's value is a parser default)
        setattr(namespace, option, defaults.get(option))
