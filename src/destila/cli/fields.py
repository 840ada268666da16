"""Command-line flags generated from a config dataclass's fields: name, type, default, choices and help.

``transformers.HfArgumentParser`` does this for a whole parser; a verb of
``destila cache`` needs it for a sub-parser, with positional arguments and a
nested spec (:class:`~destila.cache.spec.BuildSpec` holds a
:class:`~destila.targets.spec.TargetSpec`), so this module adds one
dataclass's fields to an existing ``argparse`` parser instead. Nothing about
an option is written here: each flag reads its field's metadata
(``help``, ``choices``, ``aliases``, ``metavar``).

Naming: field ``seq_len`` is ``--seq-len`` (``--seq_len`` works too, as in
``destila train``). A bool field that defaults to True is turned off by
``--no-NAME`` (and by its aliases, e.g. ``--quiet``); one that defaults to
False is turned on by ``--NAME``.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing

_SIMPLE = (bool, int, float, str)


def _scalar_type(cls, name: str):
    """The flag's type from the field's annotation: ``int | None`` → int; anything else not simple → str."""
    hint = typing.get_type_hints(cls)[name]
    options = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    for kind in _SIMPLE:
        if kind in options:
            return kind
    return str


def add_fields(parser: argparse.ArgumentParser, cls, *, positional=(), exclude=()) -> None:
    """Add one argument per field of dataclass ``cls`` (minus ``exclude``) to ``parser``."""
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        meta, kind = dict(f.metadata), _scalar_type(cls, f.name)
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = f.default if f.default is not dataclasses.MISSING else None
        help_text = meta.get("help", "")
        if f.name in positional:
            parser.add_argument(f.name, metavar=meta.get("metavar", f.name.upper()), help=help_text)
            continue
        dashed = "--" + f.name.replace("_", "-")
        names = [*(a for a in meta.get("aliases", []) if a.startswith("-") and len(a) == 2), dashed]
        if "_" in f.name:
            names.append("--" + f.name)
        long_aliases = [a for a in meta.get("aliases", []) if a not in names]
        if kind is bool:
            if default:
                names = ["--no-" + f.name.replace("_", "-"), *long_aliases]
                parser.add_argument(*names, dest=f.name, action="store_false", default=True, help=help_text)
            else:
                parser.add_argument(*names, *long_aliases, dest=f.name, action="store_true", help=help_text)
            continue
        shown = f" (default: {default})" if default is not None else ""
        parser.add_argument(
            *names, *long_aliases, dest=f.name, type=kind, default=default, required=not has_default,
            choices=meta.get("choices"), metavar=meta.get("metavar"), help=help_text + shown,
        )


def values_of(args: argparse.Namespace, cls, *, exclude=()) -> dict:
    """The parsed values of ``cls``'s fields (minus ``exclude``), ready for ``cls(**values)``."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.name not in exclude}


def given_flags(args: argparse.Namespace, cls, *, exclude=()) -> list[str]:
    """The flags of ``cls``'s fields (minus ``exclude``) set to something other than their default."""
    given = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else None
        if f.name not in exclude and getattr(args, f.name, default) != default:
            given.append("--" + f.name.replace("_", "-"))
    return given
