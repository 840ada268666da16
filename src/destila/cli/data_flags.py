"""The data flags of `cache build`, `train` and `eval`, generated from :class:`destila.data.DataSpec`.

Each field becomes ``--field-name`` (``--field_name`` also works) with the
field's type, default, choices and help; nothing about the data is restated
here. ``source`` is left to the command (a positional DATA, or ``--data``).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing


def _base_type(annotation):
    hint = annotation if not isinstance(annotation, str) else eval(annotation, {}, {})  # annotations are postponed
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return args[0]
    return hint


def add_data_arguments(group, *, skip: tuple[str, ...] = ("source",), note: str = "", defaults: dict | None = None) -> None:
    """Add one flag per :class:`DataSpec` field (except ``skip``) to ``group``.

    ``note`` prefixes each help text; ``defaults`` overrides a field's default for this command."""
    from destila.data import DataSpec

    for spec_field in dataclasses.fields(DataSpec):
        if spec_field.name in skip:
            continue
        kind = _base_type(spec_field.type)
        names = list(dict.fromkeys(["--" + spec_field.name.replace("_", "-"), "--" + spec_field.name]))
        help_text = note + spec_field.metadata.get("help", "")
        if kind is bool:
            group.add_argument(*names, dest=spec_field.name, action=argparse.BooleanOptionalAction,
                               default=spec_field.default, help=help_text)
            continue
        options = {"choices": spec_field.metadata["choices"]} if "choices" in spec_field.metadata else {}
        default = None if spec_field.default is dataclasses.MISSING else spec_field.default
        default = (defaults or {}).get(spec_field.name, default)
        group.add_argument(*names, dest=spec_field.name, type=kind, default=default, help=help_text, **options)


def data_spec_from(args, source: str):
    """The :class:`DataSpec` of parsed ``args`` reading ``source``."""
    from destila.data import DataSpec

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(DataSpec) if hasattr(args, f.name)}
    return DataSpec(**{**values, "source": source})
